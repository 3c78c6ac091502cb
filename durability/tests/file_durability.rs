//! [`FileDurability`] beyond the conformance suite: reopening, the append log and its
//! compaction, bad files, locks, failing disks and group commit.
//!
//! | case | expected |
//! | --- | --- |
//! | truncated snapshot, file of another format | refused on open, naming the file, file untouched |
//! | damaged log line followed by more lines | `AppendLogCorrupt { line, byte_offset }`, file untouched |
//! | torn last log line | cut, the rest replayed |
//! | the folder's sync failing after a snapshot's rename | tried again; failing twice, the write fails and later writes are refused (`Poisoned`) |
//! | lock of a live process (a child re-running this binary) | `Locked { pid }`, also when the lock file's pid is rewritten (the lock is the kernel's); once it is killed, the stale lock is broken |
//! | second open in this process | `AlreadyOpen` until `close()` |
//! | unwritable folder | an I/O error naming the path. Tests run as root, whom `chmod` does not stop: the folder is a path under a regular file (`ENOTDIR` for anyone), and the `chmod 0555` case asserts the refusal only when a probe shows permissions apply |
//! | full disk / failing fsync (an injected `IoHook`) | the write is not acknowledged, the error names the file, acknowledged writes survive a reopen |
#![cfg(all(feature = "testing", feature = "file"))]
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use crate::support::{self, log_of};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use botmesh_durability::file::FileError;
use botmesh_durability::file::{IoHook, IoOp};
use botmesh_durability::kv::{CasOutcome, Entry, Index, KvError, Scope};
use botmesh_durability::{DurableKv, FileDurability, FileOptions};

const CHILD_ENV: &str = "BOTMESH_FILE_CHILD_PATH";
const CHILD_MARK: &str = "BOTMESH-CHILD:";

fn scope() -> Scope {
    Scope::custom("bot")
}

fn entry(text: &str) -> Entry {
    Entry {
        value: text.as_bytes().to_vec(),
        idx1: Some(format!("due/{text}")),
        idx2: None,
    }
}

fn log_opts() -> FileOptions {
    FileOptions::new().append_log(true)
}

/// The durable file at `path`, with the default options.
async fn open(path: &Path) -> FileDurability {
    FileDurability::open(path, FileOptions::new())
        .await
        .unwrap()
}

async fn put(kv: &FileDurability, key: &str, text: &str) -> CasOutcome {
    kv.cas(&scope(), key, None, entry(text)).await.unwrap()
}

async fn value(kv: &FileDurability, key: &str) -> Option<String> {
    let got = kv.get(&scope(), key).await.unwrap();
    got.map(|v| String::from_utf8(v.value).unwrap())
}

