//! The end-to-end channel benchmark's harness: the shop bot on Telegram against the fake Bot
//! API of `providers/tests/fakes/telegram.rs`, N chats each ordering in a closed loop.
//!
//! The bot is built as a user builds it (a [`TelegramProvider`] on the fake's base URL, the
//! shop's routes, a store, `start`). A driver task on the fake's runtime plays the chats:
//! each chat sends its next message once the fake received the bot's reply to the previous
//! one. In polling mode the messages wait in the fake's queue for `getUpdates`; in webhook
//! mode the driver posts each one to the bot's webhook (at most [`WEBHOOK_CONNECTIONS`] at a
//! time, Telegram's default `max_connections`). A reply's latency runs from the moment the
//! fake handed the update out (returned it from `getUpdates`, or started posting it on one of
//! its connections) to the
//! moment it received the bot's `sendMessage`.
//!
//! Used by `benches/channel/main.rs` and, with a few chats, by `tests/channel_bench.rs`.
#![allow(unreachable_pub, dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh::durability::{MemoryStore, SqliteStore};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh_examples::shop;
use botmesh_providers::telegram::{TelegramConfig, TelegramProvider};
use botmesh_providers::webhook::{RunningWebhookServer, WebhookServer};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

use crate::fakes::telegram::{FakeTelegram, Observed, updates};
use common::{Server, remove_run_data, store_and_journals};

/// The shop benches' shared parts (the store and journals on a server).
#[path = "../common/mod.rs"]
mod common;

/// The bot token the fake accepts.
pub const TOKEN: &str = "4242:bench-token";
/// The webhook's secret token.
const SECRET: &str = "bench-secret";
/// Concurrent webhook deliveries (Telegram's default `max_connections`).
pub const WEBHOOK_CONNECTIONS: usize = 40;
/// What each chat says in one order, each answered by one reply.
pub const SCRIPT: [&str; 4] = ["/order", "coffee", "2", "yes"];
/// Replies that mean a message was taken for another question.
const WRONG: [&str; 3] = [
    "Sorry, we don't sell that.",
    "Please answer with a whole number",
    "Please answer Yes or No.",
];

/// Where the bot keeps its data and journals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// `MemoryStore`, durability off.
    None,
    /// `SqliteStore`, durability off.
    SqliteStoreOnly,
    /// `SqliteStore` with its journals in the same file (what the shop binary runs).
    SqliteDurable,
    /// `PostgresStore` + `PostgresKv`.
    Postgres,
    /// `RedisStore` + `RedisKv`.
    Redis,
}

impl Storage {
    /// Every storage, in table order.
    pub const ALL: [Storage; 5] = [
        Storage::None,
        Storage::SqliteStoreOnly,
        Storage::SqliteDurable,
        Storage::Postgres,
        Storage::Redis,
    ];

    /// The short name (`CHANNEL_BENCH_ONLY`).
    pub fn key(self) -> &'static str {
        match self {
            Storage::None => "none",
            Storage::SqliteStoreOnly => "sqlite-store",
            Storage::SqliteDurable => "sqlite",
            Storage::Postgres => "postgres",
            Storage::Redis => "redis",
        }
    }

    /// The table's label.
    pub fn label(self) -> &'static str {
        match self {
            Storage::None => "no store",
            Storage::SqliteStoreOnly => "SQLite store, no journals",
            Storage::SqliteDurable => "SQLite durable",
            Storage::Postgres => "Postgres durable",
            Storage::Redis => "Redis durable",
        }
    }

    /// The environment variable naming the server, for the server backends.
    pub fn server_var(self) -> Option<&'static str> {
        match self {
            Storage::Postgres => Some("BOTMESH_TEST_POSTGRES_URL"),
            Storage::Redis => Some("BOTMESH_TEST_REDIS_URL"),
            _ => None,
        }
    }
}

/// How updates reach the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `getUpdates` long polling.
    Polling,
    /// Telegram's webhook mode: the fake posts each update.
    Webhook,
}

