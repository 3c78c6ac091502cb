//! [`View`]: what the inbox and the outbox share as views of a [`KvDurability`], each over its
//! own record type (the record calls typed once for the view's record).

use std::marker::PhantomData;

use super::snapshots::Snapshot;
use super::{JournalRecord, KvDurability, Step, index};
use crate::error::DurabilityError;
use crate::kv::{CasOutcome, DurableKv, KvOp, WritePoint};

/// What a create of a new record found: the key free (the record written at `version`), or
/// the record already journaled under it.
pub(crate) enum Creation<R> {
    /// Written at this version.
    Written(u64),
    /// The record found under the id (nothing written).
    Found(R),
}

/// The records of type `R` in a [`KvDurability`].
pub(crate) struct View<'a, K: ?Sized, R> {
    d: &'a KvDurability<K>,
    record: PhantomData<fn() -> R>,
}

impl<'a, K: DurableKv + ?Sized, R: JournalRecord> View<'a, K, R> {
    pub(crate) fn new(d: &'a KvDurability<K>) -> Self {
        View {
            d,
            record: PhantomData,
        }
    }

    /// Reads a record.
    pub(crate) async fn record(
        &self,
        id: &str,
        operation: &'static str,
    ) -> Result<Option<R>, DurabilityError> {
        let loaded = self.d.load::<R>(id, operation).await?;
        Ok(loaded.map(|l| l.record))
    }

    /// The records in state `state`, soonest due (or oldest) first, at most `limit`.
    /// Undecodable records are quarantined and skipped.
    pub(crate) async fn list(&self, state: &str, limit: usize) -> Result<Vec<R>, DurabilityError> {
        let (from, to) = index::state_range(R::KIND, state);
        let loaded = self.d.scan::<R>(&from, &to, limit).await?;
        Ok(loaded.into_iter().map(|l| l.record).collect())
    }

    /// Creates `record` (a journal write under the hooks of `points`), or finds the record
    /// already journaled under its id. A record purged between the conflict and the read is
    /// created again, up to eight times before `Contention`.
    pub(crate) async fn create(
        &self,
        points: &[WritePoint],
        record: &R,
    ) -> Result<Creation<R>, DurabilityError> {
        for _ in 0..8 {
            match self.d.put(points, "journal", None, record).await? {
                CasOutcome::Ok { version } => return Ok(Creation::Written(version)),
                CasOutcome::Conflict { .. } => {
                    if let Some(found) = self.found(record.id()).await? {
                        return Ok(Creation::Found(found));
                    }
                }
            }
        }
        Err(self.contention(record))
    }

    /// The record under `id` after a create conflicted on it (`None`: removed since).
    pub(crate) async fn found(&self, id: &str) -> Result<Option<R>, DurabilityError> {
        // Boxed: a conflict is rare, and this future sits in every journal write's.
        let loaded = Box::pin(self.d.load::<R>(id, "journal")).await?;
        Ok(loaded.map(|l| l.record))
    }

    /// The error of a create that kept conflicting without finding the record.
    pub(crate) fn contention(&self, record: &R) -> DurabilityError {
        DurabilityError::Contention {
            kind: R::KIND,
            id: record.id().to_owned(),
            operation: "journal",
        }
    }

    /// [`KvDurability::modify`] on a record.
    pub(crate) async fn modify<T: Send>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        decide: impl FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError> + Send,
    ) -> Result<T, DurabilityError> {
        self.d.modify(point, operation, id, decide).await
    }

    /// [`KvDurability::modify_record`] on a record.
    pub(crate) async fn modify_record<T: Send>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        start: Option<Snapshot<R>>,
        decide: impl FnMut(&mut R, i64) -> Result<Step<T>, DurabilityError> + Send,
    ) -> Result<(T, R), DurabilityError> {
        self.d
            .modify_record(point, operation, id, start, decide)
            .await
    }

    /// Writes `ops` in one batch under the write point's hooks; a backend error names record
    /// `id` and `operation`.
    pub(crate) async fn batch(
        &self,
        point: WritePoint,
        id: &str,
        operation: &'static str,
        ops: Vec<KvOp>,
    ) -> Result<Vec<CasOutcome>, DurabilityError> {
        let err = KvDurability::<K>::backend_err(R::KIND, id, operation);
        self.d.batch_at(point, ops).await.map_err(err)
    }
}