/// The `FileError` inside a backend error.
fn file_error(e: &KvError) -> &FileError {
    match e {
        KvError::Unavailable { source, .. } => source
            .downcast_ref::<FileError>()
            .unwrap_or_else(|| panic!("not a FileError: {e}")),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// Writes `n` entries with the append log, then drops the handle without closing (the log
/// stays, as after a crash).
async fn leave_a_log(path: &Path, n: usize) {
    let kv = FileDurability::open(path, log_opts()).await.unwrap();
    for i in 0..n {
        put(&kv, &format!("k{i}"), &format!("v{i}")).await;
    }
    kv.simulate_crash().await;
}

#[tokio::test]
async fn reopening_finds_every_acknowledged_write_in_both_modes() {
    for options in [FileOptions::new(), log_opts()] {
        let (_dir, path) = support::fresh("journal.json");
        let kv = FileDurability::open(&path, options.clone()).await.unwrap();
        let v1 = put(&kv, "a", "1").await;
        let CasOutcome::Ok { version } = v1 else {
            panic!("create failed")
        };
        kv.cas(&scope(), "a", Some(version), entry("2"))
            .await
            .unwrap();
        put(&kv, "b", "3").await;
        kv.delete(
            &scope(),
            "b",
            kv.get(&scope(), "b").await.unwrap().unwrap().version,
        )
        .await
        .unwrap();
        kv.close().await.unwrap();
        assert!(!log_of(&path).exists(), "close() folds and removes the log");
        assert!(matches!(kv.get(&scope(), "a").await, Err(KvError::Closed)));

        let again = FileDurability::open(&path, options).await.unwrap();
        assert_eq!(value(&again, "a").await.as_deref(), Some("2"));
        assert_eq!(value(&again, "b").await, None);
        let due = again
            .range(&scope(), Index::One, "due/", "due0", 10)
            .await
            .unwrap();
        assert_eq!(due.len(), 1, "the index came back too");
        // Versions are never reused after a reopen.
        let CasOutcome::Ok { version: b2 } = put(&again, "b", "4").await else {
            panic!("re-create failed")
        };
        assert!(b2 > version + 1, "version {b2} reused");
        again.close().await.unwrap();
    }
}

#[tokio::test]
async fn a_leftover_log_is_replayed_even_without_the_append_log() {
    let (_dir, path) = support::fresh("journal.json");
    leave_a_log(&path, 5).await;
    assert!(log_of(&path).exists());
    let kv = open(&path).await;
    assert_eq!(value(&kv, "k4").await.as_deref(), Some("v4"));
    assert!(!log_of(&path).exists(), "folded into the snapshot at once");
    kv.close().await.unwrap();
    let kv = open(&path).await;
    assert_eq!(kv.len(), 5);
    kv.close().await.unwrap();
}

#[tokio::test]
async fn compaction_folds_the_log_and_a_crash_before_truncation_is_harmless() {
    let (_dir, path) = support::fresh("journal.json");
    let kv = FileDurability::open(&path, FileOptions::new().compact_every(5))
        .await
        .unwrap();
    for i in 0..12 {
        put(&kv, &format!("k{i}"), "x").await;
    }
    let stats = kv.stats();
    assert_eq!(stats.compactions, 2, "{stats:?}");
    assert_eq!(stats.log_entries, 2, "{stats:?}");
    // The log as it was before a compaction, i.e. a crash between snapshot and truncation.
    let before = std::fs::read(log_of(&path)).unwrap();
    let version = kv.get(&scope(), "k11").await.unwrap().unwrap().version;
    kv.compact().await.unwrap();
    kv.simulate_crash().await;
    std::fs::write(log_of(&path), &before).unwrap();

    let kv = FileDurability::open(&path, log_opts()).await.unwrap();
    assert_eq!(kv.len(), 12);
    let again = kv.get(&scope(), "k11").await.unwrap().unwrap();
    assert_eq!(
        again.version, version,
        "entries already in the snapshot are skipped"
    );
    kv.close().await.unwrap();
}

#[tokio::test]
async fn a_truncated_snapshot_is_refused_and_left_alone() {
    let (_dir, path) = support::fresh("journal.json");
    let kv = open(&path).await;
    for i in 0..4 {
        put(&kv, &format!("k{i}"), "some value").await;
    }
    kv.close().await.unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let cut = &bytes[..bytes.len() - 20];
    std::fs::write(&path, cut).unwrap();
    let err = FileDurability::open(&path, FileOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, FileError::SnapshotCorrupt { ref file, .. } if file == &path),
        "{err}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        cut,
        "the file is left as it is"
    );
    // The refused open released its lock: after a repair, the file opens.
    std::fs::write(&path, &bytes).unwrap();
    let kv = open(&path).await;
    assert_eq!(kv.len(), 4);
    kv.close().await.unwrap();
}

#[tokio::test]
async fn a_file_of_another_format_is_refused() {
    for foreign in [
        &b"{\"hello\": \"world\"}\n"[..],
        b"SQLite format 3\0\x10\0",
        b"",
    ] {
        let (_dir, path) = support::fresh("journal.json");
        std::fs::write(&path, foreign).unwrap();
        let err = FileDurability::open(&path, FileOptions::new())
            .await
            .unwrap_err();
        assert!(
            matches!(err, FileError::NotADurableFile { .. }),
            "{foreign:?}: {err}"
        );
        assert!(err.to_string().contains("journal.json"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), foreign);
    }
    // A foreign `.log` next to a good snapshot is refused too, not cut.
    let (_dir, path) = support::fresh("journal.json");
    open(&path).await.close().await.unwrap();
    std::fs::write(log_of(&path), "line one\nline two\n").unwrap();
    let err = FileDurability::open(&path, log_opts()).await.unwrap_err();
    assert!(
        matches!(err, FileError::NotADurableFile { ref file } if file == &log_of(&path)),
        "{err}"
    );
}

#[tokio::test]
async fn a_damaged_line_in_the_middle_is_refused_with_line_and_offset() {
    let (_dir, path) = support::fresh("journal.json");
    leave_a_log(&path, 5).await;
    let log = log_of(&path);
    let mut bytes = std::fs::read(&log).unwrap();
    // Line 1 is the header, lines 2..=6 the five writes: damage line 4.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    let offset = starts[3];
    bytes[offset + 20] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();
    let err = FileDurability::open(&path, log_opts()).await.unwrap_err();
    assert!(
        matches!(&err, FileError::AppendLogCorrupt { file, line: 4, byte_offset, .. }
            if file == &log && *byte_offset == offset as u64),
        "expected AppendLogCorrupt at line 4, byte {offset}: {err}"
    );
    assert_eq!(err.code(), "APPEND_LOG_CORRUPT");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        bytes,
        "the log is left untouched"
    );
}

