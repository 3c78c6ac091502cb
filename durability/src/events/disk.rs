//! The files of a shared events journal, read and written by whichever process holds the
//! mutex: `<file>` (the snapshot, `FileDurability`'s format), `<file>.log` (the append log),
//! `<file>.tmp` (a snapshot being written) and `<file>.lock` (a `FileEventJournal`'s lock,
//! only looked at).
//!
//! Every operation reads the current files back ([`Disk::load`]), so it sees what every
//! process wrote before it took the mutex:
//!
//! | step | snapshot mode (default) | append-log mode |
//! | --- | --- | --- |
//! | load | the snapshot, then the log lines it does not hold yet (`seq > log_seq`); a torn last line is cut | the same |
//! | a write that changed something | the whole snapshot rewritten: temp file, `fsync`, rename, `fsync` of the folder; a leftover log folded in and removed | one line appended to the log, `fsync`; every `compact_every` lines or `compact_bytes`, the snapshot rewritten carrying `log_seq` and the log cut to its header |
//! | a bad log line followed by more lines | `FileError::AppendLogCorrupt` (line, byte offset), nothing written | the same |
//!
//! A crash between a compaction's snapshot and the log's cut is harmless: the lines the
//! snapshot holds are skipped by `seq`. A failed append is cut back; if even that fails, the
//! next load finds a torn or complete last line and decides (the write was answered with an
//! error either way).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::file::FileError;
use crate::file::error::io;
use crate::file::format::{self, LogLine};
use crate::file::state::{Pending, State};
use crate::file::writer::Paths;
use crate::kv::{CasOutcome, KvOp};

use super::{SharedFileError, SharedFileOptions};

/// The paths of one shared journal (those of `FileDurability` and the mutex) and how it
/// writes.
#[derive(Debug, Clone)]
pub(crate) struct Disk {
    paths: Paths,
    pub(crate) data: PathBuf,
    pub(crate) mutex: PathBuf,
    pub(crate) options: SharedFileOptions,
}

/// The files as read under the mutex.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) state: State,
    /// The highest log sequence folded into the snapshot or seen in the log.
    last_seq: u64,
    /// Log lines not yet in the snapshot.
    log_lines: u64,
    /// The log's length (0: no log).
    log_len: u64,
    log_exists: bool,
}

impl Disk {
    pub(crate) fn new(data: &Path, options: SharedFileOptions) -> Self {
        let mut mutex = data.as_os_str().to_owned();
        mutex.push(".mutex");
        Disk {
            paths: Paths::new(data),
            data: data.to_path_buf(),
            mutex: PathBuf::from(mutex),
            options,
        }
    }

