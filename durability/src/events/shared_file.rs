//! [`SharedFileKv`]: a [`DurableKv`] in one file that several processes on one host share,
//! every operation run under the cross-process mutex `<file>.mutex` against the current file.
//!
//! The storage of a [`SharedFileEventJournal`](super::SharedFileEventJournal): the app's events
//! and the bot's journals live in it side by side. Reads take the mutex too (the file they read
//! is the one the last writer left), and every write is one compare-and-set evaluated against
//! what the file holds at that moment, so claims are exclusive and fencing tokens hold across
//! processes. Within a process, the operations of one handle queue for it in order; the
//! blocking file work runs on tokio's blocking pool.
//!
//! | situation | outcome |
//! | --- | --- |
//! | a live `FileEventJournal` holds `<file>.lock` (at open or at any later operation) | [`SharedFileError::HeldByFileJournal`], nothing written |
//! | a corrupt snapshot or log | [`FileError`](crate::file::FileError) (`SNAPSHOT_CORRUPT`, `APPEND_LOG_CORRUPT` with line and byte offset), the file left as it is |
//! | `close()` | the operations already called finish; later ones fail with [`SharedFileError::Closed`] (`KvError::Closed` through the SPI) |

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;

use crate::file::error::io;
use crate::kv::{
    CasOutcome, DurableKv, Index, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned,
};

use super::disk::{Disk, Loaded};
use super::mutex::{self, HeldMutex};
use super::{SharedFileError, SharedFileOptions};

/// A [`DurableKv`] in a file shared by the processes of one host; clones share the handle.
#[derive(Clone)]
pub struct SharedFileKv {
    inner: Arc<Inner>,
}

struct Inner {
    disk: Disk,
    closed: AtomicBool,
    /// Operations hold it shared; `close()` takes it exclusively to wait for them.
    gate: tokio::sync::RwLock<()>,
    /// Queues this handle's operations for the file mutex.
    turn: tokio::sync::Mutex<()>,
}

impl fmt::Debug for SharedFileKv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedFileKv")
            .field("file", &self.inner.disk.data)
            .field("options", &self.inner.disk.options)
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// A held cross-process mutex of a shared journal (see [`SharedFileKv::hold_mutex`]):
/// released on drop.
#[cfg(feature = "testing")]
#[derive(Debug)]
pub struct MutexHold {
    _held: HeldMutex,
}

impl SharedFileKv {
    /// Opens (creating it and its folder if needed) the file at `path`: reads it back under
    /// the mutex, so a corrupt file or a live `FileEventJournal` holding it is refused here.
    pub async fn open(
        path: impl AsRef<Path>,
        options: SharedFileOptions,
    ) -> Result<Self, SharedFileError> {
        let disk = Disk::new(path.as_ref(), options);
        let kv = SharedFileKv {
            inner: Arc::new(Inner {
                disk,
                closed: AtomicBool::new(false),
                gate: tokio::sync::RwLock::new(()),
                turn: tokio::sync::Mutex::new(()),
            }),
        };
        kv.locked(|disk, loaded| Ok(disk.ensure_snapshot(loaded)?))
            .await?;
        Ok(kv)
    }

    /// The data file.
    pub fn path(&self) -> &Path {
        &self.inner.disk.data
    }

    /// The options it was opened with.
    pub fn options(&self) -> &SharedFileOptions {
        &self.inner.disk.options
    }

    /// Lets the operations already called finish, then refuses later ones. Closing twice is
    /// a no-op; [`reopen`](Self::reopen) makes the handle usable again.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        drop(self.inner.gate.write().await);
    }

    /// Makes a closed handle usable again (the file is read back by every operation anyway).
    pub fn reopen(&self) {
        self.inner.closed.store(false, Ordering::SeqCst);
    }

    /// Takes the file's mutex and holds it until the returned guard is dropped (its heartbeat
    /// running), for tests that stall or kill a holder.
    #[cfg(feature = "testing")]
    pub async fn hold_mutex(&self) -> Result<MutexHold, SharedFileError> {
        let disk = self.inner.disk.clone();
        let held = tokio::task::spawn_blocking(move || take_mutex(&disk))
            .await
            .map_err(|e| join_error(&self.inner.disk, e))??;
        Ok(MutexHold { _held: held })
    }

    /// Runs `work` on the loaded file under the mutex, on the blocking pool.
    async fn locked<T, W>(&self, work: W) -> Result<T, SharedFileError>
    where
        T: Send + 'static,
        W: FnOnce(&Disk, &mut Loaded) -> Result<T, SharedFileError> + Send + 'static,
    {
        let _gate = self.inner.gate.read().await;
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(SharedFileError::Closed {
                file: self.inner.disk.data.clone(),
            });
        }
        let _turn = self.inner.turn.lock().await;
        let disk = self.inner.disk.clone();
        tokio::task::spawn_blocking(move || {
            let _held = take_mutex(&disk)?;
            disk.check_not_held()?;
            let mut loaded = disk.load()?;
            work(&disk, &mut loaded)
        })
        .await
        .map_err(|e| join_error(&self.inner.disk, e))?
    }

    async fn kv<T, W>(&self, operation: &'static str, work: W) -> Result<T, KvError>
    where
        T: Send + 'static,
        W: FnOnce(&Disk, &mut Loaded) -> Result<T, SharedFileError> + Send + 'static,
    {
        self.locked(work).await.map_err(|e| match e {
            SharedFileError::Closed { .. } => KvError::Closed,
            e => KvError::Unavailable {
                operation,
                source: Box::new(e),
            },
        })
    }
}

fn take_mutex(disk: &Disk) -> Result<HeldMutex, SharedFileError> {
    if let Some(dir) = disk.data.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir, "create the folder"))?;
    }
    let options = &disk.options;
    mutex::acquire(
        &disk.mutex,
        options.stale_lock_after(),
        options.heartbeat_every(),
    )
}

fn join_error(disk: &Disk, e: tokio::task::JoinError) -> SharedFileError {
    SharedFileError::Mutex {
        mutex: disk.mutex.clone(),
        operation: "run the file operation",
        source: Arc::new(std::io::Error::other(e.to_string())),
    }
}

#[async_trait]
impl DurableKv for SharedFileKv {
    /// Makes a closed handle usable again (a bot started again).
    async fn open(&self) -> Result<(), KvError> {
        self.reopen();
        Ok(())
    }

    async fn close(&self) -> Result<(), KvError> {
        SharedFileKv::close(self).await;
        Ok(())
    }

    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        let (scope, key) = (scope.id().to_owned(), key.to_owned());
        self.kv("get", move |_, loaded| {
            Ok(loaded.state.get(&scope, &key).cloned())
        })
        .await
    }

    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        let mut outcomes = self.batch(scope, vec![op]).await?;
        outcomes.pop().ok_or_else(|| KvError::Unavailable {
            operation: "apply",
            source: "the write returned no outcome".into(),
        })
    }

    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        let scope = scope.id().to_owned();
        let (index, limit): (Index, usize) = (query.index, query.limit);
        let (from, to) = (query.from.to_owned(), query.to.to_owned());
        self.kv("scan", move |_, loaded| {
            Ok(loaded.state.range(&scope, index, &from, &to, limit))
        })
        .await
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let scope = scope.id().to_owned();
        self.kv("batch", move |disk, loaded| {
            Ok(disk.commit(loaded, &scope, ops)?)
        })
        .await
    }

    fn shared_between_processes(&self) -> bool {
        true
    }
}
