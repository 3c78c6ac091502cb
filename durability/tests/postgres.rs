//! [`PostgresKv`] and [`PostgresStore`] against a real PostgreSQL server.
//!
//! Set `BOTMESH_TEST_POSTGRES_URL` (e.g. `postgres://postgres@127.0.0.1:5432/test`); without
//! it every test prints that the suite was SKIPPED and passes, except under `CI=true`, where
//! it fails. Each test works under its own random table prefix and drops its tables at the end
//! (also after a panic). The restart test runs `pg_ctlcluster --skip-systemctl-redirect <newest
//! version> main restart` (override with `BOTMESH_TEST_POSTGRES_RESTART`, a shell command; it
//! prints SKIPPED when the command fails); it takes the server lock exclusively so no other
//! test of this file runs meanwhile.
//!
//! | test | what it proves |
//! | --- | --- |
//! | store behaviour (`chats`, `inbound_rows` … `closed_store`, `a_second_store_sees_everything`) | the shared `Store` tests |
//! | `a_server_restart_loses_nothing_acknowledged` | dropped connections are reported with `tracing::error!`, the operations right after the restart succeed, nothing acknowledged is lost |
//! | `junk_rows_are_quarantined` | bytes that are no journal record, inserted with SQL, are quarantined and reported |
//! | `an_unreachable_server_names_host_and_port_not_the_password` | the connect error |
//! | `a_lazy_backend_fails_open_naming_host_and_port_not_the_password` | `new` does no I/O; `open()` (the bot's `start()`) fails naming host and port, not the password; a malformed string fails at once (no server needed: always runs) |
//! | `a_flow_step_commits_checkpoint_journal_and_values_together` | `commit_step`: checkpoint, journal rows (creates, update, delete) and value removals in one transaction, journal rows as `PostgresKv` reads them |
//! | `an_inbound_whose_ledger_row_fails_leaves_no_chat_and_no_contact` | `record_inbound`: chat, contact and ledger row in one transaction |
//! | `a_conflict_on_the_last_op_writes_nothing` | a conflict on the last journal op rolls back the checkpoint, the earlier journal ops and the value removals; the retry commits |
//! | `transactions_are_shared_only_with_a_postgres_kv_on_the_same_database` | `shares_transactions_with`: same pool, same connection string, same server identity, wrappers → `true`; `MemoryKv`, another table, another database → `false` |
//! | `an_injected_pool_stays_open` | `close()` never closes a pool it was given, and closes its own |
//! | `racing_pools_have_one_winner_per_version` | 4 pools racing `cas` on one key |
#![cfg(all(feature = "postgres", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
#[allow(unused_macros, dead_code)]
mod common;
#[allow(dead_code)]
mod servers;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Once};

use botmesh_durability::backends::postgres::tokio_postgres::{self, NoTls};
use botmesh_durability::kv::{CasOutcome, Entry, Index, KvOp, MemoryKv, Scope};
use botmesh_durability::store::{CheckpointWrite, StepCommit, StepCommitOutcome};
use botmesh_durability::testing::crash::crashable;
use botmesh_durability::{
    DurabilityConfig, DurabilityEvent, DurableKv, KvDurability, NewInbound, PostgresConfig,
    PostgresKv, PostgresStore, RecordKind, Store,
};
use serde_json::json;
use servers::postgres::{Pg, raw_client};
use tokio::sync::RwLock;

/// Shared by every test; the restart test holds it exclusively.
static SERVER: LazyLock<RwLock<()>> = LazyLock::new(|| RwLock::new(()));

fn scope() -> Scope {
    Scope::new("t", "test", "pgbot", "c")
}

fn durability(kv: Arc<PostgresKv>) -> KvDurability<PostgresKv> {
    let config = DurabilityConfig {
        instance_id: Some("pg-1".into()),
        ..DurabilityConfig::default()
    };
    KvDurability::builder(kv, scope())
        .config(config)
        .build()
        .unwrap()
}

async fn new_store() -> Option<(PostgresStore, Pg)> {
    let pg = Pg::new()?;
    let config = PostgresConfig::new().table_prefix(pg.prefix());
    let store = PostgresStore::connect_with(&pg.url, config).await.unwrap();
    Some((store, pg))
}

