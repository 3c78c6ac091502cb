//! [`EventsDurability`]: the bot's inbox and outbox kept in an app's events journal, with an
//! optional outbox on another backend ([`events_durability`], then
//! [`outbox`](EventsDurability::outbox)).
//!
//! It is a [`DurableKv`]: give it to the bot like any backend
//! (`DurabilityOptions::backend(events_durability(&journal))`), and
//! [`KvDurability`](crate::KvDurability) builds the inbox and the outbox on it, the same code
//! as on every other backend. The bot's records go to the journal's storage, beside the app's
//! events (their own scope per bot: the app's events are in a reserved one), so they share its
//! file, its atomic snapshot or log line, its lock and, on a shared journal, its mutex:
//!
//! | what | where |
//! | --- | --- |
//! | inbox records, chat turns and leader leases (keys `i/…`, `c/…`) | the journal |
//! | outbox records (keys `o/…`, index values `o/…`) | the journal, or the [`outbox`](EventsDurability::outbox) backend when one is given |
//! | a range that spans both | read from both and merged in (value, key) order |
//!
//! A batch that mixes both sends each part to its backend (each op stands on its own, as the
//! SPI allows). The bot opens and closes the outbox backend it was given, never the journal:
//! the journal is the app's, closed by the app after the bot stopped.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::kv::{
    CasOutcome, DurableKv, Index, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned,
    WritePhase, WritePoint,
};

use super::LeasedEventJournal;

/// The first outbox index value and key prefix, and the end of their range.
const OUTBOX_FROM: &str = "o/";
const OUTBOX_TO: &str = "o0";

/// The bot's journals in an events journal (see the module docs); cheap to clone.
#[derive(Clone)]
pub struct EventsDurability {
    journal: Arc<dyn DurableKv>,
    outbox: Option<Arc<dyn DurableKv>>,
}

impl fmt::Debug for EventsDurability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventsDurability")
            .field("separate_outbox", &self.outbox.is_some())
            .finish()
    }
}

/// The bot's journals kept in `journal` ([`EventsDurability::outbox`] puts the outbox on
/// another backend).
pub fn events_durability(journal: &impl LeasedEventJournal) -> EventsDurability {
    EventsDurability::new(journal)
}

impl EventsDurability {
    /// The bot's inbox and outbox in `journal`.
    pub fn new(journal: &impl LeasedEventJournal) -> Self {
        EventsDurability {
            journal: journal.storage_kv(),
            outbox: None,
        }
    }

    /// Keeps the outbox in `kv` instead (a `PostgresKv` or `RedisKv`: a shared outbox for
    /// heavy traffic or for replicas on several hosts).
    pub fn outbox(self, kv: impl DurableKv) -> Self {
        self.shared_outbox(Arc::new(kv))
    }

    /// [`outbox`](Self::outbox) with a backend shared with other users.
    pub fn shared_outbox(mut self, kv: Arc<dyn DurableKv>) -> Self {
        self.outbox = Some(kv);
        self
    }

    fn route(&self, key: &str) -> &Arc<dyn DurableKv> {
        match &self.outbox {
            Some(outbox) if key.starts_with(OUTBOX_FROM) => outbox,
            _ => &self.journal,
        }
    }
}

fn index_value(record: &KvRecord, index: Index) -> Option<&str> {
    match index {
        Index::One => record.entry.idx1.as_deref(),
        Index::Two => record.entry.idx2.as_deref(),
    }
}

#[async_trait]
impl DurableKv for EventsDurability {
    async fn open(&self) -> Result<(), KvError> {
        match &self.outbox {
            Some(outbox) => outbox.open().await,
            None => Ok(()),
        }
    }

    async fn close(&self) -> Result<(), KvError> {
        match &self.outbox {
            Some(outbox) => outbox.close().await,
            None => Ok(()),
        }
    }

    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        self.route(key).get(scope, key).await
    }

    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        self.route(op.key()).apply(scope, op).await
    }

    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        let Some(outbox) = &self.outbox else {
            return self.journal.scan(scope, query).await;
        };
        let (from, to) = (query.from, query.to);
        let mut found = Vec::new();
        let mut parts = 0;
        // Below, inside and above the outbox's range.
        let below = (from, to.min(OUTBOX_FROM));
        let inside = (from.max(OUTBOX_FROM), to.min(OUTBOX_TO));
        let above = (from.max(OUTBOX_TO), to);
        for (kv, (from, to)) in [
            (&self.journal, below),
            (outbox, inside),
            (&self.journal, above),
        ] {
            if from < to {
                parts += 1;
                found.extend(kv.scan(scope, RangeQuery { from, to, ..query }).await?);
            }
        }
        if parts > 1 {
            found.sort_by(|a, b| {
                (index_value(a, query.index), &a.key).cmp(&(index_value(b, query.index), &b.key))
            });
            found.truncate(query.limit);
        }
        Ok(found)
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        let Some(outbox) = &self.outbox else {
            return self.journal.batch(scope, ops).await;
        };
        let (to_outbox, to_journal): (Vec<_>, Vec<_>) = ops
            .into_iter()
            .enumerate()
            .partition(|(_, op)| op.key().starts_with(OUTBOX_FROM));
        let mut outcomes =
            vec![CasOutcome::Conflict { current: None }; to_outbox.len() + to_journal.len()];
        for (kv, part) in [(outbox, to_outbox), (&self.journal, to_journal)] {
            if part.is_empty() {
                continue;
            }
            let (slots, ops): (Vec<usize>, Vec<KvOp>) = part.into_iter().unzip();
            let answered = kv.batch(scope, ops).await?;
            for (slot, outcome) in slots.into_iter().zip(answered) {
                outcomes[slot] = outcome;
            }
        }
        Ok(outcomes)
    }

    fn shared_between_processes(&self) -> bool {
        self.journal.shared_between_processes()
    }

    fn on_journal_write(&self, point: WritePoint, phase: WritePhase) -> Result<(), KvError> {
        self.journal.on_journal_write(point, phase)?;
        match &self.outbox {
            Some(outbox) => outbox.on_journal_write(point, phase),
            None => Ok(()),
        }
    }
}
