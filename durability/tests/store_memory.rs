//! The shared store behaviour, and restarts, on [`MemoryStore`].
#![allow(clippy::unwrap_used)]

use crate::common;

use botmesh_durability::{MemoryStore, Store};
use serde_json::json;

async fn new_store() -> (MemoryStore, ()) {
    (MemoryStore::new(), ())
}

store_behaviour_tests!(async { Some(new_store().await) });

#[tokio::test]
async fn a_clone_is_the_same_store_after_a_restart() {
    let first = MemoryStore::new();
    let second = first.clone();
    common::restart(&first, &second).await;
}

#[tokio::test]
async fn separate_stores_share_nothing() {
    let a = MemoryStore::default();
    let b = MemoryStore::new();
    a.set_value("s", "k", &json!(1)).await.unwrap();
    assert_eq!(b.get_value("s", "k").await.unwrap(), None);
}

#[tokio::test]
async fn a_new_store_is_open_and_closing_is_shared_by_clones() {
    let store = MemoryStore::new();
    store.upsert_chat(&common::chat("c", 0)).await.unwrap();
    let clone = store.clone();
    store.close().await.unwrap();
    assert!(matches!(
        clone.chat("c").await,
        Err(botmesh_durability::StoreError::Closed)
    ));
    clone.open().await.unwrap();
    assert_eq!(store.chat("c").await.unwrap(), Some(common::chat("c", 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_all_land() {
    let store = MemoryStore::new();
    let tasks: Vec<_> = (0..50)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                store.append_ledger(&common::entry("c", n)).await.unwrap();
                store
                    .set_value("s", &format!("k{n:02}"), &json!(n))
                    .await
                    .unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(store.ledger("c", 100).await.unwrap().len(), 50);
    assert_eq!(store.values("s").await.unwrap().len(), 50);
}
