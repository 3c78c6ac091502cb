//! Decoding the rows of [`PostgresStore`](super::PostgresStore) back into records, and the
//! small encodings it stores (`u64` as the bits of a `bigint`, directions as text). A row that
//! does not decode is a [`StoreError::Corrupt`] naming the record; nothing here runs queries.

use tokio_postgres::Row;

use crate::store::{
    Direction, FlowCheckpoint, HandoffRecord, LedgerEntry, LedgerStatus, StoreError,
};

pub(super) fn u64_bits(v: u64) -> i64 {
    i64::from_ne_bytes(v.to_ne_bytes())
}

pub(super) fn bits_u64(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes())
}

pub(super) fn corrupt(what: &'static str, key: &str, reason: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what,
        key: key.to_owned(),
        reason: reason.to_string(),
    }
}

pub(super) fn json(
    what: &'static str,
    key: &str,
    text: &str,
) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(what, key, e))
}

pub(super) fn ledger_entry(row: &Row) -> Result<LedgerEntry, StoreError> {
    let chat: String = row.try_get(0).map_err(|e| corrupt("ledger", "?", e))?;
    let bad = |e: tokio_postgres::Error| corrupt("ledger", &chat, e);
    let direction: String = row.try_get(2).map_err(bad)?;
    let status: String = row.try_get(3).map_err(bad)?;
    let content: String = row.try_get(5).map_err(bad)?;
    Ok(LedgerEntry {
        message_id: row.try_get(1).map_err(bad)?,
        direction: match direction.as_str() {
            "inbound" => Direction::Inbound,
            "outbound" => Direction::Outbound,
            other => return Err(corrupt("ledger", &chat, format!("direction {other}"))),
        },
        status: match status.as_str() {
            "received" => LedgerStatus::Received,
            "sent" => LedgerStatus::Sent,
            "failed" => LedgerStatus::Failed,
            other => return Err(corrupt("ledger", &chat, format!("status {other}"))),
        },
        text: row.try_get(4).map_err(bad)?,
        content: json("ledger", &chat, &content)?,
        key: row.try_get(6).map_err(bad)?,
        error: row.try_get(7).map_err(bad)?,
        at_ms: row.try_get(8).map_err(bad)?,
        chat,
    })
}

pub(super) fn checkpoint_row(row: &Row) -> Result<FlowCheckpoint, StoreError> {
    let chat: String = row.try_get(0).map_err(|e| corrupt("checkpoint", "?", e))?;
    let bad = |e: tokio_postgres::Error| corrupt("checkpoint", &chat, e);
    let state: String = row.try_get(3).map_err(bad)?;
    Ok(FlowCheckpoint {
        flow: row.try_get(1).map_err(bad)?,
        layout_hash: bits_u64(row.try_get(2).map_err(bad)?),
        state: json("checkpoint", &chat, &state)?,
        inbound_id: row.try_get(4).map_err(bad)?,
        step: bits_u64(row.try_get(5).map_err(bad)?),
        updated_ms: row.try_get(6).map_err(bad)?,
        chat,
    })
}

pub(super) fn handoff_row(row: &Row) -> Result<HandoffRecord, StoreError> {
    let chat: String = row.try_get(0).map_err(|e| corrupt("handoff", "?", e))?;
    let bad = |e: tokio_postgres::Error| corrupt("handoff", &chat, e);
    Ok(HandoffRecord {
        agent: row.try_get(1).map_err(bad)?,
        reason: row.try_get(2).map_err(bad)?,
        since_ms: row.try_get(3).map_err(bad)?,
        chat,
    })
}
