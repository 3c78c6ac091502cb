//! [`FileDurability`]: a [`DurableKv`] in one local file, for a single process (feature `file`).
//!
//! Opened with [`FileDurability::open`]. Everything is held in memory and served from there;
//! every committed write is persisted by one dedicated writer thread before it is
//! acknowledged:
//!
//! | mode | a committed group of writes | on `close()` |
//! | --- | --- | --- |
//! | snapshot (default) | rewrites `<path>` atomically: temp file, `fsync`, rename, `fsync` of the folder | nothing to fold |
//! | append log ([`FileOptions::append_log`]) | appends one line per write to `<path>.log`, one `fsync`; compacts every [`compact_every`](FileOptions::compact_every) lines (1000) or [`compact_bytes`](FileOptions::compact_bytes) (4 MiB) | folds the log into the snapshot, removes the log |
//!
//! A leftover log is always replayed on open, also without the append log (it is then folded
//! in at once). Concurrent writes from many tasks share one append (or one snapshot) and one
//! `fsync` (group commit, counted by [`FileDurability::stats`]); a write is answered only once
//! durable, and a write that could not be persisted is answered with an error and never
//! applied. When the failure may have left the write on disk all the same (the folder's sync
//! failing after a snapshot's rename, a log that cannot be cut back), the backend also
//! refuses every later write ([`FileError::Poisoned`]) until it is reopened, and what the
//! file holds then decides.
//!
//! Opening refuses, without changing any file:
//!
//! | found | error |
//! | --- | --- |
//! | the file open elsewhere in this process | [`FileError::AlreadyOpen`] (until `close()` or drop) |
//! | `<path>.lock` locked by another live process (an OS lock) | [`FileError::Locked`] (a dead process's lock file is taken over) |
//! | a snapshot of another format | [`FileError::NotADurableFile`] |
//! | a snapshot that cannot be read back (truncated, damaged) | [`FileError::SnapshotCorrupt`] |
//! | a damaged log line followed by more lines | [`FileError::AppendLogCorrupt`] (line, byte offset) |
//!
//! A torn last log line (a crash mid-append) is cut and the rest replayed. See `format`,
//! `lock` and `writer` for the details. `fsync` defaults to `true` in both modes, because
//! botmesh never loses an acknowledged message; turn it off with [`FileOptions::fsync`].
//!
//! It is not shared between processes ([`DurableKv::shared_between_processes`] is `false`),
//! and it does not encrypt or back up the file.

pub(crate) mod error;
pub(crate) mod format;
mod lock;
mod options;
pub(crate) mod state;
pub(crate) mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use async_trait::async_trait;
use tokio::sync::oneshot;

use crate::config::DurabilityConfig;
use crate::error::DurabilityError;
use crate::journal::KvDurability;
use crate::kv::{
    CasOutcome, DurableKv, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned, only_outcome,
};
use state::State;
use writer::{Msg, Paths, Writer};

pub use error::FileError;
pub use lock::pid_alive;
pub use options::{FileOptions, IoHook, IoOp};

/// Counters of the writer thread (see [`FileDurability::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileStats {
    /// Write requests answered (`cas`, `delete`, `batch`).
    pub writes: u64,
    /// Groups persisted (one append or one snapshot each).
    pub groups: u64,
    /// `fsync` calls on data (not counting the folder's).
    pub fsyncs: u64,
    /// The most requests persisted in one group.
    pub largest_group: usize,
    /// Compactions of the log into the snapshot.
    pub compactions: u64,
    /// Lines in the log now.
    pub log_entries: u64,
    /// Size of the log now.
    pub log_bytes: u64,
}

#[derive(Debug, Default)]
struct Stats {
    writes: AtomicU64,
    groups: AtomicU64,
    fsyncs: AtomicU64,
    largest_group: AtomicUsize,
    compactions: AtomicU64,
    log_entries: AtomicU64,
    log_bytes: AtomicU64,
}

/// A [`DurableKv`] in one local file; clones share the same open file.
#[derive(Clone)]
pub struct FileDurability {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    options: FileOptions,
    state: Arc<RwLock<State>>,
    stats: Arc<Stats>,
    closed: AtomicBool,
    tx: Mutex<Option<Sender<Msg>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Held while the handle is opened or closed through [`DurableKv`] (by bots).
    reopening: tokio::sync::Mutex<()>,
    /// The bots that opened it through [`DurableKv::open`] and did not close it yet: the last
    /// [`DurableKv::close`] closes the file (several bots may share one handle).
    users: std::sync::atomic::AtomicUsize,
}

