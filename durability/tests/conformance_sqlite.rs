//! The conformance suite on the SQLite durable table ([`SqliteStore::durability_kv`]), on one
//! and on two worker threads.
#![cfg(all(feature = "testing", feature = "sqlite"))]
#![allow(clippy::print_stdout, reason = "prints the conformance report")]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use botmesh_durability::testing::conformance::{ConformanceReport, run_conformance};
use botmesh_durability::{DurableKv, SqliteStore};

async fn suite() -> ConformanceReport {
    let dir = tempfile::tempdir().expect("temp dir");
    let root: PathBuf = dir.path().to_path_buf();
    let n = AtomicUsize::new(0);
    let report = run_conformance(|| {
        let path = root.join(format!("case-{}.db", n.fetch_add(1, Ordering::Relaxed)));
        async move {
            let store = SqliteStore::connect(&path)
                .await
                .expect("open a fresh store");
            Arc::new(store.durability_kv()) as Arc<dyn DurableKv>
        }
    })
    .await;
    drop(dir);
    report
}

#[tokio::test]
async fn sqlite_passes() {
    let report = suite().await;
    println!("{report}");
    report.assert_passed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_across_threads() {
    suite().await.assert_passed();
}
