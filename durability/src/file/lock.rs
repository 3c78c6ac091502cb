//! Who may open a durable file: an OS lock on `<path>.lock` against other processes, and a
//! process-global registry against a second open in this process.
//!
//! | found at open | outcome |
//! | --- | --- |
//! | the canonical path in this process's registry | [`FileError::AlreadyOpen`] until `close()` (or drop) |
//! | no `<path>.lock` | created, locked, our pid written in it |
//! | `<path>.lock` locked by another process | [`FileError::Locked`] naming the pid written in it |
//! | `<path>.lock` locked and naming this process (a lock it released, whose descriptor a child being spawned holds until it runs its program) | tried again for up to 200 ms, then `Locked` |
//! | `<path>.lock` that nobody locks (its process died, or a crashed handle of this one) | locked and taken, with a warning naming the pid it held |
//!
//! The lock is the kernel's (`flock` on Unix, through [`File::try_lock`]), held by the open
//! lock file for as long as the handle lives: a process that dies, however it dies, releases
//! it, and a live one holds it whatever the file says, also from another pid namespace (two
//! containers sharing a volume, both running as pid 1). The pid in the file only names the
//! holder in the error. `close()` (or drop) removes the lock file while still holding the
//! lock; an open that locked a lock file removed or replaced meanwhile (checked by inode)
//! starts over on the new one, so two handles never hold the lock at once.
//!
//! It does not lock against processes that ignore the lock file, and it is only as good as
//! the filesystem's locks (on a network filesystem, as good as its lock service).

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use super::FileError;
use super::error::io;

static OPEN: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Mutex::default);

fn registry() -> std::sync::MutexGuard<'static, HashSet<PathBuf>> {
    OPEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether the process `pid` is alive on this host, as far as `/proc` tells (Linux; without
/// `/proc`, every pid counts as alive). The lock does not depend on it: it is for the
/// messages and tools that report on a lock file's pid.
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
    /// The open, locked lock file: the OS lock lives as long as it does.
    held: Option<File>,
}

impl Guard {
    /// Releases the lock and the registry entry but leaves the lock file, as a process dying
    /// would (used by the crash simulation).
    pub(super) fn abandon(mut self) {
        drop(self.held.take());
        registry().remove(&self.canonical);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            // Removed while still locked: an open racing with it finds the inode gone.
            if let Err(e) = std::fs::remove_file(&self.lock_file) {
                tracing::warn!(file = %self.lock_file.display(), error = %e, "could not remove lock file");
            }
            drop(held);
            registry().remove(&self.canonical);
        }
    }
}

/// Takes the lock of the data file whose canonical path is `canonical`.
pub(super) fn acquire(canonical: &Path, lock_file: &Path) -> Result<Guard, FileError> {
    if !registry().insert(canonical.to_path_buf()) {
        return Err(FileError::AlreadyOpen {
            file: canonical.to_path_buf(),
        });
    }
    match take(lock_file, canonical) {
        Ok(held) => Ok(Guard {
            canonical: canonical.to_path_buf(),
            lock_file: lock_file.to_path_buf(),
            held: Some(held),
        }),
        Err(error) => {
            registry().remove(canonical);
            Err(error)
        }
    }
}

/// The pid written in a lock file (`None` when empty or not a number).
fn written_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// Whether the open `file` is still the one at `path` (it may have been removed, or removed
/// and created again, between our open and our lock).
#[cfg(unix)]
fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(now)) => open.dev() == now.dev() && open.ino() == now.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn still_at(_file: &File, path: &Path) -> bool {
    path.exists()
}

/// How long a lock that this process released may still be held by a child it is spawning.
const INHERITED_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

fn take(lock_file: &Path, canonical: &Path) -> Result<File, FileError> {
    let me = std::process::id();
    let mut inherited_until = None;
    let mut replaced = 0;
    while replaced < 5 {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(lock_file)
            .map_err(io(lock_file, "open lock file"))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                // 0 when the holder has locked but not yet written its pid.
                let pid = written_pid(&mut file).unwrap_or(0);
                // Our own pid, and not open here (the registry let us in): a lock this process
                // released a moment ago (a close, a simulated crash) whose descriptor a child
                // being spawned still holds until it runs its program. Wait for that, briefly.
                let until = *inherited_until
                    .get_or_insert_with(|| std::time::Instant::now() + INHERITED_WAIT);
                if pid == me && std::time::Instant::now() < until {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    continue;
                }
                return Err(FileError::Locked {
                    file: canonical.to_path_buf(),
                    lock_file: lock_file.to_path_buf(),
                    pid,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(lock_file, "lock the lock file")(e)),
        }
        if !still_at(&file, lock_file) {
            // Removed by its closing holder after our open: lock the new one.
            replaced += 1;
            continue;
        }
        if let Some(pid) = written_pid(&mut file) {
            tracing::warn!(
                lock_file = %lock_file.display(),
                holder = pid,
                "taking a stale lock file (its process no longer holds it)"
            );
        }
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{me}"))
            .map_err(io(lock_file, "write lock file"))?;
        return Ok(file);
    }
    Err(FileError::Io {
        file: lock_file.to_path_buf(),
        operation: "take lock file",
        source: Arc::new(std::io::Error::other("the lock file keeps being replaced")),
    })
}
