//! The SQLite durable table beyond the conformance suite: reopening, group commit with the
//! store's other writes, batches in one transaction, and compare-and-set across two processes
//! (this test binary run again as children) racing on one key.
#![cfg(all(feature = "testing", feature = "sqlite"))]
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};

use botmesh_durability::kv::{CasOutcome, Entry, Index, KvOp, Scope};
use botmesh_durability::{DurabilityConfig, DurableKv, SqliteStore, Store};

use crate::support;

const CHILD_ENV: &str = "BOTMESH_SQLITE_CAS_CHILD";
const CHILD_MARK: &str = "BOTMESH-CAS-CHILD:";
const INCREMENTS: u64 = 150;

fn scope() -> Scope {
    Scope::custom("bot")
}

fn entry(text: &str) -> Entry {
    Entry {
        value: text.as_bytes().to_vec(),
        idx1: None,
        idx2: Some(text.to_owned()),
    }
}

async fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let (store, dir) = support::sqlite_store("bot.db").await;
    (dir, store)
}

#[tokio::test]
async fn the_table_survives_a_reopen_and_versions_are_not_reused() {
    let (_dir, store) = fresh().await;
    let kv = store.durability_kv();
    assert!(kv.shared_between_processes());
    let CasOutcome::Ok { version } = kv.cas(&scope(), "a", None, entry("1")).await.unwrap() else {
        panic!("create failed");
    };
    kv.delete(&scope(), "a", version).await.unwrap();
    store.close().await.unwrap();

    let again = SqliteStore::connect(store.path()).await.unwrap();
    let kv = again.durability_kv();
    assert_eq!(kv.get(&scope(), "a").await.unwrap(), None);
    let CasOutcome::Ok { version: v2 } = kv.cas(&scope(), "a", None, entry("2")).await.unwrap()
    else {
        panic!("re-create failed");
    };
    assert!(v2 > version, "version {v2} reused after delete + reopen");
    // The journals run on it directly.
    let d = again
        .durability(scope(), DurabilityConfig::default())
        .unwrap();
    assert!(d.kv().shared_between_processes());
    again.close().await.unwrap();
}

#[tokio::test]
async fn a_batch_is_one_transaction_with_one_outcome_per_op() {
    let (_dir, store) = fresh().await;
    let kv = store.durability_kv();
    kv.cas(&scope(), "taken", None, entry("x")).await.unwrap();
    let before = store.write_stats().transactions;
    let ops = vec![
        KvOp::Cas {
            key: "a".into(),
            expected: None,
            entry: entry("a"),
        },
        KvOp::Cas {
            key: "taken".into(),
            expected: None,
            entry: entry("y"),
        },
        KvOp::Cas {
            key: "b".into(),
            expected: None,
            entry: entry("b"),
        },
    ];
    let outcomes = kv.batch(&scope(), ops).await.unwrap();
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok());
    assert!(matches!(
        outcomes[1],
        CasOutcome::Conflict { current: Some(_) }
    ));
    assert_eq!(store.write_stats().transactions - before, 1);
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_transactions_and_all_survive() {
    let (_dir, store) = fresh().await;
    let kv = store.durability_kv();
    let before = store.write_stats();
    support::create_concurrently(&kv, &scope(), 200, entry("v")).await;
    let after = store.write_stats();
    let transactions = after.transactions - before.transactions;
    println!(
        "200 cas in {transactions} transactions (largest group {})",
        after.largest_batch
    );
    assert!(transactions < 200, "no group commit: {after:?}");
    store.close().await.unwrap();
    let again = SqliteStore::connect(store.path()).await.unwrap();
    let listed = again
        .durability_kv()
        .range(&scope(), Index::Two, "", "\u{10FFFF}", 1000)
        .await
        .unwrap();
    assert_eq!(listed.len(), 200);
    again.close().await.unwrap();
}

/// Not a test of its own: `two_processes_race_cas_on_one_key` runs this binary twice with
/// `BOTMESH_SQLITE_CAS_CHILD` set. Each child increments the counter under `race` by
/// compare-and-set, retrying on conflicts, and prints the versions it replaced.
#[tokio::test]
async fn child_races_cas() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let store = SqliteStore::connect(PathBuf::from(path)).await.unwrap();
    let kv = store.durability_kv();
    let mut won = Vec::new();
    let mut conflicts = 0u64;
    while (won.len() as u64) < INCREMENTS {
        let current = kv.get(&scope(), "race").await.unwrap().unwrap();
        let n: u64 = String::from_utf8(current.value).unwrap().parse().unwrap();
        let next = Entry {
            value: (n + 1).to_string().into_bytes(),
            idx1: None,
            idx2: None,
        };
        match kv
            .cas(&scope(), "race", Some(current.version), next)
            .await
            .unwrap()
        {
            CasOutcome::Ok { .. } => won.push(current.version),
            CasOutcome::Conflict { .. } => conflicts += 1,
        }
    }
    println!(
        "{CHILD_MARK}{}",
        serde_json::json!({ "won": won, "conflicts": conflicts })
    );
    store.close().await.unwrap();
}

fn spawn_child(path: &Path) -> std::process::Child {
    support::spawn_child("sqlite_durable::child_races_cas", CHILD_ENV, path)
}

fn report(child: std::process::Child) -> serde_json::Value {
    support::child_report(child, CHILD_MARK)
}

#[tokio::test]
async fn two_processes_race_cas_on_one_key() {
    let (_dir, store) = fresh().await;
    let kv = store.durability_kv();
    kv.cas(
        &scope(),
        "race",
        None,
        Entry {
            value: b"0".to_vec(),
            idx1: None,
            idx2: None,
        },
    )
    .await
    .unwrap();
    store.close().await.unwrap();

    let (a, b) = (spawn_child(store.path()), spawn_child(store.path()));
    let (a, b) = (report(a), report(b));
    let versions = |r: &serde_json::Value| -> Vec<u64> {
        r["won"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let mut all: Vec<u64> = versions(&a).into_iter().chain(versions(&b)).collect();
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total, "two processes won the same version");
    println!(
        "children: {} + {} increments, {} + {} conflicts",
        versions(&a).len(),
        versions(&b).len(),
        a["conflicts"],
        b["conflicts"]
    );

    let store = SqliteStore::connect(store.path()).await.unwrap();
    let last = store
        .durability_kv()
        .get(&scope(), "race")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8(last.value).unwrap(),
        (2 * INCREMENTS).to_string(),
        "no increment was lost"
    );
    store.close().await.unwrap();
}
