use botmesh::prelude::*;

#[flow]
fn not_async(cx: &mut FlowCx) -> FlowResult {
    Ok(())
}

#[flow]
async fn no_cx(name: String) -> FlowResult {
    Ok(())
}

#[flow]
async fn wrong_return(cx: &mut FlowCx) -> Result<(), String> {
    Ok(())
}

fn main() {}
