//! A bot with one flow that answers every other message as fresh, to show which messages no
//! flow took; and a bot with one flow alone.

use botmesh::prelude::*;

/// A transcript on `store` of a bot with `flow` alone.
pub(crate) async fn flow_alone<A, F: botmesh::flow::FlowFn<A>>(
    store: std::sync::Arc<dyn botmesh::durability::Store>,
    flow: F,
) -> botmesh::testing::Transcript {
    let setup = move |b: BotBuilder| {
        let bot = b.build()?;
        bot.flow(flow);
        Ok(bot)
    };
    botmesh::testing::Transcript::with_store(store, setup)
        .await
        .expect("bot starts")
}

/// Builds the bot with `flow` registered and every message no flow takes answered
/// `(a fresh message: <text>)`.
pub(crate) fn with_flow<F, T>(b: BotBuilder, flow: F) -> Result<Bot, BotError>
where
    F: Fn() -> T + Copy + Send + Sync + 'static,
    T: botmesh::flow::Flow,
{
    let bot = b.build()?;
    bot.flow(flow);
    bot.on_message(|ctx: Ctx| async move {
        ctx.reply(format!("(a fresh message: {})", ctx.text()))
            .await?;
        Ok(())
    });
    Ok(bot)
}
