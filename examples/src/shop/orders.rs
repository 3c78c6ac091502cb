//! Confirmed orders, kept in the store's key/value scope `orders:<chat>`: one value per
//! order, keyed by its zero-padded number (`000001`), so the scope lists in order, and a
//! `last` value naming the latest order's number and the inbound record that confirmed it.
//!
//! Placing an order reads only `last` (not every order of the chat), writes the order, then
//! `last`. A confirmation replayed after a crash is recognised by `last`; one that crashed
//! between the two writes computes the same number again and rewrites the same order.
//!
//! It does not validate orders (the conversation does) and never deletes them. A stored
//! value that cannot be decoded is skipped with a warning rather than failing `/status`.

use botmesh::durability::{Store, StoreError};
use botmesh::message::ChatId;
use serde::{Deserialize, Serialize};

use super::catalogue::{self, Item};

/// A confirmed order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The order's number in its chat, from 1.
    pub number: u32,
    /// The item's id.
    pub item: String,
    /// How many.
    pub quantity: u32,
    /// The total price in cents.
    pub total_cents: u32,
    /// When it was placed (Unix ms).
    pub at_ms: i64,
    /// The inbound record that confirmed it (so a redelivered confirmation is recognised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound: Option<String>,
}

impl Order {
    /// The item's display name (its id when the catalogue no longer has it).
    pub fn item_name(&self) -> &str {
        catalogue::find(&self.item).map_or(self.item.as_str(), |i| i.name)
    }
}

/// The store scope of a chat's orders.
pub fn scope(chat: &ChatId) -> String {
    format!("orders:{chat}")
}

/// The key of the latest order's summary in a chat's scope (orders' keys are digits).
const LAST: &str = "last";

/// The latest order of a chat: its number, and the inbound record that confirmed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Last {
    number: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inbound: Option<String>,
}

fn encode<T: Serialize>(
    value: &T,
    what: &'static str,
    key: String,
) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(value).map_err(|e| StoreError::Corrupt {
        what,
        key,
        reason: e.to_string(),
    })
}

/// Stores a new order of `quantity` × `item` for `chat` and returns it. When the latest order
/// was confirmed by the same `inbound` record (a replay), returns that one instead.
pub async fn place(
    store: &dyn Store,
    chat: &ChatId,
    item: &Item,
    quantity: u32,
    inbound: Option<&str>,
) -> Result<Order, StoreError> {
    let scope = scope(chat);
    let stored = match store.get_value(&scope, LAST).await? {
        Some(v) => match serde_json::from_value::<Last>(v) {
            Ok(last) => Some(last),
            Err(e) => {
                tracing::warn!(%scope, error = %e, "undecodable `last` order: counting the orders");
                None
            }
        },
        None => None,
    };
    let last = match stored {
        Some(last) => Some(last),
        // A scope written before `last` existed (or whose `last` is damaged): its orders are
        // counted once, so that no order is numbered (and overwritten) twice.
        None => {
            let orders = list(store, chat).await?;
            orders.last().map(|o| Last {
                number: o.number,
                inbound: o.inbound.clone(),
            })
        }
    };
    if let (Some(last), Some(inbound)) = (&last, inbound) {
        if last.inbound.as_deref() == Some(inbound) {
            let key = format!("{:06}", last.number);
            if let Some(order) = store
                .get_value(&scope, &key)
                .await?
                .and_then(|v| serde_json::from_value::<Order>(v).ok())
            {
                return Ok(order);
            }
        }
    }
    let number = last.map_or(0, |l| l.number).saturating_add(1);
    let order = Order {
        number,
        item: item.id.to_owned(),
        quantity,
        total_cents: item.price_cents.saturating_mul(quantity),
        at_ms: botmesh::clock::now_ms(),
        inbound: inbound.map(str::to_owned),
    };
    let key = format!("{number:06}");
    let value = encode(&order, "order", format!("{scope}/{key}"))?;
    store.set_value(&scope, &key, &value).await?;
    let last = Last {
        number,
        inbound: order.inbound.clone(),
    };
    let value = encode(&last, "last order", format!("{scope}/{LAST}"))?;
    store.set_value(&scope, LAST, &value).await?;
    Ok(order)
}

/// The chat's orders, oldest first.
pub async fn list(store: &dyn Store, chat: &ChatId) -> Result<Vec<Order>, StoreError> {
    let scope = scope(chat);
    let mut orders = Vec::new();
    for (key, value) in store.values(&scope).await? {
        if key == LAST {
            continue;
        }
        match serde_json::from_value::<Order>(value) {
            Ok(order) => orders.push(order),
            Err(e) => tracing::warn!(%scope, %key, error = %e, "skipping an undecodable order"),
        }
    }
    Ok(orders)
}
