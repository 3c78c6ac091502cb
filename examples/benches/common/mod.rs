//! What the shop's benches share: the closed loop of chats on `MockProvider` (each writes its
//! next message once the bot answered the previous one), the replies it waits for, and its
//! figures; and the shop's store and journals on a server. Each bench uses a part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh::durability::backends::postgres::PostgresConfig;
use botmesh::durability::backends::redis::RedisConfig;
use botmesh::durability::{DurableKv, PostgresKv, PostgresStore, RedisKv, RedisStore, Store};
use botmesh::prelude::Bot;
use botmesh::testing::MockProvider;
use tokio::sync::Notify;

/// Replies seen per chat, and one wake-up per chat: a reply wakes only the chat task waiting
/// for it (one `Notify` shared by every chat would wake all 200 tasks at each reply, and the
/// harness would then cost more than some of the variants it measures).
#[derive(Default)]
pub(crate) struct Replies {
    chats: Mutex<HashMap<String, Arc<ChatReplies>>>,
}

impl Replies {
    /// Counts each reply when the bot's `after` send hook sees it (the send journaled as
    /// sent, its ledger row written).
    pub(crate) fn count_after_sends(self: &Arc<Self>, bot: &Bot) {
        let replies = Arc::clone(self);
        bot.after_send(move |info| {
            let chat = replies.chat(&info.chat.0);
            async move { chat.replied() }
        });
    }

    /// Counts each reply when `provider` receives it (what the chat's user sees).
    pub(crate) fn count_received(self: &Arc<Self>, provider: &MockProvider) {
        let replies = Arc::clone(self);
        provider.on_send(move |sent| replies.chat(&sent.chat.0).replied());
    }

    /// The replies of `chat`.
    pub(crate) fn chat(&self, chat: &str) -> Arc<ChatReplies> {
        self.chats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(chat.to_owned())
            .or_default()
            .clone()
    }
}

/// One chat's replies.
#[derive(Default)]
pub(crate) struct ChatReplies {
    count: AtomicUsize,
    changed: Notify,
}

impl ChatReplies {
    /// Counts a reply and wakes the chat's task (a permit is stored when the task is not
    /// waiting yet: no reply is missed).
    pub(crate) fn replied(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_one();
    }
}

/// One chat's order, the script of [`closed_loop`]'s chats.
pub(crate) const ORDER: [&str; 4] = ["/order", "coffee", "2", "yes"];

/// How long a chat of [`closed_loop`] waits for an answer before the bench fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// Runs `chats` chats (`chat0`, `chat1`, …) at once, each placing [`ORDER`] `rounds` times,
/// each message sent to a replica picked at random (a load balancer without chat affinity;
/// with one replica, always that one) once the previous one was answered (a reply counted in
/// `replies`). Every message's latency to its first answer, sorted.
pub(crate) async fn closed_loop(
    replicas: &[MockProvider],
    replies: &Arc<Replies>,
    chats: usize,
    rounds: usize,
) -> Vec<Duration> {
    let replicas = Arc::new(replicas.to_vec());
    let mut tasks = Vec::new();
    for c in 0..chats {
        let (replicas, replies) = (Arc::clone(&replicas), Arc::clone(replies));
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(c as u64);
            let chat = format!("chat{c}");
            let replies = replies.chat(&chat);
            let mut latencies = Vec::with_capacity(rounds * ORDER.len());
            for (n, text) in ORDER.iter().cycle().take(rounds * ORDER.len()).enumerate() {
                let answered = replies.count.load(Ordering::SeqCst);
                let sent = Instant::now();
                let to = &replicas[rng.usize(..replicas.len())];
                to.say(&chat, &format!("m{n}"), text)
                    .await
                    .expect("the bot accepts");
                while replies.count.load(Ordering::SeqCst) <= answered {
                    if tokio::time::timeout(PATIENCE, replies.changed.notified())
                        .await
                        .is_err()
                    {
                        panic!("{chat}: no answer to {text:?} within {PATIENCE:?}");
                    }
                }
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("a chat's task"));
    }
    all.sort();
    all
}

/// One run's figures.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Figures {
    /// Messages answered per second.
    pub per_sec: f64,
    /// The median latency of a message to its first answer.
    pub p50: Duration,
    /// The 99th percentile of that latency.
    pub p99: Duration,
}

