//! The author's own lints still apply to the code of a flow's body.
#![deny(unused_variables)]

use botmesh::prelude::*;

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let unused = 1;
    let name: String = cx.ask("Name?").await?.text().to_owned();
    cx.send(name).await?;
    Ok(())
}

fn main() {}
