//! The order conversation as a `#[flow]`: item → quantity → confirmation, written as one
//! async function. The macro compiles it into a state machine that is checkpointed at every
//! question (`#[persistent]`), so a restarted shop (same database) carries on mid-order.
//!
//! | question | answer | what happens |
//! | --- | --- | --- |
//! | which item (catalogue buttons) | an item's id or name | asks how many |
//! | which item | anything else | "Sorry, we don't sell that.", then the question again |
//! | how many | a whole number 1..=99 | asks to confirm |
//! | how many | anything else | the re-ask message (the flow keeps waiting) |
//! | confirm (Yes/No buttons) | yes | the order is stored in `orders:<chat>`; the flow ends |
//! | confirm | no | "Order dropped."; the flow ends |
//! | confirm | anything else | "Please answer Yes or No.", then the question again |
//!
//! The flow starts on `/order`, the word `order` or the menu's `order` button
//! ([`wants_to_order`]); `/cancel` ([`cancel`]) ends it through `bot.cancel_flow`. While an
//! order is in progress, every message that is not a registered command (so also `/order`
//! and the word `order`) is an answer to the current question. The store write runs in
//! `cx.effect` and is keyed by the confirming message, so a step re-run after a crash never
//! stores the order twice.
//!
//! Each question is named (`.id("item")`, `.id("quantity")`, `.id("confirm")`): the name is
//! the question's identity in keys and checkpoints, so a new wording or catalogue keeps the
//! orders in progress waiting at the same question after a deploy.
//!
//! This module does not list orders (`/status` does, from the store) and keeps no state of
//! its own: the flow's state lives in its checkpoint (`bot.store().checkpoint(chat)`).

use botmesh::durability::{Store, StoreError};
use botmesh::prelude::*;

use super::answers::{MAX_QUANTITY, is_no, is_yes, parse_quantity};
use super::catalogue::{self, CATALOGUE, price};
use super::orders::{self, Order};

/// Takes an order: which item, how many, then a Yes/No confirmation; `yes` stores it.
#[flow(start = matcher(wants_to_order))]
#[persistent]
pub async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = loop {
        let answer = cx
            .ask(item_question())
            .id("item")
            .buttons(item_buttons())
            .await?;
        match catalogue::find(answer.text()) {
            Some(found) => break found.id.to_owned(),
            None => cx.send("Sorry, we don't sell that.").await?,
        }
    };
    let quantity: u32 = cx
        .ask(format!("How many {}? (1-{MAX_QUANTITY})", item_name(&item)))
        .id("quantity")
        .validate(
            |a: &Answer| parse_quantity(a.text()),
            format!("Please answer with a whole number from 1 to {MAX_QUANTITY}."),
        )
        .await?;
    loop {
        let answer = cx
            .ask(confirm_question(&item, quantity))
            .id("confirm")
            .buttons([("yes", "Yes"), ("no", "No")])
            .await?;
        if is_yes(answer.text()) {
            break;
        }
        if is_no(answer.text()) {
            cx.send("Order dropped. Send /order to start again.")
                .await?;
            return Ok(());
        }
        cx.send("Please answer Yes or No.").await?;
    }
    let store = cx.ctx().bot().store();
    let chat = cx.chat().clone();
    let inbound = cx.ctx().inbound_id().map(str::to_owned);
    let placed: Result<Option<Order>, String> = cx
        .effect(async move { place(store.as_ref(), &chat, &item, quantity, inbound).await })
        .await?;
    let Some(order) = placed? else {
        cx.send("Sorry, that item is no longer sold. Send /order to start again.")
            .await?;
        return Ok(());
    };
    cx.send(format!(
        "Order #{} placed: {} × {} for {}. Send /status to see your orders.",
        order.number,
        order.quantity,
        order.item_name(),
        price(order.total_cents)
    ))
    .await?;
    Ok(())
}

/// The flow's start trigger: `/order`, the word `order`, or the menu's `order` button (a
/// press's text is its button id).
pub fn wants_to_order(ctx: &Ctx) -> bool {
    ctx.command() == Some("order") || ctx.text().trim().eq_ignore_ascii_case("order")
}

/// Registers the flow (which installs its start trigger) and `/cancel`.
pub fn register(bot: &Bot) {
    bot.flow(order);
    bot.command("cancel", cancel);
}

/// `/cancel`: ends the order in progress (its question resumes as cancelled, through the
/// chat's queue, after the messages already queued for the chat).
pub async fn cancel(ctx: Ctx) -> HandlerResult {
    if ctx.bot().cancel_flow(ctx.chat().clone()).await? {
        ctx.reply("Order cancelled. Send /order to start again.")
            .await?;
    } else {
        ctx.reply("There is no order in progress.").await?;
    }
    Ok(())
}

/// Whether an order flow waits for an answer in `chat`, by its checkpoint in the store (so
/// every replica and a restarted shop see it).
pub async fn in_progress(store: &dyn Store, chat: &ChatId) -> Result<bool, StoreError> {
    let name = botmesh::flow::info(order).name;
    Ok(store
        .checkpoint(chat.as_str())
        .await?
        .is_some_and(|cp| cp.flow == name))
}

/// The item question, with each item's price.
fn item_question() -> String {
    let offer: Vec<String> = CATALOGUE
        .iter()
        .map(|i| format!("{} {}", i.name, price(i.price_cents)))
        .collect();
    format!("What would you like? {}", offer.join(" · "))
}

/// One button per item (its id, its name).
fn item_buttons() -> Vec<Button> {
    CATALOGUE
        .iter()
        .map(|i| Button::with_id(i.id, i.name))
        .collect()
}

/// The confirmation question.
fn confirm_question(item: &str, quantity: u32) -> String {
    let total = catalogue::find(item).map_or(0, |i| i.price_cents.saturating_mul(quantity));
    format!(
        "{quantity} × {} for {}. Place the order?",
        item_name(item),
        price(total)
    )
}

fn item_name(item: &str) -> &str {
    catalogue::find(item).map_or(item, |i| i.name)
}

/// Stores the order; `Ok(None)` when the catalogue no longer has the item. The error is a
/// string so that the effect's result can be recorded.
async fn place(
    store: &dyn Store,
    chat: &ChatId,
    item: &str,
    quantity: u32,
    inbound: Option<String>,
) -> Result<Option<Order>, String> {
    let Some(item) = catalogue::find(item) else {
        return Ok(None);
    };
    orders::place(store, chat, item, quantity, inbound.as_deref())
        .await
        .map(Some)
        .map_err(|e| e.to_string())
}
