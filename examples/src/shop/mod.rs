//! The README's demo shop: a menu, an order taken in a conversation, stored orders, `/status`.
//!
//! | trigger | answer |
//! | --- | --- |
//! | `/start`, `/menu`, `menu`, `hi`, `hello` | the menu, with buttons `Order` and `My orders` |
//! | `/order`, `order`, the `order` button | the order conversation ([`conversation`]) |
//! | `/status`, the `status` button | the chat's stored orders, or "no orders yet" |
//! | `/cancel` | abandons the order in progress |
//! | anything else | the answer to the conversation's question, or a hint |
//!
//! Confirmed orders live in the store's key/value scope `orders:<chat>` ([`orders`]); the
//! conversation's state lives in `conversation:<chat>`. Nothing is kept in memory, so a
//! restarted shop (same database) carries on where it stopped. It does not take payments,
//! track stock, or treat groups specially.

pub mod catalogue;
pub mod conversation;
pub mod orders;

use botmesh::prelude::*;

use catalogue::price;

/// The shop's bot id.
pub const BOT_ID: &str = "shop";

/// Builds the shop on `builder` (which carries the provider and the store) and registers its
/// routes. The caller picks the provider, the store and the bot id.
pub fn shop_bot(builder: BotBuilder) -> Result<Bot, BotError> {
    let bot = builder.build()?;
    register(&bot);
    Ok(bot)
}

/// Registers the shop's routes on an existing bot.
pub fn register(bot: &Bot) {
    bot.command("start", menu);
    bot.command("menu", menu);
    bot.command("help", menu);
    bot.command("status", status);
    bot.when(matcher::button("status"), status);
    conversation::register(bot);
    bot.when(matcher::keyword(["menu", "hi", "hello", "start"]), menu);
    bot.catch_all(answer_or_hint);
}

/// Shows the menu.
pub async fn menu(ctx: Ctx) -> HandlerResult {
    let mut text = String::from(
        "Welcome to the botmesh shop! What would you like to do?\n\
         /order to order, /status for your orders, /cancel to drop an order in progress.",
    );
    if conversation::load(ctx.bot().store().as_ref(), ctx.chat())
        .await?
        .is_some()
    {
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
    if let Some(step) = conversation::load(store.as_ref(), ctx.chat()).await? {
        text.push_str(&format!("\nIn progress: {}.", step.describe()));
    }
    ctx.reply(text).await?;
    Ok(())
}

/// The conversation's answer, or a hint when no order is in progress.
async fn answer_or_hint(ctx: Ctx) -> HandlerResult {
    if conversation::answer(&ctx).await? {
        return Ok(());
    }
    ctx.reply("Sorry, I didn't get that. Send /start for the menu.")
        .await?;
    Ok(())
}