impl Mode {
    /// The table's label.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Polling => "polling",
            Mode::Webhook => "webhook",
        }
    }
}

/// One run's parameters.
#[derive(Debug, Clone)]
pub struct Run {
    /// Concurrent chats.
    pub chats: usize,
    /// Orders each chat places.
    pub orders: usize,
    /// Where SQLite files go.
    pub dir: PathBuf,
}

/// One run's measurements.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Messages answered.
    pub messages: usize,
    /// From the first message handed out to the last reply.
    pub elapsed: Duration,
    /// Every reply's latency, sorted.
    pub latencies: Vec<Duration>,
    /// CPU time of the process's threads but the fake's, over the run.
    pub cpu: Duration,
    /// Bytes the process made the kernel write to storage over the run.
    pub written: u64,
    /// Peak resident memory over the run (the process's, fake included), when known.
    pub peak_rss: Option<u64>,
    /// For SQLite: the writer's work over the run.
    pub sqlite_writes: Option<Writes>,
    /// For Postgres: the transactions the server committed in the bench's database over the
    /// run (`pg_stat_database.xact_commit`; other clients of that database count too).
    pub server_commits: Option<u64>,
    /// For Redis: the commands the server ran over the run, all of them and `EVALSHA` (the
    /// scripts), from `INFO commandstats` (server-wide: other clients count too).
    pub server_commands: Option<(u64, u64)>,
}

