//! [`RedisKv`] and [`RedisStore`] against a real Redis server.
//!
//! Set `BOTMESH_TEST_REDIS_URL` (e.g. `redis://127.0.0.1:6379/`); without it every test prints
//! that the suite was SKIPPED and passes, except under `CI=true`, where it fails. Each test
//! works under its own random key prefix and deletes its keys at the end (also after a panic).
//! The fault tests (`CLIENT KILL TYPE normal`, `SCRIPT FLUSH`) hit the whole server, so they
//! take the server lock exclusively and no other test of this file runs meanwhile.
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

#[macro_use]
#[allow(unused_macros, dead_code)]
mod common;
#[allow(dead_code)]
mod servers;

use std::sync::{Arc, LazyLock};

use botmesh_durability::backends::redis::redis_crate as redis;
use botmesh_durability::kv::{CasOutcome, Entry, Index, Scope};
use botmesh_durability::{
    DurabilityConfig, DurabilityEvent, DurableKv, KvDurability, NewInbound, RecordKind,
    RedisConfig, RedisKv, RedisStore,
};
use serde_json::json;
use servers::redis_server::{Rd, raw};
use tokio::sync::RwLock;

/// Shared by every test; the fault tests hold it exclusively.
static SERVER: LazyLock<RwLock<()>> = LazyLock::new(|| RwLock::new(()));

fn scope() -> Scope {
    Scope::new("t", "test", "redisbot", "c")
}

fn durability(kv: Arc<RedisKv>) -> KvDurability<RedisKv> {
    let config = DurabilityConfig {
        instance_id: Some("redis-1".into()),
        ..DurabilityConfig::default()
    };
    KvDurability::builder(kv, scope())
        .config(config)
        .build()
        .unwrap()
}

async fn new_store() -> Option<(RedisStore, Rd, String)> {
    let rd = Rd::new()?;
    let prefix = rd.prefix();
    let store = RedisStore::open_with(&rd.url, RedisConfig::new().prefix(&prefix))
        .await
        .unwrap();
    Some((store, rd, prefix))
}

macro_rules! redis_store_tests {
    ($($name:ident),*) => {
        $(
            #[tokio::test]
            async fn $name() {
                let _shared = SERVER.read().await;
                let Some((store, _rd, _)) = new_store().await else { return };
                common::$name(&store).await;
            }
        )*
    };
}

redis_store_tests!(
    chats,
    contacts,
    ledger_order_and_limit,
    checkpoints,
    handoffs,
    values,
    closed_store
);

#[tokio::test]
async fn a_second_store_sees_everything_and_the_durable_keys_are_untouched() {
    let _shared = SERVER.read().await;
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

fn inbound(i: u32) -> NewInbound {
    NewInbound::new("chat", &format!("m{i}"), json!({ "n": i }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_reconnect() {
    let Some(rd) = Rd::new() else { return };
    let _exclusive = SERVER.write().await;
    let d = durability(Arc::new(rd.kv(&rd.prefix()).await));
    for i in 0..5 {
        d.inbox().journal(inbound(i)).await.unwrap();
    }
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut raw(&rd.url).await)
        .await
        .unwrap();
    assert!(killed >= 1, "our connection was killed");
    for i in 5..10 {
        d.inbox()
            .journal(inbound(i))
            .await
            .unwrap_or_else(|e| panic!("journal m{i} after CLIENT KILL: {e}"));
    }
    for i in 0..10 {
        assert!(
            d.inbox().get(&inbound(i).id).await.unwrap().is_some(),
            "m{i} was acknowledged and must be kept"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_falls_back_to_loading_the_script() {
    let Some(rd) = Rd::new() else { return };
    let _exclusive = SERVER.write().await;
    let d = durability(Arc::new(rd.kv(&rd.prefix()).await));
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
            .journal(inbound(i))
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
    let _shared = SERVER.read().await;
    let kv = Arc::new(rd.kv(&rd.prefix()).await);
    let d = durability(Arc::clone(&kv));
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
    d.inbox()
        .journal(NewInbound::new("chat", "good", json!({})))
        .await
        .unwrap();
    let mut events = d.subscribe();
    let claims = d.inbox().claim_due(10).await.unwrap();
    assert_eq!(claims.len(), 1, "the good record is still claimed");
    let event = events.try_recv().unwrap();
    assert!(
        matches!(&event, DurabilityEvent::Dead { kind: RecordKind::Inbound, id, .. } if id == "junk"),
        "the junk entry is reported: {event:?}"
    );
    assert_eq!(d.metrics().inbound_dead, 1);
    assert!(d.inbox().claim_due(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unreachable_server_names_host_and_port_not_the_password() {
    let config = RedisConfig::new().reconnect_attempts(0);
    let error = RedisKv::open_with("redis://:hunter2@127.0.0.1:1/", config.clone())
        .await
        .unwrap_err();
    let (text, debug) = (error.to_string(), format!("{error:?}"));
    assert!(text.contains("127.0.0.1:1"), "{text}");
    assert!(
        !text.contains("hunter2") && !debug.contains("hunter2"),
        "{debug}"
    );
    let error = RedisStore::open_with("redis://:hunter2@127.0.0.1:1/", config)
        .await
        .unwrap_err();
    let text = format!("{error} {:?}", std::error::Error::source(&error));
    assert!(
        text.contains("127.0.0.1:1") && !text.contains("hunter2"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_connections_have_one_winner_per_version() {
    let Some(rd) = Rd::new() else { return };
    let _shared = SERVER.read().await;
    let prefix = rd.prefix();
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(Arc::new(rd.kv(&prefix).await));
    }
    let entry = |who: usize| Entry {
        value: format!("w{who}").into_bytes(),
        idx1: Some(format!("by/{who}")),
        idx2: None,
    };
    assert!(
        conns[0].shared_between_processes(),
        "the instance id gets a per-boot suffix"
    );
    let first = conns[0].cas(&scope(), "hot", None, entry(0)).await.unwrap();
    let CasOutcome::Ok { mut version } = first else {
        panic!("create: {first:?}")
    };
    for round in 0..25 {
        let tasks: Vec<_> = conns
            .iter()
            .enumerate()
            .map(|(who, kv)| {
                let kv = Arc::clone(kv);
                tokio::spawn(async move {
                    let out = kv.cas(&scope(), "hot", Some(version), entry(who)).await;
                    (who, out.unwrap())
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            let (who, out) = t.await.unwrap();
            if let CasOutcome::Ok { version: v } = out {
                winners.push((who, v));
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let (who, v) = winners[0];
        assert!(v > version, "versions grow");
        version = v;
        let now = conns[3].get(&scope(), "hot").await.unwrap().unwrap();
        assert_eq!(
            (now.version, now.value),
            (v, format!("w{who}").into_bytes())
        );
        let listed = conns[2]
            .range(&scope(), Index::One, "by/", "by0", 10)
            .await
            .unwrap();
        assert_eq!(listed.len(), 1, "one index entry per key: {listed:?}");
    }
}
