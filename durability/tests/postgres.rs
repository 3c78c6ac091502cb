//! [`PostgresKv`] and [`PostgresStore`] against a real PostgreSQL server.
//!
//! Set `BOTMESH_TEST_POSTGRES_URL` (e.g. `postgres://postgres@127.0.0.1:5432/test`); without
//! it every test prints that the suite was SKIPPED and passes, except under `CI=true`, where
//! it fails. Each test works under its own random table prefix and drops its tables at the end
//! (also after a panic). The restart test runs `pg_ctlcluster --skip-systemctl-redirect <newest
//! version> main restart` (override with `BOTMESH_TEST_POSTGRES_RESTART`, a shell command; it
//! prints SKIPPED when the command fails); it has the server alone (`Pg::alone`), so no other
//! test of the binary uses it meanwhile.
//!
//! | test | what it proves |
//! | --- | --- |
//! | store behaviour (`chats`, `inbound_rows` … `closed_store`, `a_second_store_sees_everything`) | the shared `Store` tests |
//! | `a_server_restart_loses_nothing_acknowledged` | dropped connections are reported with `tracing::error!`, the operations right after the restart succeed, nothing acknowledged is lost |
//! | `junk_rows_are_quarantined` | bytes that are no journal record, inserted with SQL, are quarantined and reported |
//! | `an_unreachable_server_names_host_and_port_not_the_password` | the connect error |
//! | `a_lazy_backend_fails_open_naming_host_and_port_not_the_password` | `new` does no I/O; `open()` (the bot's `start()`) fails naming host and port, not the password; a malformed string fails at once (no server needed: always runs) |
//! | `an_inbound_whose_ledger_row_fails_leaves_no_chat_and_no_contact` | `record_inbound`: chat, contact and ledger row in one transaction |
//! | `an_inbound_within_the_activity_resolution_does_not_touch_its_rows` | an inbound message within `ACTIVITY_RESOLUTION_MS` of the stored time leaves the chat and contact rows unlocked (`xmax` 0); a later one or a new name rewrites them |
//! | `transactions_are_shared_only_with_a_postgres_kv_on_the_same_database` | `shares_transactions_with`: same pool, same connection string, same server identity, wrappers → `true`; `MemoryKv`, another table, another database → `false` |
//! | `an_injected_pool_stays_open` | `close()` never closes a pool it was given, and closes its own |
//! | `racing_pools_have_one_winner_per_version` | 4 pools racing `cas` on one key |
//! | `group_writers_run_on_the_runtime_that_opened_the_store` | a first write from a helper runtime that is not driven afterwards leaves no later write waiting for it; after `close()` and `open()` writes are answered again |
//! | `concurrent_steps_are_answered_as_if_each_ran_alone` | group commit: 40 concurrent steps, one conflicting and one with a refused ledger row; those two get their conflict and their error and write nothing, the others commit |
#![cfg(all(feature = "postgres", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use crate::common;
use crate::servers;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use crate::servers::postgres::{Pg, raw_client};
use crate::servers::{durability, scope};
use botmesh_durability::backends::postgres::PostgresConfig;
use botmesh_durability::backends::postgres::tokio_postgres::{self, NoTls};
use botmesh_durability::kv::{Entry, KvOp, MemoryKv};
use botmesh_durability::store::{CheckpointWrite, StepCommit, StepCommitOutcome};
use botmesh_durability::testing::crash::crashable;
use botmesh_durability::{DurableKv, PostgresKv, PostgresStore, Store};

async fn new_store() -> Option<(PostgresStore, Pg)> {
    let pg = Pg::new()?;
    let config = PostgresConfig::new().table_prefix(pg.prefix());
    let store = PostgresStore::connect_with(&pg.url, config).await.unwrap();
    Some((store, pg))
}

store_behaviour_tests!(new_store());

#[tokio::test]
async fn a_second_store_sees_everything_and_the_durable_table_is_untouched() {
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
    let Some(pg) = Pg::alone() else { return };
    let errors = error_events();
    let d = durability(Arc::new(pg.kv(&pg.prefix()).await), "pg-1");
    let before = errors.load(Ordering::SeqCst);
    servers::journals_survive(&d, async {
        if !restart_server().await {
            return false;
        }
        assert!(
            errors.load(Ordering::SeqCst) > before,
            "the connections the server dropped are reported with tracing::error!"
        );
        true
    })
    .await;
}

#[tokio::test]
async fn junk_rows_are_quarantined() {
    let Some(pg) = Pg::new() else { return };
    let kv = Arc::new(pg.kv(&pg.prefix()).await);
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
    servers::junk_is_quarantined(&durability(kv, "pg-1")).await;
}