macro_rules! postgres_store_tests {
    ($($name:ident),*) => {
        $(
            #[tokio::test]
            async fn $name() {
                let _shared = SERVER.read().await;
                let Some((store, _pg)) = new_store().await else { return };
                common::$name(&store).await;
            }
        )*
    };
}

postgres_store_tests!(
    chats,
    inbound_rows,
    contacts,
    ledger_order_and_limit,
    checkpoints,
    handoffs,
    values,
    closed_store
);

#[tokio::test]
async fn a_second_store_sees_everything_and_the_durable_table_is_untouched() {
    let _shared = SERVER.read().await;
    let Some((first, pg)) = new_store().await else {
        return;
    };
    let kv = pg.kv(first.table_prefix()).await;
    let entry = Entry {
        value: b"journal".to_vec(),
        idx1: None,
        idx2: None,
    };
    kv.cas(&scope(), "k", None, entry).await.unwrap();
    let config = PostgresConfig::new().table_prefix(first.table_prefix());
    let second = PostgresStore::connect_with(&pg.url, config).await.unwrap();
    common::restart(&first, &second).await;
    assert_eq!(
        kv.get(&scope(), "k").await.unwrap().unwrap().value,
        b"journal"
    );
}

/// Counts the `ERROR` events of this crate, process-wide (installed once, by the restart test).
fn error_events() -> &'static AtomicUsize {
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata};
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    static INSTALL: Once = Once::new();
    struct Counter;
    impl tracing::Subscriber for Counter {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            *m.level() == Level::ERROR
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            if e.metadata().target().starts_with("botmesh_durability") {
                COUNT.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
    INSTALL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(Counter);
    });
    &COUNT
}