impl Outcome {
    /// Messages per second.
    pub fn rate(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency at quantile `q`.
    pub fn latency(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        self.latencies[((self.latencies.len() - 1) as f64 * q).round() as usize]
    }
}

/// What SQLite's writer thread did over a run.
#[derive(Debug, Clone, Copy)]
pub struct Writes {
    /// Write requests.
    pub requests: u64,
    /// Transactions (group commits).
    pub transactions: u64,
    /// Time running the requests' statements.
    pub statements: Duration,
    /// Time in `COMMIT` (WAL write and sync).
    pub commits: Duration,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The bot could not be built or started.
    #[error("the bot ({storage:?}): {reason}")]
    Bot {
        /// The storage of the run.
        storage: Storage,
        /// Why.
        reason: String,
    },
    /// A chat got no reply in time, or a wrong one.
    #[error("the chats: {0}")]
    Chats(String),
}

fn bot_error(storage: Storage) -> impl Fn(String) -> BenchError {
    move |reason| BenchError::Bot { storage, reason }
}

/// The name of the fake's thread, whose CPU time a run does not count.
pub const FAKE_THREAD: &str = "fake-telegram";

/// Runs the shop on `storage` over `mode` against a fresh fake started on `fake_rt` (the
/// chats' driver runs there too); the bot runs on the current runtime.
pub async fn run(
    fake_rt: &tokio::runtime::Handle,
    storage: Storage,
    mode: Mode,
    run: &Run,
) -> Result<Outcome, BenchError> {
    let fake = fake_rt
        .spawn(FakeTelegram::start(TOKEN))
        .await
        .map_err(|e| BenchError::Chats(format!("the fake did not start: {e}")))?;
    fake.stop_recording();
    let observed = fake.observe();
    let (bot, server, sqlite, data) = build(storage, mode, &fake, &run.dir).await?;
    let writes = || {
        sqlite.as_ref().map(|s| {
            let stats = s.write_stats();
            Writes {
                requests: stats.requests,
                transactions: stats.transactions,
                statements: stats.statements,
                commits: stats.commits,
            }
        })
    };
    bot.start()
        .await
        .map_err(|e| bot_error(storage)(e.to_string()))?;
    let webhook = server
        .as_ref()
        .map(|s| format!("http://{}/telegram", s.local_addr()));
    reset_peak_rss();
    let cpu_before = cpu_but(FAKE_THREAD);
    let written_before = written_bytes();
    let writes_before = writes();
    let commits_before = server_commits(storage).await;
    let commands_before = server_commands(storage).await;
    let driver = fake_rt.spawn(drive(fake, observed, webhook, run.chats, run.orders));
    let result = driver
        .await
        .map_err(|e| BenchError::Chats(format!("the driver failed: {e}")))?;
    let cpu = cpu_but(FAKE_THREAD).saturating_sub(cpu_before);
    let written = written_bytes().saturating_sub(written_before);
    let peak_rss = peak_rss();
    let sqlite_writes = writes().zip(writes_before).map(|(after, before)| Writes {
        requests: after.requests - before.requests,
        transactions: after.transactions - before.transactions,
        statements: after.statements.saturating_sub(before.statements),
        commits: after.commits.saturating_sub(before.commits),
    });
    bot.stop()
        .await
        .map_err(|e| bot_error(storage)(e.to_string()))?;
    if let Some(server) = server {
        server.shutdown().await;
    }
    let server_commits = match commits_before {
        Some(before) => {
            // The bot's connections report their counts when they close (on `stop`). Real time,
            // on purpose: the bench runs against a real Postgres server, whose server processes
            // report as they exit, on the wall clock, with nothing a client could await.
            tokio::time::sleep(Duration::from_millis(500)).await;
            server_commits(storage)
                .await
                .map(|after| after.saturating_sub(before))
        }
        None => None,
    };
    let server_commands = match (commands_before, server_commands(storage).await) {
        (Some((all, scripts)), Some((all_after, scripts_after))) => Some((
            all_after.saturating_sub(all + 1),
            scripts_after.saturating_sub(scripts),
        )),
        _ => None,
    };
    if let Some((server, url, prefix)) = data
        && let Err(e) = remove_run_data(server, &url, &prefix).await
    {
        tracing::warn!(error = %e, "the run's data stays on the server");
    }
    let (elapsed, mut latencies) = result?;
    latencies.sort();
    Ok(Outcome {
        messages: latencies.len(),
        elapsed,
        latencies,
        cpu,
        written,
        peak_rss,
        sqlite_writes,
        server_commits,
        server_commands,
    })
}

/// For Redis: the commands the server ran so far (every command's `calls` in `INFO
/// commandstats`, and `EVALSHA`'s), asked on a connection of its own; `None` for the other
/// storages, or when the server cannot be asked (a line says why).
async fn server_commands(storage: Storage) -> Option<(u64, u64)> {
    if storage != Storage::Redis {
        return None;
    }
    let url = server_url(storage).ok()?;
    let asked = async {
        let client = redis::Client::open(url.as_str())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("INFO")
            .arg("commandstats")
            .query_async::<String>(&mut conn)
            .await
    };
    match asked.await {
        Ok(info) => {
            let calls = |line: &str| {
                let (_, rest) = line.split_once("calls=")?;
                rest.split(',').next()?.parse::<u64>().ok()
            };
            let lines = info.lines().filter(|l| l.starts_with("cmdstat_"));
            let all = lines.clone().filter_map(calls).sum();
            let scripts = lines
                .filter(|l| l.starts_with("cmdstat_evalsha:"))
                .filter_map(calls)
                .sum();
            Some((all, scripts))
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read INFO commandstats: no command count");
            None
        }
    }
}

/// For Postgres: the transactions committed so far in the database of the server's URL
/// (`pg_stat_database.xact_commit`), read on a connection of its own; `None` for the other
/// storages, or when the server cannot be asked (a line says why).
async fn server_commits(storage: Storage) -> Option<u64> {
    if storage != Storage::Postgres {
        return None;
    }
    let url = server_url(storage).ok()?;
    let asked = async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        let connection = tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await?;
        drop(client);
        let _ = connection.await;
        row.try_get::<_, i64>(0)
    };
    match asked.await {
        Ok(n) => u64::try_from(n).ok(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read pg_stat_database: no transaction count");
            None
        }
    }
}

