//! Compiles without a warning: the code `#[flow]` generates raises none of its own.
#![deny(warnings)]

use botmesh::prelude::*;

/// Two questions, no control flow.
#[flow(start = command("order"))]
#[persistent]
async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx.ask("What would you like?").await?.text().to_owned();
    let note: String = cx.ask("Any note?").await?.text().into();
    cx.send(format!("{item} ({note})")).await?;
    cx.ask("Thanks! Anything else?").await?;
    Ok(())
}

fn main() {
    let _ = order;
}
