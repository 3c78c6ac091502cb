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

/// The same, given their values by a destructuring assignment after the ask.
#[flow(start = command("pair"))]
#[persistent]
async fn pair(cx: &mut FlowCx) -> FlowResult {
    let a: u32;
    let b: u32;
    let _ok = cx.ask("go?").await?;
    (a, b) = (1, 2);
    cx.send(format!("{a} {b}")).await?;
    Ok(())
}

fn main() {
    let _ = (size, pair);
}
