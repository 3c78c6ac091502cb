//! The crash matrix on the SQLite durable table ([`SqliteDurableKv`]): every write point ×
//! before/after × both ambiguity policies, and seeded random points. Each crashed process's
//! store is shut without further writes and the next incarnation reopens the file. SQLite
//! commits each group in one transaction, so what a killed process leaves is exactly what it
//! committed; a real SIGKILL of a child process is the `tests` crate's job.
#![cfg(all(feature = "testing", feature = "sqlite"))]
#![allow(clippy::print_stdout, reason = "the crash matrix prints its table")]

mod crash_restart;
mod crash_script;

use std::path::PathBuf;
use std::sync::Arc;

use botmesh_durability::{SqliteDurableKv, SqliteStore, Store};
use crash_restart::Restartable;
use tempfile::TempDir;

/// A store file in a fresh temporary folder.
struct SqliteBackend {
    _dir: TempDir,
    path: PathBuf,
}

async fn fresh() -> SqliteBackend {
    let dir = tempfile::tempdir().expect("temp dir");
    SqliteBackend {
        path: dir.path().join("bot.db"),
        _dir: dir,
    }
}

impl Restartable for SqliteBackend {
    type Kv = SqliteDurableKv;

    async fn open(&self) -> Arc<SqliteDurableKv> {
        let store = SqliteStore::connect(&self.path)
            .await
            .expect("open the store");
        Arc::new(store.durability_kv())
    }

    async fn kill(&self, kv: Arc<SqliteDurableKv>) {
        kv.store().close().await.expect("shut the store");
    }

    async fn close(&self, kv: Arc<SqliteDurableKv>) {
        kv.store().close().await.expect("close");
    }
}

#[tokio::test]
async fn script_passes_every_crash_point() {
    crash_restart::script_passes_every_crash_point(fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_matrix() {
    println!("{}", crash_restart::crash_matrix(fresh).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_random_crash_points() {
    println!(
        "{}",
        crash_restart::seeded_random_crash_points(fresh, 12).await
    );
}
