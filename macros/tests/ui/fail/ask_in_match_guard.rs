use botmesh::prelude::*;

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let n: u32 = 3;
    match n {
        3 if cx.ask("Sure?").await?.is_yes() => {}
        _ => {}
    }
    Ok(())
}

fn main() {}
