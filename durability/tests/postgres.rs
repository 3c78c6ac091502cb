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
//! | `conformance` | the whole `DurableKv` suite |
//! | `script_passes_every_crash_point`, `crash_matrix`, `seeded_random_crash_points` | the crash matrix, each incarnation on a new pool |
//! | store behaviour (`chats` … `closed_store`, `a_second_store_sees_everything`) | the shared `Store` tests |
//! | `a_server_restart_loses_nothing_acknowledged` | dropped connections are reported with `tracing::error!`, the operations right after the restart succeed, nothing acknowledged is lost |
//! | `junk_rows_are_quarantined` | bytes that are no journal record, inserted with SQL, are quarantined and reported |
//! | `an_unreachable_server_names_host_and_port_not_the_password` | the connect error |
//! | `an_injected_pool_stays_open` | `close()` never closes a pool it was given, and closes its own |
//! | `racing_pools_have_one_winner_per_version` | 4 pools racing `cas` on one key |
#![cfg(all(feature = "postgres", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
#[allow(unused_macros, dead_code)]
mod common;
mod crash_restart;
mod crash_script;
mod servers;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Once};

use botmesh_durability::backends::postgres::tokio_postgres::{self, NoTls};
use botmesh_durability::kv::{CasOutcome, Entry, Scope};
use botmesh_durability::testing::conformance::run_conformance;
use botmesh_durability::{
    DurabilityConfig, DurabilityEvent, DurableKv, KvDurability, NewInbound, PostgresConfig,
    PostgresKv, PostgresStore, RecordKind,
};
use crash_restart::Restartable;
use serde_json::json;
use servers::{Cleanup, server_url, unique_prefix};
use tokio::sync::RwLock;

const VAR: &str = "BOTMESH_TEST_POSTGRES_URL";
const EXAMPLE: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Shared by every test; the restart test holds it exclusively.
static SERVER: LazyLock<RwLock<()>> = LazyLock::new(|| RwLock::new(()));

/// Every table a prefix may have created.
fn tables(p: &str) -> String {
    [
        "durable",
        "meta",
        "chats",
        "contacts",
        "ledger",
        "checkpoints",
        "handoffs",
        "kv",
    ]
    .iter()
    .map(|t| format!("{p}{t}"))
    .collect::<Vec<_>>()
    .join(", ")
}

async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

/// The server URL and every prefix a test used; drops their tables when dropped.
struct Pg {
    url: String,
    prefixes: Arc<Mutex<Vec<String>>>,
    _cleanup: Cleanup,
}

impl Pg {
    fn new() -> Option<Pg> {
        let url = server_url(VAR, "PostgreSQL", EXAMPLE)?;
        let prefixes: Arc<Mutex<Vec<String>>> = Arc::default();
        let (u, p) = (url.clone(), Arc::clone(&prefixes));
        let cleanup = Cleanup::new(Box::new(move || {
            Box::pin(async move {
                let all = std::mem::take(&mut *p.lock().unwrap());
                if all.is_empty() {
                    return;
                }
                let client = raw_client(&u).await;
                for prefix in all {
                    let sql = format!(
                        "DROP TABLE IF EXISTS {} CASCADE; DROP SEQUENCE IF EXISTS {prefix}durable_version",
                        tables(&prefix)
                    );
                    if let Err(e) = client.batch_execute(&sql).await {
                        eprintln!("cleanup of {prefix}: {e}");
                    }
                }
            })
        }));
        Some(Pg {
            url,
            prefixes,
            _cleanup: cleanup,
        })
    }

    /// A fresh prefix, dropped at the end.
    fn prefix(&self) -> String {
        let p = unique_prefix();
        self.prefixes.lock().unwrap().push(p.clone());
        p
    }

    async fn kv(&self, prefix: &str) -> PostgresKv {
        PostgresKv::connect_with(&self.url, PostgresConfig::new().table_prefix(prefix))
            .await
            .unwrap()
    }
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let pg = &pg;
    let report = run_conformance(move || async move {
        Arc::new(pg.kv(&pg.prefix()).await) as Arc<dyn DurableKv>
    })
    .await;
    println!("{report}");
    report.assert_passed();
}

/// One table prefix; every incarnation opens its own pool on it, a kill closes the pool.
struct PgBackend {
    url: String,
    prefix: String,
}

impl Restartable for PgBackend {
    type Kv = PostgresKv;

    async fn open(&self) -> Arc<PostgresKv> {
        let config = PostgresConfig::new().table_prefix(&self.prefix);
        Arc::new(PostgresKv::connect_with(&self.url, config).await.unwrap())
    }

    async fn kill(&self, kv: Arc<PostgresKv>) {
        kv.close();
    }

    async fn close(&self, kv: Arc<PostgresKv>) {
        kv.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_passes_every_crash_point() {
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let make = async || PgBackend {
        url: pg.url.clone(),
        prefix: pg.prefix(),
    };
    crash_restart::script_passes_every_crash_point(make).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_matrix() {
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let make = async || PgBackend {
        url: pg.url.clone(),
        prefix: pg.prefix(),
    };
    println!("{}", crash_restart::crash_matrix(make).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_random_crash_points() {
    let Some(pg) = Pg::new() else { return };
    let _shared = SERVER.read().await;
    let make = async || PgBackend {
        url: pg.url.clone(),
        prefix: pg.prefix(),
    };
    println!(
        "{}",
        crash_restart::seeded_random_crash_points(make, 8).await
    );
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
    kv.close();
    assert!(!pool.is_closed(), "an injected pool is the user's");
    assert!(kv.get(&scope(), "k").await.unwrap().is_some());
    let own = pg.kv(&prefix).await;
    own.close();
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
