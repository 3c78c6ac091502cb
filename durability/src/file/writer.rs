//! The writer thread of a [`FileDurability`](super::FileDurability): opening and recovery,
//! group commit, compaction and close. All file I/O of the backend happens here, never on a
//! tokio worker.
//!
//! The thread takes the first request of its queue and every request queued behind it (up to
//! `max_group`), evaluates them in order over the committed state, persists their changes
//! with one write and one fsync, then applies them and answers every caller:
//!
//! | step | append-log mode | snapshot mode |
//! | --- | --- | --- |
//! | persist | append one line per request to `<path>.log`, one `fsync` | write `<path>.tmp`, `fsync`, rename over `<path>`, `fsync` the folder |
//! | persist fails | the log is cut back to its previous length; every request of the group fails, nothing applied | before the rename: the temp file is removed; every request fails, nothing applied |
//! | the failure leaves the group on disk | cutting back fails: the backend is poisoned (later writes fail until it is reopened, and the reopened file decides) | the folder's sync fails twice after the rename: every request fails and the backend is poisoned, as in append-log mode |
//! | compaction (every `compact_every` lines or `compact_bytes`) | snapshot carrying the log sequence, then the log is cut to its header | — |
//!
//! A crash at any point of those steps loses only requests that were not answered yet:
//!
//! | crash | on the next open |
//! | --- | --- |
//! | during an append | the torn last line is cut, the rest replayed |
//! | between a snapshot's rename and the log's truncation | the log lines already in the snapshot (`seq <= log_seq`) are skipped |
//! | while writing `<path>.tmp` | the temp file is ignored (overwritten by the next snapshot) |

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, RwLock};

use tokio::sync::oneshot;

use super::error::io;
use super::format::{self, LogLine};
use super::lock::{self, Guard};
use super::state::{Pending, State};
use super::{FileError, FileOptions, IoHook, IoOp, Stats};
use crate::kv::{CasOutcome, KvOp};

/// The reply to a write request.
pub(super) type WriteReply = oneshot::Sender<Result<Vec<CasOutcome>, FileError>>;

/// A message to the writer thread.
pub(super) enum Msg {
    /// A write request (`cas`, `delete` or `batch`).
    Write {
        scope: String,
        ops: Vec<KvOp>,
        reply: WriteReply,
    },
    /// Fold the log into the snapshot now.
    Compact(oneshot::Sender<Result<(), FileError>>),
    /// Fold the log, release the lock, stop.
    Close(oneshot::Sender<Result<(), FileError>>),
    /// Stop at once, as a killed process would: nothing folded, the lock file left behind.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    Crash(oneshot::Sender<()>),
}

/// The files of one durable file.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    pub(crate) data: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) tmp: PathBuf,
    pub(crate) lock: PathBuf,
    pub(crate) dir: PathBuf,
}

impl Paths {
    pub(crate) fn new(data: &Path) -> Self {
        let suffixed = |suffix: &str| {
            let mut name = data.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        let dir = match data.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Paths {
            data: data.to_path_buf(),
            log: suffixed(".log"),
            tmp: suffixed(".tmp"),
            lock: suffixed(".lock"),
            dir,
        }
    }
}

fn checked(
    hook: Option<&Arc<dyn IoHook>>,
    op: IoOp,
    file: &Path,
    run: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    if let Some(hook) = hook {
        hook.before(op, file)?;
    }
    run()
}

/// The writer thread's state.
pub(super) struct Writer {
    paths: Paths,
    options: FileOptions,
    state: Arc<RwLock<State>>,
    stats: Arc<Stats>,
    guard: Option<Guard>,
    log: Option<File>,
    header_len: u64,
    log_len: u64,
    log_entries: u64,
    seq: u64,
    poisoned: bool,
}

impl Writer {
    fn hook(&self) -> Option<&Arc<dyn IoHook>> {
        self.options.io_hook.as_ref()
    }

