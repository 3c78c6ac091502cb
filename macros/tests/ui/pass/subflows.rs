//! Compiles without a warning: the code `#[flow]` generates raises none of its own.
#![deny(warnings)]

use botmesh::prelude::*;

/// A sub-flow with an argument that returns a value.
#[flow]
#[persistent]
async fn confirm(cx: &mut FlowCx, question: String) -> FlowResult<bool> {
    let yes: bool = cx.ask(question).buttons(["yes", "no"]).await?.is_yes();
    Ok(yes)
}

/// Calls it.
#[flow(start = regex("^buy .+$"), on_version_mismatch = migrate(migrate_buy))]
#[persistent]
async fn buy(cx: &mut FlowCx) -> FlowResult {
    let ok: bool = cx.call(confirm("Sure?".to_owned())).await?;
    if ok {
        let id: u64 = cx.effect(async { 42u64 }).await?;
        let at: i64 = cx.now().await;
        cx.send(format!("order {id} at {at}")).key("confirmation").await?;
    }
    Ok(())
}

fn migrate_buy(old: serde_json::Value, _hash: u64) -> Result<serde_json::Value, String> {
    Ok(old)
}

fn is_hello(ctx: &Ctx) -> bool {
    ctx.text() == "hello"
}

/// Not persistent: holds a non-serializable local; starts by a matcher function.
#[flow(start = matcher(is_hello), on_version_mismatch = abandon)]
async fn hello(cx: &mut FlowCx) -> FlowResult {
    let started: std::time::Instant = std::time::Instant::now();
    let _ = cx.ask("Hi! Your name?").await?;
    let (a, b) = tokio::join!(cx.send("one"), cx.send(format!("two {:?}", started.elapsed())));
    a?;
    b?;
    Ok(())
}

fn main() {
    let _ = (buy, hello, confirm("x".into()));
    let _ = botmesh::Bot::builder(botmesh::testing::MockProvider::new()).build().map(|b| {
        b.flow(buy).flow(hello);
    });
}
