//! Reading and writing journal records: encoding, compare-and-set loops, scans and the
//! quarantine of undecodable records.
//!
//! Writes go through [`DurableKv::cas_record`](crate::DurableKv::cas_record) and reads through
//! `get_record` / `range_records`: a stored value is either bytes (decoded here) or a record a
//! backend kept unencoded (copied out; one of the other journal counts as not a valid record).
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

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::snapshots::{self, Snapshot, SnapshotMap, Snapshots};
use super::{KvDurability, MAX_CAS_RETRIES, index};
use crate::error::DurabilityError;
use crate::kv::{
    CasOutcome, DurableKv, Entry, EntryValue, Index, KeyedValue, KvError, RecordChange,
    RecordEntry, RecordIdx1, RecordUpdate, RecordUpdated, RecordValue, VersionedValue, WritePhase,
    WritePoint, encode_json,
};
use crate::operating::{Counter, DurabilityEvent, RecordKind};

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// The entry of a record encoded for storage (for a batch, which carries bytes).
    pub(crate) fn encode<R: JournalRecord>(record: &R) -> Result<Entry, DurabilityError> {
        let value =
            encode_json(record, record.payload_len()).map_err(|e| DurabilityError::Encode {
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

    /// Writes a copy of a record (create with `expected: None`).
    pub(crate) async fn put<R>(
        &self,
        point: WritePoint,
        operation: &'static str,
        expected: Option<u64>,
        record: &R,
    ) -> Result<CasOutcome, DurabilityError>
    where
        R: JournalRecord,
    {
        self.put_shared_at_points(&[point], operation, expected, &Arc::new(record.clone()))
            .await
    }

    /// Writes a record the caller shares (`Arc`) at the hooks of `points` (one write that is
    /// several write points at once): the backend gets the record itself, not a copy, and
    /// the caller keeps it for a retry or to return it (a backend that keeps records holds the
    /// other reference; one that stores bytes has dropped it). `idx1` is left for the backend
    /// to derive from the record ([`RecordIdx1::Derived`]): a backend that keeps records
    /// computes it when its `idx1` is read (the sweeper), not at every write.
    pub(crate) fn put_shared_at_points<'a, R>(
        &'a self,
        points: &'a [WritePoint],
        operation: &'static str,
        expected: Option<u64>,
        record: &'a Arc<R>,
    ) -> impl Future<Output = Result<CasOutcome, DurabilityError>> + Send + 'a
    where
        R: JournalRecord,
    {
        // Not an `async fn` of its own: the caller awaits the write's future itself.
        self.put_shared_indexed(points, operation, expected, record, record.idx2())
    }

    /// [`put_shared_at_points`](Self::put_shared_at_points) with the record's `idx2` value
    /// already built by the caller (it is `record.idx2()`).
    pub(crate) async fn put_shared_indexed<R>(
        &self,
        points: &[WritePoint],
        operation: &'static str,
        expected: Option<u64>,
        record: &Arc<R>,
        idx2: Option<String>,
    ) -> Result<CasOutcome, DurabilityError>
    where
        R: JournalRecord,
    {
        debug_assert_eq!(idx2, record.idx2());
        let (key, entry) = Self::shared_entry(record, idx2);
        self.cas_record_at_points(points, &key, expected, entry)
            .await
            .map_err(Self::backend_err(R::KIND, record.id(), operation))
    }

    /// [`put_shared_indexed`](Self::put_shared_indexed) done at once, by a backend that keeps
    /// its records in this process and writes without waiting
    /// ([`DurableKv::cas_record_now`]) and whose journal write hooks cannot refuse a write
    /// (they run only around the future's write). `Err(idx2)` gives `idx2` back when it
    /// cannot: nothing was written, and the caller writes through `put_shared_indexed`.
    pub(crate) fn put_shared_now<R>(
        &self,
        operation: &'static str,
        expected: Option<u64>,
        record: &Arc<R>,
        idx2: Option<String>,
    ) -> Result<Result<CasOutcome, DurabilityError>, Option<String>>
    where
        R: JournalRecord,
    {
        let backend = self.backend();
        if backend.may_refuse_journal_writes() {
            return Err(idx2);
        }
        let (key, entry) = Self::shared_entry(record, idx2);
        match backend.cas_record_now(&self.shared.scope, &key, expected, entry) {
            Ok(outcome) => Ok(outcome.map_err(Self::backend_err(R::KIND, record.id(), operation))),
            Err(entry) => Err(entry.idx2),
        }
    }

    /// The storage key of `record` and the entry that writes it, shared (its `idx1` left to
    /// derive, its `idx2` value `idx2`).
    fn shared_entry<R: JournalRecord>(
        record: &Arc<R>,
        idx2: Option<String>,
    ) -> (String, RecordEntry) {
        let entry = RecordEntry {
            value: R::shared_value(Arc::clone(record)),
            idx1: RecordIdx1::Derived,
            idx2,
        };
        (index::storage_key(R::KIND, record.id()), entry)
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
            .get_record(&self.shared.scope, &key)
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

    /// Decodes a listed entry, quarantining it when it is not a valid record.
    async fn decode_listed<R: JournalRecord>(&self, raw: KeyedValue) -> Option<Loaded<R>> {
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
    async fn quarantine(&self, kind: RecordKind, key: &str, entry: VersionedValue, reason: &str) {
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
        // A record of the other journal under this key is kept as its JSON.
        let value = match entry.value.into_bytes() {
            Ok(value) => value,
            Err(e) => {
                tracing::error!(%kind, id = %id, error = %e, %reason, "cannot quarantine undecodable record");
                return;
            }
        };
        let moved = Entry {
            value,
            idx1: Some(index::idx1(kind, "quarantine", self.now_ms(), &id)),
            idx2: None,
        };
        match self.cas_at(point, key, Some(entry.version), moved).await {
            Ok(CasOutcome::Ok { .. }) => {
                tracing::error!(%kind, id = %id, %reason, "undecodable journal record quarantined");
                self.count(match kind {
                    RecordKind::Inbound => Counter::InboundDead,
                    RecordKind::Outbound => Counter::OutboxDead,
                });
                self.emit(DurabilityEvent::Dead {
                    kind,
                    id,
                    error: format!("undecodable record: {reason}"),
                });
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
    ) -> Result<Vec<KeyedValue>, DurabilityError> {
        self.backend()
            .range_records(&self.shared.scope, Index::One, from, to, limit)
            .await
            .map_err(Self::backend_err(kind, from, "list"))
    }

    /// Raw entries of `idx2` in `from..to`.
    pub(crate) async fn range_idx2_raw(
        &self,
        kind: RecordKind,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<KeyedValue>, DurabilityError> {
        self.backend()
            .range_records(&self.shared.scope, Index::Two, from, to, limit)
            .await
            .map_err(Self::backend_err(kind, from, "list by chat"))
    }

    /// The storage key of the first entry of `idx2` in `from..to`: read at once from a
    /// backend in this process, listed otherwise.
    pub(crate) async fn first_idx2_key(
        &self,
        kind: RecordKind,
        from: &str,
        to: &str,
    ) -> Result<Option<String>, DurabilityError> {
        if let Some(first) = self.first_idx2_key_now(kind, from, to) {
            return first;
        }
        self.backend()
            .range_records(&self.shared.scope, Index::Two, from, to, 1)
            .await
            .map(|found| found.into_iter().next().map(|e| e.key))
            .map_err(Self::backend_err(kind, from, "list by chat"))
    }

    /// [`first_idx2_key`](Self::first_idx2_key) read at once ([`DurableKv::first_key_now`]);
    /// `None` from a backend that lists only through its future.
    pub(crate) fn first_idx2_key_now(
        &self,
        kind: RecordKind,
        from: &str,
        to: &str,
    ) -> Option<Result<Option<String>, DurabilityError>> {
        let first = self
            .backend()
            .first_key_now(&self.shared.scope, Index::Two, from, to)?;
        Some(first.map_err(Self::backend_err(kind, from, "list by chat")))
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
        self.modify_from(point, operation, id, start, decide).await
    }

    /// [`modify`](Self::modify) starting from `start` (a snapshot the caller took), or from a
    /// read when `None`. A decision taken on `start` counts only if it writes and the write
    /// lands on `start`'s version; otherwise the record is read and decided again.
    pub(crate) async fn modify_from<R, T, F>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        start: Option<Snapshot<R>>,
        decide: F,
    ) -> Result<T, DurabilityError>
    where
        R: JournalRecord,
        F: FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError> + Send,
        T: Send,
    {
        self.modify_changing(point, operation, id, start, Returned::Nothing, decide)
            .await
            .map(|(out, _)| out)
    }

    /// [`modify_from`](Self::modify_from) for a decision that changes the record only when it
    /// writes (it checks, then changes: `complete`, `mark_sent`). On a backend that keeps
    /// records and whose journal writes cannot be refused
    /// ([`DurableKv::may_refuse_journal_writes`]), it runs on the stored record itself: no copy
    /// of the record is made.
    pub(crate) async fn settle_from<R, F>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        start: Option<Snapshot<R>>,
        decide: F,
    ) -> Result<(), DurabilityError>
    where
        R: JournalRecord,
        F: FnMut(&mut R, i64) -> Result<Step<()>, DurabilityError> + Send,
    {
        self.modify_changing(
            point,
            operation,
            id,
            start,
            Returned::NothingChecksFirst,
            decide,
        )
        .await
        .map(|((), _)| ())
    }

    /// [`settle_from`](Self::settle_from) done at once by a backend that changes records in
    /// place ([`DurableKv::update_record`]): no future, no snapshot. `None` when this backend
    /// does not (or the key holds bytes): nothing was changed, and the caller settles through
    /// `settle_from`.
    pub(crate) fn settle_now<R, F>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        mut decide: F,
    ) -> Option<Result<(), DurabilityError>>
    where
        R: JournalRecord,
        F: FnMut(&mut R, i64) -> Result<Step<()>, DurabilityError>,
    {
        if !self.updates_in_place() {
            return None;
        }
        self.modify_in_place::<R, (), F>(
            point,
            operation,
            id,
            Returned::NothingChecksFirst,
            &mut decide,
        )
        .transpose()
        .map(|done| done.map(|((), _)| ()))
    }

    /// [`modify_from`](Self::modify_from) that also returns the record as written (or as found,
    /// for `Keep`), so a caller that needs it does not clone it inside `decide`.
    pub(crate) async fn modify_record<R, T, F>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        start: Option<Snapshot<R>>,
        decide: F,
    ) -> Result<(T, R), DurabilityError>
    where
        R: JournalRecord,
        F: FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError> + Send,
        T: Send,
    {
        let (out, record) = self
            .modify_changing(point, operation, id, start, Returned::Record, decide)
            .await?;
        match record {
            Some(record) => Ok((out, record)),
            // `Returned::Record` always gives the record back; a typed error rather than a
            // panic should that ever change.
            None => Err(DurabilityError::NotFound {
                kind: R::KIND,
                id: id.to_owned(),
            }),
        }
    }

    /// The read, decide, write loop of [`modify_from`](Self::modify_from) and
    /// [`modify_record`](Self::modify_record); `returned` says whether the caller wants the
    /// record (changed in place, it is copied only then).
    async fn modify_changing<R, T, F>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        mut start: Option<Snapshot<R>>,
        returned: Returned,
        mut decide: F,
    ) -> Result<(T, Option<R>), DurabilityError>
    where
        R: JournalRecord,
        F: FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError> + Send,
        T: Send,
    {
        // A backend that keeps records changes it in place, under its lock: no snapshot, no
        // read, no compare-and-set (bytes under the key are read and decoded below).
        if self.updates_in_place() {
            drop(start.take());
            if let Some(done) = self.modify_in_place(point, operation, id, returned, &mut decide)? {
                return Ok(done);
            }
        }
        // The record is kept boxed and the read boxed too: this future sits inside every
        // handler's and every send's future, so it holds pointers, not records.
        for _ in 0..MAX_CAS_RETRIES {
            let (from_snapshot, mut loaded) = match start.take() {
                Some(snapshot) => (true, snapshot),
                None => match Box::pin(self.load::<R>(id, operation)).await? {
                    Some(loaded) => (false, Box::new(loaded)),
                    None => {
                        return Err(DurabilityError::NotFound {
                            kind: R::KIND,
                            id: id.to_owned(),
                        });
                    }
                },
            };
            let decided = decide(&mut loaded.record, self.now_ms());
            let (at, out) = match decided {
                // Only a write can confirm a snapshot: decide again on a fresh read.
                Ok(Step::Keep(_)) | Err(_) if from_snapshot => continue,
                Err(e) => return Err(e),
                Ok(Step::Keep(out)) => return Ok((out, Some(loaded.record))),
                Ok(Step::Write(out)) => (point, out),
                Ok(Step::WriteAt(at, out)) => (at, out),
            };
            if let CasOutcome::Ok { version } = self
                .put(at, operation, Some(loaded.version), &loaded.record)
                .await?
            {
                self.note_written(version, &loaded.record);
                return Ok((out, Some(loaded.record)));
            }
        }
        Err(DurabilityError::Contention {
            kind: R::KIND,
            id: id.to_owned(),
            operation,
        })
    }

    /// Whether changes of records are made in place by the backend
    /// ([`DurableKv::update_record`], for a backend that keeps records): no snapshots are kept
    /// then.
    fn updates_in_place(&self) -> bool {
        self.kv.keeps_records()
    }

    /// The in-place change of [`modify_record`](Self::modify_record): `decide` runs on the
    /// stored record under the backend's lock (on a copy, which replaces the stored record
    /// when it writes). `None`: the backend does not change records in place, or the key
    /// holds bytes; the caller reads, decides and compares-and-sets.
    fn modify_in_place<R, T, F>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        returned: Returned,
        decide: &mut F,
    ) -> Result<Option<(T, Option<R>)>, DurabilityError>
    where
        R: JournalRecord,
        F: FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError>,
    {
        let on_the_record = matches!(returned, Returned::NothingChecksFirst)
            && !self.backend().may_refuse_journal_writes();
        let mut update = InPlace {
            d: self,
            decide,
            now: self.now_ms(),
            point,
            returned,
            on_the_record,
            decided: None,
            written_at: None,
        };
        let updated = index::with_storage_key(R::KIND, id, |key| {
            self.backend()
                .update_record(&self.shared.scope, key, &mut update)
        });
        let Some(updated) = updated else {
            return Ok(None);
        };
        match updated.map_err(Self::backend_err(R::KIND, id, operation))? {
            RecordUpdated::Missing => Err(DurabilityError::NotFound {
                kind: R::KIND,
                id: id.to_owned(),
            }),
            RecordUpdated::NotARecord => Ok(None),
            RecordUpdated::Kept | RecordUpdated::Written { .. } => {
                if let Some(at) = update.written_at {
                    self.hook(at, WritePhase::After).map_err(Self::backend_err(
                        R::KIND,
                        id,
                        operation,
                    ))?;
                }
                match update.decided {
                    Some(decided) => decided.map(Some),
                    // A backend that answered without showing the record: read it instead.
                    None => Ok(None),
                }
            }
        }
    }

    /// Takes this incarnation's snapshot of a record (see [`super::snapshots`]).
    pub(crate) fn take_snapshot<R: JournalRecord>(&self, id: &str) -> Option<Snapshot<R>> {
        if self.updates_in_place() {
            return None;
        }
        snapshots::take(R::snapshots(&self.shared.snapshots), id)
    }

    /// Remembers (a copy of) a record this incarnation has just written at `version`, if it is
    /// open; forgets its snapshot otherwise. Nothing when the backend changes records in
    /// place.
    pub(crate) fn note_written<R: JournalRecord>(&self, version: u64, record: &R) {
        if self.updates_in_place() {
            return;
        }
        let map = R::snapshots(&self.shared.snapshots);
        if record.is_open() {
            let loaded = Box::new(Loaded {
                version,
                record: record.clone(),
            });
            snapshots::keep(map, record.id(), loaded);
        } else {
            snapshots::forget(map, record.id());
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

/// Whether a change of a record gives the record back to its caller.
#[derive(Debug, Clone, Copy)]
enum Returned {
    /// The record as written (or as found, when the decision keeps it).
    Record,
    /// Nothing: a record changed in place is then not copied for the caller.
    Nothing,
    /// Nothing, and the decision changes the record only when it writes: a record changed in
    /// place is decided on as it is stored, unless a journal write hook may refuse the write.
    NothingChecksFirst,
}

/// A [`KvDurability::modify_record`] decision run by the backend on the stored record
/// ([`DurableKv::update_record`]).
struct InPlace<'a, K: ?Sized, R, T, F> {
    d: &'a KvDurability<K>,
    decide: &'a mut F,
    now: i64,
    point: WritePoint,
    /// Whether the caller wants the record back.
    returned: Returned,
    /// The decision runs on the stored record itself (it changes it only when it writes, and
    /// no write hook can refuse the write): no copy.
    on_the_record: bool,
    /// What `decide` answered, with the record as written (or as found, for `Keep`) when the
    /// caller wants it.
    decided: Option<Result<(T, Option<R>), DurabilityError>>,
    /// The write point of the write made, whose `After` hooks the caller runs.
    written_at: Option<WritePoint>,
}

impl<K, R, T, F> RecordUpdate for InPlace<'_, K, R, T, F>
where
    K: DurableKv + ?Sized,
    R: JournalRecord,
    F: FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError>,
{
    fn apply(&mut self, value: &mut RecordValue, _version: u64) -> Result<RecordChange, KvError> {
        let Some(stored) = R::record_mut(value) else {
            return Ok(RecordChange::Foreign);
        };
        if self.on_the_record {
            return self.apply_on_the_record(stored);
        }
        // Decided on a copy: a decision that keeps the record or fails may have changed it.
        let mut record = stored.clone();
        let (at, out) = match (self.decide)(&mut record, self.now) {
            Err(e) => {
                self.decided = Some(Err(e));
                return Ok(RecordChange::Keep);
            }
            Ok(Step::Keep(out)) => {
                let kept = matches!(self.returned, Returned::Record).then_some(record);
                self.decided = Some(Ok((out, kept)));
                return Ok(RecordChange::Keep);
            }
            Ok(Step::Write(out)) => (self.point, out),
            Ok(Step::WriteAt(at, out)) => (at, out),
        };
        self.d.hook(at, WritePhase::Before)?;
        let idx2 = record.idx2();
        // The changed copy replaces the stored record; the caller gets a copy of it only if it
        // asked (the record it replaced is dropped here).
        std::mem::swap(stored, &mut record);
        drop(record);
        let written = matches!(self.returned, Returned::Record).then(|| stored.clone());
        self.decided = Some(Ok((out, written)));
        self.written_at = Some(at);
        Ok(RecordChange::Changed {
            idx1: RecordIdx1::Derived,
            idx2,
        })
    }
}

impl<K, R, T, F> InPlace<'_, K, R, T, F>
where
    K: DurableKv + ?Sized,
    R: JournalRecord,
    F: FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError>,
{
    /// [`apply`](RecordUpdate::apply) deciding on `stored` itself (see `on_the_record`).
    fn apply_on_the_record(&mut self, stored: &mut R) -> Result<RecordChange, KvError> {
        let (at, out) = match (self.decide)(stored, self.now) {
            // Unchanged: the decision changes the record only when it writes.
            Err(e) => {
                self.decided = Some(Err(e));
                return Ok(RecordChange::Keep);
            }
            Ok(Step::Keep(out)) => {
                self.decided = Some(Ok((out, None)));
                return Ok(RecordChange::Keep);
            }
            Ok(Step::Write(out)) => (self.point, out),
            Ok(Step::WriteAt(at, out)) => (at, out),
        };
        // Cannot refuse the write (checked before choosing this path).
        self.d.hook(at, WritePhase::Before)?;
        self.decided = Some(Ok((out, None)));
        self.written_at = Some(at);
        Ok(RecordChange::Changed {
            idx1: RecordIdx1::Derived,
            idx2: stored.idx2(),
        })
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

/// The record behind `shared`: taken out when nothing else holds it (a backend that stores
/// bytes), copied otherwise (one that keeps records holds it).
pub(crate) fn unshare<R: Clone>(shared: Arc<R>) -> R {
    Arc::try_unwrap(shared).unwrap_or_else(|kept| (*kept).clone())
}

/// A decoded record with the version it was read at.
#[derive(Debug, Clone)]
pub(crate) struct Loaded<R> {
    pub(crate) version: u64,
    pub(crate) record: R,
}

/// Decodes a stored value into a record of `R`'s journal; the reason when it is not one.
fn decode<R: JournalRecord>(value: &EntryValue) -> Result<R, String> {
    match value {
        EntryValue::Bytes(bytes) => serde_json::from_slice::<R>(bytes).map_err(|e| e.to_string()),
        EntryValue::Record(record) => R::from_record_value(record)
            .ok_or_else(|| format!("a record of another journal than the {} one", R::KIND)),
    }
}

/// A record kept in a journal.
pub(crate) trait JournalRecord: Serialize + DeserializeOwned + Clone + Send + Sync {
    /// Its journal.
    const KIND: RecordKind;
    /// Its inbound id or outbox key.
    fn id(&self) -> &str;
    /// Its `idx1` value (see [`super::index`]).
    fn idx1(&self) -> String {
        // `<i|o>/<state>/<16 digits>/` is at most 34 bytes: one allocation for most ids.
        let mut value = String::with_capacity(34 + self.id().len());
        self.push_idx1(&mut value);
        value
    }
    /// Appends its `idx1` value to `out` (a buffer the caller reuses).
    fn push_idx1(&self, out: &mut String);
    /// Its `idx2` value, only while it is open (see [`super::index`]).
    fn idx2(&self) -> Option<String>;
    /// Its `idx1` and `idx2` values.
    fn indexes(&self) -> (String, Option<String>) {
        (self.idx1(), self.idx2())
    }
    /// Whether it will change again (it is not settled): only open records keep a snapshot.
    fn is_open(&self) -> bool;
    /// The size of its payload's JSON text.
    fn payload_len(&self) -> usize;
    /// It, shared, as a backend stores it before encoding.
    fn shared_value(record: Arc<Self>) -> RecordValue
    where
        Self: Sized;
    /// A copy of the record `value` holds, if it is one of this journal.
    fn from_record_value(value: &RecordValue) -> Option<Self>
    where
        Self: Sized;
    /// The record `value` holds, to change in place, if it is one of this journal.
    fn record_mut(value: &mut RecordValue) -> Option<&mut Self>
    where
        Self: Sized;
    /// Its journal's snapshots.
    fn snapshots(all: &Snapshots) -> &SnapshotMap<Self>
    where
        Self: Sized;
}
