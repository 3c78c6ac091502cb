//! Operating the journals: the operator API, with the metrics and events it reports.
//!
//! The dead-letter queues are `inbox().list(Dead)` / `outbox().list(Dead)`, then
//! [`KvDurability::replay_inbound`], [`KvDurability::retry_send`],
//! [`KvDurability::discard_send`], and [`KvDurability::quarantined`] for undecodable records.
//! The counters ([`DurabilityMetrics`]) and events ([`DurabilityEvent`]) are described in their
//! own types.

use crate::error::DurabilityError;
use crate::inbox::InboundRecord;
use crate::journal::{KvDurability, index};
use crate::kv::{DurableKv, WritePoint};
pub use crate::metrics::{DurabilityEvent, DurabilityMetrics, RecordKind};
use crate::outbox::OutboxRecord;

/// A stored record that cannot be decoded, kept aside for an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedRecord {
    /// Inbound or outbound.
    pub kind: RecordKind,
    /// The inbound id or outbox key.
    pub id: String,
    /// The stored bytes, as they were found.
    pub bytes: Vec<u8>,
}

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// Processes a dead (or done) inbound record again: it becomes pending with its whole
    /// attempt budget (`replayInbound(id)`).
    pub async fn replay_inbound(&self, id: &str) -> Result<InboundRecord, DurabilityError> {
        self.inbox().replay(id).await
    }

    /// Sends a dead, failed or unknown send again (`retrySend(key)`).
    pub async fn retry_send(&self, key: &str) -> Result<OutboxRecord, DurabilityError> {
        self.outbox().retry(key).await
    }

    /// Forgets a send (`outbox.discard(key)`).
    pub async fn discard_send(&self, key: &str) -> Result<bool, DurabilityError> {
        self.outbox().discard(key).await
    }

    /// Every quarantined (undecodable) record of one journal, oldest first, at most `limit`.
    pub async fn quarantined(
        &self,
        kind: RecordKind,
        limit: usize,
    ) -> Result<Vec<QuarantinedRecord>, DurabilityError> {
        let (from, to) = index::state_range(kind, "quarantine");
        let found = self.range_raw(kind, &from, &to, limit).await?;
        Ok(found
            .into_iter()
            .filter_map(|r| {
                let id = index::id_of(kind, &r.key)?.to_owned();
                Some(QuarantinedRecord {
                    kind,
                    id,
                    bytes: r.entry.value,
                })
            })
            .collect())
    }

    /// Deletes a quarantined record (after an operator looked at it). Returns whether it existed.
    pub async fn discard_quarantined(
        &self,
        kind: RecordKind,
        id: &str,
    ) -> Result<bool, DurabilityError> {
        let point = match kind {
            RecordKind::Inbound => WritePoint::InboxQuarantine,
            RecordKind::Outbound => WritePoint::OutboxQuarantine,
        };
        self.delete_any(point, kind, id, "discard_quarantined")
            .await
    }
}
