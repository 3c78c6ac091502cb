use botmesh::prelude::*;

#[flow(start = telepathy("x"))]
async fn a(cx: &mut FlowCx) -> FlowResult {
    Ok(())
}

#[flow(start = command("b"))]
async fn b(cx: &mut FlowCx, who: String) -> FlowResult {
    Ok(())
}

#[flow(on_version_mismatch = panic)]
async fn c(cx: &mut FlowCx) -> FlowResult {
    Ok(())
}

#[persistent]
async fn d(cx: &mut FlowCx) -> FlowResult {
    Ok(())
}

#[flow(colour = blue)]
async fn e(cx: &mut FlowCx) -> FlowResult {
    Ok(())
}

#[flow(version = -1)]
async fn f(cx: &mut FlowCx) -> FlowResult {
    Ok(())
}

fn main() {}
