use botmesh::prelude::*;

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let pending = cx.ask("Name?");
    let _ = pending;
    Ok(())
}

fn main() {}
