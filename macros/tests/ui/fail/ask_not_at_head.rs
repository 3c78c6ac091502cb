use botmesh::prelude::*;

fn shout(s: &str) -> String {
    s.to_uppercase()
}

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let x: String = shout(cx.ask("Name?").await?.text());
    cx.send(x).await?;
    Ok(())
}

fn main() {}