impl Drop for Inner {
    /// Without `close()`: stops the writer (nothing folded: the log is replayed on the next
    /// open) and releases the lock.
    fn drop(&mut self) {
        drop(self.tx.get_mut().map(Option::take));
        if let Ok(slot) = self.thread.get_mut() {
            if let Some(thread) = slot.take() {
                let _ = thread.join();
            }
        }
    }
}

impl fmt::Debug for FileDurability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileDurability")
            .field("path", &self.inner.path)
            .field("options", &self.inner.options)
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl FileDurability {
    /// Opens (creating it and its folder if needed) the durable file at `path`, replaying a
    /// leftover log. The file stays locked until [`close`](Self::close) or the last clone is
    /// dropped.
    pub async fn open(path: impl AsRef<Path>, options: FileOptions) -> Result<Self, FileError> {
        let path = path.as_ref().to_path_buf();
        let state = Arc::new(RwLock::new(State::default()));
        let stats = Arc::new(Stats::default());
        let (tx, thread) = spawn_writer(&path, &options, &state, &stats).await?;
        Ok(FileDurability {
            inner: Arc::new(Inner {
                path,
                options,
                state,
                stats,
                closed: AtomicBool::new(false),
                tx: Mutex::new(Some(tx)),
                thread: Mutex::new(Some(thread)),
                reopening: tokio::sync::Mutex::new(()),
                users: std::sync::atomic::AtomicUsize::new(0),
            }),
        })
    }

    /// Opens a closed handle again (a bot started again after `stop()`): the file is locked,
    /// read back and replayed as by [`open`](Self::open), into this handle and its clones. A
    /// no-op while open.
    pub async fn reopen(&self) -> Result<(), FileError> {
        let _one = self.inner.reopening.lock().await;
        self.reopen_locked().await
    }

    async fn reopen_locked(&self) -> Result<(), FileError> {
        if !self.inner.closed.load(Ordering::SeqCst) {
            return Ok(());
        }
        *self.inner.state.write().unwrap_or_else(|p| p.into_inner()) = State::default();
        let (tx, thread) = spawn_writer(
            &self.inner.path,
            &self.inner.options,
            &self.inner.state,
            &self.inner.stats,
        )
        .await?;
        if let Ok(mut slot) = self.inner.tx.lock() {
            *slot = Some(tx);
        }
        if let Ok(mut slot) = self.inner.thread.lock() {
            *slot = Some(thread);
        }
        self.inner.closed.store(false, Ordering::SeqCst);
        Ok(())
    }
}