impl Figures {
    /// The figures of `sorted` latencies (one per message) over `elapsed`.
    pub(crate) fn of(sorted: &[Duration], elapsed: Duration) -> Self {
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        Self {
            per_sec: sorted.len() as f64 / elapsed.as_secs_f64(),
            p50: at(0.5),
            p99: at(0.99),
        }
    }
}

/// A server the shop's store and journals run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Server {
    Postgres,
    Redis,
}

impl Server {
    /// The server's name in a bench's report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Server::Postgres => "postgres",
            Server::Redis => "redis",
        }
    }
}

/// The shop's store and its journals on `server` at `url`, each on connections of its own,
/// under `prefix` (the table prefix `<prefix>_` on Postgres, the key prefix on Redis); on
/// Postgres, pools of `max_connections` when given.
pub(crate) async fn store_and_journals(
    server: Server,
    url: &str,
    prefix: &str,
    max_connections: Option<usize>,
) -> Result<(Arc<dyn Store>, Arc<dyn DurableKv>), String> {
    match server {
        Server::Postgres => {
            let mut config = PostgresConfig::new().table_prefix(format!("{prefix}_"));
            if let Some(n) = max_connections {
                config = config.max_connections(n);
            }
            let kv = PostgresKv::connect_with(url, config.clone());
            opened(PostgresStore::connect_with(url, config), kv).await
        }
        Server::Redis => {
            let config = RedisConfig::new().prefix(prefix);
            let kv = RedisKv::open_with(url, config.clone());
            opened(RedisStore::open_with(url, config), kv).await
        }
    }
}

/// Removes what a run left on `server` at `url` under `prefix` (as given to
/// [`store_and_journals`]): on Postgres the tables, sequences and functions named
/// `<prefix>_…`, on Redis the keys `<prefix>:…`. A bench calls it once its bots stopped, so
/// that runs do not pile their journals up in the user's database.
pub(crate) async fn remove_run_data(server: Server, url: &str, prefix: &str) -> Result<(), String> {
    match server {
        Server::Postgres => {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("connecting to {url}: {e}"))?;
            let connection = tokio::spawn(connection);
            let start = format!("{prefix}_");
            // Tables first (their own sequences go with them), then the journals' version
            // sequence and apply function.
            let kinds = [
                (
                    "TABLE",
                    "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables \
                     WHERE starts_with(tablename, $1)",
                ),
                (
                    "SEQUENCE",
                    "SELECT format('%I.%I', schemaname, sequencename) FROM pg_sequences \
                     WHERE starts_with(sequencename, $1)",
                ),
                (
                    "FUNCTION",
                    "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE starts_with(p.proname, $1)",
                ),
            ];
            for (kind, list) in kinds {
                let rows = client
                    .query(list, &[&start])
                    .await
                    .map_err(|e| format!("listing the {kind}s of {start}: {e}"))?;
                let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                if !names.is_empty() {
                    let drop = format!("DROP {kind} IF EXISTS {} CASCADE", names.join(", "));
                    client
                        .batch_execute(&drop)
                        .await
                        .map_err(|e| format!("dropping the {kind}s of {start}: {e}"))?;
                }
            }
            drop(client);
            let _ = connection.await;
            Ok(())
        }
        Server::Redis => {
            let client = redis::Client::open(url).map_err(|e| format!("{url}: {e}"))?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("connecting to {url}: {e}"))?;
            let pattern = format!("{prefix}:*");
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("listing the keys {pattern}: {e}"))?;
                if !keys.is_empty() {
                    let () = redis::cmd("UNLINK")
                        .arg(&keys)
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| format!("removing the keys {pattern}: {e}"))?;
                }
                if next == 0 {
                    return Ok(());
                }
                cursor = next;
            }
        }
    }
}

/// The store and the journals `store` and `kv` open (the journals first).
async fn opened<S: Store + 'static, K: DurableKv + 'static>(
    store: impl Future<Output = Result<S, impl std::fmt::Display>>,
    kv: impl Future<Output = Result<K, impl std::fmt::Display>>,
) -> Result<(Arc<dyn Store>, Arc<dyn DurableKv>), String> {
    let kv = kv.await.map_err(|e| format!("the journals: {e}"))?;
    let store = store.await.map_err(|e| format!("the store: {e}"))?;
    Ok((Arc::new(store), Arc::new(kv)))
}
