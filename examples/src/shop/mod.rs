//! The README's demo shop: a menu, an order taken in a conversation, stored orders, `/status`.
//!
//! | trigger | answer |
//! | --- | --- |
//! | `/start`, `/menu`, `menu`, `hi`, `hello` | the menu, with buttons `Order` and `My orders` |
//! | `/order`, `order`, the `order` button | the order conversation ([`order_flow`]) |
//! | `/status`, the `status` button | the chat's stored orders, or "no orders yet" |
//! | `/cancel` | abandons the order in progress |
//! | anything else | the answer to the conversation's question, or a hint |
//!
//! Two builds of the same shop: [`shop_bot`] runs the order conversation as a `#[flow]`
//! ([`order_flow`], its state in the flow's checkpoint), [`hand_written_bot`] runs the
//! baseline written by hand on the runtime API ([`hand_written`], its state in the key/value
//! scope `conversation:<chat>`); the benchmark `flow` compares them. Confirmed orders live in
//! the store's key/value scope `orders:<chat>` ([`orders`]) in both. Nothing is kept in
//! memory only, so a restarted shop (same database) carries on where it stopped. It does not
//! take payments, track stock, or treat groups specially.

pub mod answers;
pub mod catalogue;
pub mod hand_written;
pub mod order_flow;
pub mod orders;

use botmesh::prelude::*;

use catalogue::price;

/// The shop's bot id.
pub const BOT_ID: &str = "shop";

/// Builds the shop on `builder` (which carries the provider and the store) and registers its
/// routes, with the order conversation as a `#[flow]`. The caller picks the provider, the
/// store and the bot id.
pub fn shop_bot(builder: BotBuilder) -> Result<Bot, BotError> {
    let bot = builder.build()?;
    register(&bot);
    Ok(bot)
}

/// Builds the same shop with the hand-written order conversation ([`hand_written`]): the
/// baseline of the `flow` benchmark.
pub fn hand_written_bot(builder: BotBuilder) -> Result<Bot, BotError> {
    let bot = builder.build()?;
    register_hand_written(&bot);
    Ok(bot)
}

/// Registers the shop's routes on an existing bot (the `#[flow]` order conversation).
pub fn register(bot: &Bot) {
    register_menu_and_status(bot);
    order_flow::register(bot);
    bot.when(matcher::keyword(["menu", "hi", "hello", "start"]), menu);
    bot.catch_all(hint);
}

/// Registers the shop's routes with the hand-written order conversation.
pub fn register_hand_written(bot: &Bot) {
    register_menu_and_status(bot);
    hand_written::register(bot);
    bot.when(matcher::keyword(["menu", "hi", "hello", "start"]), menu);
    bot.catch_all(answer_or_hint);
}

fn register_menu_and_status(bot: &Bot) {
    bot.command("start", menu);
    bot.command("menu", menu);
    bot.command("help", menu);
    bot.command("status", status);
    bot.when(matcher::button("status"), status);
}

/// What the chat's order in progress is at, for the menu and `/status`, from the store: the
/// flow's checkpoint when the bot runs the `#[flow]` (its state is the runtime's, so it reads
/// "an order"), else the hand-written conversation's state (which knows its question).
async fn in_progress(ctx: &Ctx) -> Result<Option<String>, HandlerError> {
    let store = ctx.bot().store();
    let flow = botmesh::flow::info(order_flow::order).name;
    if ctx.bot().flow_info(flow).is_some() {
        let waiting = order_flow::in_progress(store.as_ref(), ctx.chat()).await?;
        return Ok(waiting.then(|| "an order, waiting for your answer".to_owned()));
    }
    Ok(hand_written::load(store.as_ref(), ctx.chat())
        .await?
        .map(|step| step.describe()))
}

/// Shows the menu.
pub async fn menu(ctx: Ctx) -> HandlerResult {
    let mut text = String::from(
        "Welcome to the botmesh shop! What would you like to do?\n\
         /order to order, /status for your orders, /cancel to drop an order in progress.",
    );
    if in_progress(&ctx).await?.is_some() {
        text.push_str("\nYou have an order in progress: answer the last question, or /cancel.");
    }
    ctx.reply_buttons(text, [("order", "Order"), ("status", "My orders")])
        .await?;
    Ok(())
}

/// Lists the chat's stored orders.
pub async fn status(ctx: Ctx) -> HandlerResult {
    let store = ctx.bot().store();
    let list = orders::list(store.as_ref(), ctx.chat()).await?;
    let mut text = if list.is_empty() {
        "You have no orders yet. Send /order to place one.".to_owned()
    } else {
        let mut text = format!("Your orders ({}):", list.len());
        for o in &list {
            text.push_str(&format!(
                "\n#{} {} × {} — {}",
                o.number,
                o.quantity,
                o.item_name(),
                price(o.total_cents)
            ));
        }
        text
    };
    if let Some(step) = in_progress(&ctx).await? {
        text.push_str(&format!("\nIn progress: {step}."));
    }
    ctx.reply(text).await?;
    Ok(())
}

/// The hand-written conversation's answer, or a hint when no order is in progress.
async fn answer_or_hint(ctx: Ctx) -> HandlerResult {
    if hand_written::answer(&ctx).await? {
        return Ok(());
    }
    hint(ctx).await
}

/// The hint for a message nothing else took (with the flow version, a waiting order flow
/// takes every message before this catch-all).
async fn hint(ctx: Ctx) -> HandlerResult {
    ctx.reply("Sorry, I didn't get that. Send /start for the menu.")
        .await?;
    Ok(())
}