/// Runs the restart command; `false` when this machine cannot restart the server.
async fn restart_server() -> bool {
    let command = std::env::var("BOTMESH_TEST_POSTGRES_RESTART").unwrap_or_else(|_| {
        // The newest installed cluster version, as `.ci/run` picks it (15 on this machine).
        "pg_ctlcluster --skip-systemctl-redirect \"$(ls /etc/postgresql | sort -V | tail -n 1)\" \
             main restart"
            .into()
    });
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .status()
    })
    .await
    .unwrap();
    match status {
        Ok(s) if s.success() => true,
        other => {
            eprintln!(
                "the PostgreSQL restart test was SKIPPED: the restart command failed: {other:?}"
            );
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_loses_nothing_acknowledged() {
    let Some(pg) = Pg::new() else { return };
    let _exclusive = SERVER.write().await;
    let errors = error_events();
    let kv = Arc::new(pg.kv(&pg.prefix()).await);
    let d = durability(Arc::clone(&kv));
    let inbound = |i: u32| NewInbound::new("chat", &format!("m{i}"), json!({ "n": i }));
    for i in 0..5 {
        d.inbox().journal(inbound(i)).await.unwrap();
    }
    let before = errors.load(Ordering::SeqCst);
    if !restart_server().await {
        return;
    }
    assert!(
        errors.load(Ordering::SeqCst) > before,
        "the connections the server dropped are reported with tracing::error!"
    );
    // The very next operations succeed: the dead connections are replaced.
    for i in 5..10 {
        d.inbox()
            .journal(inbound(i))
            .await
            .unwrap_or_else(|e| panic!("journal m{i} after the restart: {e}"));
    }
    for i in 0..10 {
        let id = inbound(i).id;
        assert!(
            d.inbox().get(&id).await.unwrap().is_some(),
            "m{i} was acknowledged and must survive the restart"
        );
    }
}

#[tokio::test]
async fn junk_rows_are_quarantined() {
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let kv = Arc::new(pg.kv(&pg.prefix()).await);
    let d = durability(Arc::clone(&kv));
    let sql = format!(
        "INSERT INTO {t} (scope, key, version, value, idx1, idx2) VALUES \
         ($1, 'i/junk', nextval('{t}_version'), '\\xff00beef'::bytea, \
          'i/pending/0000000000000000/junk', NULL)",
        t = kv.table()
    );
    raw_client(&pg.url)
        .await
        .execute(&sql, &[&scope().id()])
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
        "the junk row is reported: {event:?}"
    );
    assert_eq!(d.metrics().inbound_dead, 1);
    assert!(d.inbox().claim_due(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unreachable_server_names_host_and_port_not_the_password() {
    let error = PostgresKv::connect("postgres://postgres:hunter2@127.0.0.1:1/test")
        .await
        .unwrap_err();
    let (text, debug) = (error.to_string(), format!("{error:?}"));
    assert!(text.contains("127.0.0.1:1"), "{text}");
    assert!(
        !text.contains("hunter2") && !debug.contains("hunter2"),
        "{debug}"
    );
    let error = PostgresStore::connect("postgres://postgres:hunter2@127.0.0.1:1/test")
        .await
        .unwrap_err();
    let text = format!("{error} {:?}", std::error::Error::source(&error));
    assert!(
        text.contains("127.0.0.1:1") && !text.contains("hunter2"),
        "{text}"
    );
}

#[tokio::test]
async fn an_injected_pool_stays_open() {
    use botmesh_durability::backends::postgres::deadpool_postgres::{Manager, Pool};
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let config: tokio_postgres::Config = pg.url.parse().unwrap();
    let pool = Pool::builder(Manager::new(config, NoTls))
        .max_size(2)
        .build()
        .unwrap();
    let prefix = pg.prefix();
    let kv = PostgresKv::with_pool(pool.clone(), PostgresConfig::new().table_prefix(&prefix))
        .await
        .unwrap();
    assert!(
        kv.shared_between_processes(),
        "the instance id gets a per-boot suffix"
    );
    let entry = Entry {
        value: b"v".to_vec(),
        idx1: None,
        idx2: None,
    };
    kv.cas(&scope(), "k", None, entry).await.unwrap();
    kv.close_pool();
    assert!(!pool.is_closed(), "an injected pool is the user's");
    assert!(kv.get(&scope(), "k").await.unwrap().is_some());
    let own = pg.kv(&prefix).await;
    own.close_pool();
    assert!(
        own.pool().is_closed(),
        "a pool made from a connection string is ours to close"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_pools_have_one_winner_per_version() {
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let prefix = pg.prefix();
    let mut pools = Vec::new();
    for _ in 0..4 {
        pools.push(Arc::new(pg.kv(&prefix).await));
    }
    let entry = |who: usize| Entry {
        value: format!("w{who}").into_bytes(),
        idx1: Some(format!("by/{who}")),
        idx2: None,
    };
    let first = pools[0].cas(&scope(), "hot", None, entry(0)).await.unwrap();
    let CasOutcome::Ok { mut version } = first else {
        panic!("create: {first:?}")
    };
    for round in 0..25 {
        let tasks: Vec<_> = pools
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
        let now = pools[3].get(&scope(), "hot").await.unwrap().unwrap();
        assert_eq!(
            (now.version, now.value),
            (v, format!("w{who}").into_bytes())
        );
    }
}

#[tokio::test]
async fn a_lazy_backend_fails_open_naming_host_and_port_not_the_password() {
    const URL: &str = "postgres://postgres:s3cret@127.0.0.1:1/test";
    let check = |what: &str, text: String, debug: String| {
        println!("{what}: {text}");
        assert!(text.contains("127.0.0.1:1"), "{what}: {text}");
        assert!(
            !text.contains("s3cret") && !debug.contains("s3cret"),
            "{what}: {debug}"
        );
    };

    // The store: `new` does no I/O, `open()` (the bot's start) connects.
    let store = PostgresStore::new(URL).unwrap();
    assert!(
        !format!("{store:?}").contains("s3cret"),
        "the Debug of the store hides the password"
    );
    assert!(
        matches!(
            store.chat("c").await,
            Err(botmesh_durability::StoreError::Closed)
        ),
        "a store built with `new` is closed until `open()`"
    );
    let error = store.open().await.unwrap_err();
    check("store open", error.to_string(), format!("{error:?}"));

    // The journals' backend: `new` does no I/O, `DurableKv::open` connects.
    let kv: Arc<dyn DurableKv> = Arc::new(PostgresKv::new(URL).unwrap());
    let error = kv.open().await.unwrap_err();
    check("kv open", error.to_string(), format!("{error:?}"));
    // Without `open`, the first call connects and fails the same way.
    let error = kv.get(&scope(), "k").await.unwrap_err();
    check("kv get", error.to_string(), format!("{error:?}"));

    // A malformed string fails at once, naming what is wrong but not the password.
    let bad = "postgres://postgres:s3cret@127.0.0.1:notaport/test";
    let error = PostgresStore::new(bad).unwrap_err();
    let (text, debug) = (error.to_string(), format!("{error:?}"));
    assert!(
        text.contains("port") && !text.contains("s3cret") && !debug.contains("s3cret"),
        "{debug}"
    );
    let error = PostgresKv::new(bad).unwrap_err();
    let (text, debug) = (error.to_string(), format!("{error:?}"));
    assert!(
        text.contains("port") && !text.contains("s3cret") && !debug.contains("s3cret"),
        "{debug}"
    );
}

/// A journal entry whose value is `text`.
fn journal_entry(text: &str) -> Entry {
    Entry {
        value: text.as_bytes().to_vec(),
        idx1: Some(format!("due/{text}")),
        idx2: None,
    }
}

/// A store and a kv on one prefix of the test database (both from the connection string).
async fn store_and_kv(pg: &Pg) -> (PostgresStore, PostgresKv) {
    let prefix = pg.prefix();
    let config = PostgresConfig::new().table_prefix(&prefix);
    let store = PostgresStore::connect_with(&pg.url, config).await.unwrap();
    let kv = pg.kv(&prefix).await;
    (store, kv)
}

#[tokio::test]
async fn a_flow_step_commits_checkpoint_journal_and_values_together() {
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let (store, kv) = store_and_kv(&pg).await;
    assert!(store.shares_transactions_with(&kv));
    let s = scope();
    let CasOutcome::Ok { version: inbound_v } = kv
        .cas(&s, "i/1", None, journal_entry("open"))
        .await
        .unwrap()
    else {
        panic!("create i/1")
    };
    let CasOutcome::Ok { version: old_v } = kv
        .cas(&s, "o/old", None, journal_entry("old"))
        .await
        .unwrap()
    else {
        panic!("create o/old")
    };
    store
        .save_checkpoint(&common::checkpoint("chat", 1))
        .await
        .unwrap();
    store.set_value("effects", "e1", &json!(1)).await.unwrap();
    store.set_value("effects", "e2", &json!(2)).await.unwrap();

    let step = StepCommit {
        checkpoint: CheckpointWrite::Save(common::checkpoint("chat", 2)),
        scope: s.clone(),
        journal: vec![
            KvOp::Cas {
                key: "o/1".into(),
                expected: None,
                entry: journal_entry("send 1"),
            },
            KvOp::Cas {
                key: "o/2".into(),
                expected: None,
                entry: journal_entry("send 2"),
            },
            KvOp::Delete {
                key: "o/old".into(),
                expected: old_v,
            },
            KvOp::Cas {
                key: "i/1".into(),
                expected: Some(inbound_v),
                entry: journal_entry("done"),
            },
        ],
        delete_values: vec![("effects".into(), "e1".into())],
        ledger: vec![botmesh_durability::LedgerEntry {
            chat: "chat".into(),
            message_id: Some("m-9".into()),
            direction: botmesh_durability::Direction::Outbound,
            status: botmesh_durability::LedgerStatus::Sent,
            text: Some("send 1".into()),
            content: json!({"text": "send 1"}),
            key: Some("o/1".into()),
            error: None,
            at_ms: 3,
        }],
        chat: Some(inbound_chat()),
        contact: Some(inbound_contact()),
    };
    // The chat exists with a title and a language: the step's upsert keeps them.
    store
        .upsert_chat(&botmesh_durability::ChatRecord {
            title: Some("Shop".into()),
            lang: Some("de".into()),
            first_seen_ms: 1,
            ..inbound_chat()
        })
        .await
        .unwrap();
    let StepCommitOutcome::Committed(outcomes) = store.commit_step(&step).await.unwrap() else {
        panic!("the step conflicts")
    };
    let ledger = store.ledger("chat", 10).await.unwrap();
    assert_eq!(ledger.len(), 1, "the ledger row landed with the step");
    assert_eq!(ledger[0].message_id.as_deref(), Some("m-9"));
    let chat = store.chat("chat").await.unwrap().unwrap();
    assert_eq!(
        (
            chat.title.as_deref(),
            chat.lang.as_deref(),
            chat.first_seen_ms
        ),
        (Some("Shop"), Some("de"), 1),
        "an existing chat keeps its title, language and first sighting"
    );
    assert_eq!(chat.last_activity_ms, 3, "and gets the step's activity");
    assert_eq!(
        store.contact("alice").await.unwrap(),
        Some(inbound_contact())
    );
    assert_eq!(outcomes.len(), 4);
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    assert_eq!(
        outcomes[2],
        CasOutcome::Ok { version: old_v },
        "a delete answers the removed version"
    );

    // The checkpoint, the journal rows (as the kv reads them) and the values, together.
    assert_eq!(
        store.checkpoint("chat").await.unwrap(),
        Some(common::checkpoint("chat", 2))
    );
    for (i, (key, text)) in [("o/1", "send 1"), ("o/2", "send 2")]
        .into_iter()
        .enumerate()
    {
        let row = kv.get(&s, key).await.unwrap().unwrap();
        assert_eq!(row.value, text.as_bytes());
        assert_eq!(row.idx1.as_deref(), Some(format!("due/{text}").as_str()));
        assert_eq!(
            outcomes[i],
            CasOutcome::Ok {
                version: row.version
            }
        );
    }
    assert_eq!(kv.get(&s, "o/old").await.unwrap(), None);
    let inbound = kv.get(&s, "i/1").await.unwrap().unwrap();
    assert_eq!(inbound.value, b"done");
    assert!(
        inbound.version > inbound_v,
        "versions come from the kv's sequence"
    );
    assert_eq!(
        outcomes[3],
        CasOutcome::Ok {
            version: inbound.version
        }
    );
    assert_eq!(store.get_value("effects", "e1").await.unwrap(), None);
    assert_eq!(
        store.get_value("effects", "e2").await.unwrap(),
        Some(json!(2))
    );
    // The rows are in range order too (the indexes were written with them).
    let due = kv.range(&s, Index::One, "due/", "due0", 10).await.unwrap();
    let keys: Vec<_> = due.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["i/1", "o/1", "o/2"]);

    // Removing the checkpoint in a step.
    let end = StepCommit::new(
        s.clone(),
        CheckpointWrite::Delete {
            chat: "chat".into(),
        },
    );
    assert_eq!(
        store.commit_step(&end).await.unwrap(),
        StepCommitOutcome::Committed(Vec::new())
    );
    assert_eq!(store.checkpoint("chat").await.unwrap(), None);
}

#[tokio::test]
async fn a_conflict_on_the_last_op_writes_nothing() {
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let (store, kv) = store_and_kv(&pg).await;
    let s = scope();
    let CasOutcome::Ok { version: inbound_v } = kv
        .cas(&s, "i/1", None, journal_entry("open"))
        .await
        .unwrap()
    else {
        panic!("create i/1")
    };
    let old = common::checkpoint("chat", 1);
    store.save_checkpoint(&old).await.unwrap();
    store.set_value("effects", "e1", &json!(1)).await.unwrap();

    let step = |inbound_expected: u64, checkpoint: CheckpointWrite| StepCommit {
        checkpoint,
        scope: s.clone(),
        journal: vec![
            KvOp::Cas {
                key: "o/1".into(),
                expected: None,
                entry: journal_entry("send 1"),
            },
            KvOp::Cas {
                key: "o/2".into(),
                expected: None,
                entry: journal_entry("send 2"),
            },
            KvOp::Cas {
                key: "i/1".into(),
                expected: Some(inbound_expected),
                entry: journal_entry("done"),
            },
        ],
        delete_values: vec![("effects".into(), "e1".into())],
        ledger: vec![botmesh_durability::LedgerEntry {
            chat: "chat".into(),
            message_id: None,
            direction: botmesh_durability::Direction::Outbound,
            status: botmesh_durability::LedgerStatus::Sent,
            text: None,
            content: json!({}),
            key: None,
            error: None,
            at_ms: 3,
        }],
        chat: Some(inbound_chat()),
        contact: Some(inbound_contact()),
    };
    let nothing_written = async || {
        assert_eq!(store.checkpoint("chat").await.unwrap(), Some(old.clone()));
        assert_eq!(store.chat("chat").await.unwrap(), None, "no chat row");
        assert_eq!(
            store.contact("alice").await.unwrap(),
            None,
            "no contact row"
        );
        assert!(
            store.ledger("chat", 10).await.unwrap().is_empty(),
            "no ledger row"
        );
        assert_eq!(kv.get(&s, "o/1").await.unwrap(), None);
        assert_eq!(kv.get(&s, "o/2").await.unwrap(), None);
        let inbound = kv.get(&s, "i/1").await.unwrap().unwrap();
        assert_eq!(
            (inbound.version, inbound.value),
            (inbound_v, b"open".to_vec())
        );
        assert_eq!(
            store.get_value("effects", "e1").await.unwrap(),
            Some(json!(1))
        );
    };

    // A save and a delete of the checkpoint: both rolled back with the journal ops.
    let stale = inbound_v + 1_000;
    for checkpoint in [
        CheckpointWrite::Save(common::checkpoint("chat", 2)),
        CheckpointWrite::Delete {
            chat: "chat".into(),
        },
    ] {
        let outcome = store.commit_step(&step(stale, checkpoint)).await.unwrap();
        assert_eq!(
            outcome,
            StepCommitOutcome::Conflict {
                op: 2,
                current: Some(inbound_v)
            }
        );
        nothing_written().await;
    }

    // The retry at the right version commits everything (the connection survived the rollback).
    let retry = step(
        inbound_v,
        CheckpointWrite::Save(common::checkpoint("chat", 2)),
    );
    let outcome = store.commit_step(&retry).await.unwrap();
    assert!(
        matches!(&outcome, StepCommitOutcome::Committed(o) if o.len() == 3),
        "{outcome:?}"
    );
    assert_eq!(
        store.checkpoint("chat").await.unwrap(),
        Some(common::checkpoint("chat", 2))
    );
    assert!(kv.get(&s, "o/1").await.unwrap().is_some());
    assert_eq!(store.get_value("effects", "e1").await.unwrap(), None);
}

/// `pg.url` as a key/value connection string naming `dbname` instead.
fn key_value_url(url: &str, dbname: &str) -> String {
    use tokio_postgres::config::Host;
    let config: tokio_postgres::Config = url.parse().unwrap();
    let mut parts = Vec::new();
    for host in config.get_hosts() {
        match host {
            Host::Tcp(name) => parts.push(format!("host={name}")),
            Host::Unix(path) => parts.push(format!("host={}", path.display())),
        }
    }
    for port in config.get_ports() {
        parts.push(format!("port={port}"));
    }
    if let Some(user) = config.get_user() {
        parts.push(format!("user={user}"));
    }
    if let Some(password) = config.get_password() {
        parts.push(format!("password='{}'", String::from_utf8_lossy(password)));
    }
    parts.push(format!("dbname={dbname}"));
    parts.join(" ")
}

#[tokio::test]
async fn transactions_are_shared_only_with_a_postgres_kv_on_the_same_database() {
    use botmesh_durability::backends::postgres::deadpool_postgres::{Manager, Pool};
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let (store, kv) = store_and_kv(&pg).await;
    let prefix = store.table_prefix().to_owned();
    let config = || PostgresConfig::new().table_prefix(&prefix);

    // The same database, from the same connection string: through any wrapper.
    assert!(store.shares_transactions_with(&kv));
    let shared: Arc<dyn DurableKv> = Arc::new(kv.clone());
    assert!(store.shares_transactions_with(&shared));
    assert!(store.shares_transactions_with(&crashable(Arc::new(kv.clone()))));
    // The store's own journals backend: the same pool.
    assert!(store.shares_transactions_with(&store.durability_kv()));
    // Not opened yet: decided from the connection strings (also written as key/value).
    let lazy = PostgresKv::new_with(&pg.url, config()).unwrap();
    assert!(store.shares_transactions_with(&lazy));
    let dbname = pg.url.parse::<tokio_postgres::Config>().unwrap();
    let dbname = dbname.get_dbname().unwrap_or("postgres").to_owned();
    let same = PostgresKv::new_with(&key_value_url(&pg.url, &dbname), config()).unwrap();
    assert!(store.shares_transactions_with(&same));
    let other_db = PostgresKv::new_with(&key_value_url(&pg.url, "botmesh_other_db"), config());
    assert!(!store.shares_transactions_with(&other_db.unwrap()));
    // An injected pool of its own on the same database: the server's identity, once opened.
    let pg_config: tokio_postgres::Config = pg.url.parse().unwrap();
    let pool = Pool::builder(Manager::new(pg_config, NoTls))
        .max_size(2)
        .build()
        .unwrap();
    let injected = PostgresKv::with_pool(pool, config()).await.unwrap();
    assert!(store.shares_transactions_with(&injected));

    // Another backend, or another table on the same database.
    assert!(!store.shares_transactions_with(&MemoryKv::new()));
    let other_prefix = pg.prefix();
    let elsewhere = pg.kv(&other_prefix).await;
    assert!(!store.shares_transactions_with(&elsewhere));
    // ... unless the store is told to commit steps into that table.
    let bound = store.clone().with_journals(&elsewhere);
    assert_eq!(bound.journal_table(), elsewhere.table());
    assert!(bound.shares_transactions_with(&elsewhere));
    assert!(!bound.shares_transactions_with(&kv));
    let step = StepCommit {
        journal: vec![KvOp::Cas {
            key: "o/1".into(),
            expected: None,
            entry: journal_entry("send"),
        }],
        ..StepCommit::new(scope(), CheckpointWrite::Keep)
    };
    assert!(matches!(
        bound.commit_step(&step).await.unwrap(),
        StepCommitOutcome::Committed(_)
    ));
    assert!(elsewhere.get(&scope(), "o/1").await.unwrap().is_some());
    assert_eq!(kv.get(&scope(), "o/1").await.unwrap(), None);
}

/// The chat of an inbound message journaled with its step.
fn inbound_chat() -> botmesh_durability::ChatRecord {
    botmesh_durability::ChatRecord {
        id: "chat".into(),
        is_group: false,
        title: None,
        lang: None,
        first_seen_ms: 3,
        last_activity_ms: 3,
    }
}

/// Its sender.
fn inbound_contact() -> botmesh_durability::ContactRecord {
    botmesh_durability::ContactRecord {
        id: "alice".into(),
        name: Some("Alice".into()),
        last_seen_ms: 3,
    }
}

/// `record_inbound` is one transaction: when its ledger row is refused, neither the chat nor
/// the contact written before it in the same call stays (the trait's default, three separate
/// writes, would leave both).
#[tokio::test]
async fn an_inbound_whose_ledger_row_fails_leaves_no_chat_and_no_contact() {
    let _shared = SERVER.read().await;
    let Some(pg) = Pg::new() else { return };
    let prefix = pg.prefix();
    let store = PostgresStore::connect_with(&pg.url, PostgresConfig::new().table_prefix(&prefix))
        .await
        .unwrap();
    raw_client(&pg.url)
        .await
        .batch_execute(&format!(
            "ALTER TABLE {prefix}ledger ADD CONSTRAINT refuse_boom CHECK (text <> 'boom')"
        ))
        .await
        .unwrap();
    let mut refused = common::entry("chat", 0);
    refused.text = Some("boom".into());
    let error = store
        .record_inbound(&inbound_chat(), &inbound_contact(), &refused)
        .await
        .unwrap_err();
    let message = format!("{error}: {:?}", std::error::Error::source(&error));
    assert!(message.contains("record_inbound"), "{message}");
    assert!(message.contains(&format!("{prefix}ledger")), "{message}");
    assert_eq!(store.chat("chat").await.unwrap(), None);
    assert_eq!(store.contact("alice").await.unwrap(), None);
    assert!(store.ledger("chat", 10).await.unwrap().is_empty());

    store
        .record_inbound(
            &inbound_chat(),
            &inbound_contact(),
            &common::entry("chat", 0),
        )
        .await
        .unwrap();
    assert_eq!(store.chat("chat").await.unwrap(), Some(inbound_chat()));
    assert_eq!(
        store.contact("alice").await.unwrap(),
        Some(inbound_contact())
    );
    assert_eq!(store.ledger("chat", 10).await.unwrap().len(), 1);
}
