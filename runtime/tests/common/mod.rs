//! Flows shared by the flow tests, and the helpers of the other tests ([`eventually`],
//! [`fresh`]).

pub(crate) mod eventually;
pub(crate) mod fresh;

use botmesh::prelude::*;

/// The DESIGN.md order flow: an item, then a quantity re-asked until it is a positive number
/// (loop, match, break value).
#[flow(start = command("order"))]
#[persistent]
pub(crate) async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx.ask("What would you like?").await?.text().to_owned();
    let qty: u32 = loop {
        let answer = cx.ask("How many?").await?;
        match answer.text().trim().parse() {
            Ok(n) if n > 0 => break n,
            _ => cx.send("Please answer with a number.").await?,
        }
    };
    cx.send(format!("Ordered {qty} x {item}")).await?;
    Ok(())
}
