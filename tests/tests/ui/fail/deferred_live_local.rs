use botmesh::prelude::*;

/// A typed local declared first and initialised after an ask (deferred initialisation).
#[flow(start = command("size"))]
#[persistent]
async fn size(cx: &mut FlowCx) -> FlowResult {
    let size: String;
    if cx.ask("Large?").await?.is_yes() {
        size = "L".to_owned();
    } else {
        size = "M".to_owned();
    }
    cx.send(format!("Size {size}")).await?;
    Ok(())
}

fn main() {
    let _ = size;
}