#[tokio::test]
async fn an_unreachable_server_names_host_and_port_not_the_password() {
    const URL: &str = "postgres://postgres:hunter2@127.0.0.1:1/test";
    let kv = PostgresKv::connect(URL).await.unwrap_err();
    let store = PostgresStore::connect(URL).await.unwrap_err();
    servers::names_host_not_secret(&[&kv, &store], "127.0.0.1:1", "hunter2");
}

#[tokio::test]
async fn an_injected_pool_stays_open() {
    use botmesh_durability::backends::postgres::deadpool_postgres::{Manager, Pool};
    let Some(pg) = Pg::new() else { return };
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
    let prefix = pg.prefix();
    let pools = servers::opened(4, || pg.kv(&prefix)).await;
    servers::racing_writers_have_one_winner_per_version(pools).await;
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
fn inbound_chat() -> botmesh_durability::store::ChatRecord {
    common::chat("chat", 0)
}

/// Its sender.
fn inbound_contact() -> botmesh_durability::store::ContactRecord {
    botmesh_durability::store::ContactRecord {
        id: "alice".into(),
        name: Some("Alice".into()),
        last_seen_ms: 3,
    }
}

/// Makes the ledger of `prefix` refuse a row whose text is `boom`.
async fn refuse_boom(pg: &Pg, prefix: &str) {
    raw_client(&pg.url)
        .await
        .batch_execute(&format!(
            "ALTER TABLE {prefix}ledger ADD CONSTRAINT refuse_boom CHECK (text <> 'boom')"
        ))
        .await
        .unwrap();
}

/// `record_inbound` is one transaction: when its ledger row is refused, neither the chat nor
/// the contact written before it in the same call stays (the trait's default, three separate
/// writes, would leave both).
#[tokio::test]
async fn an_inbound_whose_ledger_row_fails_leaves_no_chat_and_no_contact() {
    let Some(pg) = Pg::new() else { return };
    let prefix = pg.prefix();
    let store = PostgresStore::connect_with(&pg.url, PostgresConfig::new().table_prefix(&prefix))
        .await
        .unwrap();
    refuse_boom(&pg, &prefix).await;
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

/// The row's `xmax` as text: `0` while no transaction has locked, updated or deleted it.
async fn xmax(client: &tokio_postgres::Client, table: &str, id: &str) -> String {
    client
        .query_one(
            &format!("SELECT xmax::text FROM {table} WHERE id = $1"),
            &[&id],
        )
        .await
        .unwrap()
        .get(0)
}

/// An inbound message of a chat seen less than `ACTIVITY_RESOLUTION_MS` earlier leaves the
/// chat and contact rows as they are, unlocked too (a lock is a heap write and a WAL record at
/// every message); a later one, or a new name, rewrites them.
#[tokio::test]
async fn an_inbound_within_the_activity_resolution_does_not_touch_its_rows() {
    let Some(pg) = Pg::new() else { return };
    let prefix = pg.prefix();
    let store = PostgresStore::connect_with(&pg.url, PostgresConfig::new().table_prefix(&prefix))
        .await
        .unwrap();
    let client = raw_client(&pg.url).await;
    let (chats, contacts) = (format!("{prefix}chats"), format!("{prefix}contacts"));
    let at = |chat: &botmesh_durability::store::ChatRecord, ms: i64| {
        let mut chat = chat.clone();
        chat.last_activity_ms = ms;
        chat
    };
    let seen = |name: &str, ms: i64| botmesh_durability::store::ContactRecord {
        id: "alice".into(),
        name: Some(name.into()),
        last_seen_ms: ms,
    };
    let resolution = botmesh_durability::store::ACTIVITY_RESOLUTION_MS;
    let chat = inbound_chat();
    let first = chat.last_activity_ms;
    store
        .record_inbound(&chat, &seen("Alice", first), &common::entry("chat", 0))
        .await
        .unwrap();
    assert_eq!(xmax(&client, &chats, "chat").await, "0");
    assert_eq!(xmax(&client, &contacts, "alice").await, "0");

    let soon = first + resolution - 1;
    store
        .record_inbound(
            &at(&chat, soon),
            &seen("Alice", soon),
            &common::entry("chat", 2),
        )
        .await
        .unwrap();
    assert_eq!(
        xmax(&client, &chats, "chat").await,
        "0",
        "the chat row was locked"
    );
    assert_eq!(
        xmax(&client, &contacts, "alice").await,
        "0",
        "the contact row was locked"
    );
    assert_eq!(store.chat("chat").await.unwrap(), Some(chat.clone()));
    assert_eq!(
        store.contact("alice").await.unwrap(),
        Some(seen("Alice", first))
    );

    let later = first + resolution;
    store
        .record_inbound(
            &at(&chat, later),
            &seen("Alice B.", soon),
            &common::entry("chat", 4),
        )
        .await
        .unwrap();
    assert_eq!(store.chat("chat").await.unwrap(), Some(at(&chat, later)));
    assert_eq!(
        store.contact("alice").await.unwrap(),
        Some(seen("Alice B.", soon))
    );
    assert_eq!(store.ledger("chat", 10).await.unwrap().len(), 3);
}

/// Flow steps committed at the same moment share transactions (group commit) and are answered
/// as if each ran alone: a step whose operation conflicts gets its conflict and writes
/// nothing, a step whose ledger row is refused fails alone, and every other step commits.
#[tokio::test]
async fn concurrent_steps_are_answered_as_if_each_ran_alone() {
    let Some(pg) = Pg::new() else { return };
    let (store, kv) = store_and_kv(&pg).await;
    let prefix = store.table_prefix().to_owned();
    refuse_boom(&pg, &prefix).await;
    // A key the conflicting step expects at a version it does not have.
    let taken = kv
        .apply(
            &scope(),
            KvOp::Cas {
                key: "o/taken".into(),
                expected: None,
                entry: journal_entry("taken"),
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        taken,
        botmesh_durability::kv::CasOutcome::Ok { .. }
    ));
    let step = |i: usize| {
        let mut entry = common::entry(&format!("chat{i}"), i as i64);
        let key = match i {
            7 => "o/taken".to_owned(),
            _ => format!("o/{i}"),
        };
        if i == 11 {
            entry.text = Some("boom".into());
        }
        StepCommit {
            journal: vec![KvOp::Cas {
                key,
                expected: (i == 7).then_some(u64::MAX / 2),
                entry: journal_entry(&format!("send {i}")),
            }],
            ledger: vec![entry],
            ..StepCommit::new(scope(), CheckpointWrite::Keep)
        }
    };
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (store, step) = (store.clone(), step(i));
            tokio::spawn(async move { store.commit_step(&step).await })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let answer = task.await.unwrap();
        let chat = format!("chat{i}");
        let written = kv.get(&scope(), &format!("o/{i}")).await.unwrap();
        let ledger = store.ledger(&chat, 10).await.unwrap();
        match i {
            7 => {
                assert!(
                    matches!(answer, Ok(StepCommitOutcome::Conflict { op: 0, .. })),
                    "{answer:?}"
                );
                assert!(ledger.is_empty());
            }
            11 => {
                let error = answer.unwrap_err().to_string();
                assert!(error.contains("commit_step"), "{error}");
                assert_eq!(written, None);
                assert!(ledger.is_empty());
            }
            _ => {
                assert!(
                    matches!(answer, Ok(StepCommitOutcome::Committed(ref o)) if o.len() == 1),
                    "step {i}: {answer:?}"
                );
                assert!(written.is_some(), "step {i}");
                assert_eq!(ledger.len(), 1, "step {i}");
            }
        }
    }
}

/// The group commit's writer tasks run on the runtime that opened the store, not on the one
/// of the first write: a first write made in a `block_on` of a helper runtime, which is not
/// driven afterwards, leaves no later write of the opening runtime waiting for writers parked
/// there. `close()` ends the writers; after `open()` writes are answered again.
#[test]
fn group_writers_run_on_the_runtime_that_opened_the_store() {
    let Some(pg) = Pg::new() else { return };
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let helper = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = PostgresConfig::new().table_prefix(pg.prefix());
    let store = main
        .block_on(PostgresStore::connect_with(&pg.url, config))
        .unwrap();
    let value = serde_json::json!({ "n": 1 });
    helper
        .block_on(store.set_value("s", "first", &value))
        .unwrap();
    // `helper` is not driven from here on.
    let wait = std::time::Duration::from_secs(10);
    let later = main.block_on(async {
        tokio::time::timeout(wait, store.set_value("s", "later", &value)).await
    });
    assert!(
        matches!(later, Ok(Ok(()))),
        "a write after the helper runtime's first one was not answered: {later:?}"
    );
    main.block_on(async {
        store.close().await.unwrap();
        store.open().await.unwrap();
        tokio::time::timeout(wait, store.set_value("s", "reopened", &value))
            .await
            .expect("a write after close() and open() was not answered")
            .unwrap();
        assert_eq!(store.values("s").await.unwrap().len(), 3);
    });
    drop(helper);
}
