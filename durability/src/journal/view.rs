//! [`View`]: what the inbox and the outbox share as views of a [`KvDurability`], each over its
//! own record type (the record calls typed once for the view's record).

use std::marker::PhantomData;

use super::snapshots::Snapshot;
use super::{JournalRecord, KvDurability, Step};
use crate::error::DurabilityError;
use crate::kv::{CasOutcome, DurableKv, KvOp, WritePoint};

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
