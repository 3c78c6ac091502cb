//! The shared suites on every backend, through one factory each: memory, file (append log and
//! snapshot mode), SQLite, PostgreSQL, Redis and Redis Cluster.
//!
//! A backend is a [`Restartable`]: a fresh, empty instance (a temporary folder, a table or
//! key prefix) that opens, dies and opens again. For each, `suites!` runs
//!
//! | test | what it proves |
//! | --- | --- |
//! | `conformance` | the whole `DurableKv` suite, each case on a fresh instance |
//! | `script_passes_every_crash_point` | the crash script recovers from a crash at every write point, on the reopened backend |
//! | `crash_matrix` | every write point × before/after × both ambiguity policies |
//! | `seeded_random_crash_points` | seeded random points, with a second crash during recovery |
//!
//! The server backends run when their variable is set (`BOTMESH_TEST_POSTGRES_URL`,
//! `BOTMESH_TEST_REDIS_URL`, `BOTMESH_TEST_REDIS_CLUSTER_URL`) and print SKIPPED otherwise
//! (failing under `CI=true`). What is specific to one backend (restarts, killed connections,
//! files, group commit) stays in its own test file.
#![cfg(feature = "testing")]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::crash_restart::Restartable;
use botmesh_durability::testing::conformance::run_conformance;
use botmesh_durability::{DurableKv, MemoryKv};

/// Runs the conformance suite on a fresh instance of `make`'s backend per case.
async fn conformance<R, Fut>(make: impl Fn() -> Fut)
where
    R: Restartable + Send + 'static,
    Fut: Future<Output = R>,
{
    let kept: Mutex<Vec<R>> = Mutex::new(Vec::new());
    let report = run_conformance(|| async {
        let backend = make().await;
        let kv = backend.open().await;
        kept.lock().unwrap().push(backend);
        kv as Arc<dyn DurableKv>
    })
    .await;
    println!("{report}");
    report.assert_passed();
}