    /// Refuses the file while a live `FileEventJournal` (or `FileDurability`) holds its lock:
    /// that journal keeps the file in memory and would overwrite any change made beside it.
    pub(crate) fn check_not_held(&self) -> Result<(), SharedFileError> {
        let mut file = match File::open(&self.paths.lock) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(&self.paths.lock, "open the lock file")(e).into()),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(()),
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let pid = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok())
                    .unwrap_or(0);
                Err(SharedFileError::HeldByFileJournal {
                    file: self.data.clone(),
                    lock_file: self.paths.lock.clone(),
                    pid,
                })
            }
            Err(TryLockError::Error(e)) => {
                Err(io(&self.paths.lock, "check the lock file")(e).into())
            }
        }
    }

    /// Reads the snapshot and the log back; cuts a torn last log line.
    pub(crate) fn load(&self) -> Result<Loaded, FileError> {
        let mut loaded = Loaded::default();
        let mut log_seq = 0;
        match std::fs::read(&self.data) {
            Ok(bytes) => {
                let snapshot = format::parse_snapshot(&bytes, &self.data)?;
                log_seq = snapshot.log_seq;
                loaded.state.last_version = snapshot.last_version;
                for entry in snapshot.entries {
                    loaded.state.load(entry);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&self.data, "read snapshot")(e)),
        }
        loaded.last_seq = log_seq;
        let bytes = match std::fs::read(&self.paths.log) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(loaded),
            Err(e) => return Err(io(&self.paths.log, "read append log")(e)),
        };
        let parsed = format::parse_log(&bytes, &self.paths.log)?;
        loaded.log_exists = true;
        for line in parsed.lines {
            loaded.last_seq = loaded.last_seq.max(line.seq);
            if line.seq <= log_seq {
                continue;
            }
            loaded.log_lines += 1;
            for change in line.ops {
                loaded.state.apply(&line.scope, change);
            }
        }
        loaded.log_len = parsed.valid_len;
        if parsed.torn {
            tracing::warn!(file = %self.paths.log.display(), cut_at = parsed.valid_len, "append log ends with a torn line (a crash mid-append): cutting it");
            let file = OpenOptions::new()
                .write(true)
                .open(&self.paths.log)
                .map_err(io(&self.paths.log, "open append log"))?;
            file.set_len(parsed.valid_len)
                .and_then(|()| file.sync_all())
                .map_err(io(&self.paths.log, "cut torn line"))?;
        }
        Ok(loaded)
    }

    /// Creates an empty snapshot when there is none (at open).
    pub(crate) fn ensure_snapshot(&self, loaded: &Loaded) -> Result<(), FileError> {
        if self.data.exists() {
            return Ok(());
        }
        self.write_snapshot(loaded)
    }

    /// Evaluates `ops` in `scope` against the loaded files and persists what changed.
    pub(crate) fn commit(
        &self,
        loaded: &mut Loaded,
        scope: &str,
        ops: Vec<KvOp>,
    ) -> Result<Vec<CasOutcome>, FileError> {
        let mut outcomes = Vec::with_capacity(ops.len());
        let mut changes = Vec::new();
        let last_version = {
            let mut pending = Pending::new(&loaded.state);
            for op in ops {
                let (outcome, change) = pending.eval(scope, op);
                outcomes.push(outcome);
                changes.extend(change);
            }
            pending.last_version
        };
        if changes.is_empty() {
            return Ok(outcomes);
        }
        let line = LogLine {
            seq: loaded.last_seq + 1,
            scope: scope.to_owned(),
            ops: changes.clone(),
        };
        for change in changes {
            loaded.state.apply(scope, change);
        }
        loaded.state.last_version = loaded.state.last_version.max(last_version);
        if self.options.file.append_log {
            self.append(loaded, &line)?;
            loaded.last_seq = line.seq;
            loaded.log_lines += 1;
            let file = &self.options.file;
            if loaded.log_lines >= file.compact_every as u64 || loaded.log_len >= file.compact_bytes
            {
                self.compact(loaded)?;
            }
        } else {
            loaded.last_seq = line.seq;
            self.write_snapshot(loaded)?;
            if loaded.log_exists {
                std::fs::remove_file(&self.paths.log)
                    .map_err(io(&self.paths.log, "remove folded log"))?;
                loaded.log_exists = false;
                loaded.log_len = 0;
                loaded.log_lines = 0;
            }
        }
        Ok(outcomes)
    }

    /// Appends one line to the log (writing its header first when it has none); cuts the log
    /// back when the append fails.
    fn append(&self, loaded: &mut Loaded, line: &LogLine) -> Result<(), FileError> {
        let header = format::log_header();
        let mut bytes = Vec::new();
        if loaded.log_len < header.len() as u64 {
            bytes.extend_from_slice(&header);
        }
        format::encode_line(line, &mut bytes)
            .map_err(|e| io(&self.paths.log, "encode log line")(e.into()))?;
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.paths.log)
            .map_err(io(&self.paths.log, "open append log"))?;
        let start = if loaded.log_len < header.len() as u64 {
            0
        } else {
            loaded.log_len
        };
        let written = file
            .set_len(start)
            .and_then(|()| {
                use std::io::Seek;
                file.seek(std::io::SeekFrom::Start(start)).map(|_| ())
            })
            .and_then(|()| file.write_all(&bytes))
            .and_then(|()| {
                if self.options.file.fsync {
                    file.sync_data()
                } else {
                    Ok(())
                }
            });
        if let Err(e) = written {
            if let Err(cut) = file.set_len(start).and_then(|()| file.sync_data()) {
                tracing::error!(file = %self.paths.log.display(), error = %cut, "could not cut the log back after a failed append; the next load decides");
            }
            return Err(io(&self.paths.log, "append to log")(e));
        }
        if !loaded.log_exists {
            self.sync_dir()?;
        }
        loaded.log_exists = true;
        loaded.log_len = start + bytes.len() as u64;
        Ok(())
    }

    /// Folds the log into the snapshot and cuts the log to its header.
    fn compact(&self, loaded: &mut Loaded) -> Result<(), FileError> {
        self.write_snapshot(loaded)?;
        let header_len = format::log_header().len() as u64;
        let file = OpenOptions::new()
            .write(true)
            .open(&self.paths.log)
            .map_err(io(&self.paths.log, "open append log"))?;
        file.set_len(header_len)
            .and_then(|()| file.sync_data())
            .map_err(io(&self.paths.log, "truncate log after compaction"))?;
        loaded.log_len = header_len;
        loaded.log_lines = 0;
        tracing::debug!(file = %self.data.display(), log_seq = loaded.last_seq, "events journal compacted");
        Ok(())
    }

    /// Atomically replaces the snapshot with the loaded state, carrying the log sequence.
    fn write_snapshot(&self, loaded: &Loaded) -> Result<(), FileError> {
        let bytes = format::encode_snapshot(
            loaded.last_seq,
            loaded.state.last_version,
            loaded.state.stored(None),
        )
        .map_err(|e| io(&self.data, "encode snapshot")(e.into()))?;
        let fsync = self.options.file.fsync;
        let written = File::create(&self.paths.tmp)
            .and_then(|mut file| {
                file.write_all(&bytes)?;
                if fsync { file.sync_all() } else { Ok(()) }
            })
            .and_then(|()| std::fs::rename(&self.paths.tmp, &self.data));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&self.paths.tmp);
            return Err(io(&self.data, "replace snapshot")(e));
        }
        if fsync { self.sync_dir() } else { Ok(()) }
    }

    fn sync_dir(&self) -> Result<(), FileError> {
        File::open(&self.paths.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.paths.dir, "fsync the folder"))
    }
}
