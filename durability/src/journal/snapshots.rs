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
//!   sweeper, an operator, a purge) makes it conflict, and the change is re-read and re-decided
//!   as before;
//! - a decision that writes nothing (`Keep`) or refuses (`StaleLease`, …) is never taken on a
//!   snapshot: the record is read from the backend and decided again;
//! - taking a snapshot removes it, so two concurrent changes never start from the same one.
//!
//! Settled records (done, sent, dead, unknown) leave no snapshot, so the map only holds the
//! records in flight (a burst of admitted messages waiting in their chats' queues, for
//! example); it is also cleared when it reaches [`MAX_SNAPSHOTS`] (records another replica
//! finished, for example), which costs the next change of each record one read. Snapshots
//! live in one incarnation: a reopened durability (a restarted process) starts with none.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::Loaded;
use crate::inbox::InboundRecord;
use crate::outbox::OutboxRecord;

/// The most snapshots kept per journal before the map is cleared. A snapshot shares its
/// payload with the caller's copy of the record, so this is about the records' fields.
pub(crate) const MAX_SNAPSHOTS: usize = 1 << 16;

/// A snapshot: a record and the version this incarnation wrote it at (boxed, so the futures
/// that carry one stay small).
pub(crate) type Snapshot<R> = Box<Loaded<R>>;

/// The snapshots of one journal, by record id.
pub(crate) type SnapshotMap<R> = Mutex<SnapshotTable<R>>;

/// The snapshots of one journal by record id (a fast hasher: these are looked up on every
/// journal write).
pub(crate) type SnapshotTable<R> = HashMap<String, Snapshot<R>, foldhash::fast::RandomState>;

/// The snapshots of both journals.
#[derive(Default)]
pub(crate) struct Snapshots {
    pub(crate) inbound: SnapshotMap<InboundRecord>,
    pub(crate) outbound: SnapshotMap<OutboxRecord>,
}

fn lock<R>(map: &SnapshotMap<R>) -> MutexGuard<'_, SnapshotTable<R>> {
    // Each operation below leaves the map consistent, so a poisoned lock is still usable.
    map.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes the snapshot of `id`, if any.
pub(crate) fn take<R>(map: &SnapshotMap<R>, id: &str) -> Option<Snapshot<R>> {
    lock(map).remove(id)
}

/// Remembers `record` as written at `version` (replacing an older snapshot).
pub(crate) fn keep<R>(map: &SnapshotMap<R>, id: &str, loaded: Snapshot<R>) {
    let mut map = lock(map);
    if map.len() >= MAX_SNAPSHOTS && !map.contains_key(id) {
        map.clear();
    }
    map.insert(id.to_owned(), loaded);
}

/// Forgets the snapshot of `id`.
pub(crate) fn forget<R>(map: &SnapshotMap<R>, id: &str) {
    lock(map).remove(id);
}
