use botmesh::prelude::*;

#[flow]
async fn sub(_cx: &mut FlowCx) -> FlowResult<u32> {
    Ok(1)
}

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let a = cx.ask("Name?").shout().await?;
    let flows = [sub];
    let n: u32 = cx.call(flows[0]).await?;
    let _ = (a, n);
    Ok(())
}

fn main() {}
