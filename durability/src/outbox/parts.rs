//! Parts: a send over the channel's text limit becomes one record per part.
//!
//! `split_parts(key, parts)` journals `key#2`, `key#3`, … (each linked to its previous part by
//! `previous_part`, and forward by `next_part`), then replaces the first record's payload with
//! the first part. The part keys depend only on the record key and the part's index, so a
//! retry or a replay journals nothing twice:
//!
//! | the process dies… | found on replay | `split_parts` again |
//! | --- | --- | --- |
//! | before the parts are journaled | the unsplit record | journals the parts, then updates the record |
//! | after the parts, before the record's update | the parts and the unsplit record | finds the parts (checks their links), updates the record |
//! | after the update | the split chain | returns the chain, writes nothing |
//!
//! Waiting behind a previous part and dying with it are decided in `sweep` and `attempts`.

use serde_json::Value;

use super::{Outbox, OutboxRecord, OutboxState, Payload};
use crate::error::DurabilityError;
use crate::journal::{KvDurability, Step, cas};
use crate::keys::{self, Fingerprint, SendKey};
use crate::kv::{DurableKv, WritePoint};
use crate::metrics::{Counter, RecordKind};

impl<K: DurableKv + ?Sized> Outbox<'_, K> {
    /// Splits the journaled send `key` into one record per part, before it is sent: the other
    /// parts are journaled as `key#2`, `key#3`, … (each linked to its previous part), then the
    /// first part's content replaces the record's payload. Calling it again (a retry, a replay)
    /// journals nothing twice and returns the same records.
    pub async fn split_parts(
        &self,
        key: &str,
        parts: Vec<Value>,
    ) -> Result<Vec<OutboxRecord>, DurabilityError> {
        let not_found = || DurabilityError::NotFound {
            kind: RecordKind::Outbound,
            id: key.to_owned(),
        };
        let base = self.lookup(key).await?.ok_or_else(not_found)?;
        if parts.len() <= 1 {
            return Ok(vec![base]);
        }
        if base.next_part.is_some() {
            return self.chain(base).await;
        }
        if !matches!(base.state, OutboxState::Pending | OutboxState::Failed) {
            return Err(DurabilityError::InvalidState {
                kind: RecordKind::Outbound,
                id: key.to_owned(),
                state: base.state.as_str(),
                operation: "split into parts",
            });
        }
        let n = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        let now = self.d.now_ms();
        let mut records = Vec::new();
        let mut ops = Vec::new();
        for (i, payload) in (2..=n).zip(parts.iter().skip(1)) {
            let record = OutboxRecord {
                previous_part: Some(keys::part_key(key, i - 1)),
                next_part: (i < n).then(|| keys::part_key(key, i + 1)),
                part: i,
                ..OutboxRecord::pending(
                    SendKey::with_kind(keys::part_key(key, i), base.key_kind),
                    base.chat.clone(),
                    Payload::from(payload),
                    Fingerprint::of(&base.chat, payload),
                    base.on_ambiguous,
                    base.seq,
                    now,
                )
            };
            ops.push(cas(&record, None, KvDurability::<K>::encode(&record)?));
            records.push(record);
        }
        let outcomes = self
            .view()
            .batch(WritePoint::OutboxSplit, key, "split_parts", ops)
            .await?;
        let mut out = Vec::with_capacity(records.len() + 1);
        for (record, outcome) in records.into_iter().zip(outcomes) {
            if outcome.is_ok() {
                self.d.count(Counter::OutboxJournaled);
                out.push(record);
                continue;
            }
            let existing = self.lookup(&record.key).await?.ok_or_else(not_found)?;
            if existing.previous_part != record.previous_part {
                return Err(DurabilityError::InvalidState {
                    kind: RecordKind::Outbound,
                    id: record.key,
                    state: existing.state.as_str(),
                    operation: "journal as a part (the key is another send's)",
                });
            }
            out.push(existing);
        }
        let first = Payload::from(parts.into_iter().next().unwrap_or(Value::Null));
        let second = keys::part_key(key, 2);
        let base = self
            .view()
            .modify(WritePoint::OutboxSplit, "split_parts", key, |r, now| {
                if r.next_part.is_some() {
                    return Ok(Step::Keep(r.clone()));
                }
                r.payload = first.clone();
                r.next_part = Some(second.clone());
                r.updated_ms = now;
                Ok(Step::Write(r.clone()))
            })
            .await?;
        out.insert(0, base);
        Ok(out)
    }

    /// A record and every part after it.
    async fn chain(&self, first: OutboxRecord) -> Result<Vec<OutboxRecord>, DurabilityError> {
        let mut next = first.next_part.clone();
        let mut out = vec![first];
        while let Some(key) = next.take() {
            if out.iter().any(|r| r.key == key) {
                break; // a loop in the links: never follow it twice
            }
            if let Some(r) = self.lookup(&key).await? {
                next = r.next_part.clone();
                out.push(r);
            }
        }
        Ok(out)
    }
}