/// The bot, its webhook server, its SQLite store, and where its server keeps its data
/// (server, URL, prefix).
type Built = (
    Bot,
    Option<RunningWebhookServer>,
    Option<SqliteStore>,
    Option<(Server, String, String)>,
);

async fn build(
    storage: Storage,
    mode: Mode,
    fake: &FakeTelegram,
    dir: &Path,
) -> Result<Built, BenchError> {
    let err = bot_error(storage);
    let config = TelegramConfig::new(TOKEN)
        .api_base(&fake.base_url())
        .map_err(|e| err(e.to_string()))?;
    let config = match mode {
        Mode::Polling => config.polling(Duration::from_secs(1)),
        Mode::Webhook => config
            .webhook("/telegram", SECRET)
            .map_err(|e| err(e.to_string()))?,
    };
    let telegram = TelegramProvider::new(config).map_err(|e| err(e.to_string()))?;
    let server = match mode {
        Mode::Polling => None,
        Mode::Webhook => Some(
            WebhookServer::new()
                .mount(telegram.webhook_routes())
                .bind("127.0.0.1:0")
                .await
                .map_err(|e| err(e.to_string()))?,
        ),
    };
    let builder = Bot::builder(telegram).bot_id(shop::BOT_ID);
    let sqlite = matches!(storage, Storage::SqliteStoreOnly | Storage::SqliteDurable)
        .then(|| SqliteStore::open(dir.join(format!("shop-{}.db", unique()))));
    let mut data = None;
    let builder = match (storage, sqlite.clone()) {
        (Storage::SqliteStoreOnly, Some(store)) => {
            builder.store(store).durability(DurabilityOptions::off())
        }
        (Storage::SqliteDurable, Some(store)) => builder.store(store),
        (Storage::None | Storage::SqliteStoreOnly | Storage::SqliteDurable, _) => builder
            .store(MemoryStore::new())
            .durability(DurabilityOptions::off()),
        (Storage::Postgres | Storage::Redis, _) => {
            let server = match storage {
                Storage::Postgres => Server::Postgres,
                _ => Server::Redis,
            };
            let url = server_url(storage)?;
            let prefix = format!("chbench{}", unique());
            let (store, kv) = store_and_journals(server, &url, &prefix, None)
                .await
                .map_err(&err)?;
            data = Some((server, url, prefix));
            builder
                .store_arc(store)
                .durability(DurabilityOptions::shared(kv))
        }
    };
    let bot = shop::shop_bot(builder).map_err(|e| err(e.to_string()))?;
    Ok((bot, server, sqlite, data))
}

fn server_url(storage: Storage) -> Result<String, BenchError> {
    let var = storage.server_var().unwrap_or_default();
    std::env::var(var).map_err(|_| bot_error(storage)(format!("{var} is not set")))
}

/// A suffix that differs between runs (file names, table prefixes).
fn unique() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64 % 1_000_000_000)
}

/// A chat's progress.
struct Chat {
    /// Messages sent so far.
    sent: usize,
    /// When the fake handed out the chat's message waiting for its reply.
    handed_out: Option<Instant>,
}

