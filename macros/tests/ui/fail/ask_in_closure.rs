use botmesh::prelude::*;

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let ask = || cx.ask("Name?");
    let _ = ask;
    Ok(())
}

fn main() {}