    /// Opens the file: takes the lock, loads the snapshot, replays (and cuts) the log.
    pub(super) fn open(
        paths: Paths,
        options: FileOptions,
        state: Arc<RwLock<State>>,
        stats: Arc<Stats>,
    ) -> Result<Writer, FileError> {
        std::fs::create_dir_all(&paths.dir).map_err(io(&paths.dir, "create the folder"))?;
        let canonical = std::fs::canonicalize(&paths.dir)
            .map_err(io(&paths.dir, "resolve the folder"))?
            .join(paths.data.file_name().unwrap_or_default());
        let guard = lock::acquire(&canonical, &paths.lock)?;
        let mut loaded = State::default();
        let mut log_seq = 0;
        let snapshot_found = match std::fs::read(&paths.data) {
            Ok(bytes) => {
                let snapshot = format::parse_snapshot(&bytes, &paths.data)?;
                log_seq = snapshot.log_seq;
                loaded.last_version = snapshot.last_version;
                for entry in snapshot.entries {
                    loaded.load(entry);
                }
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io(&paths.data, "read snapshot")(e)),
        };
        let mut writer = Writer {
            header_len: format::log_header().len() as u64,
            paths,
            options,
            state,
            stats,
            guard: Some(guard),
            log: None,
            log_len: 0,
            log_entries: 0,
            seq: log_seq,
            poisoned: false,
        };
        let replayed = writer.replay(&mut loaded, log_seq)?;
        *writer.state.write().unwrap_or_else(|p| p.into_inner()) = loaded;
        if writer.options.append_log {
            writer.open_log()?;
            if writer.needs_compaction() {
                writer.compact()?;
            }
        } else if replayed.is_some() {
            // A leftover log, opened without the append log: fold it in and remove it.
            writer.write_snapshot()?;
            writer.remove_log()?;
        }
        if !snapshot_found && !writer.paths.data.exists() {
            writer.write_snapshot()?;
        }
        tracing::debug!(file = %writer.paths.data.display(), seq = writer.seq, "durable file opened");
        Ok(writer)
    }

