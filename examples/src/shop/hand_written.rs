//! The order conversation, written by hand with the runtime's own API: item → quantity →
//! confirmation. The shop runs the `#[flow]` version ([`order_flow`](super::order_flow)); this
//! baseline is compiled and tested beside it, for the benchmark that compares the two
//! (`examples/benches/flow.rs`) and is what [`hand_written_bot`](super::hand_written_bot) builds.
//!
//! The state is a small serde enum, [`Conversation`], stored per chat in the key/value scope
//! `conversation:<chat>` (key `state`). Routes advance it: `/order`, the word `order` and the
//! `order` button start it, `/cancel` drops it, and the shop's catch-all hands every other
//! message or button press to [`answer`]. The chat's FIFO queue runs one handler at a time
//! per chat, so the read-modify-write of the state never races.
//!
//! | state | answer | next |
//! | --- | --- | --- |
//! | `ChoosingItem` | an item of the catalogue (button id or name) | `ChoosingQuantity` |
//! | `ChoosingQuantity` | an integer 1..=99 | `Confirming` |
//! | `ChoosingQuantity` | anything else | re-ask message, the question again |
//! | `Confirming` | `yes` | the order is stored; the conversation ends |
//! | `Confirming` | `no` | the conversation ends |
//!
//! Redelivery: an order remembers the inbound record that confirmed it, so a `yes` delivered
//! again after a crash between storing the order and clearing the state finds the order
//! already stored and does not store it twice (the reply may then repeat).

use botmesh::durability::{Store, StoreError};
use botmesh::message::{Button, ChatId};
use botmesh::prelude::*;
use serde::{Deserialize, Serialize};

use super::answers::{MAX_QUANTITY, is_no, is_yes, parse_quantity};
use super::catalogue::{self, CATALOGUE, price};
use super::orders;

/// The key of the state within the chat's scope.
const KEY: &str = "state";

/// Where a chat's order conversation stands: the question it waits an answer for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Conversation {
    /// Asked which item.
    ChoosingItem,
    /// Asked how many of `item`.
    ChoosingQuantity {
        /// The item's id.
        item: String,
    },
    /// Asked to confirm `quantity` × `item`.
    Confirming {
        /// The item's id.
        item: String,
        /// How many.
        quantity: u32,
    },
}

impl Conversation {
    /// A short description for `/status`.
    pub fn describe(&self) -> String {
        match self {
            Conversation::ChoosingItem => "choosing an item".to_owned(),
            Conversation::ChoosingQuantity { item } => format!("choosing how many {}", name(item)),
            Conversation::Confirming { item, quantity } => {
                format!("confirming {quantity} × {}", name(item))
            }
        }
    }
}

fn name(item: &str) -> &str {
    catalogue::find(item).map_or(item, |i| i.name)
}

/// The store scope of a chat's conversation.
pub fn scope(chat: &ChatId) -> String {
    format!("conversation:{chat}")
}

/// The chat's conversation, if one is in progress. An undecodable state (written by another
/// version) is dropped with a warning.
pub async fn load(store: &dyn Store, chat: &ChatId) -> Result<Option<Conversation>, StoreError> {
    let scope = scope(chat);
    let Some(value) = store.get_value(&scope, KEY).await? else {
        return Ok(None);
    };
    match serde_json::from_value(value) {
        Ok(state) => Ok(Some(state)),
        Err(e) => {
            tracing::warn!(%scope, error = %e, "dropping an undecodable conversation state");
            store.delete_value(&scope, KEY).await?;
            Ok(None)
        }
    }
}

async fn save(store: &dyn Store, chat: &ChatId, state: &Conversation) -> Result<(), StoreError> {
    let scope = scope(chat);
    let value = serde_json::to_value(state).map_err(|e| StoreError::Corrupt {
        what: "conversation",
        key: scope.clone(),
        reason: e.to_string(),
    })?;
    store.set_value(&scope, KEY, &value).await
}

async fn clear(store: &dyn Store, chat: &ChatId) -> Result<(), StoreError> {
    store.delete_value(&scope(chat), KEY).await
}

/// Registers `/order`, the word `order`, the `order` button and `/cancel`.
pub fn register(bot: &Bot) {
    bot.command("order", start);
    bot.when(matcher::button("order"), start);
    bot.when(matcher::keyword(["order"]), start);
    bot.command("cancel", cancel);
}

