//! Compiles without a warning: the code `#[flow]` generates raises none of its own.
#![deny(warnings)]

use botmesh::prelude::*;

/// What the `let … else` error suggests: a `match` whose diverging arm asks.
#[flow(start = command("age"))]
#[persistent]
async fn age(cx: &mut FlowCx) -> FlowResult {
    let text: String = cx.ask("Your age?").await?.text().to_owned();
    let years: u32 = match text.trim().parse::<u32>() {
        Ok(v) => v,
        Err(_) => {
            let _bye = cx.ask("That is not a number. Press any key to leave.").await?;
            return Ok(());
        }
    };
    cx.send(format!("{years} years")).await?;
    Ok(())
}

fn main() {
    let _ = age;
}