/// Plays the chats until each placed its orders; returns the elapsed time and the latencies.
async fn drive(
    fake: FakeTelegram,
    mut observed: mpsc::UnboundedReceiver<Observed>,
    webhook: Option<String>,
    chats: usize,
    orders: usize,
) -> Result<(Duration, Vec<Duration>), BenchError> {
    let total = SCRIPT.len() * orders;
    let poster = webhook.map(|url| Poster {
        url: Arc::new(url),
        client: reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("an HTTP client"),
        slots: Arc::new(Semaphore::new(WEBHOOK_CONNECTIONS)),
        started: Arc::default(),
    });
    let mut state: HashMap<i64, Chat> = (1..=chats as i64)
        .map(|c| {
            (
                c,
                Chat {
                    sent: 0,
                    handed_out: None,
                },
            )
        })
        .collect();
    let mut latencies = Vec::with_capacity(chats * total);
    let started = Instant::now();
    let mut last = started;
    for chat in 1..=chats as i64 {
        if let Some(c) = state.get_mut(&chat) {
            c.sent = 1;
        }
        send(&fake, poster.as_ref(), chat, 0);
    }
    let mut finished = 0;
    while finished < chats {
        let event = match tokio::time::timeout(Duration::from_secs(30), observed.recv()).await {
            Ok(Some(event)) => event,
            Ok(None) => return Err(BenchError::Chats("the fake stopped".to_owned())),
            Err(_) => {
                return Err(BenchError::Chats(format!(
                    "no progress for 30 s ({finished} of {chats} chats done)"
                )));
            }
        };
        match event {
            Observed::HandedOut(ids, at) => {
                for (_, chat) in ids {
                    if let Some(c) = state.get_mut(&chat) {
                        c.handed_out.get_or_insert(at);
                    }
                }
            }
            Observed::Delivered(chat, text, at) => {
                if WRONG.iter().any(|w| text.starts_with(w)) {
                    return Err(BenchError::Chats(format!(
                        "chat {chat}: an answer taken for another question: {text:?}"
                    )));
                }
                let Some(c) = state.get_mut(&chat) else {
                    continue;
                };
                if let Some(poster) = &poster {
                    c.handed_out = poster.started.lock().expect("lock").remove(&chat);
                }
                if let Some(t0) = c.handed_out.take() {
                    latencies.push(at.saturating_duration_since(t0));
                }
                last = at;
                if c.sent == total {
                    finished += 1;
                    continue;
                }
                let i = c.sent;
                c.sent += 1;
                send(&fake, poster.as_ref(), chat, i);
            }
        }
    }
    Ok((last.saturating_duration_since(started), latencies))
}

/// Posts updates to the bot's webhook, as Telegram does.
struct Poster {
    url: Arc<String>,
    client: reqwest::Client,
    slots: Arc<Semaphore>,
    /// When each chat's delivery in flight started (got a connection).
    started: Arc<std::sync::Mutex<HashMap<i64, Instant>>>,
}

/// Sends chat `chat`'s message number `i`: queued for `getUpdates`, or posted to the webhook.
fn send(fake: &FakeTelegram, poster: Option<&Poster>, chat: i64, i: usize) {
    let text = SCRIPT[i % SCRIPT.len()];
    let payload = updates::text(chat, i as i64 + 1, text);
    let Some(poster) = poster else {
        fake.push_update(payload);
        return;
    };
    let mut payload = payload;
    payload["update_id"] = json!(chat * 1_000_000 + i as i64);
    let (url, client, slots) = (
        poster.url.clone(),
        poster.client.clone(),
        poster.slots.clone(),
    );
    let started = poster.started.clone();
    tokio::spawn(async move {
        let Ok(_slot) = slots.acquire().await else {
            return;
        };
        started.lock().expect("lock").insert(chat, Instant::now());
        // Telegram retries a delivery until it gets a 2xx.
        let poll = crate::fakes::poll::Poll::within(Duration::from_secs(5));
        loop {
            let sent = client
                .post(url.as_str())
                .header("X-Telegram-Bot-Api-Secret-Token", SECRET)
                .json(&payload)
                .send()
                .await;
            if sent.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            if !poll.again().await {
                tracing::error!(chat, "a webhook delivery failed for 5 s");
                return;
            }
        }
    });
}

/// CPU time of this process's threads but those named `skip` (`/proc/self/task/*/schedstat`;
/// zero elsewhere).
pub fn cpu_but(skip: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut ns = 0u64;
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if name.trim_end() == skip {
            continue;
        }
        ns += std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Duration::from_nanos(ns)
}

/// Bytes this process made the kernel write to storage so far (`/proc/self/io`; 0 elsewhere).
pub fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("write_bytes: ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the process's peak resident memory to its current size (Linux `clear_refs`).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak resident memory since the last reset, in bytes (`VmHWM`).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}
