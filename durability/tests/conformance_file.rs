//! The conformance suite on [`FileDurability`], in snapshot and append-log mode, on one and
//! on two worker threads.
#![cfg(all(feature = "testing", feature = "file"))]
#![allow(clippy::print_stdout, reason = "prints the conformance report")]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use botmesh_durability::testing::conformance::{ConformanceReport, run_conformance};
use botmesh_durability::{DurableKv, FileDurability, FileOptions};

/// Runs the suite on fresh files under one temporary folder.
async fn suite(options: FileOptions) -> ConformanceReport {
    let dir = tempfile::tempdir().expect("temp dir");
    let root: PathBuf = dir.path().to_path_buf();
    let n = AtomicUsize::new(0);
    let report = run_conformance(|| {
        let path = root.join(format!("case-{}.json", n.fetch_add(1, Ordering::Relaxed)));
        let options = options.clone();
        async move {
            let kv = FileDurability::open(&path, options)
                .await
                .expect("open a fresh durable file");
            Arc::new(kv) as Arc<dyn DurableKv>
        }
    })
    .await;
    drop(dir);
    report
}

#[tokio::test]
async fn file_in_snapshot_mode_passes() {
    let report = suite(FileOptions::new()).await;
    println!("{report}");
    report.assert_passed();
}

#[tokio::test]
async fn file_with_append_log_passes() {
    suite(FileOptions::new().append_log(true))
        .await
        .assert_passed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_passes_across_threads_with_frequent_compaction() {
    suite(FileOptions::new().compact_every(3))
        .await
        .assert_passed();
}

#[tokio::test]
async fn file_without_fsync_passes() {
    suite(FileOptions::new().append_log(true).fsync(false))
        .await
        .assert_passed();
}
