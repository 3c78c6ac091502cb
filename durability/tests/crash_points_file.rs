//! The crash matrix on [`FileDurability`] (append log, small compaction threshold so that
//! compactions and replays of a compacted log happen inside the script): every write point ×
//! before/after × both ambiguity policies, and seeded random points. Each crashed process's
//! file is abandoned with `simulate_crash` (log not folded, lock file left behind) and the
//! next incarnation reopens it from disk.
#![cfg(all(feature = "testing", feature = "file"))]
#![allow(clippy::print_stdout, reason = "the crash matrix prints its table")]

mod crash_restart;
mod crash_script;

use std::path::PathBuf;
use std::sync::Arc;

use botmesh_durability::{FileDurability, FileOptions};
use crash_restart::Restartable;
use tempfile::TempDir;

/// A durable file in a fresh temporary folder.
struct FileBackend {
    _dir: TempDir,
    path: PathBuf,
    options: FileOptions,
}

async fn append_log() -> FileBackend {
    let dir = tempfile::tempdir().expect("temp dir");
    FileBackend {
        path: dir.path().join("journal.json"),
        _dir: dir,
        options: FileOptions::new().append_log(true).compact_every(7),
    }
}

async fn snapshot_mode() -> FileBackend {
    let dir = tempfile::tempdir().expect("temp dir");
    FileBackend {
        path: dir.path().join("journal.json"),
        _dir: dir,
        options: FileOptions::new(),
    }
}

impl Restartable for FileBackend {
    type Kv = FileDurability;

    async fn open(&self) -> Arc<FileDurability> {
        let kv = FileDurability::open(&self.path, self.options.clone())
            .await
            .expect("open the durable file");
        Arc::new(kv)
    }

    async fn kill(&self, kv: Arc<FileDurability>) {
        kv.simulate_crash().await;
    }

    async fn close(&self, kv: Arc<FileDurability>) {
        kv.close().await.expect("close");
    }
}

#[tokio::test]
async fn script_passes_every_crash_point() {
    crash_restart::script_passes_every_crash_point(append_log).await;
    crash_restart::script_passes_every_crash_point(snapshot_mode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_matrix() {
    println!("{}", crash_restart::crash_matrix(append_log).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_matrix_in_snapshot_mode() {
    crash_restart::crash_matrix(snapshot_mode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_random_crash_points() {
    println!(
        "{}",
        crash_restart::seeded_random_crash_points(append_log, 24).await
    );
}
