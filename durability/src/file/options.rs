//! [`FileOptions`] (snapshot or append log, compaction thresholds, fsync, group size) and
//! the [`IoHook`] a test uses to make low-level writes fail.
//!
//! It does not open files: see the writer.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use derive_setters::Setters;

/// A low-level file operation of the writer, as seen by an [`IoHook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOp {
    /// Writing bytes (a log append, a snapshot temp file).
    Write,
    /// `fsync` of a file.
    Sync,
    /// Renaming the snapshot temp file over the snapshot.
    Rename,
    /// Cutting the log (rollback of a failed append, compaction).
    Truncate,
    /// `fsync` of the folder.
    SyncDir,
}

/// Called before each low-level write operation; an error makes that operation fail as if
/// the OS had failed it. Set with `FileOptions::io_hook` (feature `testing`) to simulate a
/// full disk or a failing `fsync`.
pub trait IoHook: Send + Sync + 'static {
    /// `Ok` lets the operation run.
    fn before(&self, op: IoOp, file: &Path) -> std::io::Result<()>;
}

/// Options of [`FileDurability::open`](super::FileDurability::open), set builder-style.
#[derive(Clone, Setters)]
#[setters(
    generate = false,
    generate_delegates(ty = "crate::events::SharedFileOptions", field = "file")
)]
pub struct FileOptions {
    /// Appends each committed write to `<path>.log` instead of rewriting the snapshot; the
    /// snapshot is rewritten and the log cut every 1000 lines or 4 MiB (see
    /// `compact_every`, `compact_bytes`).
    #[setters(generate)]
    pub(crate) append_log: bool,
    pub(crate) compact_every: usize,
    pub(crate) compact_bytes: u64,
    /// Whether every commit is flushed to disk before it is acknowledged (default `true`).
    /// Without it, a rename or append is atomic but may sit in the OS cache at a power loss.
    #[setters(generate)]
    pub(crate) fsync: bool,
    pub(super) max_group: usize,
    pub(crate) io_hook: Option<Arc<dyn IoHook>>,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            append_log: false,
            compact_every: 1000,
            compact_bytes: 4 * 1024 * 1024,
            fsync: true,
            max_group: 1024,
            io_hook: None,
        }
    }
}

impl fmt::Debug for FileOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileOptions")
            .field("append_log", &self.append_log)
            .field("compact_every", &self.compact_every)
            .field("compact_bytes", &self.compact_bytes)
            .field("fsync", &self.fsync)
            .field("max_group", &self.max_group)
            .field("io_hook", &self.io_hook.is_some())
            .finish()
    }
}

impl FileOptions {
    /// The defaults: snapshot mode, `fsync` on.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compacts after this many log lines (default 1000; 0 counts as 1). Turns the append
    /// log on.
    pub fn compact_every(mut self, lines: usize) -> Self {
        self.compact_every = lines.max(1);
        self.append_log = true;
        self
    }

    /// Compacts once the log reaches this size (default 4 MiB). Turns the append log on.
    pub fn compact_bytes(mut self, bytes: u64) -> Self {
        self.compact_bytes = bytes;
        self.append_log = true;
        self
    }

    /// The most write requests persisted together (default 1024; 0 counts as 1).
    pub fn max_group(mut self, requests: usize) -> Self {
        self.max_group = requests.max(1);
        self
    }

    /// Intercepts every low-level write operation (to simulate a full disk in tests).
    #[cfg(feature = "testing")]
    pub fn io_hook(mut self, hook: Arc<dyn IoHook>) -> Self {
        self.io_hook = Some(hook);
        self
    }

    /// Whether the append log is on.
    pub fn is_append_log(&self) -> bool {
        self.append_log
    }
}