#[tokio::test]
async fn a_torn_last_line_is_cut_and_the_rest_replayed() {
    for tear in [7usize, 1] {
        let (_dir, path) = support::fresh("journal.json");
        leave_a_log(&path, 4).await;
        let log = log_of(&path);
        let bytes = std::fs::read(&log).unwrap();
        // Tear the last line: drop its last `tear` bytes (1 = only the newline).
        std::fs::write(&log, &bytes[..bytes.len() - tear]).unwrap();
        let kv = FileDurability::open(&path, log_opts()).await.unwrap();
        assert_eq!(kv.len(), 3, "the three complete writes are replayed");
        assert_eq!(value(&kv, "k2").await.as_deref(), Some("v2"));
        assert_eq!(value(&kv, "k3").await, None, "the torn write is gone");
        put(&kv, "k9", "after").await;
        kv.simulate_crash().await;
        let kv = FileDurability::open(&path, log_opts()).await.unwrap();
        assert_eq!(kv.len(), 4, "appends after the cut are readable");
        kv.close().await.unwrap();
    }
}

#[tokio::test]
async fn a_second_open_in_this_process_waits_for_close() {
    let (_dir, path) = support::fresh("journal.json");
    let kv = open(&path).await;
    support::assert_already_open(FileDurability::open(&path, FileOptions::new()).await);
    // Another spelling of the same path is the same file.
    let dotted = path.parent().unwrap().join(".").join("journal.json");
    support::assert_already_open(FileDurability::open(&dotted, FileOptions::new()).await);
    kv.close().await.unwrap();
    let kv = open(&path).await;
    drop(kv);
    // Dropping the last handle releases it too.
    open(&path).await;
}

/// Not a test of its own: `a_live_process_holds_the_lock` runs this binary again with
/// `BOTMESH_FILE_CHILD_PATH` set; this opens the file, says so, and holds it until stdin ends.
#[tokio::test]
async fn child_holds_the_file() {
    let Some(path) = support::child_path(CHILD_ENV) else {
        return;
    };
    let kv = FileDurability::open(path, log_opts()).await.unwrap();
    put(&kv, "child", "was here").await;
    println!("{CHILD_MARK}ready");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    kv.close().await.unwrap();
}

