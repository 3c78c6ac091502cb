//! What the real-server suites (`postgres.rs`, `redis.rs`) share: reading the server URL from
//! the environment, skipping loudly without it (and failing under `CI=true`), unique names so
//! that runs never collide, and a cleanup guard that runs even when a test panics.
//!
//! It does not start servers: point `BOTMESH_TEST_POSTGRES_URL` / `BOTMESH_TEST_REDIS_URL` at
//! running ones.

use std::future::Future;
use std::pin::Pin;

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

/// A name no other run uses: `bmt_<random>_` (lowercase letters and digits).
pub(crate) fn unique_prefix() -> String {
    let tail: String = (0..10)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect();
    format!("bmt_{tail}_")
}

/// A cleanup to run once: an async block built on the cleanup thread.
pub(crate) type CleanupFn = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// Runs its cleanup when dropped, on a thread of its own with its own runtime, so it runs
/// after a panic too and never inside the test's runtime.
pub(crate) struct Cleanup {
    cleanup: Option<CleanupFn>,
}

impl Cleanup {
    pub(crate) fn new(cleanup: CleanupFn) -> Self {
        Cleanup {
            cleanup: Some(cleanup),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        let done = std::thread::spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(cleanup()),
                Err(e) => eprintln!("cleanup skipped: no runtime: {e}"),
            }
        })
        .join();
        if done.is_err() {
            eprintln!("cleanup panicked");
        }
    }
}

/// The PostgreSQL server of the tests (`BOTMESH_TEST_POSTGRES_URL`).
#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    use std::sync::{Arc, Mutex};

    use botmesh_durability::backends::postgres::tokio_postgres::{self, NoTls};
    use botmesh_durability::{PostgresConfig, PostgresKv};

    use super::{Cleanup, server_url, unique_prefix};

    const VAR: &str = "BOTMESH_TEST_POSTGRES_URL";
    const EXAMPLE: &str = "postgres://postgres@127.0.0.1:5432/test";

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

    /// The server URL and every prefix a test used; drops their tables when dropped.
    pub(crate) struct Pg {
        pub(crate) url: String,
        pub(crate) prefixes: Arc<Mutex<Vec<String>>>,
        _cleanup: Cleanup,
    }

    impl Pg {
        pub(crate) fn new() -> Option<Pg> {
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
        pub(crate) fn prefix(&self) -> String {
            let p = unique_prefix();
            self.prefixes.lock().unwrap().push(p.clone());
            p
        }

        pub(crate) async fn kv(&self, prefix: &str) -> PostgresKv {
            PostgresKv::connect_with(&self.url, PostgresConfig::new().table_prefix(prefix))
                .await
                .unwrap()
        }
    }
}

/// The Redis server of the tests (`BOTMESH_TEST_REDIS_URL`).
#[cfg(feature = "redis")]
pub(crate) mod redis_server {
    use std::sync::{Arc, Mutex};

    use botmesh_durability::backends::redis::redis_crate as redis;
    use botmesh_durability::{RedisConfig, RedisKv};

    use super::{Cleanup, server_url, unique_prefix};

    const VAR: &str = "BOTMESH_TEST_REDIS_URL";
    const EXAMPLE: &str = "redis://127.0.0.1:6379/";

    pub(crate) async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(url).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }

    pub(crate) async fn delete_prefix(url: &str, prefix: &str) {
        let mut conn = raw(url).await;
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
            if !keys.is_empty() {
                let _: () = redis::cmd("UNLINK")
                    .arg(&keys)
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

    /// The server URL and every prefix a test used; deletes their keys when dropped.
    pub(crate) struct Rd {
        pub(crate) url: String,
        pub(crate) prefixes: Arc<Mutex<Vec<String>>>,
        _cleanup: Cleanup,
    }

    impl Rd {
        pub(crate) fn new() -> Option<Rd> {
            let url = server_url(VAR, "Redis", EXAMPLE)?;
            let prefixes: Arc<Mutex<Vec<String>>> = Arc::default();
            let (u, p) = (url.clone(), Arc::clone(&prefixes));
            let cleanup = Cleanup::new(Box::new(move || {
                Box::pin(async move {
                    let all = std::mem::take(&mut *p.lock().unwrap());
                    for prefix in all {
                        delete_prefix(&u, &prefix).await;
                    }
                })
            }));
            Some(Rd {
                url,
                prefixes,
                _cleanup: cleanup,
            })
        }

        pub(crate) fn prefix(&self) -> String {
            let p = unique_prefix().trim_end_matches('_').to_owned();
            self.prefixes.lock().unwrap().push(p.clone());
            p
        }

        pub(crate) async fn kv(&self, prefix: &str) -> RedisKv {
            RedisKv::open_with(&self.url, RedisConfig::new().prefix(prefix))
                .await
                .unwrap()
        }
    }
}

/// The Redis Cluster of the tests (`BOTMESH_TEST_REDIS_CLUSTER_URL`, the seed nodes).
#[cfg(feature = "redis-cluster")]
pub(crate) mod redis_cluster {
    use std::sync::{Arc, Mutex};

    use botmesh_durability::backends::redis::redis_crate as redis;
    use botmesh_durability::{RedisConfig, RedisKv};

    use super::{Cleanup, server_url, unique_prefix};

    const VAR: &str = "BOTMESH_TEST_REDIS_CLUSTER_URL";
    const EXAMPLE: &str = "redis://127.0.0.1:7001/,redis://127.0.0.1:7002/,redis://127.0.0.1:7003/";

    pub(crate) async fn delete_cluster_prefix(nodes: &[String], prefix: &str) {
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
    pub(crate) struct Cluster {
        pub(crate) nodes: Vec<String>,
        pub(crate) prefixes: Arc<Mutex<Vec<String>>>,
        _cleanup: Cleanup,
    }

    impl Cluster {
        pub(crate) fn new() -> Option<Cluster> {
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
                        delete_cluster_prefix(&n, &prefix).await;
                    }
                })
            }));
            Some(Cluster {
                nodes,
                prefixes,
                _cleanup: cleanup,
            })
        }

        pub(crate) fn prefix(&self) -> String {
            let p = unique_prefix().trim_end_matches('_').to_owned();
            self.prefixes.lock().unwrap().push(p.clone());
            p
        }

        pub(crate) fn seeds(&self) -> Vec<&str> {
            self.nodes.iter().map(String::as_str).collect()
        }

        pub(crate) async fn kv(&self, prefix: &str) -> RedisKv {
            RedisKv::open_cluster(&self.seeds(), RedisConfig::new().prefix(prefix))
                .await
                .unwrap()
        }
    }
}
