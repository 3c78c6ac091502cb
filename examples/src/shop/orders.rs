//! Confirmed orders, kept in the store's key/value scope `orders:<chat>`: one value per
//! order, keyed by its zero-padded number (`000001`), so the scope lists in order.
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

/// Stores a new order of `quantity` × `item` for `chat` and returns it. When an order
/// confirmed by the same `inbound` record is already stored, returns that one instead.
pub async fn place(
    store: &dyn Store,
    chat: &ChatId,
    item: &Item,
    quantity: u32,
    inbound: Option<&str>,
) -> Result<Order, StoreError> {
    let scope = scope(chat);
    let existing = store.values(&scope).await?;
    if let Some(inbound) = inbound {
        let earlier = existing
            .iter()
            .filter_map(|(_, v)| serde_json::from_value::<Order>(v.clone()).ok())
            .find(|o| o.inbound.as_deref() == Some(inbound));
        if let Some(order) = earlier {
            return Ok(order);
        }
    }
    let number = u32::try_from(existing.len()).unwrap_or(u32::MAX - 1) + 1;
    let order = Order {
        number,
        item: item.id.to_owned(),
        quantity,
        total_cents: item.price_cents.saturating_mul(quantity),
        at_ms: botmesh::clock::now_ms(),
        inbound: inbound.map(str::to_owned),
    };
    let value = serde_json::to_value(&order).map_err(|e| StoreError::Corrupt {
        what: "order",
        key: format!("{scope}/{number}"),
        reason: e.to_string(),
    })?;
    store
        .set_value(&scope, &format!("{number:06}"), &value)
        .await?;
    Ok(order)
}

/// The chat's orders, oldest first.
pub async fn list(store: &dyn Store, chat: &ChatId) -> Result<Vec<Order>, StoreError> {
    let scope = scope(chat);
    let mut orders = Vec::new();
    for (key, value) in store.values(&scope).await? {
        match serde_json::from_value::<Order>(value) {
            Ok(order) => orders.push(order),
            Err(e) => tracing::warn!(%scope, %key, error = %e, "skipping an undecodable order"),
        }
    }
    Ok(orders)
}
