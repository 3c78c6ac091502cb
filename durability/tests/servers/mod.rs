//! What the real-server suites (`postgres.rs`, `redis.rs`, `redis_cluster.rs`, and the server
//! backends of `backends.rs` and `step_commit.rs`) share: reading the server URL from the
//! environment, skipping loudly without it (and failing under `CI=true`), unique names so that
//! runs never collide, a cleanup guard that runs even when a test panics, and the checks every
//! server suite makes (a journal that survives a broken connection, racing writers, junk
//! quarantined, connect errors without the password).
//!
//! Tests that disturb a whole server (a restart, killed connections, a flushed script cache)
//! hold it alone ([`postgres::Pg::alone`], [`redis_server::Rd::alone`]); every other test holds it
//! shared for as long as it has its [`Server`], so the suites of the one test binary never see
//! each other's faults.
//!
//! It does not start servers: point `BOTMESH_TEST_POSTGRES_URL` / `BOTMESH_TEST_REDIS_URL` /
//! `BOTMESH_TEST_REDIS_CLUSTER_URL` at running ones.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use botmesh_durability::inbox::NewInbound;
use botmesh_durability::kv::{CasOutcome, Entry, Index, Scope};
use botmesh_durability::operating::RecordKind;
use botmesh_durability::{DurabilityConfig, DurabilityEvent, DurableKv, KvDurability};

mod lock;
pub(crate) use lock::{Hold, ServerLock};

/// The URL in `var`, or `None` after printing that the suite was SKIPPED. Panics when the
/// variable is missing and `CI=true`: CI must run every suite.
pub(crate) fn server_url(var: &str, suite: &str, example: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true but {var} is not set: the {suite} suite must run in CI (e.g. {var}={example})"
            );
            eprintln!("the {suite} suite was SKIPPED: set {var} (e.g. {example}) to run it");
            None
        }
    }
}

/// A cleanup of every prefix a test used on its server's nodes.
type CleanFn = fn(Vec<String>, Vec<String>) -> Pin<Box<dyn Future<Output = ()>>>;

/// A test server: its nodes, and every prefix a test used (a name no other run uses,
/// `bmt_<random>`), whose tables or keys are removed when it is dropped, on a thread of its
/// own with its own runtime (so also after a panic, and never inside the test's runtime).
pub(crate) struct Server<B> {
    /// The URL (a cluster's first seed node).
    pub(crate) url: String,
    /// Every node (the one URL of a single server).
    pub(crate) nodes: Vec<String>,
    prefixes: Arc<Mutex<Vec<String>>>,
    /// What ends a prefix (`_` for table names).
    separator: &'static str,
    clean: CleanFn,
    /// Which server it is ([`postgres::Postgres`], [`redis_server::Redis`]): its own methods.
    backend: std::marker::PhantomData<B>,
    /// The test's use of the server (dropped after the cleanup).
    _hold: Option<Hold>,
}

impl<B> Server<B> {
    fn with_cleanup(
        nodes: Vec<String>,
        separator: &'static str,
        hold: Option<Hold>,
        clean: CleanFn,
    ) -> Option<Self> {
        Some(Server {
            url: nodes.first()?.clone(),
            nodes,
            prefixes: Arc::default(),
            separator,
            clean,
            backend: std::marker::PhantomData,
            _hold: hold,
        })
    }

    /// A fresh prefix, cleaned at the end.
    pub(crate) fn prefix(&self) -> String {
        let tail: String = (0..10)
            .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
            .collect();
        let p = format!("bmt_{tail}{}", self.separator);
        self.prefixes.lock().unwrap().push(p.clone());
        p
    }
}

impl<B> Drop for Server<B> {
    fn drop(&mut self) {
        let prefixes = std::mem::take(&mut *self.prefixes.lock().unwrap());
        if prefixes.is_empty() {
            return;
        }
        let (nodes, clean) = (self.nodes.clone(), self.clean);
        let done = std::thread::spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(clean(nodes, prefixes)),
                Err(e) => eprintln!("cleanup skipped: no runtime: {e}"),
            }
        })
        .join();
        if done.is_err() {
            eprintln!("cleanup panicked");
        }
    }
}

/// A server that the tests share, unless one has it alone.
pub(crate) trait Shared: Sized {
    /// The server for a test, which has it `alone` or shares it (`None`: no URL is set).
    fn open(alone: bool) -> Option<Server<Self>>;
}

impl<B: Shared> Server<B> {
    /// The server, shared with the other tests.
    pub(crate) fn new() -> Option<Self> {
        B::open(false)
    }

