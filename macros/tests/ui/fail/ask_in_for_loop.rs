use botmesh::prelude::*;

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    for item in ["a", "b"] {
        let _answer = cx.ask(format!("Want {item}?")).await?;
    }
    Ok(())
}

fn main() {}