/// The suites on one backend: `$make` is an `Option` of a factory (`None`: skipped).
macro_rules! suites {
    ($name:ident, $make:expr, seeds: $seeds:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn conformance() {
                let Some(make) = $make else { return };
                super::conformance(&make).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn script_passes_every_crash_point() {
                let Some(make) = $make else { return };
                crate::crash_restart::script_passes_every_crash_point(async || make().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn crash_matrix() {
                let Some(make) = $make else { return };
                println!(
                    "{}",
                    crate::crash_restart::crash_matrix(async || make().await).await
                );
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn seeded_random_crash_points() {
                let Some(make) = $make else { return };
                println!(
                    "{}",
                    crate::crash_restart::seeded_random_crash_points(async || make().await, $seeds)
                        .await
                );
            }
        }
    };
}

/// The in-memory backend: a restart keeps the same `MemoryKv` (a new incarnation in the same
/// process), a kill forgets nothing.
struct MemoryBackend(MemoryKv);

impl Restartable for MemoryBackend {
    type Kv = MemoryKv;

    async fn open(&self) -> Arc<MemoryKv> {
        Arc::new(self.0.clone())
    }
}

fn memory() -> Option<impl Fn() -> std::future::Ready<MemoryBackend>> {
    Some(|| std::future::ready(MemoryBackend(MemoryKv::new())))
}

suites!(memory_kv, memory(), seeds: 12);

#[cfg(feature = "file")]
mod file_backend {
    use std::path::PathBuf;
    use std::sync::Arc;

    use botmesh_durability::{FileDurability, FileOptions};
    use tempfile::TempDir;

    use crate::crash_restart::Restartable;

    /// A durable file in a fresh temporary folder.
    pub(crate) struct FileBackend {
        _dir: TempDir,
        path: PathBuf,
        options: FileOptions,
    }

    pub(crate) fn fresh(options: FileOptions) -> FileBackend {
        let dir = tempfile::tempdir().expect("temp dir");
        FileBackend {
            path: dir.path().join("journal.json"),
            _dir: dir,
            options,
        }
    }

    impl Restartable for FileBackend {
        type Kv = FileDurability;

        async fn open(&self) -> Arc<FileDurability> {
            let kv = FileDurability::open(&self.path, self.options.clone())
                .await
                .expect("open the durable file");
            Arc::new(kv)
        }

        async fn kill(&self, kv: Arc<FileDurability>) {
            kv.simulate_crash().await;
        }

        async fn close(&self, kv: Arc<FileDurability>) {
            kv.close().await.expect("close");
        }
    }
}

#[cfg(feature = "file")]
suites!(
    file_append_log,
    Some(|| std::future::ready(file_backend::fresh(
        botmesh_durability::FileOptions::new()
            .append_log(true)
            .compact_every(7)
    ))),
    seeds: 24
);

#[cfg(feature = "file")]
suites!(
    file_snapshot_mode,
    Some(|| std::future::ready(file_backend::fresh(
        botmesh_durability::FileOptions::new()
    ))),
    seeds: 8
);

#[cfg(feature = "sqlite")]
mod sqlite_backend {
    use std::path::PathBuf;
    use std::sync::Arc;

    use botmesh_durability::{SqliteDurableKv, SqliteStore, Store};
    use tempfile::TempDir;

    use crate::crash_restart::Restartable;

    /// A store file in a fresh temporary folder.
    pub(crate) struct SqliteBackend {
        _dir: TempDir,
        path: PathBuf,
    }

    pub(crate) fn fresh() -> SqliteBackend {
        let dir = tempfile::tempdir().expect("temp dir");
        SqliteBackend {
            path: dir.path().join("bot.db"),
            _dir: dir,
        }
    }

    impl Restartable for SqliteBackend {
        type Kv = SqliteDurableKv;

        async fn open(&self) -> Arc<SqliteDurableKv> {
            let store = SqliteStore::connect(&self.path)
                .await
                .expect("open the store");
            Arc::new(store.durability_kv())
        }

        async fn kill(&self, kv: Arc<SqliteDurableKv>) {
            kv.store().close().await.expect("shut the store");
        }

        async fn close(&self, kv: Arc<SqliteDurableKv>) {
            kv.store().close().await.expect("close");
        }
    }
}

#[cfg(feature = "sqlite")]
suites!(
    sqlite,
    Some(|| std::future::ready(sqlite_backend::fresh())),
    seeds: 12
);

#[cfg(feature = "postgres")]
mod postgres_backend {
    use std::sync::Arc;

    use botmesh_durability::PostgresKv;
    use botmesh_durability::backends::postgres::PostgresConfig;

    use crate::crash_restart::Restartable;
    use crate::servers::postgres::Pg;

    /// One table prefix; every incarnation opens its own pool on it, a kill closes the pool.
    pub(crate) struct PgBackend {
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
            kv.close_pool();
        }
    }

    /// A factory of fresh prefixes on the test server, dropped with it; `None` without one.
    pub(crate) fn factory() -> Option<impl Fn() -> std::future::Ready<PgBackend>> {
        let pg = Pg::new()?;
        Some(move || {
            std::future::ready(PgBackend {
                url: pg.url.clone(),
                prefix: pg.prefix(),
            })
        })
    }
}

#[cfg(feature = "postgres")]
suites!(postgres, postgres_backend::factory(), seeds: 8);

#[cfg(feature = "redis")]
mod redis_backend {
    use std::sync::Arc;

    use botmesh_durability::RedisKv;
    use botmesh_durability::backends::redis::RedisConfig;

    use crate::crash_restart::Restartable;

    /// One key prefix on a Redis server or cluster; every incarnation opens its own
    /// connection on it.
    pub(crate) struct RedisBackend {
        nodes: Vec<String>,
        cluster: bool,
        prefix: String,
    }

    impl Restartable for RedisBackend {
        type Kv = RedisKv;

        async fn open(&self) -> Arc<RedisKv> {
            let config = RedisConfig::new().prefix(&self.prefix);
            let kv = if self.cluster {
                let seeds: Vec<&str> = self.nodes.iter().map(String::as_str).collect();
                open_cluster(&seeds, config).await
            } else {
                RedisKv::open_with(&self.nodes[0], config).await.unwrap()
            };
            Arc::new(kv)
        }
    }

    #[cfg(feature = "redis-cluster")]
    async fn open_cluster(seeds: &[&str], config: RedisConfig) -> RedisKv {
        RedisKv::open_cluster(seeds, config).await.unwrap()
    }

    /// Without the cluster feature no cluster backend is made; its first seed then serves.
    #[cfg(not(feature = "redis-cluster"))]
    async fn open_cluster(seeds: &[&str], config: RedisConfig) -> RedisKv {
        RedisKv::open_with(seeds[0], config).await.unwrap()
    }

    /// A factory of fresh prefixes on the test server; `None` without one.
    pub(crate) fn server() -> Option<impl Fn() -> std::future::Ready<RedisBackend>> {
        let rd = crate::servers::redis_server::Rd::new()?;
        Some(move || {
            std::future::ready(RedisBackend {
                nodes: vec![rd.url.clone()],
                cluster: false,
                prefix: rd.prefix(),
            })
        })
    }

    /// A factory of fresh prefixes on the test cluster; `None` without one.
    #[cfg(feature = "redis-cluster")]
    pub(crate) fn cluster() -> Option<impl Fn() -> std::future::Ready<RedisBackend>> {
        let c = crate::servers::redis_server::Rd::cluster()?;
        Some(move || {
            std::future::ready(RedisBackend {
                nodes: c.nodes.clone(),
                cluster: true,
                prefix: c.prefix(),
            })
        })
    }
}

#[cfg(feature = "redis")]
suites!(redis, redis_backend::server(), seeds: 8);

#[cfg(feature = "redis-cluster")]
suites!(redis_cluster, redis_backend::cluster(), seeds: 4);

/// The bot's journals in an events journal (`events_durability`): a `FileEventJournal`, a
/// `SharedFileEventJournal` (snapshot and append-log mode), and a journal with its outbox on
/// another backend (a `MemoryKv` standing for a server; Postgres when one is configured).
#[cfg(feature = "file")]
mod events_backend {
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    use botmesh_durability::events::{
        EventsDurability, FileEventJournal, SharedFileEventJournal, SharedFileOptions,
        events_durability,
    };
    use botmesh_durability::{DurableKv, FileOptions, MemoryKv};
    use tempfile::TempDir;

    use crate::crash_restart::Restartable;

    /// Which journal the bot's records live in.
    #[derive(Clone)]
    pub(crate) enum Journal {
        File(FileOptions),
        Shared(SharedFileOptions),
    }

    /// An events journal file in a fresh temporary folder, and the outbox backend if any.
    pub(crate) struct EventsBackend {
        _dir: TempDir,
        path: PathBuf,
        journal: Journal,
        outbox: Outbox,
        /// The open `FileEventJournal`, which a kill abandons.
        file: Mutex<Option<FileEventJournal>>,
        shared: Mutex<Option<SharedFileEventJournal>>,
    }

    /// Where the outbox lives.
    pub(crate) enum Outbox {
        /// In the journal.
        Journal,
        /// In this backend, kept across restarts (a lazily connected server, or memory).
        Kv(Arc<dyn DurableKv>),
        /// On a Redis server under a prefix, connected again at every open.
        #[cfg(feature = "redis")]
        Redis { url: String, prefix: String },
    }

    impl Outbox {
        async fn open(&self) -> Option<Arc<dyn DurableKv>> {
            match self {
                Outbox::Journal => None,
                Outbox::Kv(kv) => {
                    // Connects a lazily built server backend (the bot's start does the same).
                    kv.open().await.expect("open the outbox backend");
                    Some(Arc::clone(kv))
                }
                #[cfg(feature = "redis")]
                Outbox::Redis { url, prefix } => {
                    use botmesh_durability::RedisKv;
                    use botmesh_durability::backends::redis::RedisConfig;
                    let config = RedisConfig::new().prefix(prefix);
                    let kv = RedisKv::open_with(url, config)
                        .await
                        .expect("connect to Redis");
                    Some(Arc::new(kv))
                }
            }
        }
    }

    pub(crate) fn fresh(journal: Journal, outbox: Outbox) -> EventsBackend {
        let dir = tempfile::tempdir().expect("temp dir");
        EventsBackend {
            path: dir.path().join("events.json"),
            _dir: dir,
            journal,
            outbox,
            file: Mutex::new(None),
            shared: Mutex::new(None),
        }
    }

    pub(crate) fn memory_outbox() -> Outbox {
        Outbox::Kv(Arc::new(MemoryKv::new()))
    }

    impl Restartable for EventsBackend {
        type Kv = EventsDurability;

        async fn open(&self) -> Arc<EventsDurability> {
            let durability = match &self.journal {
                Journal::File(options) => {
                    let journal = FileEventJournal::open(&self.path, options.clone())
                        .await
                        .expect("open the events journal");
                    let durability = events_durability(&journal);
                    *self.file.lock().unwrap() = Some(journal);
                    durability
                }
                Journal::Shared(options) => {
                    let journal = SharedFileEventJournal::open(&self.path, options.clone())
                        .await
                        .expect("open the shared events journal");
                    let durability = events_durability(&journal);
                    *self.shared.lock().unwrap() = Some(journal);
                    durability
                }
            };
            Arc::new(match self.outbox.open().await {
                Some(outbox) => durability.shared_outbox(outbox),
                None => durability,
            })
        }

        async fn kill(&self, kv: Arc<EventsDurability>) {
            drop(kv);
            let file = self.file.lock().unwrap().take();
            if let Some(journal) = file {
                journal.storage().simulate_crash().await;
            }
            // A shared journal holds nothing between operations: dropping it is a kill.
            drop(self.shared.lock().unwrap().take());
        }

        async fn close(&self, kv: Arc<EventsDurability>) {
            drop(kv);
            let file = self.file.lock().unwrap().take();
            if let Some(journal) = file {
                journal.close().await.expect("close");
            }
            let shared = self.shared.lock().unwrap().take();
            if let Some(journal) = shared {
                journal.close().await;
            }
        }
    }

    /// Postgres as the shared outbox, on a fresh table prefix; `None` without a server.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_outbox() -> Option<impl Fn() -> std::future::Ready<EventsBackend>> {
        use botmesh_durability::PostgresKv;
        use botmesh_durability::backends::postgres::PostgresConfig;

        let pg = crate::servers::postgres::Pg::new()?;
        Some(move || {
            let prefix = pg.prefix();
            let config = PostgresConfig::new().table_prefix(&prefix);
            let kv = PostgresKv::new_with(&pg.url, config).expect("the test server's URL");
            let outbox: Arc<dyn DurableKv> = Arc::new(kv);
            std::future::ready(fresh(
                Journal::File(FileOptions::new().append_log(true)),
                Outbox::Kv(outbox),
            ))
        })
    }

    /// Redis as the shared outbox of a shared journal, on a fresh key prefix; `None` without
    /// a server.
    #[cfg(feature = "redis")]
    pub(crate) fn redis_outbox() -> Option<impl Fn() -> std::future::Ready<EventsBackend>> {
        let rd = crate::servers::redis_server::Rd::new()?;
        Some(move || {
            let outbox = Outbox::Redis {
                url: rd.url.clone(),
                prefix: rd.prefix(),
            };
            std::future::ready(fresh(
                Journal::Shared(SharedFileOptions::new().fsync(false)),
                outbox,
            ))
        })
    }
}

#[cfg(feature = "file")]
suites!(
    events_file_journal,
    Some(|| std::future::ready(events_backend::fresh(
        events_backend::Journal::File(botmesh_durability::FileOptions::new().append_log(true)),
        events_backend::Outbox::Journal
    ))),
    seeds: 8
);

#[cfg(feature = "file")]
suites!(
    events_shared_snapshot,
    Some(|| std::future::ready(events_backend::fresh(
        events_backend::Journal::Shared(
            botmesh_durability::SharedFileOptions::new().fsync(false)
        ),
        events_backend::Outbox::Journal
    ))),
    seeds: 4
);

#[cfg(feature = "file")]
suites!(
    events_shared_append_log,
    Some(|| std::future::ready(events_backend::fresh(
        events_backend::Journal::Shared(
            botmesh_durability::SharedFileOptions::new()
                .fsync(false)
                .compact_every(5)
        ),
        events_backend::Outbox::Journal
    ))),
    seeds: 4
);

#[cfg(feature = "file")]
suites!(
    events_memory_outbox,
    Some(|| std::future::ready(events_backend::fresh(
        events_backend::Journal::File(botmesh_durability::FileOptions::new().append_log(true)),
        events_backend::memory_outbox()
    ))),
    seeds: 4
);

#[cfg(all(feature = "file", feature = "postgres"))]
suites!(events_postgres_outbox, events_backend::postgres_outbox(), seeds: 4);

#[cfg(all(feature = "file", feature = "redis"))]
suites!(events_redis_outbox, events_backend::redis_outbox(), seeds: 4);
