//! The cross-process mutex of a shared events journal: the file `<file>.mutex`, created
//! exclusively by its holder.
//!
//! | found when taking it | outcome |
//! | --- | --- |
//! | no mutex file | created (`O_EXCL`), `<pid> <nonce>` written in it: held |
//! | a mutex naming a pid that is not alive on this host | broken at once (a warning names the pid), taken |
//! | a mutex whose mtime is older than `stale_lock` (its holder stalled: stopped, swapped out, frozen) | broken (a warning), taken |
//! | a mutex of a live holder, refreshed within `stale_lock` | waited for (polled every 1–16 ms) |
//!
//! A holder refreshes the mutex's mtime every `heartbeat` from a thread of its own, so a slow
//! write is never taken for a stalled one. Releasing removes the file only if it still holds
//! our nonce (a holder whose mutex was broken leaves the new holder's alone). Breaking renames
//! the mutex aside and removes it: two processes breaking the same stalled mutex at the same
//! moment can both believe they broke it, which is why `stale_lock` must stay well above the
//! slowest write. Nothing here kills anything.
//!
//! Not for NFS: it relies on exclusive create and atomic rename. Whether a holder is alive is
//! read from this host's `/proc`, so the processes sharing a file must share a pid namespace
//! (containers on one volume: the host's pid namespace); a holder in another one would be
//! taken for dead. Without `/proc` every pid counts as alive and only `stale_lock` breaks.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::file::pid_alive;

use super::SharedFileError;

fn mutex_error(
    path: &Path,
    operation: &'static str,
) -> impl FnOnce(std::io::Error) -> SharedFileError {
    let mutex = path.to_path_buf();
    move |e| SharedFileError::Mutex {
        mutex,
        operation,
        source: Arc::new(e),
    }
}

/// A held mutex: refreshed by its heartbeat thread, released on drop.
#[derive(Debug)]
pub(crate) struct HeldMutex {
    path: PathBuf,
    owner: String,
    stop: Option<mpsc::Sender<()>>,
    heartbeat: Option<JoinHandle<()>>,
}

impl Drop for HeldMutex {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.heartbeat.take() {
            let _ = thread.join();
        }
        match std::fs::read_to_string(&self.path) {
            Ok(content) if content.trim() == self.owner => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!(mutex = %self.path.display(), error = %e, "could not release the events journal mutex");
                }
            }
            Ok(_) | Err(_) => {
                tracing::warn!(mutex = %self.path.display(), "the events journal mutex was broken while held (a stalled write)");
            }
        }
    }
}

/// How the current holder of a mutex looks.
enum Holder {
    /// Gone meanwhile: try again.
    Gone,
    /// A process that is not alive.
    Dead(u32),
    /// Not refreshed for longer than allowed.
    Stalled(Option<u32>, Duration),
    /// Alive and refreshed.
    Live,
}

fn inspect(path: &Path, stale_lock: Duration) -> Holder {
    let content = match std::fs::read_to_string(path) {
        Ok(content) => content,
        Err(_) => return Holder::Gone,
    };
    let pid = content
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u32>().ok());
    if let Some(pid) = pid {
        if !pid_alive(pid) {
            return Holder::Dead(pid);
        }
    }
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok());
    match age {
        None if !path.exists() => Holder::Gone,
        Some(age) if age > stale_lock => Holder::Stalled(pid, age),
        _ => Holder::Live,
    }
}

/// Takes the mutex at `path`, waiting while a live holder refreshes it.
pub(crate) fn acquire(
    path: &Path,
    stale_lock: Duration,
    heartbeat: Duration,
) -> Result<HeldMutex, SharedFileError> {
    let owner = format!("{} {:016x}", std::process::id(), fastrand::u64(..));
    let mut backoff = Duration::from_millis(1);
    loop {
        match OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(mut file) => {
                file.write_all(format!("{owner}\n").as_bytes())
                    .map_err(mutex_error(path, "write the mutex"))?;
                return Ok(start(path, owner, heartbeat));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(mutex_error(path, "create the mutex")(e)),
        }
        match inspect(path, stale_lock) {
            Holder::Gone => continue,
            Holder::Dead(pid) => {
                tracing::warn!(mutex = %path.display(), holder = pid, "breaking the events journal mutex of a dead process");
                break_mutex(path, &owner)?;
            }
            Holder::Stalled(pid, age) => {
                tracing::warn!(mutex = %path.display(), holder = ?pid, stalled_ms = age.as_millis(), "breaking a stalled events journal mutex");
                break_mutex(path, &owner)?;
            }
            Holder::Live => {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(16));
            }
        }
    }
}

/// Moves an abandoned mutex aside and removes it.
fn break_mutex(path: &Path, owner: &str) -> Result<(), SharedFileError> {
    let mut aside = path.as_os_str().to_owned();
    aside.push(format!(".broken.{}", owner.replace(' ', ".")));
    let aside = PathBuf::from(aside);
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            std::fs::remove_file(&aside).map_err(mutex_error(&aside, "remove a broken mutex"))
        }
        // Another process broke or released it first.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(mutex_error(path, "break the mutex")(e)),
    }
}

fn start(path: &Path, owner: String, every: Duration) -> HeldMutex {
    let (stop, stopped) = mpsc::channel::<()>();
    let touched = path.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("botmesh-events-mutex".into())
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                let touch = OpenOptions::new()
                    .write(true)
                    .open(&touched)
                    .and_then(|f| f.set_modified(SystemTime::now()));
                if let Err(e) = touch {
                    tracing::warn!(mutex = %touched.display(), error = %e, "events journal mutex heartbeat failed");
                }
            }
        });
    let heartbeat = match spawned {
        Ok(thread) => Some(thread),
        Err(e) => {
            // Held all the same: only a write slower than the stale-lock time is at risk.
            tracing::warn!(mutex = %path.display(), error = %e, "could not start the mutex heartbeat");
            None
        }
    };
    HeldMutex {
        path: path.to_path_buf(),
        owner,
        stop: Some(stop),
        heartbeat,
    }
}
