use botmesh::prelude::*;

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let fut = async { cx.ask("Name?").await };
    let _ = fut;
    Ok(())
}

fn main() {}
