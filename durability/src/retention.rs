//! Retention: `done` inbound and `sent` outbound records are purged once older than
//! `retention` (7 days by default; `None` keeps them).
//!
//! | record | kept | purged by [`KvDurability::purge`] |
//! | --- | --- | --- |
//! | inbound `done`, outbound `sent` | while `updated_ms > now - retention` | after |
//! | `pending`, `processing`, `sending`, `failed` | always | never (still in flight) |
//! | `dead`, `unknown`, quarantined | always | never: an operator retries, replays or discards them |
//!
//! Keep retention longer than the longest redelivery window of your channels: a redelivery is
//! recognised as a duplicate only while its record still exists, and a replayed handler's sends
//! are answered from the outbox only while their records exist. Each purge deletes by
//! compare-and-set on the version it read, so a record that changed meanwhile is left alone.
//! The runtime calls `purge` from its sweeper; this module does not schedule anything.

use crate::error::DurabilityError;
use crate::journal::{KvDurability, index};
use crate::kv::{DurableKv, KvOp, WritePoint};
use crate::metrics::RecordKind;
use crate::retries::duration_ms;

/// How many records one purge deletes per batch.
const PURGE_BATCH: usize = 256;

/// What a purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// `done` inbound records purged.
    pub inbound: usize,
    /// `sent` outbound records purged.
    pub outbound: usize,
}

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// Purges `done` and `sent` records older than `retention`, at most `max` of each journal.
    pub async fn purge(&self, max: usize) -> Result<PurgeReport, DurabilityError> {
        let Some(retention) = self.config().retention else {
            return Ok(PurgeReport::default());
        };
        let cutoff = self.now_ms().saturating_sub(duration_ms(retention));
        Ok(PurgeReport {
            inbound: self
                .purge_state(RecordKind::Inbound, "done", cutoff, max)
                .await?,
            outbound: self
                .purge_state(RecordKind::Outbound, "sent", cutoff, max)
                .await?,
        })
    }

    async fn purge_state(
        &self,
        kind: RecordKind,
        state: &str,
        cutoff: i64,
        max: usize,
    ) -> Result<usize, DurabilityError> {
        // Records updated strictly before the cutoff.
        let (from, to) = index::state_until(kind, state, cutoff.saturating_sub(1));
        let mut purged = 0;
        while purged < max {
            let found = self
                .range_raw(kind, &from, &to, PURGE_BATCH.min(max - purged))
                .await?;
            if found.is_empty() {
                break;
            }
            let ops: Vec<KvOp> = found
                .into_iter()
                .map(|r| KvOp::Delete {
                    key: r.key,
                    expected: r.entry.version,
                })
                .collect();
            let asked = ops.len();
            let outcomes = self
                .batch_at(WritePoint::RetentionPurge, ops)
                .await
                .map_err(Self::backend_err(kind, state, "purge"))?;
            let deleted = outcomes.iter().filter(|o| o.is_ok()).count();
            purged += deleted;
            if deleted == 0 || asked < PURGE_BATCH {
                break;
            }
        }
        if purged > 0 {
            tracing::debug!(%kind, state, purged, "records past retention purged");
        }
        Ok(purged)
    }
}