/// Starts the writer thread of `path`, which locks the file and reads it back into `state`.
async fn spawn_writer(
    path: &Path,
    options: &FileOptions,
    state: &Arc<RwLock<State>>,
    stats: &Arc<Stats>,
) -> Result<(Sender<Msg>, JoinHandle<()>), FileError> {
    let path = path.to_path_buf();
    let paths = Paths::new(&path);
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = oneshot::channel();
    let thread = {
        let (options, state, stats) = (options.clone(), Arc::clone(state), Arc::clone(stats));
        std::thread::Builder::new()
            .name("botmesh-file-durability".into())
            .spawn(move || match Writer::open(paths, options, state, stats) {
                Ok(writer) => {
                    let _ = ready_tx.send(Ok(()));
                    writer.run(rx);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| FileError::Io {
                file: path.clone(),
                operation: "start the writer thread",
                source: Arc::new(e),
            })?
    };
    let opened = ready_rx
        .await
        .unwrap_or_else(|_| Err(FileError::Closed { file: path.clone() }));
    if let Err(e) = opened {
        let _ = thread.join();
        return Err(e);
    }
    Ok((tx, thread))
}

impl FileDurability {
    /// The inbox and outbox journals of `scope` over this file.
    pub fn durability(
        &self,
        scope: Scope,
        config: DurabilityConfig,
    ) -> Result<KvDurability<FileDurability>, DurabilityError> {
        KvDurability::new(Arc::new(self.clone()), scope, config)
    }

    /// The data file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> &FileOptions {
        &self.inner.options
    }

    /// The writer's counters.
    pub fn stats(&self) -> FileStats {
        let s = &self.inner.stats;
        FileStats {
            writes: s.writes.load(Ordering::Relaxed),
            groups: s.groups.load(Ordering::Relaxed),
            fsyncs: s.fsyncs.load(Ordering::Relaxed),
            largest_group: s.largest_group.load(Ordering::Relaxed),
            compactions: s.compactions.load(Ordering::Relaxed),
            log_entries: s.log_entries.load(Ordering::Relaxed),
            log_bytes: s.log_bytes.load(Ordering::Relaxed),
        }
    }

    /// How many entries the file holds, across scopes.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the file holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Folds the log into the snapshot now (a no-op in snapshot mode).
    pub async fn compact(&self) -> Result<(), FileError> {
        let (reply, rx) = oneshot::channel();
        self.send(Msg::Compact(reply))?;
        rx.await.unwrap_or_else(|_| Err(self.closed_error()))
    }

    /// Lets the writes already queued finish, folds the log into the snapshot, releases the
    /// lock. Every clone is closed; later calls fail with [`KvError::Closed`]. Closing twice
    /// is a no-op.
    pub async fn close(&self) -> Result<(), FileError> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let (reply, rx) = oneshot::channel();
        let sent = self.send_raw(Msg::Close(reply));
        let result = match sent {
            Ok(()) => rx.await.unwrap_or(Ok(())),
            Err(_) => Ok(()),
        };
        self.stop_thread().await;
        result
    }

    /// Stops as a killed process would: queued writes are dropped unanswered, the log is not
    /// folded and the lock file stays behind, unlocked (the next open takes it over).
    #[cfg(feature = "testing")]
    pub async fn simulate_crash(&self) {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let (reply, rx) = oneshot::channel();
        if self.send_raw(Msg::Crash(reply)).is_ok() {
            let _ = rx.await;
        }
        self.stop_thread().await;
    }

    async fn stop_thread(&self) {
        drop(self.inner.tx.lock().map(|mut tx| tx.take()));
        let thread = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }

    fn closed_error(&self) -> FileError {
        FileError::Closed {
            file: self.inner.path.clone(),
        }
    }

    fn send_raw(&self, msg: Msg) -> Result<(), FileError> {
        let tx = self.inner.tx.lock().map_err(|_| self.closed_error())?;
        match tx.as_ref() {
            Some(tx) => tx.send(msg).map_err(|_| self.closed_error()),
            None => Err(self.closed_error()),
        }
    }

    fn send(&self, msg: Msg) -> Result<(), FileError> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(self.closed_error());
        }
        self.send_raw(msg)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn check_open(&self) -> Result<(), KvError> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(KvError::Closed);
        }
        Ok(())
    }

    async fn write(
        &self,
        operation: &'static str,
        scope: &Scope,
        ops: Vec<KvOp>,
    ) -> Result<Vec<CasOutcome>, KvError> {
        self.check_open()?;
        let (reply, rx) = oneshot::channel();
        let msg = Msg::Write {
            scope: scope.id().to_owned(),
            ops,
            reply,
        };
        let unavailable = |e: FileError| match e {
            FileError::Closed { .. } => KvError::Closed,
            e => KvError::Unavailable {
                operation,
                source: Box::new(e),
            },
        };
        self.send(msg).map_err(unavailable)?;
        rx.await
            .unwrap_or_else(|_| Err(self.closed_error()))
            .map_err(unavailable)
    }
}

#[async_trait]
impl DurableKv for FileDurability {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        self.check_open()?;
        Ok(self.read().get(scope.id(), key).cloned())
    }

    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        only_outcome("apply", self.write("apply", scope, vec![op]).await?)
    }

    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        let (index, from, to, limit) = (query.index, query.from, query.to, query.limit);
        self.check_open()?;
        Ok(self.read().range(scope.id(), index, from, to, limit))
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        self.write("batch", scope, ops).await
    }

    /// A bot starts on this handle: opens it again if an earlier [`close`](DurableKv::close)
    /// closed it, and counts the bot.
    async fn open(&self) -> Result<(), KvError> {
        let _one = self.inner.reopening.lock().await;
        self.reopen_locked()
            .await
            .map_err(|e| KvError::Unavailable {
                operation: "open",
                source: Box::new(e),
            })?;
        self.inner.users.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// A bot stops: the last one of the bots that opened this handle closes it
    /// ([`FileDurability::close`]: the log folded into the snapshot, the lock released).
    async fn close(&self) -> Result<(), KvError> {
        let _one = self.inner.reopening.lock().await;
        // 0 before: a caller that did not open it through the trait; it closes too.
        let before = self
            .inner
            .users
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before > 1 {
            return Ok(());
        }
        FileDurability::close(self)
            .await
            .map_err(|e| KvError::Unavailable {
                operation: "close",
                source: Box::new(e),
            })
    }

    fn shared_between_processes(&self) -> bool {
        false
    }
}
