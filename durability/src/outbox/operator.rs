//! The operator's side of the outbox: retry and discard, and the counters the runtime
//! reports through it (deferral, bypass).
//!
//! | state | `retry(key)` | `discard(key)` |
//! | --- | --- | --- |
//! | `dead` (and the parts that died with it), `failed`, `unknown` | pending, due now, whole retry budget | deleted |
//! | `pending`, `sent` | `InvalidState` | deleted |
//! | `sending`, live lease | `InvalidState` | `InvalidState` |
//!
//! A retry writes the record and the parts that died with it in one batch, so a backend that
//! commits a batch at once never revives the first part without the others.

use super::{Outbox, OutboxRecord, OutboxState};
use crate::error::DurabilityError;
use crate::journal::{KvDurability, attempts, cas};
use crate::kv::{DurableKv, WritePoint};
use crate::metrics::{Counter, RecordKind};

impl<K: DurableKv + ?Sized> Outbox<'_, K> {
    /// Sends a dead, failed or unknown send again (`retrySend`): pending, due now, with its
    /// whole retry budget. The parts that died with it come back in the same batch.
    pub async fn retry(&self, key: &str) -> Result<OutboxRecord, DurabilityError> {
        for _ in 0..8 {
            let base = self.d.load_existing::<OutboxRecord>(key, "retry").await?;
            let mut record = base.record;
            if !matches!(
                record.state,
                OutboxState::Dead | OutboxState::Failed | OutboxState::Unknown
            ) {
                return Err(DurabilityError::InvalidState {
                    kind: RecordKind::Outbound,
                    id: key.to_owned(),
                    state: record.state.as_str(),
                    operation: "retry",
                });
            }
            let now = self.d.now_ms();
            revive(&mut record, now);
            let mut writes = vec![(base.version, record.clone())];
            let mut next = record.next_part.clone();
            while let Some(part_key) = next.take() {
                if writes.iter().any(|(_, r)| r.key == part_key) {
                    break;
                }
                let Some(part) = self.d.load::<OutboxRecord>(&part_key, "retry").await? else {
                    break;
                };
                let previous = writes.last().map(|(_, r)| r.key.as_str());
                let died_with =
                    part.record.state == OutboxState::Dead && part.record.died_with_previous;
                if part.record.previous_part.as_deref() != previous || !died_with {
                    break;
                }
                let mut p = part.record;
                revive(&mut p, now);
                next = p.next_part.clone();
                writes.push((part.version, p));
            }
            let mut ops = Vec::with_capacity(writes.len());
            for (version, r) in &writes {
                ops.push(cas(r, Some(*version), KvDurability::<K>::encode(r)?));
            }
            let outcomes = self
                .view()
                .batch(WritePoint::OutboxRetry, key, "retry", ops)
                .await?;
            if outcomes.first().is_some_and(|o| o.is_ok()) {
                let revived = outcomes.iter().filter(|o| o.is_ok()).count() - 1;
                if revived + 1 < outcomes.len() {
                    tracing::warn!(key = %key, "some parts changed during the retry and were left as they are");
                }
                tracing::info!(key = %key, parts = revived, "send retried by operator");
                return Ok(record);
            }
        }
        Err(DurabilityError::Contention {
            kind: RecordKind::Outbound,
            id: key.to_owned(),
            operation: "retry",
        })
    }

    /// Forgets a send (any state but a live `sending`); its later parts no longer wait for it.
    /// Returns whether it existed.
    pub async fn discard(&self, key: &str) -> Result<bool, DurabilityError> {
        self.d
            .discard::<OutboxRecord>(WritePoint::OutboxDiscard, key)
            .await
    }

    /// Records that an inline send stopped waiting (`SendDeferredError`): the sweeper owns it
    /// now. Counted in `outbox_deferred`.
    pub fn defer(&self, key: &str) {
        self.d.count(Counter::OutboxDeferred);
        tracing::info!(key = %key, "send deferred to the sweeper");
    }

    /// Records that a send bypassed the outbox (too large, or not encodable), with a warning.
    /// Counted in `outbox_bypassed`.
    pub fn bypass(&self, key: &str, reason: &str) {
        self.d.count(Counter::OutboxBypassed);
        tracing::warn!(key = %key, %reason, "send bypasses the outbox");
    }
}

/// A record made pending again, due now, with its whole budget.
fn revive(r: &mut OutboxRecord, now: i64) {
    r.state = OutboxState::Pending;
    r.died_with_previous = false;
    attempts::restart(r, now);
}
