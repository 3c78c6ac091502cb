//! Snapshots: the last version of each open record this incarnation wrote itself.
//!
//! The live path writes a record and changes it again a moment later: an inbound event is
//! journaled (leased) and then completed; a send is journaled, leased by `begin_attempt` and
//! marked sent. Reading the record back from the backend before each change costs a read and a
//! decode, although this process has just written it. So every successful write of an *open*
//! record (one that will change again: pending, processing, sending, failed) leaves a snapshot
//! here, `(version, record)`, and the next [`modify`](super::KvDurability::modify) of that
//! record starts from the snapshot instead of a read.
//!
//! A snapshot is only a hint, never a source of truth:
//!
//! - a change decided on a snapshot is written by compare-and-set on the snapshot's version.
//!   The backend contract (a key never gets a version it had before, also after delete and
//!   re-create) makes that write succeed only if the stored record is still exactly the
//!   snapshot, as if it had just been read; any other write in between (another replica, a
//!   sweeper, an operator, a purge) makes it conflict, and the record is read again and the
//!   change decided again, as after any conflict;
//! - a decision that writes nothing (`Keep`) or refuses (`StaleLease`, …) is never taken on a
//!   snapshot: the record is read from the backend and decided again;
//! - taking a snapshot removes it, so two concurrent changes never start from the same one.
//!
//! Settled records (done, sent, dead, unknown) leave no snapshot, so the map only holds the
//! records in flight (a burst of admitted messages waiting in their chats' queues, for
//! example); it is also cleared when it reaches [`MAX_SNAPSHOTS`] (records another replica
//! finished, for example), which costs the next change of each record one read. Snapshots
//! live in one incarnation: a reopened durability (a restarted process) starts with none.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::Loaded;
use crate::metrics::RecordKind;

/// The most snapshots kept per journal before the map is cleared. A snapshot shares its
/// payload with the caller's copy of the record, so this is about the records' fields.
pub(crate) const MAX_SNAPSHOTS: usize = 1 << 16;

/// A snapshot: a record and the version this incarnation wrote it at (boxed, so the futures
/// that carry one stay small).
pub(crate) type Snapshot<R> = Box<Loaded<R>>;

/// The snapshots of one journal by record id, each a [`Snapshot`] of that journal's record
/// type (a fast hasher: these are looked up on every journal write).
type SnapshotTable = HashMap<String, Box<dyn Any + Send>, foldhash::fast::RandomState>;

/// The snapshots of both journals.
#[derive(Default)]
pub(crate) struct Snapshots {
    inbound: Mutex<SnapshotTable>,
    outbound: Mutex<SnapshotTable>,
}

impl Snapshots {
    fn lock(&self, kind: RecordKind) -> MutexGuard<'_, SnapshotTable> {
        let map = match kind {
            RecordKind::Inbound => &self.inbound,
            RecordKind::Outbound => &self.outbound,
        };
        // Each operation below leaves the map consistent, so a poisoned lock is still usable.
        map.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the snapshot of record `id` of `kind`, if any.
    pub(crate) fn take<R: Send + 'static>(
        &self,
        kind: RecordKind,
        id: &str,
    ) -> Option<Snapshot<R>> {
        self.lock(kind).remove(id)?.downcast::<Loaded<R>>().ok()
    }

    /// Remembers `loaded` as the snapshot of record `id` of `kind` (replacing an older one).
    pub(crate) fn keep<R: Send + 'static>(&self, kind: RecordKind, id: &str, loaded: Snapshot<R>) {
        let mut map = self.lock(kind);
        if map.len() >= MAX_SNAPSHOTS && !map.contains_key(id) {
            map.clear();
        }
        map.insert(id.to_owned(), loaded);
    }

    /// Forgets the snapshot of record `id` of `kind`.
    pub(crate) fn forget(&self, kind: RecordKind, id: &str) {
        self.lock(kind).remove(id);
    }
}
