//! A [`SqliteStore`]'s writer thread ends with the store: closed or dropped without closing,
//! none is left behind. The threads are counted in a child process of the test binary that
//! runs this test alone, so that no other test's stores are counted.
#![cfg(all(feature = "sqlite", target_os = "linux"))]
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use botmesh_durability::{SqliteStore, Store};
use serde_json::json;

use crate::support;

/// Set in the child process, which counts the threads.
const CHILD_ENV: &str = "BOTMESH_SQLITE_THREADS_CHILD";
/// What precedes the child's report.
const MARK: &str = "BOTMESH-SQLITE-THREADS:";

/// This process's threads whose name starts with `prefix` (`/proc/self/task/*/comm`, which
/// holds the first 15 bytes of a thread's name).
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .map(|name| name.starts_with(prefix))
                .unwrap_or(false)
        })
        .count()
}

/// The writer threads of this process (`botmesh-sqlite-writer`).
fn store_threads() -> usize {
    threads_named("botmesh-sqlite-")
}

/// Waits up to 5 s for the writer threads to be gone; how many are left. Also after `close()`,
/// which joins the writer: a joined thread has exited, but the kernel may list it in
/// `/proc/self/task` for a moment longer (it wakes the joiner before it reaps the thread).
fn left_after_waiting() -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = store_threads();
        if left == 0 || Instant::now() > deadline {
            return left;
        }
        // A poll of the kernel's thread list, on purpose: no event tells when a thread is reaped.
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_and_dropped_stores_leave_no_thread_behind() {
    if std::env::var_os(CHILD_ENV).is_some() {
        println!("{MARK}{}", count_threads().await);
        return;
    }
    let child = support::spawn_child(
        "store_sqlite_threads::closed_and_dropped_stores_leave_no_thread_behind",
        CHILD_ENV,
        Path::new("child"),
    );
    let report = tokio::task::spawn_blocking(move || support::child_report(child, MARK))
        .await
        .unwrap();
    assert_eq!(report["open"], 1, "while open: one writer");
    assert_eq!(report["closed"], 0, "close() joins the writer");
    // Opened, written to and dropped without close(), ten times over the same file: every
    // write that was answered is in the file, and the threads end on their own.
    assert_eq!(report["dropped"], 0);
    assert_eq!(report["values"], 11);
    assert_eq!(report["closed_again"], 0);
}

/// In the child: the writer threads while a store is open, after `close()`, after ten stores
/// dropped without closing, and after the last `close()`; and how many values were kept.
async fn count_threads() -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db");
    let store = SqliteStore::connect(&db).await.unwrap();
    store.set_value("s", "k0", &json!(0)).await.unwrap();
    let open = store_threads();
    store.close().await.unwrap();
    let closed = left_after_waiting();
    for n in 1..=10 {
        let store = SqliteStore::connect(&db).await.unwrap();
        store
            .set_value("s", &format!("k{n}"), &json!(n))
            .await
            .unwrap();
        drop(store);
    }
    let dropped = left_after_waiting();
    let store = SqliteStore::connect(&db).await.unwrap();
    let values = store.values("s").await.unwrap().len();
    store.close().await.unwrap();
    json!({
        "open": open,
        "closed": closed,
        "dropped": dropped,
        "values": values,
        "closed_again": left_after_waiting(),
    })
}
