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
//! | store behaviour (`chats` … `closed_store`) | the shared `Store` tests |
//! | `a_scope_lives_on_one_slot` | the record, index and counter keys of a scope share a slot |
//! | `an_unreachable_cluster_names_host_and_port_not_the_password` | the connect error |
#![cfg(all(feature = "redis-cluster", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use crate::servers::redis_server::Rd;
use botmesh_durability::backends::redis::RedisConfig;
use botmesh_durability::backends::redis::redis_crate as redis;
use botmesh_durability::kv::{Index, Scope};
use botmesh_durability::{RedisKv, RedisStore};

/// A store on a fresh prefix of the cluster.
async fn new_store() -> Option<(RedisStore, Rd)> {
    let c = Rd::cluster()?;
    let config = RedisConfig::new().prefix(c.prefix());
    Some((
        RedisStore::open_cluster(&c.seeds(), config).await.unwrap(),
        c,
    ))
}

store_behaviour_tests!(@tests new_store();
    chats, contacts, ledger_order_and_limit, checkpoints, handoffs, values, closed_store);

#[tokio::test]
async fn a_scope_lives_on_one_slot() {
    let Some(c) = Rd::cluster() else { return };
    let kv = c.cluster_kv(&c.prefix()).await;
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
