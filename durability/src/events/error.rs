//! The errors of the events journals: [`SharedFileError`] (opening and using a file shared by
//! processes) and [`EventJournalError`] (the journal's operations).
//!
//! Opening a [`FileEventJournal`](super::FileEventJournal) fails with the
//! [`FileError`] of `FileDurability` (`Locked` naming the holder pid, `AlreadyOpen`,
//! `AppendLogCorrupt` with line and byte offset, …): it is that file.

use std::path::PathBuf;
use std::sync::Arc;

use crate::file::FileError;
use crate::kv::KvError;

use super::EventStatus;

/// Why a [`SharedFileEventJournal`](super::SharedFileEventJournal) file could not be opened,
/// read or written. Every variant names the file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SharedFileError {
    /// The file itself: I/O, not a journal file, a corrupt snapshot, or a corrupt log
    /// (`FileError::AppendLogCorrupt`, code `APPEND_LOG_CORRUPT`, leaving the file untouched).
    #[error(transparent)]
    File(#[from] FileError),
    /// A live `FileEventJournal` (or `FileDurability`) holds the file's lock: a shared journal
    /// never writes under it, since that journal would overwrite the change.
    #[error(
        "events journal `{file}` is held by a locked FileEventJournal of live process {pid} (lock file `{lock_file}`); never open a file with both"
    )]
    HeldByFileJournal {
        /// The data file.
        file: PathBuf,
        /// Its lock file.
        lock_file: PathBuf,
        /// The holder's pid, as its lock file names it (0 when unreadable).
        pid: u32,
    },
    /// The cross-process mutex `<file>.mutex` could not be taken or released.
    #[error("events journal mutex `{mutex}`: {operation} failed: {source}")]
    Mutex {
        /// The mutex file.
        mutex: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The journal was closed; operations called after `close()` are refused.
    #[error("events journal `{file}` is closed")]
    Closed {
        /// The data file.
        file: PathBuf,
    },
}

impl SharedFileError {
    /// A stable code: the file's ([`FileError::code`], e.g. `APPEND_LOG_CORRUPT`),
    /// `HELD_BY_FILE_JOURNAL`, `MUTEX` or `CLOSED`.
    pub fn code(&self) -> &'static str {
        match self {
            SharedFileError::File(e) => e.code(),
            SharedFileError::HeldByFileJournal { .. } => "HELD_BY_FILE_JOURNAL",
            SharedFileError::Mutex { .. } => "MUTEX",
            SharedFileError::Closed { .. } => "CLOSED",
        }
    }
}

/// Why an operation of an [`EventJournal`](super::EventJournal) failed. Every variant names
/// the event.
#[derive(Debug, thiserror::Error)]
pub enum EventJournalError {
    /// No event has this id.
    #[error("event `{id}` is not in the journal")]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The caller's claim is no longer the current one: another claim took the event after
    /// its lease ran out (a higher token), or it was completed, failed or replayed since.
    #[error(
        "event `{id}`: fencing token {token} is stale (the event is {status} under token {current})"
    )]
    Fenced {
        /// The event.
        id: String,
        /// The token shown.
        token: u64,
        /// The event's current highest token.
        current: u64,
        /// The event's status.
        status: EventStatus,
    },
    /// A replay of an event that is pending or claimed (only done and failed events replay).
    #[error("event `{id}` is {status}: only done or failed events can be replayed")]
    NotReplayable {
        /// The event.
        id: String,
        /// Its status.
        status: EventStatus,
    },
    /// The stored bytes of an event do not decode.
    #[error("event `{id}` cannot be read back: {reason}")]
    Corrupt {
        /// The event.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// An id or event type that the journal cannot store (empty).
    #[error("invalid event: {reason}")]
    Invalid {
        /// What is wrong.
        reason: String,
    },
    /// The storage failed (I/O, the shared mutex, a closed journal, a corrupt log found by a
    /// later operation).
    #[error("events journal: `{operation}` of event `{id}` failed: {source}")]
    Storage {
        /// `append`, `claim`, …
        operation: &'static str,
        /// The event (`*` for a claim or a listing).
        id: String,
        /// The backend's error.
        #[source]
        source: KvError,
    },
    /// An event changed under every attempt to write it (many claimers on one event).
    #[error("event `{id}` kept changing during `{operation}`; try again")]
    Contended {
        /// `complete`, …
        operation: &'static str,
        /// The event.
        id: String,
    },
}
