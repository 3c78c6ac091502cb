//! Compiles without a warning: the code `#[flow]` generates raises none of its own.
#![deny(warnings)]

use botmesh::prelude::*;

/// Saved locals whose names the generated state codec once used for its own variables (`m`,
/// `c`, `name`, `out`, `fields`): they are the flow's, and it compiles.
#[flow(start = command("timer"))]
#[persistent]
async fn timer(cx: &mut FlowCx) -> FlowResult {
    let m: u32 = cx.ask("Minutes?").parse::<u32>("a number").await?;
    let c: u32 = cx.ask("How many?").parse::<u32>("a number").await?;
    let name: String = "timer".to_owned();
    let out: String = "out".to_owned();
    let fields: Vec<String> = Vec::new();
    let _ok = cx.ask(format!("Set {c} timers of {m} minutes?")).await?;
    cx.send(format!("{name} {out} {} {m} {c}", fields.len())).await?;
    Ok(())
}

fn main() {
    let _ = timer;
}
