//! Who may open a durable file: a pid lock file against other processes, and a
//! process-global registry against a second open in this process.
//!
//! | found at open | outcome |
//! | --- | --- |
//! | the canonical path in this process's registry | [`FileError::AlreadyOpen`] until `close()` (or drop) |
//! | no `<path>.lock` | created atomically (written aside, then hard-linked), holding our pid |
//! | `<path>.lock` of a live process | [`FileError::Locked`] naming the pid |
//! | `<path>.lock` of a dead process, of our own pid (a crashed handle of this process), or unreadable | broken (removed) with a warning, then taken |
//!
//! Liveness is `/proc/<pid>` existing (Linux). Without `/proc` a pid is taken as alive, so a
//! stale lock must then be removed by hand. A dead pid reused by an unrelated live process
//! keeps the lock (refused until that process ends or the lock file is removed). Two processes
//! breaking the same stale lock at the same instant can, in a narrow window, both succeed;
//! that is not a concern for the single process this backend is meant for.
//!
//! It does not lock against processes that ignore the lock file.

use std::collections::HashSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use super::FileError;

static OPEN: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Mutex::default);

fn registry() -> std::sync::MutexGuard<'static, HashSet<PathBuf>> {
    OPEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether the process `pid` is alive (see the module documentation).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    if !Path::new("/proc/self").exists() {
        return true;
    }
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The lock of one open file: released on drop.
#[derive(Debug)]
pub(super) struct Guard {
    canonical: PathBuf,
    lock_file: PathBuf,
    active: bool,
}

impl Guard {
    /// Releases the registry entry but leaves the lock file, as a process dying would
    /// (used by the crash simulation).
    pub(super) fn abandon(mut self) {
        registry().remove(&self.canonical);
        self.active = false;
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        let ours = std::fs::read_to_string(&self.lock_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            == Some(std::process::id());
        if ours {
            if let Err(e) = std::fs::remove_file(&self.lock_file) {
                tracing::warn!(file = %self.lock_file.display(), error = %e, "could not remove lock file");
            }
        }
        registry().remove(&self.canonical);
    }
}

fn io(file: &Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> FileError {
    let file = file.to_path_buf();
    move |e| FileError::Io {
        file,
        operation,
        source: Arc::new(e),
    }
}

/// Takes the lock of the data file whose canonical path is `canonical`.
pub(super) fn acquire(canonical: &Path, lock_file: &Path) -> Result<Guard, FileError> {
    if !registry().insert(canonical.to_path_buf()) {
        return Err(FileError::AlreadyOpen {
            file: canonical.to_path_buf(),
        });
    }
    // From here the registry entry is released by the guard's drop, also on error.
    let mut guard = Guard {
        canonical: canonical.to_path_buf(),
        lock_file: lock_file.to_path_buf(),
        active: true,
    };
    let me = std::process::id();
    let aside = PathBuf::from(format!("{}.{me}.tmp", lock_file.display()));
    std::fs::write(&aside, format!("{me}\n")).map_err(io(&aside, "write lock file"))?;
    let result = take(lock_file, &aside, canonical);
    let _ = std::fs::remove_file(&aside);
    if result.is_err() {
        // Not ours: the drop must not remove another process's lock file.
        registry().remove(canonical);
        guard.active = false;
    }
    result.map(|()| guard)
}

fn take(lock_file: &Path, aside: &Path, canonical: &Path) -> Result<(), FileError> {
    for _ in 0..3 {
        match std::fs::hard_link(aside, lock_file) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(lock_file, "create lock file")(e)),
        }
        let holder = match std::fs::read_to_string(lock_file) {
            Ok(text) => text.trim().parse::<u32>().ok(),
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io(lock_file, "read lock file")(e)),
        };
        match holder {
            Some(pid) if pid != std::process::id() && pid_alive(pid) => {
                return Err(FileError::Locked {
                    file: canonical.to_path_buf(),
                    lock_file: lock_file.to_path_buf(),
                    pid,
                });
            }
            _ => {
                tracing::warn!(
                    lock_file = %lock_file.display(),
                    holder = ?holder,
                    "breaking a stale lock (its process is gone)"
                );
                match std::fs::remove_file(lock_file) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(io(lock_file, "remove stale lock file")(e)),
                }
            }
        }
    }
    Err(FileError::Io {
        file: lock_file.to_path_buf(),
        operation: "take lock file",
        source: Arc::new(std::io::Error::other("the lock file keeps changing")),
    })
}