#[tokio::test]
async fn a_live_process_holds_the_lock_and_a_killed_one_does_not() {
    let (_dir, path) = support::fresh("journal.json");
    let mut child = support::spawn_child("file_durability::child_holds_the_file", CHILD_ENV, &path);
    assert!(
        support::child_printed(&mut child, &format!("{CHILD_MARK}ready")),
        "the child did not open the file"
    );

    let err = FileDurability::open(&path, log_opts()).await.unwrap_err();
    match &err {
        FileError::Locked { pid, lock_file, .. } => {
            assert_eq!(*pid, child.id());
            assert!(lock_file.ends_with("journal.json.lock"));
        }
        other => panic!("expected Locked, got {other}"),
    }
    assert!(err.to_string().contains("journal.json"), "{err}");
    // The lock is the kernel's, not the pid in the file: whatever the file says (our own pid,
    // as a holder in another pid namespace might write; a pid of nobody; garbage), the live
    // child keeps it.
    let lock = PathBuf::from(format!("{}.lock", path.display()));
    for written in [
        std::process::id().to_string(),
        "999999".into(),
        "junk".into(),
    ] {
        std::fs::write(&lock, format!("{written}\n")).unwrap();
        let err = FileDurability::open(&path, log_opts()).await.unwrap_err();
        assert!(
            matches!(err, FileError::Locked { .. }),
            "a lock file saying {written}: {err}"
        );
    }

    // SIGKILL: the lock file stays behind with a dead pid, and the log is not folded.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(PathBuf::from(format!("{}.lock", path.display())).exists());
    let kv = FileDurability::open(&path, log_opts()).await.unwrap();
    assert_eq!(value(&kv, "child").await.as_deref(), Some("was here"));
    kv.close().await.unwrap();
}

#[tokio::test]
async fn a_stale_lock_of_a_dead_process_is_broken() {
    let (_dir, path) = support::fresh("journal.json");
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    assert!(!botmesh_durability::file::pid_alive(pid));
    let lock = PathBuf::from(format!("{}.lock", path.display()));
    std::fs::write(&lock, format!("{pid}\n")).unwrap();
    let kv = open(&path).await;
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap().trim(),
        std::process::id().to_string()
    );
    kv.close().await.unwrap();
    assert!(!lock.exists(), "close() removes the lock file");
}