    /// Replays a leftover log into `loaded`; cuts a torn tail. `None` when there is no log.
    fn replay(&mut self, loaded: &mut State, log_seq: u64) -> Result<Option<()>, FileError> {
        let log = &self.paths.log;
        let bytes = match std::fs::read(log) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(log, "read append log")(e)),
        };
        let parsed = format::parse_log(&bytes, log)?;
        let mut applied = 0usize;
        for line in parsed.lines {
            self.seq = self.seq.max(line.seq);
            if line.seq <= log_seq {
                continue;
            }
            applied += 1;
            for change in line.ops {
                loaded.apply(&line.scope, change);
            }
        }
        if parsed.torn {
            tracing::warn!(
                file = %log.display(),
                cut_at = parsed.valid_len,
                "append log ends with a torn line (a crash mid-append): cutting it"
            );
            let file = OpenOptions::new()
                .write(true)
                .open(log)
                .map_err(io(log, "open append log"))?;
            file.set_len(parsed.valid_len)
                .and_then(|()| file.sync_all())
                .map_err(io(log, "cut torn line"))?;
        }
        tracing::debug!(file = %log.display(), applied, "append log replayed");
        self.log_len = parsed.valid_len;
        self.log_entries = applied as u64;
        Ok(Some(()))
    }

    fn open_log(&mut self) -> Result<(), FileError> {
        let path = self.paths.log.clone();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io(&path, "open append log"))?;
        let len = file.metadata().map_err(io(&path, "stat append log"))?.len();
        if len < self.header_len {
            file.set_len(0)
                .and_then(|()| file.write_all(&format::log_header()))
                .and_then(|()| file.sync_all())
                .map_err(io(&path, "write append log header"))?;
            self.sync_dir()?;
        }
        self.log_len = len.max(self.header_len);
        self.stats.log_bytes.store(self.log_len, Ordering::Relaxed);
        self.stats
            .log_entries
            .store(self.log_entries, Ordering::Relaxed);
        self.log = Some(file);
        Ok(())
    }

    fn sync_dir(&self) -> Result<(), FileError> {
        let dir = &self.paths.dir;
        checked(self.hook(), IoOp::SyncDir, dir, || {
            File::open(dir)?.sync_all()
        })
        .map_err(io(dir, "fsync the folder"))
    }

    fn needs_compaction(&self) -> bool {
        self.log.is_some()
            && (self.log_entries >= self.options.compact_every as u64
                || self.log_len >= self.options.compact_bytes)
    }

    /// Serves requests until closed, crashed or every handle is gone.
    pub(super) fn run(mut self, rx: Receiver<Msg>) {
        let mut next = None;
        loop {
            let msg = match next.take() {
                Some(msg) => msg,
                None => match rx.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                },
            };
            match msg {
                Msg::Write { scope, ops, reply } => {
                    let mut group = vec![(scope, ops, reply)];
                    while group.len() < self.options.max_group {
                        match rx.try_recv() {
                            Ok(Msg::Write { scope, ops, reply }) => group.push((scope, ops, reply)),
                            Ok(other) => {
                                next = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.commit(group);
                }
                Msg::Compact(reply) => {
                    let result = if self.log.is_some() {
                        self.compact()
                    } else {
                        Ok(())
                    };
                    let _ = reply.send(result);
                }
                Msg::Close(reply) => {
                    let result = self.fold();
                    drop(self.guard.take());
                    tracing::debug!(file = %self.paths.data.display(), "durable file closed");
                    let _ = reply.send(result);
                    return;
                }
                Msg::Crash(reply) => {
                    if let Some(guard) = self.guard.take() {
                        guard.abandon();
                    }
                    let _ = reply.send(());
                    return;
                }
            }
        }
    }

    fn commit(&mut self, group: Vec<(String, Vec<KvOp>, WriteReply)>) {
        if self.poisoned {
            for (_, _, reply) in group {
                let _ = reply.send(Err(FileError::Poisoned {
                    file: self.paths.data.clone(),
                }));
            }
            return;
        }
        let size = group.len();
        let state = Arc::clone(&self.state);
        let mut answers = Vec::with_capacity(size);
        let mut lines: Vec<LogLine> = Vec::new();
        let mut seq = self.seq;
        let (persisted, last_version) = {
            let committed = state.read().unwrap_or_else(|p| p.into_inner());
            let mut pending = Pending::new(&committed);
            for (scope, ops, reply) in group {
                let mut outcomes = Vec::with_capacity(ops.len());
                let mut changes = Vec::new();
                for op in ops {
                    let (outcome, change) = pending.eval(&scope, op);
                    outcomes.push(outcome);
                    changes.extend(change);
                }
                if !changes.is_empty() {
                    seq += 1;
                    lines.push(LogLine {
                        seq,
                        scope,
                        ops: changes,
                    });
                }
                answers.push((reply, outcomes));
            }
            let persisted = if lines.is_empty() {
                Ok(())
            } else if self.options.append_log {
                let mut bytes = Vec::new();
                let encoded = lines
                    .iter()
                    .try_for_each(|line| format::encode_line(line, &mut bytes));
                match encoded {
                    Ok(()) => self.append(&bytes),
                    Err(e) => Err(io(&self.paths.log, "encode log line")(e.into())),
                }
            } else {
                let stored = committed.stored(Some(&pending));
                match format::encode_snapshot(self.seq, pending.last_version, stored) {
                    Ok(bytes) => match self.replace_snapshot(&bytes) {
                        Ok(()) => Ok(()),
                        Err(Replaced::Not(e)) => Err(e),
                        Err(Replaced::Unsynced(e)) => {
                            // The group is in the file but may not survive a crash: neither
                            // an answer nor a rollback can be right, so stop writing; the
                            // file decides at the next open.
                            tracing::error!(file = %self.paths.data.display(), error = %e, "the new snapshot is in place but the folder could not be synced: refusing further writes");
                            self.poisoned = true;
                            Err(e)
                        }
                    },
                    Err(e) => Err(io(&self.paths.data, "encode snapshot")(e.into())),
                }
            };
            (persisted, pending.last_version)
        };
        if let Err(e) = persisted {
            tracing::error!(error = %e, requests = size, "durable write failed; nothing acknowledged");
            for (reply, _) in answers {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
        if !lines.is_empty() {
            let mut committed = state.write().unwrap_or_else(|p| p.into_inner());
            let written = lines.len() as u64;
            for line in lines {
                for change in line.ops {
                    committed.apply(&line.scope, change);
                }
            }
            committed.last_version = committed.last_version.max(last_version);
            drop(committed);
            self.stats.groups.fetch_add(1, Ordering::Relaxed);
            if self.options.append_log {
                self.seq = seq;
                self.log_entries += written;
                self.stats
                    .log_entries
                    .store(self.log_entries, Ordering::Relaxed);
            }
        }
        self.stats.writes.fetch_add(size as u64, Ordering::Relaxed);
        self.stats.largest_group.fetch_max(size, Ordering::Relaxed);
        for (reply, outcomes) in answers {
            let _ = reply.send(Ok(outcomes));
        }
        if self.needs_compaction() {
            if let Err(e) = self.compact() {
                tracing::warn!(error = %e, "compaction failed; the log keeps every write");
            }
        }
    }

    /// Appends `bytes` to the log and syncs it; on failure, cuts the log back.
    fn append(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        let path = self.paths.log.clone();
        let hook = self.options.io_hook.clone();
        let fsync = self.options.fsync;
        let before = self.log_len;
        let Some(log) = self.log.as_mut() else {
            return Err(FileError::Closed { file: path });
        };
        let mut result = checked(hook.as_ref(), IoOp::Write, &path, || log.write_all(bytes))
            .map_err(io(&path, "append to log"));
        if result.is_ok() && fsync {
            self.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
            result = checked(hook.as_ref(), IoOp::Sync, &path, || log.sync_data())
                .map_err(io(&path, "fsync log"));
        }
        if result.is_err() {
            let rollback = checked(hook.as_ref(), IoOp::Truncate, &path, || {
                log.set_len(before)?;
                log.sync_data()
            });
            if let Err(e) = rollback {
                tracing::error!(file = %path.display(), error = %e, "could not cut the log back after a failed write: refusing further writes");
                self.poisoned = true;
            }
            return result;
        }
        self.log_len += bytes.len() as u64;
        self.stats.log_bytes.store(self.log_len, Ordering::Relaxed);
        Ok(())
    }

    /// Atomically replaces the snapshot with `bytes`. A failed sync of the folder after the
    /// rename is tried once more before it counts.
    fn replace_snapshot(&self, bytes: &[u8]) -> Result<(), Replaced> {
        let (data, tmp, hook) = (&self.paths.data, &self.paths.tmp, self.hook());
        let written = (|| {
            let mut file = File::create(tmp).map_err(io(data, "create snapshot temp file"))?;
            checked(hook, IoOp::Write, tmp, || file.write_all(bytes))
                .map_err(io(data, "write snapshot temp file"))?;
            if self.options.fsync {
                self.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
                checked(hook, IoOp::Sync, tmp, || file.sync_all())
                    .map_err(io(data, "fsync snapshot temp file"))?;
            }
            drop(file);
            checked(hook, IoOp::Rename, data, || std::fs::rename(tmp, data))
                .map_err(io(data, "replace snapshot"))
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(tmp);
            return Err(Replaced::Not(e));
        }
        if self.options.fsync {
            if let Err(first) = self.sync_dir() {
                tracing::warn!(error = %first, "syncing the folder after a snapshot failed; trying again");
                self.sync_dir().map_err(Replaced::Unsynced)?;
            }
        }
        Ok(())
    }

    /// Writes the committed state as the snapshot, carrying the log sequence.
    fn write_snapshot(&self) -> Result<(), FileError> {
        let bytes = {
            let committed = self.state.read().unwrap_or_else(|p| p.into_inner());
            format::encode_snapshot(self.seq, committed.last_version, committed.stored(None))
                .map_err(|e| io(&self.paths.data, "encode snapshot")(e.into()))?
        };
        // It holds only what memory holds (every write of it answered already): a snapshot
        // in place but not synced loses nothing, the log still has every line.
        self.replace_snapshot(&bytes).map_err(Replaced::into_error)
    }

    /// Folds the log into the snapshot and cuts the log to its header.
    fn compact(&mut self) -> Result<(), FileError> {
        self.write_snapshot()?;
        let path = self.paths.log.clone();
        let hook = self.options.io_hook.clone();
        if let Some(log) = self.log.as_mut() {
            let header_len = self.header_len;
            checked(hook.as_ref(), IoOp::Truncate, &path, || {
                log.set_len(header_len)?;
                log.sync_data()
            })
            .map_err(io(&path, "truncate log after compaction"))?;
            self.log_len = header_len;
        }
        self.log_entries = 0;
        self.stats.compactions.fetch_add(1, Ordering::Relaxed);
        self.stats.log_entries.store(0, Ordering::Relaxed);
        self.stats.log_bytes.store(self.log_len, Ordering::Relaxed);
        Ok(())
    }

    fn remove_log(&mut self) -> Result<(), FileError> {
        self.log = None;
        match std::fs::remove_file(&self.paths.log) {
            Ok(()) => self.sync_dir(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&self.paths.log, "remove folded log")(e)),
        }
    }

    /// `close()`: folds the log into the snapshot and removes it.
    fn fold(&mut self) -> Result<(), FileError> {
        if self.poisoned {
            return Err(FileError::Poisoned {
                file: self.paths.data.clone(),
            });
        }
        if self.log.is_some() {
            self.write_snapshot()?;
            self.remove_log()?;
        }
        Ok(())
    }
}

/// How replacing the snapshot failed.
enum Replaced {
    /// Before the rename: the previous snapshot stands, nothing changed.
    Not(FileError),
    /// After the rename: the new snapshot is in place, but the folder could not be synced, so
    /// whether it survives a crash is unknown.
    Unsynced(FileError),
}

impl Replaced {
    fn into_error(self) -> FileError {
        match self {
            Replaced::Not(e) | Replaced::Unsynced(e) => e,
        }
    }
}
