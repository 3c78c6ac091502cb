use botmesh::prelude::*;

struct Basket {
    items: Vec<String>,
}

#[flow]
#[persistent]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let first: String = cx.ask("Item?").await?.text().to_owned();
    let basket: Basket = Basket { items: vec![first] };
    cx.ask("Confirm?").await?;
    cx.send(basket.items.join(", ")).await?;
    Ok(())
}

fn main() {}