#[tokio::test]
async fn an_unwritable_folder_is_an_error_naming_the_path() {
    let (dir, path) = support::under_a_regular_file("journal.json");
    let err = FileDurability::open(&path, FileOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, FileError::Io { .. }), "{err}");
    assert!(err.to_string().contains("plain-file"), "{err}");

    // chmod: refused for an ordinary user; root is not stopped by permissions, which the
    // probe detects (then the open must simply work).
    let locked = dir.path().join("read-only");
    std::fs::create_dir(&locked).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    let permissions_apply = std::fs::write(locked.join("probe"), "x").is_err();
    let opened = FileDurability::open(locked.join("journal.json"), FileOptions::new()).await;
    if permissions_apply {
        let err = opened.unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
    } else {
        println!("running as root: chmod does not stop writes; the ENOTDIR case covers refusal");
        opened.unwrap().close().await.unwrap();
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A disk that fails one kind of operation after `allow` successes.
struct FailingDisk {
    op: IoOp,
    allow: AtomicU32,
    also_truncate: bool,
}

impl IoHook for FailingDisk {
    fn before(&self, op: IoOp, _file: &Path) -> std::io::Result<()> {
        let fail = (op == self.op
            && self
                .allow
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_err())
            || (self.also_truncate && op == IoOp::Truncate);
        if fail {
            return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_full_disk_fails_the_write_and_keeps_what_was_acknowledged() {
    let cases = [
        (log_opts(), IoOp::Write, false, true),
        (log_opts(), IoOp::Sync, false, true),
        (log_opts(), IoOp::Write, true, false),
        (FileOptions::new(), IoOp::Write, false, true),
        (FileOptions::new(), IoOp::Rename, false, true),
    ];
    for (options, op, also_truncate, recovers) in cases {
        let label = format!(
            "{op:?} append_log={} truncate fails={also_truncate}",
            options.is_append_log()
        );
        let (_dir, path) = support::fresh("journal.json");
        let disk = Arc::new(FailingDisk {
            op,
            allow: AtomicU32::new(u32::MAX),
            also_truncate,
        });
        let kv = FileDurability::open(&path, options.clone().io_hook(disk.clone()))
            .await
            .unwrap();
        disk.allow.store(3, Ordering::SeqCst);
        for i in 0..3 {
            put(&kv, &format!("k{i}"), "kept").await;
        }
        let err = kv
            .cas(&scope(), "lost", None, entry("never acknowledged"))
            .await
            .unwrap_err();
        let file_err = file_error(&err);
        assert!(err.to_string().contains("journal.json"), "{label}: {err}");
        assert!(
            matches!(file_err, FileError::Io { .. }),
            "{label}: {file_err}"
        );
        assert_eq!(value(&kv, "lost").await, None, "{label}: not applied");
        disk.allow.store(u32::MAX, Ordering::SeqCst);
        let next = kv.cas(&scope(), "after", None, entry("x")).await;
        assert_eq!(next.is_ok(), recovers, "{label}: {next:?}");
        if !recovers {
            let err = next.unwrap_err();
            assert!(
                matches!(file_error(&err), FileError::Poisoned { .. }),
                "{label}: {err}"
            );
        }
        kv.simulate_crash().await;
        let kv = FileDurability::open(&path, options).await.unwrap();
        for i in 0..3 {
            assert_eq!(
                value(&kv, &format!("k{i}")).await.as_deref(),
                Some("kept"),
                "{label}"
            );
        }
        if also_truncate {
            // The cut-back failed: the unacknowledged line may be on disk; nothing else is lost.
        } else {
            assert_eq!(value(&kv, "lost").await, None, "{label}: rolled back");
        }
        kv.close().await.unwrap();
    }
}

/// Fails the folder's sync `failures` times once `allow` syncs have passed.
struct FlakyFolder {
    allow: AtomicU32,
    failures: AtomicU32,
}

impl IoHook for FlakyFolder {
    fn before(&self, op: IoOp, _file: &Path) -> std::io::Result<()> {
        let passes = |n: &AtomicU32| {
            n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if op == IoOp::SyncDir && !passes(&self.allow) && passes(&self.failures) {
            return Err(std::io::Error::from_raw_os_error(5)); // EIO
        }
        Ok(())
    }
}

/// Snapshot mode: once the rename is done, the group is in the file. A failed sync of the
/// folder is tried again; failing twice, the write is answered with the error and the backend
/// refuses every later write, since the reopened file (which has the write) decides.
#[tokio::test]
async fn a_folder_sync_failing_after_the_rename_stops_the_writes() {
    for failures in [1, 2] {
        let (_dir, path) = support::fresh("journal.json");
        let folder = Arc::new(FlakyFolder {
            allow: AtomicU32::new(u32::MAX),
            failures: AtomicU32::new(failures),
        });
        let options = FileOptions::new();
        let kv = FileDurability::open(&path, options.clone().io_hook(folder.clone()))
            .await
            .unwrap();
        put(&kv, "k0", "kept").await;
        folder.allow.store(0, Ordering::SeqCst);
        let written = kv.cas(&scope(), "unsure", None, entry("in the file")).await;
        if failures == 1 {
            assert!(written.is_ok(), "a second sync succeeded: {written:?}");
            put(&kv, "k1", "kept").await;
        } else {
            let err = written.unwrap_err();
            assert!(err.to_string().contains("fsync the folder"), "{err}");
            assert_eq!(value(&kv, "unsure").await, None, "not applied in memory");
            let next = kv
                .cas(&scope(), "after", None, entry("x"))
                .await
                .unwrap_err();
            assert!(
                matches!(file_error(&next), FileError::Poisoned { .. }),
                "{next}"
            );
        }
        kv.simulate_crash().await;
        let kv = FileDurability::open(&path, options).await.unwrap();
        assert_eq!(value(&kv, "k0").await.as_deref(), Some("kept"));
        assert_eq!(
            value(&kv, "unsure").await.as_deref(),
            Some("in the file"),
            "{failures} failed syncs: the renamed snapshot is what the file holds"
        );
        assert_eq!(value(&kv, "after").await, None);
        kv.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_fsyncs_and_all_survive() {
    let (_dir, path) = support::fresh("journal.json");
    let kv = FileDurability::open(&path, log_opts()).await.unwrap();
    support::create_concurrently(&kv, &scope(), 200, entry("v")).await;
    let stats = kv.stats();
    println!("{stats:?}");
    assert_eq!(stats.writes, 200);
    assert!(stats.fsyncs < 200, "no group commit: {stats:?}");
    assert!(stats.largest_group > 1, "{stats:?}");
    kv.simulate_crash().await;
    let kv = FileDurability::open(&path, log_opts()).await.unwrap();
    assert_eq!(kv.len(), 200);
    kv.close().await.unwrap();
}
