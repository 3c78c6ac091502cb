//! Writes of chats, contacts, the message ledger and handoffs to the store.
//!
//! Inbound writes happen in the inbound pipeline before the event is queued; outbound ledger
//! writes happen on the send path, inside the chat's queue slot, so a chat's writes are issued
//! in order. With `BotConfig::ledger` off, only handoffs and languages are written. This module
//! does not decide what to persist when; its callers do.

use botmesh_durability::StoreError;
use botmesh_durability::store::ChatRecord;
use botmesh_durability::store::ContactRecord;
use botmesh_durability::store::Direction;
use botmesh_durability::store::HandoffRecord;
use botmesh_durability::store::LedgerEntry;
use botmesh_durability::store::LedgerStatus;

use crate::kernel::Kernel;
use crate::message::{ChatId, Message, MessageId, Outgoing};

/// What recording an inbound message writes: its chat, its sender and its ledger row.
pub(crate) struct InboundRows {
    pub(crate) chat: ChatRecord,
    pub(crate) contact: ContactRecord,
    pub(crate) entry: LedgerEntry,
}

pub(crate) async fn record_inbound(k: &Kernel, m: &Message) -> Result<(), StoreError> {
    let Some(rows) = inbound_rows(k, m) else {
        return Ok(());
    };
    // One call (one transaction on SQLite): an existing chat keeps its title, language and
    // first sighting.
    k.store
        .record_inbound(&rows.chat, &rows.contact, &rows.entry)
        .await
}

/// The rows recording `m`; `None` when the ledger is off.
pub(crate) fn inbound_rows(k: &Kernel, m: &Message) -> Option<InboundRows> {
    if !k.config.ledger {
        return None;
    }
    let now = k.clock.now_ms();
    let chat = ChatRecord {
        id: m.chat.0.clone(),
        is_group: m.is_group,
        title: None,
        lang: None,
        first_seen_ms: now,
        last_activity_ms: now,
    };
    let contact = ContactRecord {
        id: m.sender.0.clone(),
        name: m.sender_name.clone(),
        last_seen_ms: now,
    };
    let entry = LedgerEntry {
        chat: m.chat.0.clone(),
        message_id: Some(m.id.0.clone()),
        direction: Direction::Inbound,
        status: LedgerStatus::Received,
        text: Some(m.text_content().to_owned()).filter(|t| !t.is_empty()),
        content: serde_json::to_value(&m.content).unwrap_or(serde_json::Value::Null),
        key: None,
        error: None,
        at_ms: m.timestamp_ms,
    };
    Some(InboundRows {
        chat,
        contact,
        entry,
    })
}

pub(crate) struct OutboundEntry<'a> {
    pub(crate) chat: &'a ChatId,
    pub(crate) outgoing: &'a Outgoing,
    pub(crate) message_id: Option<&'a MessageId>,
    pub(crate) key: Option<&'a str>,
    pub(crate) error: Option<String>,
}

pub(crate) async fn record_outbound(k: &Kernel, e: OutboundEntry<'_>) {
    let chat = e.chat;
    let Some(entry) = outbound_entry(k, e) else {
        return;
    };
    if let Err(err) = k.store.append_ledger(&entry).await {
        k.events.error("persistence:ledger", Some(chat), err);
    }
}

/// The ledger row of an outbound message; `None` when the ledger is off.
pub(crate) fn outbound_entry(k: &Kernel, e: OutboundEntry<'_>) -> Option<LedgerEntry> {
    if !k.config.ledger {
        return None;
    }
    let status = if e.error.is_some() {
        LedgerStatus::Failed
    } else {
        LedgerStatus::Sent
    };
    let entry = LedgerEntry {
        chat: e.chat.0.clone(),
        message_id: e.message_id.map(|m| m.0.clone()),
        direction: Direction::Outbound,
        status,
        text: Some(e.outgoing.content.text().to_owned()).filter(|t| !t.is_empty()),
        content: serde_json::to_value(&e.outgoing.content).unwrap_or(serde_json::Value::Null),
        key: e.key.map(str::to_owned),
        error: e.error,
        at_ms: k.clock.now_ms(),
    };
    Some(entry)
}

pub(crate) async fn save_lang(k: &Kernel, chat: &ChatId, lang: &str) -> Result<(), StoreError> {
    let now = k.clock.now_ms();
    let mut record = k.store.chat(chat.as_str()).await?.unwrap_or(ChatRecord {
        id: chat.0.clone(),
        is_group: false,
        title: None,
        lang: None,
        first_seen_ms: now,
        last_activity_ms: now,
    });
    record.lang = Some(lang.to_owned());
    k.store.upsert_chat(&record).await
}

pub(crate) async fn save_handoff(k: &Kernel, record: &HandoffRecord) -> Result<(), StoreError> {
    k.store.set_handoff(record).await
}

pub(crate) async fn clear_handoff(k: &Kernel, chat: &ChatId) -> Result<(), StoreError> {
    k.store.clear_handoff(chat.as_str()).await
}
