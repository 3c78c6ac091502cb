//! [`SharedFileOptions`]: how a [`SharedFileEventJournal`](super::SharedFileEventJournal)
//! writes (snapshot or append log, compaction, fsync) and how its cross-process mutex treats a
//! holder that stopped (stale lock, heartbeat).

use std::time::Duration;

use derive_setters::Setters;

use crate::file::FileOptions;

/// Options of [`SharedFileEventJournal::open`](super::SharedFileEventJournal::open), set
/// builder-style. The file options are those of [`FileOptions`] (the same file format).
#[derive(Debug, Clone, Setters)]
pub struct SharedFileOptions {
    #[setters(skip)]
    pub(crate) file: FileOptions,
    /// After how long without a heartbeat a live holder's mutex counts as abandoned and is
    /// broken (default 30 s). A mutex of a dead process is broken at once. Keep it well above
    /// the slowest write: nothing is ever killed, and two processes breaking the same stalled
    /// mutex at once can briefly both hold it.
    pub(crate) stale_lock: Duration,
    /// How often a holder refreshes the mutex's mtime (default a third of
    /// [`stale_lock`](Self::stale_lock)).
    #[setters(strip_option)]
    pub(crate) heartbeat: Option<Duration>,
}

impl Default for SharedFileOptions {
    fn default() -> Self {
        SharedFileOptions {
            file: FileOptions::default(),
            stale_lock: Duration::from_secs(30),
            heartbeat: None,
        }
    }
}

impl SharedFileOptions {
    /// The defaults: every write rereads and rewrites the snapshot, `fsync` on, a mutex is
    /// stale after 30 s without a heartbeat, heartbeats every 10 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compacts after this many log lines (default 1000). Turns the append log on.
    pub fn compact_every(mut self, lines: usize) -> Self {
        self.file = self.file.compact_every(lines);
        self
    }

    /// Compacts once the log reaches this size (default 4 MiB). Turns the append log on.
    pub fn compact_bytes(mut self, bytes: u64) -> Self {
        self.file = self.file.compact_bytes(bytes);
        self
    }

    /// The heartbeat period in effect.
    pub fn heartbeat_every(&self) -> Duration {
        self.heartbeat.unwrap_or(self.stale_lock / 3)
    }

    /// The stale-lock time in effect.
    pub fn stale_lock_after(&self) -> Duration {
        self.stale_lock
    }

    /// Whether the append log is on.
    pub fn is_append_log(&self) -> bool {
        self.file.is_append_log()
    }
}
