//! [`SqliteStore`]'s writer thread: group commit, failures isolated within a group, and
//! `close()` draining the queue. Requests are made to queue up deterministically by holding
//! the writer inside a request while the others are sent.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)]

use crate::support;

use botmesh_durability::store::Direction;
use botmesh_durability::store::LedgerEntry;
use botmesh_durability::store::LedgerStatus;
use botmesh_durability::store::rusqlite;
use botmesh_durability::{SqliteStore, Store, StoreError};
use serde_json::json;
use tempfile::TempDir;

async fn new_store() -> (SqliteStore, TempDir) {
    support::sqlite_store("bot.db").await
}

fn entry(chat: &str, n: i64) -> LedgerEntry {
    LedgerEntry {
        chat: chat.to_owned(),
        message_id: None,
        direction: Direction::Outbound,
        status: LedgerStatus::Sent,
        text: Some(format!("text {n}")),
        content: json!({ "n": n }),
        key: None,
        error: None,
        at_ms: 10_000 + n,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_from_50_tasks_all_land() {
    let (store, _dir) = new_store().await;
    let tasks: Vec<_> = (0..50)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                store.append_ledger(&entry("c", n)).await.unwrap();
                let key = format!("k{n:02}");
                store.set_value("s", &key, &json!(n)).await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut ledger: Vec<i64> = store
        .ledger("c", 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.at_ms - 10_000)
        .collect();
    ledger.sort_unstable();
    assert_eq!(ledger, (0..50).collect::<Vec<_>>());
    let values = store.values("s").await.unwrap();
    assert_eq!(values.len(), 50);
    assert_eq!(values[7], ("k07".to_owned(), json!(7)));
    let stats = store.write_stats();
    assert_eq!(stats.requests, 100, "{stats:?}");
}

/// The writer thread held inside a request ([`hold_writer`]).
struct Held {
    holder: tokio::task::JoinHandle<Result<(), StoreError>>,
    release: std::sync::mpsc::Sender<()>,
}

impl Held {
    /// Lets the writer go on; the holding request's result once its group is done.
    async fn release(self) -> Result<(), StoreError> {
        self.release.send(()).unwrap();
        self.holder.await.unwrap()
    }
}

/// Holds the writer thread inside a request until it is released (or dropped), so that the
/// requests made meanwhile queue up, and join the holding request's group. Only its first run
/// waits (a group run again with savepoints runs it again).
async fn hold_writer(store: &SqliteStore) -> Held {
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
    let store = store.clone();
    let mut inside_tx = Some(inside_tx);
    let holder = tokio::spawn(async move {
        store
            .write("hold", move |_tx| {
                if let Some(inside) = inside_tx.take() {
                    let _ = inside.send(());
                    let _ = release_rx.recv();
                }
                Ok(())
            })
            .await
    });
    inside_rx.await.unwrap();
    Held {
        holder,
        release: release_tx,
    }
}

/// A new store whose writer is held ([`hold_writer`]).
async fn held_store() -> (SqliteStore, TempDir, Held) {
    let (store, dir) = new_store().await;
    let held = hold_writer(&store).await;
    (store, dir, held)
}

/// Spawns a `set_value` of `key` in scope `s`: a request queued behind the held writer.
fn spawn_set(
    store: &SqliteStore,
    key: String,
    value: serde_json::Value,
) -> tokio::task::JoinHandle<Result<(), StoreError>> {
    let store = store.clone();
    tokio::spawn(async move { store.set_value("s", &key, &value).await })
}

/// Spawns `n` `set_value`s in scope `s`, of the keys `key(i)` with the values `i`.
fn spawn_numbered(
    store: &SqliteStore,
    n: i64,
    key: impl Fn(i64) -> String,
) -> Vec<tokio::task::JoinHandle<Result<(), StoreError>>> {
    (0..n).map(|i| spawn_set(store, key(i), json!(i))).collect()
}

/// Waits for `writes`, each of which must succeed.
async fn all_succeed(writes: Vec<tokio::task::JoinHandle<Result<(), StoreError>>>) {
    for write in writes {
        write.await.unwrap().unwrap();
    }
}

/// Checks that `error` is the failure of the request `operation`.
fn assert_failed_in(error: &StoreError, operation: &str) {
    assert!(
        matches!(error, StoreError::Query { operation: op, .. } if *op == operation),
        "{error:?}"
    );
}

/// Spawns the request `operation` running `f`.
fn spawn_write<F>(
    store: &SqliteStore,
    operation: &'static str,
    f: F,
) -> tokio::task::JoinHandle<Result<(), StoreError>>
where
    F: FnMut(&rusqlite::Transaction<'_>) -> Result<(), rusqlite::Error> + Send + 'static,
{
    let store = store.clone();
    tokio::spawn(async move { store.write(operation, f).await })
}

/// Lets every spawned task of this current-thread runtime make its first poll (and so queue
/// its request).
async fn let_tasks_queue() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// A request that inserts a row, then panics (a bug in a write closure); counts its runs.
fn spawn_panicking(
    store: &SqliteStore,
    operation: &'static str,
    runs: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> tokio::task::JoinHandle<Result<(), StoreError>> {
    let (store, runs) = (store.clone(), runs.clone());
    tokio::spawn(async move {
        store
            .write(operation, move |tx| -> Result<(), rusqlite::Error> {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tx.execute(
                    "INSERT INTO kv (scope, key, value) VALUES ('s', 'p', '1')",
                    [],
                )?;
                panic!("a bug in a write closure");
            })
            .await
    })
}

/// The keys of scope `s`, in order.
async fn keys(store: &SqliteStore) -> Vec<String> {
    store
        .values("s")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

#[tokio::test]
async fn writes_queued_while_a_group_runs_commit_with_it() {
    let (store, _dir, held) = held_store().await;
    let writes = spawn_numbered(&store, 20, |n| format!("k{n:02}"));
    let_tasks_queue().await;
    // Held inside the first request at least this long. Real time, on purpose: the writer
    // thread measures its statement time on the wall clock (checked below).
    std::thread::sleep(std::time::Duration::from_millis(20));
    held.release().await.unwrap();
    all_succeed(writes).await;
    // The twenty queued while the holding request ran share its transaction: one `COMMIT`.
    let stats = store.write_stats();
    assert_eq!(stats.requests, 21, "{stats:?}");
    assert_eq!(stats.transactions, 1, "{stats:?}");
    assert_eq!(stats.largest_batch, 21, "{stats:?}");
    assert_eq!(stats.isolated_reruns, 0, "no request failed: {stats:?}");
    // The writer's time: the 20 ms it was held inside the first request count as statement
    // time; the commit took some time too.
    assert!(
        stats.statements >= std::time::Duration::from_millis(20),
        "{stats:?}"
    );
    assert!(stats.commits > std::time::Duration::ZERO, "{stats:?}");
    assert_eq!(store.values("s").await.unwrap().len(), 20);
}

#[tokio::test]
async fn max_batch_bounds_a_group() {
    let dir = tempfile::tempdir().unwrap();
    let options = botmesh_durability::SqliteStoreOptions::default().max_batch(8);
    let store = SqliteStore::connect_with(dir.path().join("bot.db"), options)
        .await
        .unwrap();
    let held = hold_writer(&store).await;
    let writes = spawn_numbered(&store, 20, |n| format!("k{n:02}"));
    let_tasks_queue().await;
    held.release().await.unwrap();
    all_succeed(writes).await;
    // The holding request with the first 7 queued, then 8, then 5.
    let stats = store.write_stats();
    assert_eq!((stats.transactions, stats.requests), (3, 21), "{stats:?}");
    assert_eq!(stats.largest_batch, 8);
}

#[tokio::test]
async fn a_failing_request_fails_alone_in_its_group() {
    let (store, _dir, held) = held_store().await;
    let set = |key: &str| spawn_set(&store, key.to_owned(), json!(key));
    let first = set("before");
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let panics = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted_runs = runs.clone();
    let counted = spawn_write(&store, "counted", move |tx| {
        counted_runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tx.execute(
            "INSERT INTO kv (scope, key, value) VALUES ('s', 'counted', '1')",
            [],
        )?;
        Ok(())
    });
    let failing = spawn_write(&store, "half_then_fail", |tx| {
        tx.execute(
            "INSERT INTO kv (scope, key, value) VALUES ('s', 'half', '1')",
            [],
        )?;
        tx.execute("INSERT INTO no_such_table VALUES (1)", [])?;
        Ok(())
    });
    let panicking = spawn_panicking(&store, "panics", &panics);
    let last = set("after");
    let_tasks_queue().await;
    held.release().await.unwrap();
    first.await.unwrap().unwrap();
    counted.await.unwrap().unwrap();
    last.await.unwrap().unwrap();
    let error = failing.await.unwrap().unwrap_err();
    assert_failed_in(&error, "half_then_fail");
    assert!(error.to_string().contains("no_such_table"), "{error}");
    let error = panicking.await.unwrap().unwrap_err();
    assert!(error.to_string().contains("panicked"), "{error}");
    let stats = store.write_stats();
    // The holding request's group took in the requests queued while it ran, without
    // savepoints, until `half_then_fail` failed; it was rolled back and run again with one
    // savepoint per request (taking no more): `counted` ran twice (its first writes were
    // undone). The panicking request and `after` made the next group, rolled back and run again
    // too; the panicking request ran once (a closure that panicked is never run again).
    assert_eq!(stats.largest_batch, 4, "{stats:?}");
    assert_eq!((stats.transactions, stats.requests), (2, 6), "{stats:?}");
    assert_eq!(stats.isolated_reruns, 2, "{stats:?}");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(panics.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The failed requests' own statements were rolled back, the others committed.
    let keys = keys(&store).await;
    assert_eq!(keys, ["after", "before", "counted"]);
    // The writer still works.
    store.set_value("s", "later", &json!(1)).await.unwrap();
}

#[tokio::test]
async fn a_request_that_panicked_is_not_run_again_with_its_group() {
    let (store, _dir, held) = held_store().await;
    let panics = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let panicking = spawn_panicking(&store, "panics first", &panics);
    let after = {
        let store = store.clone();
        tokio::spawn(async move { store.set_value("s", "after", &json!(1)).await })
    };
    let_tasks_queue().await;
    held.release().await.unwrap();
    let error = panicking.await.unwrap().unwrap_err();
    assert!(error.to_string().contains("panicked"), "{error}");
    after.await.unwrap().unwrap();
    assert_eq!(panics.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(store.write_stats().isolated_reruns, 1);
    let keys = keys(&store).await;
    assert_eq!(
        keys,
        ["after"],
        "the panicked request's insert was rolled back"
    );
}

#[tokio::test]
async fn close_drains_the_queued_writes() {
    let (store, _dir, held) = held_store().await;
    let writes = spawn_numbered(&store, 10, |n| format!("k{n}"));
    let_tasks_queue().await;
    let closing = {
        let store = store.clone();
        tokio::spawn(async move { store.close().await })
    };
    let_tasks_queue().await;
    held.release().await.unwrap();
    closing.await.unwrap().unwrap();
    all_succeed(writes).await;
    assert!(matches!(
        store.set_value("s", "late", &json!(0)).await,
        Err(StoreError::Closed)
    ));
    store.open().await.unwrap();
    assert_eq!(store.values("s").await.unwrap().len(), 10);
}

#[tokio::test]
async fn a_request_that_ends_the_transaction_fails_only_the_requests_before_it() {
    let (store, _dir, held) = held_store().await;
    let set = |key: &str| spawn_set(&store, key.to_owned(), json!(key));
    let before = set("before");
    let rogue = spawn_write(&store, "rogue", |tx| tx.execute_batch("ROLLBACK"));
    let after = set("after");
    let_tasks_queue().await;
    // The holding request and `before` ran in the transaction `rogue` ended: their writes were
    // rolled back with it, and they must not be told they landed.
    let error = held.release().await.unwrap_err();
    assert!(error.to_string().contains("before COMMIT"), "{error}");
    let error = before.await.unwrap().unwrap_err();
    assert!(error.to_string().contains("before COMMIT"), "{error}");
    let error = rogue.await.unwrap().unwrap_err();
    assert_failed_in(&error, "rogue");
    // The requests after it run in a new transaction.
    after.await.unwrap().unwrap();
    let keys = keys(&store).await;
    assert_eq!(keys, ["after"]);
}