    /// The server, for a test that disturbs it (restarts it, kills its connections, flushes
    /// its scripts): no other test uses it meanwhile.
    pub(crate) fn alone() -> Option<Self> {
        B::open(true)
    }
}

/// The scope of the server suites' journals.
pub(crate) fn scope() -> Scope {
    Scope::new("t", "test", "serverbot", "c")
}

/// The journals on `kv` in [`scope`], as instance `instance`.
pub(crate) fn durability<K: DurableKv + ?Sized>(kv: Arc<K>, instance: &str) -> KvDurability<K> {
    let config = DurabilityConfig {
        instance_id: Some(instance.into()),
        ..DurabilityConfig::default()
    };
    KvDurability::builder(kv, scope())
        .config(config)
        .build()
        .unwrap()
}

fn inbound(i: u32) -> NewInbound {
    NewInbound::new("chat", &format!("m{i}"), serde_json::json!({ "n": i }))
}

/// Journals five messages, runs `fault` (a restart, killed connections; `false`: it cannot
/// run here, and the test ends), then five more: each of those succeeds at once (the lost
/// connections are replaced), and all ten are there.
pub(crate) async fn journals_survive<K, F>(d: &KvDurability<K>, fault: F)
where
    K: DurableKv + ?Sized,
    F: Future<Output = bool>,
{
    for i in 0..5 {
        d.inbox().journal(inbound(i)).await.unwrap();
    }
    if !fault.await {
        return;
    }
    for i in 5..10 {
        d.inbox()
            .journal(inbound(i))
            .await
            .unwrap_or_else(|e| panic!("journal m{i} after the fault: {e}"));
    }
    for i in 0..10 {
        assert!(
            d.inbox().get(&inbound(i).id).await.unwrap().is_some(),
            "m{i} was acknowledged and must survive the fault"
        );
    }
}

/// Asserts that a junk entry (an inbound record `junk` that does not decode, pending) is
/// quarantined and reported when the inbox claims, while a good record is claimed.
pub(crate) async fn junk_is_quarantined<K: DurableKv + ?Sized>(d: &KvDurability<K>) {
    d.inbox()
        .journal(NewInbound::new("chat", "good", serde_json::json!({})))
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

/// Asserts that an error (its text, Debug and source) names `host` and never `secret`.
pub(crate) fn names_host_not_secret(errors: &[&dyn std::error::Error], host: &str, secret: &str) {
    for error in errors {
        let text = format!("{error} {:?}", error.source());
        let debug = format!("{error:?}");
        assert!(text.contains(host), "{text}");
        assert!(!text.contains(secret) && !debug.contains(secret), "{debug}");
    }
}

/// `n` backends, opened one after the other by `open`.
pub(crate) async fn opened<K: DurableKv + 'static, F: Future<Output = K>>(
    n: usize,
    open: impl Fn() -> F,
) -> Vec<Arc<dyn DurableKv>> {
    let mut all: Vec<Arc<dyn DurableKv>> = Vec::new();
    for _ in 0..n {
        all.push(Arc::new(open().await));
    }
    all
}

/// Four connections (pools) race compare-and-sets on one key, 25 rounds: one winner per round,
/// versions grow, every reader sees the winner's value and one index entry.
pub(crate) async fn racing_writers_have_one_winner_per_version(kvs: Vec<Arc<dyn DurableKv>>) {
    let entry = |who: usize| Entry {
        value: format!("w{who}").into_bytes(),
        idx1: Some(format!("by/{who}")),
        idx2: None,
    };
    let first = kvs[0].cas(&scope(), "hot", None, entry(0)).await.unwrap();
    let CasOutcome::Ok { mut version } = first else {
        panic!("create: {first:?}")
    };
    for round in 0..25 {
        let tasks: Vec<_> = kvs
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
        let now = kvs[3].get(&scope(), "hot").await.unwrap().unwrap();
        assert_eq!(
            (now.version, now.value),
            (v, format!("w{who}").into_bytes())
        );
        let listed = kvs[2]
            .range(&scope(), Index::One, "by/", "by0", 10)
            .await
            .unwrap();
        assert_eq!(listed.len(), 1, "one index entry per key: {listed:?}");
    }
}