/// Starts (or restarts) an order: asks for the item.
pub async fn start(ctx: Ctx) -> HandlerResult {
    let state = Conversation::ChoosingItem;
    save(ctx.bot().store().as_ref(), ctx.chat(), &state).await?;
    ask(&ctx, &state).await
}

/// Drops the order in progress.
pub async fn cancel(ctx: Ctx) -> HandlerResult {
    let store = ctx.bot().store();
    if load(store.as_ref(), ctx.chat()).await?.is_none() {
        ctx.reply("There is no order in progress.").await?;
        return Ok(());
    }
    clear(store.as_ref(), ctx.chat()).await?;
    ctx.reply("Order cancelled. Send /order to start again.")
        .await?;
    Ok(())
}

/// Asks the question of `state`.
async fn ask(ctx: &Ctx, state: &Conversation) -> HandlerResult {
    match state {
        Conversation::ChoosingItem => {
            let offer: Vec<String> = CATALOGUE
                .iter()
                .map(|i| format!("{} {}", i.name, price(i.price_cents)))
                .collect();
            let buttons = CATALOGUE.iter().map(|i| Button::with_id(i.id, i.name));
            ctx.reply_buttons(
                format!("What would you like? {}", offer.join(" · ")),
                buttons,
            )
            .await?;
        }
        Conversation::ChoosingQuantity { item } => {
            ctx.reply(format!("How many {}? (1-{MAX_QUANTITY})", name(item)))
                .await?;
        }
        Conversation::Confirming { item, quantity } => {
            let total = catalogue::find(item).map_or(0, |i| i.price_cents * quantity);
            ctx.reply_buttons(
                format!(
                    "{quantity} × {} for {}. Place the order?",
                    name(item),
                    price(total)
                ),
                [("yes", "Yes"), ("no", "No")],
            )
            .await?;
        }
    }
    Ok(())
}

/// Takes the message or button press as the answer to the conversation's question.
/// Returns `false` when no conversation is in progress in the chat.
pub async fn answer(ctx: &Ctx) -> Result<bool, HandlerError> {
    let store = ctx.bot().store();
    let store = store.as_ref();
    let chat = ctx.chat();
    let Some(state) = load(store, chat).await? else {
        return Ok(false);
    };
    let text = ctx.text().trim();
    match state {
        Conversation::ChoosingItem => match catalogue::find(text) {
            Some(item) => {
                let next = Conversation::ChoosingQuantity {
                    item: item.id.to_owned(),
                };
                save(store, chat, &next).await?;
                ask(ctx, &next).await?;
            }
            None => {
                ctx.reply("Sorry, we don't sell that.").await?;
                ask(ctx, &state).await?;
            }
        },
        Conversation::ChoosingQuantity { ref item } => match parse_quantity(text) {
            Some(quantity) => {
                let next = Conversation::Confirming {
                    item: item.clone(),
                    quantity,
                };
                save(store, chat, &next).await?;
                ask(ctx, &next).await?;
            }
            None => {
                ctx.reply(format!(
                    "Please answer with a whole number from 1 to {MAX_QUANTITY}."
                ))
                .await?;
                ask(ctx, &state).await?;
            }
        },
        Conversation::Confirming { ref item, quantity } => {
            if is_yes(text) {
                let Some(item) = catalogue::find(item) else {
                    clear(store, chat).await?;
                    ctx.reply("Sorry, that item is no longer sold. Send /order to start again.")
                        .await?;
                    return Ok(true);
                };
                let order = orders::place(store, chat, item, quantity, ctx.inbound_id()).await?;
                clear(store, chat).await?;
                ctx.reply(format!(
                    "Order #{} placed: {} × {} for {}. Send /status to see your orders.",
                    order.number,
                    order.quantity,
                    item.name,
                    price(order.total_cents)
                ))
                .await?;
            } else if is_no(text) {
                clear(store, chat).await?;
                ctx.reply("Order dropped. Send /order to start again.")
                    .await?;
            } else {
                ctx.reply("Please answer Yes or No.").await?;
                ask(ctx, &state).await?;
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_as_tagged_json() {
        let state = Conversation::Confirming {
            item: "tea".into(),
            quantity: 2,
        };
        let json = serde_json::to_value(&state).ok();
        assert_eq!(
            json,
            Some(serde_json::json!({"step": "confirming", "item": "tea", "quantity": 2}))
        );
        assert_eq!(
            json.and_then(|j| serde_json::from_value(j).ok()),
            Some(state)
        );
    }
}
