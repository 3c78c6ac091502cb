//! Events journals (feature `file`): an app's own journal of events in one file, which can
//! also keep the bot's inbox and outbox.
//!
//! - [`FileEventJournal`]: one process. It is a [`FileDurability`] file with the events on
//!   top, so it has that file's guarantees: a pid lock (`<file>.lock`; a second process gets
//!   [`FileError::Locked`] naming the file and the holder pid, a second open in this process
//!   [`FileError::AlreadyOpen`] until the first is closed), `fsync`, the append log with
//!   compaction (every 1000 entries or 4 MiB, [`FileOptions`]), a torn last line cut and the
//!   rest replayed, a bad line in the middle refused with [`FileError::AppendLogCorrupt`]
//!   (file, line, byte offset) leaving the file untouched. Concurrent writes share one append
//!   or one snapshot (group commit).
//! - [`SharedFileEventJournal`]: several processes on one host. Every operation runs under
//!   the cross-process mutex `<file>.mutex` against the current file ([`SharedFileKv`]), so
//!   claims are exclusive and fencing tokens hold across processes; a dead holder's mutex is
//!   broken at once, a stalled one's after [`SharedFileOptions::stale_lock`] (30 s; the
//!   holder's heartbeat refreshes it every third of that). Same file format and options, same
//!   refusal of a corrupt log; it refuses a file that a live locked `FileEventJournal` holds.
//! - [`events_durability`]: the bot's journals in such a journal ([`EventsDurability`], a
//!   [`DurableKv`]: the inbox and outbox are built by [`KvDurability`](crate::KvDurability) as
//!   on every backend), optionally with the outbox on another backend
//!   ([`EventsDurability::outbox`], e.g. a `PostgresKv` or `RedisKv`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use botmesh_durability::events::{ClaimRequest, NewEvent, SharedFileEventJournal, SharedFileOptions};
//!
//! let journal = SharedFileEventJournal::open("./data/events.json", SharedFileOptions::new()).await?;
//! journal.append(NewEvent::new("order.paid", serde_json::json!({ "order": 7 })).channel("billing")).await?;
//! for claimed in journal.claim(&ClaimRequest::new("worker-1").channel("billing")).await? {
//!     // … handle claimed.record …
//!     journal.complete(&claimed.record.id, claimed.token).await?;
//! }
//! journal.close().await;
//! # Ok(()) }
//! ```
//!
//! The bot's records are not events of the journal: [`list`](EventJournal::list) shows the
//! app's events only, and the bot's are seen through its operator API.

mod disk;
mod durability;
mod error;
mod journal;
mod mutex;
mod options;
mod record;
mod shared_file;

use std::path::Path;
use std::sync::Arc;

pub use durability::{EventsDurability, events_durability};
pub use error::{EventJournalError, SharedFileError};
pub use journal::EventJournal;
pub use options::SharedFileOptions;
pub use record::{
    ClaimRequest, ClaimedEvent, EventLease, EventQuery, EventRecord, EventStatus, NewEvent,
};
#[cfg(feature = "testing")]
pub use shared_file::MutexHold;
pub use shared_file::SharedFileKv;

use crate::file::{FileDurability, FileError, FileOptions};
use crate::kv::DurableKv;

/// An app's events journal in one locked file, for one process.
pub type FileEventJournal = EventJournal<FileDurability>;

/// An app's events journal in one file shared by the processes of one host.
pub type SharedFileEventJournal = EventJournal<SharedFileKv>;

/// A journal the bot's durability can live in: atomic, fenced operations over a
/// [`DurableKv`] (every [`EventJournal`] is one). On a journal shared between processes
/// ([`SharedFileEventJournal`]), several replicas of a bot on one host share the records.
pub trait LeasedEventJournal {
    /// The storage the journal's events live in, which the bot's records will share.
    fn storage_kv(&self) -> Arc<dyn DurableKv>;
}

impl<B: DurableKv> LeasedEventJournal for EventJournal<B> {
    fn storage_kv(&self) -> Arc<dyn DurableKv> {
        Arc::clone(self.storage()) as Arc<dyn DurableKv>
    }
}

impl EventJournal<FileDurability> {
    /// Opens (creating it if needed) the journal file at `path`, locked for this process
    /// until [`close`](Self::close): see [`FileDurability::open`] for the options and
    /// refusals.
    pub async fn open(path: impl AsRef<Path>, options: FileOptions) -> Result<Self, FileError> {
        Ok(Self::over(FileDurability::open(path, options).await?))
    }

    /// Lets the writes already queued finish, folds the log into the snapshot, releases the
    /// lock; later operations fail.
    pub async fn close(&self) -> Result<(), FileError> {
        FileDurability::close(self.storage()).await
    }
}

impl EventJournal<SharedFileKv> {
    /// Opens (creating it if needed) the journal file at `path`, shared with the other
    /// processes that open it: see [`SharedFileKv::open`].
    pub async fn open(
        path: impl AsRef<Path>,
        options: SharedFileOptions,
    ) -> Result<Self, SharedFileError> {
        Ok(Self::over(SharedFileKv::open(path, options).await?))
    }

    /// Lets the operations already called finish and refuses later ones.
    pub async fn close(&self) {
        SharedFileKv::close(self.storage()).await;
    }
}
