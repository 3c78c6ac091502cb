//! Compiles without a warning: the code `#[flow]` generates raises none of its own.
#![deny(warnings)]

use botmesh::prelude::*;

/// A sub-flow without arguments, called by its constructor.
#[flow]
#[persistent]
async fn yes_no(cx: &mut FlowCx) -> FlowResult<bool> {
    let yes: bool = cx.ask("Yes or no?").await?.is_yes();
    Ok(yes)
}

/// A flow whose locals share names with flows: the flow is a function, so `let` shadows it.
#[flow(start = command("more"))]
#[persistent]
async fn more(cx: &mut FlowCx) -> FlowResult {
    let mut n: u32 = 0;
    while cx.ask(format!("{n} so far. More?")).await?.is_yes() {
        let yes_no: bool = cx.call(yes_no).await?;
        if yes_no {
            n += 1;
        }
    }
    let more = n * 2;
    cx.send(format!("{more}")).await?;
    Ok(())
}

async fn start(bot: &Bot) -> Result<(), BotError> {
    bot.register_flow(yes_no);
    bot.start_flow("alice", more).await?;
    bot.start_flow("bob", yes_no()).await
}

fn main() {
    let graph: &'static str = botmesh::flow::mermaid(more);
    let info = botmesh::flow::info(yes_no);
    let _ = (graph, info.layout_hash, start);
}
