//! Flows that the process tests and the `crashbot` binary share.

use botmesh::prelude::*;

/// Takes an order in two questions; survives the process being killed between them.
#[flow(start = command("order"))]
#[persistent]
pub async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx.ask("What would you like?").await?.text().to_owned();
    let qty: String = cx.ask("How many?").await?.text().to_owned();
    cx.send(format!("Ordered {qty} x {item}")).await?;
    Ok(())
}