/// The PostgreSQL server of the tests (`BOTMESH_TEST_POSTGRES_URL`).
#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    use botmesh_durability::PostgresKv;
    use botmesh_durability::backends::postgres::PostgresConfig;
    use botmesh_durability::backends::postgres::tokio_postgres::{self, NoTls};

    use super::{Server, ServerLock, Shared, server_url};

    static LOCK: ServerLock = ServerLock::new();

    /// Every table a prefix may have created.
    pub(crate) fn tables(p: &str) -> String {
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

    pub(crate) async fn raw_client(url: &str) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    }

    /// The kind of a PostgreSQL [`Server`].
    pub(crate) enum Postgres {}

    /// The server; drops the tables of every prefix used when dropped.
    pub(crate) type Pg = Server<Postgres>;

    impl Shared for Postgres {
        fn open(alone: bool) -> Option<Pg> {
            let url = server_url(
                "BOTMESH_TEST_POSTGRES_URL",
                "PostgreSQL",
                "postgres://postgres@127.0.0.1:5432/test",
            )?;
            let hold = Some(LOCK.take(alone));
            Server::with_cleanup(vec![url], "_", hold, |nodes, prefixes| {
                Box::pin(async move {
                    let client = raw_client(&nodes[0]).await;
                    for prefix in prefixes {
                        let sql = format!(
                            "DROP TABLE IF EXISTS {} CASCADE; DROP SEQUENCE IF EXISTS {prefix}durable_version",
                            tables(&prefix)
                        );
                        if let Err(e) = client.batch_execute(&sql).await {
                            eprintln!("cleanup of {prefix}: {e}");
                        }
                    }
                })
            })
        }
    }

    impl Pg {
        pub(crate) async fn kv(&self, prefix: &str) -> PostgresKv {
            PostgresKv::connect_with(&self.url, PostgresConfig::new().table_prefix(prefix))
                .await
                .unwrap()
        }
    }
}

/// A Redis server or cluster of the tests: `BOTMESH_TEST_REDIS_URL`, or
/// `BOTMESH_TEST_REDIS_CLUSTER_URL` (the seed nodes, comma-separated).
#[cfg(feature = "redis")]
pub(crate) mod redis_server {
    use botmesh_durability::RedisKv;
    use botmesh_durability::backends::redis::RedisConfig;
    use botmesh_durability::backends::redis::redis_crate as redis;

    use super::{Hold, Server, ServerLock, Shared, server_url};

    /// The single server's (the cluster's nodes are other servers, which no test disturbs).
    static LOCK: ServerLock = ServerLock::new();

    pub(crate) async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(url).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }

    /// Deletes the keys under `prefix` on `node` (one `UNLINK` per key, pipelined: on a
    /// cluster node the keys are of several slots).
    async fn delete_prefix(node: &str, prefix: &str) {
        let mut conn = raw(node).await;
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
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("UNLINK").arg(key).ignore();
            }
            let _: () = pipe.query_async(&mut conn).await.unwrap();
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }

    /// The kind of a Redis [`Server`].
    pub(crate) enum Redis {}

    /// The server (or cluster); deletes the keys of every prefix used when dropped.
    pub(crate) type Rd = Server<Redis>;

    /// `Rd::new` and `Rd::alone` are the single server.
    impl Shared for Redis {
        fn open(alone: bool) -> Option<Rd> {
            let url = server_url("BOTMESH_TEST_REDIS_URL", "Redis", "redis://127.0.0.1:6379/")?;
            Rd::on(vec![url], Some(LOCK.take(alone)))
        }
    }

    impl Rd {
        /// The cluster.
        pub(crate) fn cluster() -> Option<Rd> {
            let list = server_url(
                "BOTMESH_TEST_REDIS_CLUSTER_URL",
                "Redis Cluster",
                "redis://127.0.0.1:7001/,redis://127.0.0.1:7002/,redis://127.0.0.1:7003/",
            )?;
            let nodes = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            Self::on(nodes, None)
        }

        fn on(nodes: Vec<String>, hold: Option<Hold>) -> Option<Rd> {
            Server::with_cleanup(nodes, "", hold, |nodes, prefixes| {
                Box::pin(async move {
                    for node in &nodes {
                        for prefix in &prefixes {
                            delete_prefix(node, prefix).await;
                        }
                    }
                })
            })
        }

        /// The nodes as `open_cluster` takes them.
        pub(crate) fn seeds(&self) -> Vec<&str> {
            self.nodes.iter().map(String::as_str).collect()
        }

        /// A kv on the single server.
        pub(crate) async fn kv(&self, prefix: &str) -> RedisKv {
            RedisKv::open_with(&self.url, RedisConfig::new().prefix(prefix))
                .await
                .unwrap()
        }

        /// A kv on the cluster.
        #[cfg(feature = "redis-cluster")]
        pub(crate) async fn cluster_kv(&self, prefix: &str) -> RedisKv {
            RedisKv::open_cluster(&self.seeds(), RedisConfig::new().prefix(prefix))
                .await
                .unwrap()
        }
    }
}
