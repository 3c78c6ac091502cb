use botmesh::prelude::*;

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let s = format!("{}", cx.ask("Name?").await?.text());
    cx.send(s).await?;
    Ok(())
}

fn main() {}
