//! [`RedisKv`] and [`RedisStore`] against a real Redis server.
//!
//! Set `BOTMESH_TEST_REDIS_URL` (e.g. `redis://127.0.0.1:6379/`); without it every test prints
//! that the suite was SKIPPED and passes, except under `CI=true`, where it fails. Each test
//! works under its own random key prefix and deletes its keys at the end (also after a panic).
//! The fault tests (`CLIENT KILL TYPE normal`, `SCRIPT FLUSH`) hit the whole server, so they
//! have it alone (`Rd::alone`) and no other test of the binary uses it meanwhile.
//!
//! | test | what it proves |
//! | --- | --- |
//! | store behaviour (`chats` … `closed_store`, `a_second_store_sees_everything…`) | the shared `Store` tests |
//! | `killed_connections_reconnect` | after `CLIENT KILL TYPE normal` the next operations succeed, nothing acknowledged is lost |
//! | `a_script_flush_falls_back_to_loading_the_script` | `EVALSHA` answered `NOSCRIPT` loads the script again |
//! | `junk_entries_are_quarantined` | bytes that are no journal record, written with `HSET`, are quarantined and reported |
//! | `an_unreachable_server_names_host_and_port_not_the_password` | the connect error |
//! | `racing_connections_have_one_winner_per_version` | 4 connections racing `cas` on one key |
#![cfg(all(feature = "redis", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use crate::common;
use crate::servers;

use std::sync::Arc;

use crate::servers::redis_server::{Rd, raw};
use crate::servers::{durability, scope};
use botmesh_durability::backends::redis::RedisConfig;
use botmesh_durability::backends::redis::redis_crate as redis;
use botmesh_durability::inbox::NewInbound;
use botmesh_durability::kv::{Entry, Index};
use botmesh_durability::{DurableKv, RedisKv, RedisStore};
use serde_json::json;

async fn new_store() -> Option<(RedisStore, Rd, String)> {
    let rd = Rd::new()?;
    let prefix = rd.prefix();
    let store = RedisStore::open_with(&rd.url, RedisConfig::new().prefix(&prefix))
        .await
        .unwrap();
    Some((store, rd, prefix))
}

/// A store on a fresh prefix, with the server that cleans it.
async fn shared_store() -> Option<(RedisStore, Rd)> {
    let (store, rd, _) = new_store().await?;
    Some((store, rd))
}

store_behaviour_tests!(@tests shared_store();
    chats, contacts, ledger_order_and_limit, checkpoints, handoffs, values, closed_store);

#[tokio::test]
async fn a_second_store_sees_everything_and_the_durable_keys_are_untouched() {
    let Some((first, rd, prefix)) = new_store().await else {
        return;
    };
    let kv = rd.kv(&prefix).await;
    let entry = Entry {
        value: b"journal".to_vec(),
        idx1: Some("a".into()),
        idx2: None,
    };
    kv.cas(&scope(), "k", None, entry).await.unwrap();
    let second = RedisStore::open_with(&rd.url, RedisConfig::new().prefix(&prefix))
        .await
        .unwrap();
    common::restart(&first, &second).await;
    assert_eq!(
        kv.get(&scope(), "k").await.unwrap().unwrap().value,
        b"journal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_reconnect() {
    let Some(rd) = Rd::alone() else { return };
    let d = durability(Arc::new(rd.kv(&rd.prefix()).await), "redis-1");
    servers::journals_survive(&d, async {
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query_async(&mut raw(&rd.url).await)
            .await
            .unwrap();
        assert!(killed >= 1, "our connection was killed");
        true
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_falls_back_to_loading_the_script() {
    let Some(rd) = Rd::alone() else { return };
    let d = durability(Arc::new(rd.kv(&rd.prefix()).await), "redis-1");
    let mut conn = raw(&rd.url).await;
    for i in 0..6 {
        if i % 2 == 1 {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        d.inbox()
            .journal(NewInbound::new("chat", &format!("m{i}"), json!({ "n": i })))
            .await
            .unwrap_or_else(|e| panic!("journal m{i} after SCRIPT FLUSH: {e}"));
        let claims = d.inbox().claim_due(10).await.unwrap();
        assert_eq!(claims.len(), 1, "the range script runs after a flush too");
        d.inbox().complete(&claims[0].lease).await.unwrap();
    }
}

#[tokio::test]
async fn junk_entries_are_quarantined() {
    let Some(rd) = Rd::new() else { return };
    let kv = Arc::new(rd.kv(&rd.prefix()).await);
    let idx = "i/pending/0000000000000000/junk";
    let member = RedisKv::index_member(idx, "i/junk");
    let mut conn = raw(&rd.url).await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(kv.record_key(&scope(), "i/junk"))
        .arg("v")
        .arg("999999")
        .arg("d")
        .arg(&b"\xff\x00not a record"[..])
        .arg("i1")
        .arg(idx)
        .arg("m1")
        .arg(&member)
        .ignore()
        .cmd("ZADD")
        .arg(kv.index_key(&scope(), Index::One))
        .arg(0)
        .arg(&member)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    servers::junk_is_quarantined(&durability(kv, "redis-1")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_connections_have_one_winner_per_version() {
    let Some(rd) = Rd::new() else { return };
    let prefix = rd.prefix();
    let conns = servers::opened(4, || rd.kv(&prefix)).await;
    assert!(
        conns[0].shared_between_processes(),
        "the instance id gets a per-boot suffix"
    );
    servers::racing_writers_have_one_winner_per_version(conns).await;
}

#[tokio::test]
async fn an_unreachable_server_names_host_and_port_not_the_password() {
    const URL: &str = "redis://:hunter2@127.0.0.1:1/";
    let config = RedisConfig::new().reconnect_attempts(0);
    let kv = RedisKv::open_with(URL, config.clone()).await.unwrap_err();
    let store = RedisStore::open_with(URL, config).await.unwrap_err();
    servers::names_host_not_secret(&[&kv, &store], "127.0.0.1:1", "hunter2");
}
