//! [`FileError`]: what opening, writing and closing a durable file can fail with.
//!
//! Every variant names the file concerned, and [`FileError::code`] gives a stable code
//! (`APPEND_LOG_CORRUPT`, …). Errors are `Clone` (the OS error is shared) because one
//! failed group commit answers every request of the group with the same error. The journals
//! see them wrapped in [`KvError::Unavailable`](crate::kv::KvError::Unavailable).

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a durable file could not be opened, written or closed. Every variant names the file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FileError {
    /// A file operation failed (disk full, permissions, a path under a regular file, …).
    #[error("durable file `{file}`: {operation} failed: {source}")]
    Io {
        /// The file (or folder) concerned.
        file: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// Another live process holds the lock file.
    #[error(
        "durable file `{file}` is locked by live process {pid} (lock file `{lock_file}`); stop it first"
    )]
    Locked {
        /// The data file.
        file: PathBuf,
        /// The lock file.
        lock_file: PathBuf,
        /// The holder's pid.
        pid: u32,
    },
    /// The file is already open in this process.
    #[error("durable file `{file}` is already open in this process; close() it first")]
    AlreadyOpen {
        /// The canonical path.
        file: PathBuf,
    },
    /// The file is not a botmesh durable file.
    #[error("`{file}` is not a botmesh durable file; refusing to touch it")]
    NotADurableFile {
        /// The file.
        file: PathBuf,
    },
    /// The snapshot cannot be read back.
    #[error(
        "durable snapshot `{file}` cannot be read back ({reason}); restore it from a backup or move it aside"
    )]
    SnapshotCorrupt {
        /// The snapshot file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A damaged log line is followed by more lines (code `APPEND_LOG_CORRUPT`). The file was
    /// left as it is: cutting there would drop every later entry.
    #[error(
        "append log `{file}` is corrupt at line {line} (byte offset {byte_offset}): {reason}; more entries follow, so it was left untouched: restore it from a backup or move it aside"
    )]
    AppendLogCorrupt {
        /// The log file.
        file: PathBuf,
        /// The bad line (1-based, the header is line 1).
        line: u64,
        /// Where the bad line starts.
        byte_offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An earlier write failed and could not be rolled back; writes are refused until reopen.
    #[error(
        "durable file `{file}` refuses writes: an earlier write failed and could not be rolled back; reopen it"
    )]
    Poisoned {
        /// The data file.
        file: PathBuf,
    },
    /// The backend was closed.
    #[error("durable file `{file}` is closed")]
    Closed {
        /// The data file.
        file: PathBuf,
    },
}

impl FileError {
    /// A stable code (`APPEND_LOG_CORRUPT`, `LOCKED`, …), the same from one version to the
    /// next: match on it rather than on the message.
    pub fn code(&self) -> &'static str {
        match self {
            FileError::Io { .. } => "IO",
            FileError::Locked { .. } => "LOCKED",
            FileError::AlreadyOpen { .. } => "ALREADY_OPEN",
            FileError::NotADurableFile { .. } => "NOT_A_DURABLE_FILE",
            FileError::SnapshotCorrupt { .. } => "SNAPSHOT_CORRUPT",
            FileError::AppendLogCorrupt { .. } => "APPEND_LOG_CORRUPT",
            FileError::Poisoned { .. } => "POISONED",
            FileError::Closed { .. } => "CLOSED",
        }
    }
}

/// Maps an OS error of `operation` on `file` to [`FileError::Io`] (for `map_err`).
pub(crate) fn io(file: &Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> FileError {
    let file = file.to_path_buf();
    move |e| FileError::Io {
        file,
        operation,
        source: Arc::new(e),
    }
}
