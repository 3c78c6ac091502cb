//! [`RedisKv`] and [`RedisStore`] on a real Redis Cluster (feature `redis-cluster`).
//!
//! Set `BOTMESH_TEST_REDIS_CLUSTER_URL` to the seed nodes, comma-separated (e.g.
//! `redis://127.0.0.1:7001/,redis://127.0.0.1:7002/,redis://127.0.0.1:7003/`, the 3-master
//! cluster `.ci/run` starts); without it every test prints that the suite was SKIPPED and passes,
//! except under `CI=true`, where it fails. Each test works under its own random prefix and
//! deletes its keys on every node at the end.
//!
//! | test | what it proves |
//! | --- | --- |
//! | `conformance` | the whole `DurableKv` suite through the cluster connection |
//! | `script_passes_every_crash_point`, `crash_matrix`, `seeded_random_crash_points` | the crash matrix, each incarnation on a new connection |
//! | store behaviour (`chats` … `closed_store`) | the shared `Store` tests |
//! | `a_scope_lives_on_one_slot` | the record, index and counter keys of a scope share a slot |
//! | `an_unreachable_cluster_names_host_and_port_not_the_password` | the connect error |
#![cfg(all(feature = "redis-cluster", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
#[allow(unused_macros, dead_code)]
mod common;
mod crash_restart;
mod crash_script;
mod servers;

use std::sync::{Arc, Mutex};

use botmesh_durability::backends::redis::redis_crate as redis;
use botmesh_durability::kv::{Index, Scope};
use botmesh_durability::testing::conformance::run_conformance;
use botmesh_durability::{DurableKv, RedisConfig, RedisKv, RedisStore};
use crash_restart::Restartable;
use servers::{Cleanup, server_url, unique_prefix};

const VAR: &str = "BOTMESH_TEST_REDIS_CLUSTER_URL";
const EXAMPLE: &str = "redis://127.0.0.1:7001/,redis://127.0.0.1:7002/,redis://127.0.0.1:7003/";

/// Deletes the keys under `prefix` on every node (one `DEL` per key: keys of several slots).
async fn delete_prefix(nodes: &[String], prefix: &str) {
    for node in nodes {
        let client = redis::Client::open(node.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}:*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap();
            for key in keys {
                let _: () = redis::cmd("DEL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
}

/// The seed nodes and every prefix a test used; deletes their keys when dropped.
struct Cluster {
    nodes: Vec<String>,
    prefixes: Arc<Mutex<Vec<String>>>,
    _cleanup: Cleanup,
}

impl Cluster {
    fn new() -> Option<Cluster> {
        let list = server_url(VAR, "Redis Cluster", EXAMPLE)?;
        let nodes: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let prefixes: Arc<Mutex<Vec<String>>> = Arc::default();
        let (n, p) = (nodes.clone(), Arc::clone(&prefixes));
        let cleanup = Cleanup::new(Box::new(move || {
            Box::pin(async move {
                let all = std::mem::take(&mut *p.lock().unwrap());
                for prefix in all {
                    delete_prefix(&n, &prefix).await;
                }
            })
        }));
        Some(Cluster {
            nodes,
            prefixes,
            _cleanup: cleanup,
        })
    }

    fn prefix(&self) -> String {
        let p = unique_prefix().trim_end_matches('_').to_owned();
        self.prefixes.lock().unwrap().push(p.clone());
        p
    }

    fn seeds(&self) -> Vec<&str> {
        self.nodes.iter().map(String::as_str).collect()
    }

    async fn kv(&self, prefix: &str) -> RedisKv {
        RedisKv::open_cluster(&self.seeds(), RedisConfig::new().prefix(prefix))
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let Some(c) = Cluster::new() else { return };
    let c = &c;
    let report =
        run_conformance(
            move || async move { Arc::new(c.kv(&c.prefix()).await) as Arc<dyn DurableKv> },
        )
        .await;
    println!("{report}");
    report.assert_passed();
}

/// One prefix; every incarnation opens its own cluster connection.
struct ClusterBackend {
    nodes: Vec<String>,
    prefix: String,
}

impl Restartable for ClusterBackend {
    type Kv = RedisKv;

    async fn open(&self) -> Arc<RedisKv> {
        let seeds: Vec<&str> = self.nodes.iter().map(String::as_str).collect();
        let config = RedisConfig::new().prefix(&self.prefix);
        Arc::new(RedisKv::open_cluster(&seeds, config).await.unwrap())
    }

    async fn kill(&self, kv: Arc<RedisKv>) {
        drop(kv);
    }

    async fn close(&self, kv: Arc<RedisKv>) {
        drop(kv);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_passes_every_crash_point() {
    let Some(c) = Cluster::new() else { return };
    let make = async || ClusterBackend {
        nodes: c.nodes.clone(),
        prefix: c.prefix(),
    };
    crash_restart::script_passes_every_crash_point(make).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_matrix() {
    let Some(c) = Cluster::new() else { return };
    let make = async || ClusterBackend {
        nodes: c.nodes.clone(),
        prefix: c.prefix(),
    };
    println!("{}", crash_restart::crash_matrix(make).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_random_crash_points() {
    let Some(c) = Cluster::new() else { return };
    let make = async || ClusterBackend {
        nodes: c.nodes.clone(),
        prefix: c.prefix(),
    };
    println!(
        "{}",
        crash_restart::seeded_random_crash_points(make, 4).await
    );
}

macro_rules! cluster_store_tests {
    ($($name:ident),*) => {
        $(
            #[tokio::test]
            async fn $name() {
                let Some(c) = Cluster::new() else { return };
                let config = RedisConfig::new().prefix(c.prefix());
                let store = RedisStore::open_cluster(&c.seeds(), config).await.unwrap();
                common::$name(&store).await;
            }
        )*
    };
}

cluster_store_tests!(
    chats,
    contacts,
    ledger_order_and_limit,
    checkpoints,
    handoffs,
    values,
    closed_store
);

#[tokio::test]
async fn a_scope_lives_on_one_slot() {
    let Some(c) = Cluster::new() else { return };
    let kv = c.kv(&c.prefix()).await;
    let client = redis::Client::open(c.nodes[0].as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut slots = Vec::new();
    for scope in [
        Scope::new("t", "e", "bot", "c"),
        Scope::custom("we{ird}/scope"),
    ] {
        let keys = [
            kv.record_key(&scope, "i/a"),
            kv.record_key(&scope, "o/{tricky}"),
            kv.index_key(&scope, Index::One),
            kv.index_key(&scope, Index::Two),
            format!("{}:v", kv.scope_tag(&scope)),
        ];
        let mut these = Vec::new();
        for key in keys {
            let slot: i64 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            these.push(slot);
        }
        assert!(these.windows(2).all(|w| w[0] == w[1]), "{scope}: {these:?}");
        slots.push(these[0]);
    }
    assert_ne!(slots[0], slots[1], "two scopes get their own tags");
}

#[tokio::test]
async fn an_unreachable_cluster_names_host_and_port_not_the_password() {
    let config = RedisConfig::new().reconnect_attempts(0);
    let error = RedisKv::open_cluster(&["redis://:hunter2@127.0.0.1:1/"], config)
        .await
        .unwrap_err();
    let (text, debug) = (error.to_string(), format!("{error:?}"));
    assert!(text.contains("127.0.0.1:1"), "{text}");
    assert!(
        !text.contains("hunter2") && !debug.contains("hunter2"),
        "{debug}"
    );
}
