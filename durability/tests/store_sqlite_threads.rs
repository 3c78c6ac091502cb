//! A [`SqliteStore`]'s writer thread ends with the store: closed or dropped without closing,
//! none is left behind. Its own test binary, so that no other test's stores are counted.
#![cfg(all(feature = "sqlite", target_os = "linux"))]
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use botmesh_durability::{SqliteStore, Store};
use serde_json::json;

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
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db");
    // While open: one writer.
    let store = SqliteStore::connect(&db).await.unwrap();
    store.set_value("s", "k0", &json!(0)).await.unwrap();
    assert_eq!(store_threads(), 1);
    store.close().await.unwrap();
    assert_eq!(left_after_waiting(), 0, "close() joins the writer");

    // Opened, written to and dropped without close(), ten times over the same file: every
    // write that was answered is in the file, and the threads end on their own.
    for n in 1..=10 {
        let store = SqliteStore::connect(&db).await.unwrap();
        store
            .set_value("s", &format!("k{n}"), &json!(n))
            .await
            .unwrap();
        drop(store);
    }
    assert_eq!(left_after_waiting(), 0);
    let store = SqliteStore::connect(&db).await.unwrap();
    assert_eq!(store.values("s").await.unwrap().len(), 11);
    store.close().await.unwrap();
    assert_eq!(left_after_waiting(), 0);
}
