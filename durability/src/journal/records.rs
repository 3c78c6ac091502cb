//! Reading and writing journal records: encoding, compare-and-set loops, scans and the
//! quarantine of undecodable records.
//!
//! A record is stored as its JSON bytes, with the `idx1` and `idx2` values it gives itself.
//!
//! | stored value | `load` (one record) | `scan` / `scan_page` (listing, sweeping) |
//! | --- | --- | --- |
//! | a valid record | `Some(Loaded { version, record })` | listed |
//! | missing | `None` | — |
//! | not a valid record | quarantined once, `Err(Corrupt)` | quarantined once, skipped |
//! | already quarantined | `Err(Corrupt)`, not reported again | not listed (its `idx1` moved) |
//!
//! Quarantining moves the entry's `idx1` to `<i|o>/quarantine/<ms>/<id>`, drops its `idx2`
//! and keeps the bytes for an operator; it logs with `tracing::error!`, counts the record as
//! dead and emits a `Dead` event. A failure to quarantine is logged and never raised.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::snapshots::Snapshot;
use super::{KvDurability, MAX_CAS_RETRIES, index};
use crate::error::DurabilityError;
use crate::kv::{
    CasOutcome, DurableKv, Entry, Index, KvError, KvOp, KvRecord, Versioned, WritePhase, WritePoint,
};
use crate::metrics::RecordKind;

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// The entry of a record encoded for storage (for a batch, which carries bytes).
    pub(crate) fn encode<R: JournalRecord>(record: &R) -> Result<Entry, DurabilityError> {
        let value = serde_json::to_vec(record).map_err(|e| DurabilityError::Encode {
            kind: R::KIND,
            id: record.id().to_owned(),
            reason: e.to_string(),
        })?;
        let (idx1, idx2) = record.indexes();
        Ok(Entry {
            value,
            idx1: Some(idx1),
            idx2,
        })
    }

    /// Writes a record (create with `expected: None`) under the hooks of `points` (one write
    /// that is several write points at once).
    pub(crate) async fn put<R: JournalRecord>(
        &self,
        points: &[WritePoint],
        operation: &'static str,
        expected: Option<u64>,
        record: &R,
    ) -> Result<CasOutcome, DurabilityError> {
        let entry = Self::encode(record)?;
        let key = index::storage_key(R::KIND, record.id());
        self.cas_at_points(points, &key, expected, entry)
            .await
            .map_err(Self::backend_err(R::KIND, record.id(), operation))
    }

    /// Creates a record under the hooks of `points` only if no entry has an `idx2` value in
    /// `from..to` (a [`KvOp::CreateIfNoneIn`]): `Conflict { current: None }` when one has.
    pub(crate) async fn create_unless_idx2<R: JournalRecord>(
        &self,
        points: &[WritePoint],
        operation: &'static str,
        record: &R,
        (from, to): (String, String),
    ) -> Result<CasOutcome, DurabilityError> {
        let op = KvOp::CreateIfNoneIn {
            key: index::storage_key(R::KIND, record.id()),
            entry: Self::encode(record)?,
            index: Index::Two,
            from,
            to,
        };
        self.hooked(points, || self.backend().apply(&self.shared.scope, op))
            .await
            .map_err(Self::backend_err(R::KIND, record.id(), operation))
    }

    /// Reads and decodes a record. An undecodable record is quarantined and reported as
    /// [`DurabilityError::Corrupt`].
    pub(crate) async fn load<R: JournalRecord>(
        &self,
        id: &str,
        operation: &'static str,
    ) -> Result<Option<Loaded<R>>, DurabilityError> {
        let key = index::storage_key(R::KIND, id);
        let found = self
            .backend()
            .get(&self.shared.scope, &key)
            .await
            .map_err(Self::backend_err(R::KIND, id, operation))?;
        let Some(entry) = found else {
            return Ok(None);
        };
        match decode::<R>(&entry.value) {
            Ok(record) => Ok(Some(Loaded {
                version: entry.version,
                record,
            })),
            Err(reason) => {
                // Boxed: a rare path, kept out of the (hot) load future's size.
                Box::pin(self.quarantine(R::KIND, &key, entry, &reason)).await;
                Err(DurabilityError::Corrupt {
                    kind: R::KIND,
                    id: id.to_owned(),
                    reason,
                })
            }
        }
    }

    /// [`load`](Self::load) of a record that must exist: `NotFound` when it does not.
    pub(crate) async fn load_existing<R: JournalRecord>(
        &self,
        id: &str,
        operation: &'static str,
    ) -> Result<Loaded<R>, DurabilityError> {
        self.load::<R>(id, operation)
            .await?
            .ok_or_else(|| DurabilityError::NotFound {
                kind: R::KIND,
                id: id.to_owned(),
            })
    }

    /// This incarnation's snapshot of record `id` (taken), or else the record as read
    /// (`NotFound` when it does not exist).
    pub(crate) async fn snapshot_or_load<R: JournalRecord>(
        &self,
        id: &str,
        operation: &'static str,
    ) -> Result<Loaded<R>, DurabilityError> {
        match self.take_snapshot::<R>(id) {
            Some(snapshot) => Ok(*snapshot),
            None => self.load_existing(id, operation).await,
        }
    }

    /// Decodes a listed entry, quarantining it when it is not a valid record.
    async fn decode_listed<R: JournalRecord>(&self, raw: KvRecord) -> Option<Loaded<R>> {
        match decode::<R>(&raw.entry.value) {
            Ok(record) => Some(Loaded {
                version: raw.entry.version,
                record,
            }),
            Err(reason) => {
                self.quarantine(R::KIND, &raw.key, raw.entry, &reason).await;
                None
            }
        }
    }

    /// Moves an undecodable record out of every index except the quarantine, logs it and
    /// emits `Dead`. Failing to do so is logged, never raised: the caller goes on.
    async fn quarantine(&self, kind: RecordKind, key: &str, entry: Versioned, reason: &str) {
        let id = index::id_of(kind, key).unwrap_or(key).to_owned();
        let (q_from, q_to) = index::state_range(kind, "quarantine");
        if entry
            .idx1
            .as_deref()
            .is_some_and(|v| v >= q_from.as_str() && v < q_to.as_str())
        {
            return; // already quarantined and reported
        }
        let point = match kind {
            RecordKind::Inbound => WritePoint::InboxQuarantine,
            RecordKind::Outbound => WritePoint::OutboxQuarantine,
        };
        let moved = Entry {
            value: entry.value,
            idx1: Some(index::idx1(kind, "quarantine", self.now_ms(), &id)),
            idx2: None,
        };
        match self.cas_at(point, key, Some(entry.version), moved).await {
            Ok(CasOutcome::Ok { .. }) => {
                tracing::error!(%kind, id = %id, %reason, "undecodable journal record quarantined");
                self.dead(kind, id, format!("undecodable record: {reason}"));
            }
            Ok(CasOutcome::Conflict { .. }) => {
                tracing::warn!(%kind, id = %id, "undecodable record changed while being quarantined");
            }
            Err(e) => {
                tracing::error!(%kind, id = %id, error = %e, %reason, "cannot quarantine undecodable record");
            }
        }
    }

    /// One page of decoded records whose `idx1` is in `from..to`, and the cursor to resume at
    /// (`None` when the range is exhausted). Undecodable entries are quarantined and skipped.
    pub(crate) async fn scan_page<R: JournalRecord>(
        &self,
        from: &str,
        to: &str,
        page: usize,
    ) -> Result<(Vec<Loaded<R>>, Option<String>), DurabilityError> {
        let raw = self.range_raw(R::KIND, from, to, page).await?;
        let exhausted = raw.len() < page;
        let cursor = raw
            .last()
            .and_then(|r| r.entry.idx1.as_deref())
            .map(index::after);
        let mut out = Vec::with_capacity(raw.len());
        for r in raw {
            if let Some(loaded) = self.decode_listed::<R>(r).await {
                out.push(loaded);
            }
        }
        Ok((out, if exhausted { None } else { cursor }))
    }

    /// Up to `limit` decoded records whose `idx1` is in `from..to`.
    pub(crate) async fn scan<R: JournalRecord>(
        &self,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<Loaded<R>>, DurabilityError> {
        let mut out = Vec::new();
        let mut cursor = from.to_owned();
        while out.len() < limit {
            let (page, next) = self.scan_page::<R>(&cursor, to, limit - out.len()).await?;
            out.extend(page);
            match next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        Ok(out)
    }

    /// Raw entries of `idx1` in `from..to`.
    pub(crate) async fn range_raw(
        &self,
        kind: RecordKind,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<KvRecord>, DurabilityError> {
        self.backend()
            .range(&self.shared.scope, Index::One, from, to, limit)
            .await
            .map_err(Self::backend_err(kind, from, "list"))
    }

    /// The storage key of the first entry of `idx2` in `from..to`.
    pub(crate) async fn first_idx2_key(
        &self,
        kind: RecordKind,
        from: &str,
        to: &str,
    ) -> Result<Option<String>, DurabilityError> {
        let found = self
            .backend()
            .range(&self.shared.scope, Index::Two, from, to, 1)
            .await
            .map_err(Self::backend_err(kind, from, "list by chat"))?;
        Ok(found.into_iter().next().map(|e| e.key))
    }

    /// Reads a record, lets `decide` change it, and writes it back by CAS; re-reads and
    /// re-decides on a conflict. `decide` returns `Write(t)` to write the changed record or
    /// `Keep(t)` to leave it as it is. Starts from this incarnation's snapshot of the record
    /// when it has one (see [`super::snapshots`]).
    pub(crate) async fn modify<R, T, F>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        decide: F,
    ) -> Result<T, DurabilityError>
    where
        R: JournalRecord,
        F: FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError> + Send,
        T: Send,
    {
        let start = self.take_snapshot::<R>(id);
        self.modify_record(point, operation, id, start, decide)
            .await
            .map(|(out, _)| out)
    }

    /// [`modify`](Self::modify) starting from `start` (a snapshot the caller took), or from a
    /// read when `None`, that also returns the record as written (or as found, for `Keep`). A
    /// decision taken on `start` counts only if it writes and the write lands on `start`'s
    /// version; otherwise the record is read and decided again.
    pub(crate) async fn modify_record<R, T, F>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        mut start: Option<Snapshot<R>>,
        mut decide: F,
    ) -> Result<(T, R), DurabilityError>
    where
        R: JournalRecord,
        F: FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError> + Send,
        T: Send,
    {
        // The record is kept boxed and the read boxed too: this future sits inside every
        // handler's and every send's future, so it holds pointers, not records.
        for _ in 0..MAX_CAS_RETRIES {
            let (from_snapshot, mut loaded) = match start.take() {
                Some(snapshot) => (true, snapshot),
                None => (
                    false,
                    Box::new(Box::pin(self.load_existing::<R>(id, operation)).await?),
                ),
            };
            let decided = decide(&mut loaded.record, self.now_ms());
            let (at, out) = match decided {
                // Only a write can confirm a snapshot: decide again on a fresh read.
                Ok(Step::Keep(_)) | Err(_) if from_snapshot => continue,
                Err(e) => return Err(e),
                Ok(Step::Keep(out)) => return Ok((out, loaded.record)),
                Ok(Step::Write(out)) => (point, out),
                Ok(Step::WriteAt(at, out)) => (at, out),
            };
            if let CasOutcome::Ok { version } = self
                .put(&[at], operation, Some(loaded.version), &loaded.record)
                .await?
            {
                self.note_written(version, &loaded.record);
                return Ok((out, loaded.record));
            }
        }
        Err(DurabilityError::Contention {
            kind: R::KIND,
            id: id.to_owned(),
            operation,
        })
    }

    /// Takes this incarnation's snapshot of a record (see [`super::snapshots`]).
    pub(crate) fn take_snapshot<R: JournalRecord>(&self, id: &str) -> Option<Snapshot<R>> {
        self.shared.snapshots.take(R::KIND, id)
    }

    /// Remembers (a copy of) a record this incarnation has just written at `version`, if it is
    /// open; forgets its snapshot otherwise.
    pub(crate) fn note_written<R: JournalRecord>(&self, version: u64, record: &R) {
        let snapshots = &self.shared.snapshots;
        if record.is_open() {
            let loaded = Box::new(Loaded {
                version,
                record: record.clone(),
            });
            snapshots.keep(R::KIND, record.id(), loaded);
        } else {
            snapshots.forget(R::KIND, record.id());
        }
    }

    /// Deletes a record whatever its content (also an undecodable one). Returns whether it
    /// existed.
    pub(crate) async fn delete_any(
        &self,
        point: WritePoint,
        kind: RecordKind,
        id: &str,
        operation: &'static str,
    ) -> Result<bool, DurabilityError> {
        let key = index::storage_key(kind, id);
        for _ in 0..MAX_CAS_RETRIES {
            let found = self
                .backend()
                .get(&self.shared.scope, &key)
                .await
                .map_err(Self::backend_err(kind, id, operation))?;
            let Some(entry) = found else {
                return Ok(false);
            };
            let err = Self::backend_err(kind, id, operation);
            let deleted = async {
                self.hook(point, WritePhase::Before)?;
                let outcome = self
                    .backend()
                    .delete(&self.shared.scope, &key, entry.version)
                    .await?;
                if outcome.is_ok() {
                    self.hook(point, WritePhase::After)?;
                }
                Ok::<_, KvError>(outcome)
            }
            .await
            .map_err(err)?;
            if deleted.is_ok() {
                return Ok(true);
            }
        }
        Err(DurabilityError::Contention {
            kind,
            id: id.to_owned(),
            operation,
        })
    }
}

