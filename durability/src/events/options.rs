//! [`SharedFileOptions`]: how a [`SharedFileEventJournal`](super::SharedFileEventJournal)
//! writes (snapshot or append log, compaction, fsync) and how its cross-process mutex treats a
//! holder that stopped (stale lock, heartbeat).

use std::time::Duration;

use crate::file::FileOptions;

/// Options of [`SharedFileEventJournal::open`](super::SharedFileEventJournal::open), set
/// builder-style. The file options are those of [`FileOptions`] (the same file format).
#[derive(Debug, Clone)]
pub struct SharedFileOptions {
    pub(crate) file: FileOptions,
    pub(crate) stale_lock: Duration,
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

    /// Each write appends one line with what changed to `<file>.log` instead of rewriting the
    /// snapshot; the snapshot is rewritten (carrying the log sequence) and the log cut every
    /// 1000 lines or 4 MiB.
    pub fn append_log(mut self, on: bool) -> Self {
        self.file = self.file.append_log(on);
        self
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

    /// Whether each write is flushed to disk before it is acknowledged (default `true`).
    pub fn fsync(mut self, on: bool) -> Self {
        self.file = self.file.fsync(on);
        self
    }

    /// After how long without a heartbeat a live holder's mutex counts as abandoned and is
    /// broken (default 30 s). A mutex of a dead process is broken at once. Keep it well above
    /// the slowest write: nothing is ever killed, and two processes breaking the same stalled
    /// mutex at once can briefly both hold it.
    pub fn stale_lock(mut self, after: Duration) -> Self {
        self.stale_lock = after;
        self
    }

    /// How often a holder refreshes the mutex's mtime (default a third of
    /// [`stale_lock`](Self::stale_lock)).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every);
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
