//! Compiles without a warning: the code `#[flow]` generates raises none of its own.
#![deny(warnings)]

use std::time::Duration;

use botmesh::flow::Interrupt;
use botmesh::prelude::*;

/// if/else, match, loop with break value, while, labels, continue, blocks, early return, `?`.
#[flow(start = keyword("go"))]
#[persistent]
async fn everything(cx: &mut FlowCx) -> FlowResult<u32> {
    let mut total: u32 = 0;
    if cx.ask("Start?").await?.is_yes() {
        total += 1;
    } else {
        return Ok(0);
    }
    let n: u32 = 'outer: loop {
        let a = cx.ask("A number?").await?;
        match a.text().parse::<u32>() {
            Ok(0) => continue 'outer,
            Ok(n) => break 'outer n,
            Err(_) => {
                cx.send("Not a number").await?;
            }
        }
    };
    while total < n {
        let step: u32 = cx.ask("Step?").parse::<u32>("a number please").await?;
        total += step;
        if step == 0 {
            break;
        }
    }
    let r: u32 = {
        let inner: u32 = match cx.ask("Inner?").idle(Duration::from_secs(5)).await {
            Ok(a) => a.text().len() as u32,
            Err(Interrupt::Timeout) => 0,
            Err(Interrupt::Cancelled) => return cx.cancel(),
        };
        inner + total
    };
    let Ok(last) = cx.ask("Last?").parse::<u32>("number").await else {
        return Ok(r);
    };
    Ok(r + last)
}

fn main() {
    let _ = everything;
}