/// The write of `entry` (a record's encoding) at `record`'s key, expected at `expected`
/// (`None`: the key must be free).
pub(crate) fn cas<R: JournalRecord>(record: &R, expected: Option<u64>, entry: Entry) -> KvOp {
    KvOp::Cas {
        key: index::storage_key(R::KIND, record.id()),
        expected,
        entry,
    }
}

/// What a [`KvDurability::modify`] decision does.
pub(crate) enum Step<T> {
    /// Write the changed record, then return `T`.
    Write(T),
    /// Write the changed record under another write point (a claim that dead-letters).
    WriteAt(WritePoint, T),
    /// Leave the record as it is and return `T`.
    Keep(T),
}

/// A decoded record with the version it was read at.
#[derive(Debug, Clone)]
pub(crate) struct Loaded<R> {
    pub(crate) version: u64,
    pub(crate) record: R,
}

/// Decodes stored bytes into a record of `R`'s journal; the reason when they are not one.
fn decode<R: JournalRecord>(value: &[u8]) -> Result<R, String> {
    serde_json::from_slice::<R>(value).map_err(|e| e.to_string())
}

/// A record kept in a journal.
pub(crate) trait JournalRecord:
    Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
    /// Its journal.
    const KIND: RecordKind;
    /// Its inbound id or outbox key.
    fn id(&self) -> &str;
    /// Its state's name, the first part of its `idx1` value.
    fn state_name(&self) -> &'static str;
    /// The ms of its `idx1` value: when an open record is due (its next attempt, or its
    /// lease's end), when a settled one last changed.
    fn idx1_ms(&self) -> i64;
    /// Its `idx1` value (see [`super::index`]).
    fn idx1(&self) -> String {
        super::index::idx1(Self::KIND, self.state_name(), self.idx1_ms(), self.id())
    }
    /// Its `idx2` value, only while it is open (see [`super::index`]).
    fn idx2(&self) -> Option<String>;
    /// Its `idx1` and `idx2` values.
    fn indexes(&self) -> (String, Option<String>) {
        (self.idx1(), self.idx2())
    }
    /// Whether it will change again (it is not settled): only open records keep a snapshot.
    fn is_open(&self) -> bool;
}
