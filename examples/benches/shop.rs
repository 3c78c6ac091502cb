//! The shop conversation over 200 concurrent chats, each a closed loop (a chat writes its next
//! message once the bot answered the previous one): `/order` → item → quantity → `yes`.
//! A reply counts as answered when the provider receives it ([`MockProvider::on_send`]), what
//! the chat's user sees; the bot's bookkeeping of the send (marked sent, ledger row) may then
//! still run beside the chat's next message, as it does with a real user.
//! `SHOP_BENCH_LOOP=after-send` waits for the bot's `after` send hook instead: a reply then
//! counts once its send is journaled as sent and its ledger row written.
//! Runs it with durability off, `MemoryDurability`, `FileDurability` (append log, fsync on) and
//! SQLite (store and journal in one file, `synchronous=FULL`), and in the same run measures the
//! raw ceiling of this disk: single-row fsync'd commits per second through rusqlite, and
//! append+fsync per second on a plain file. Prints messages/s, p50/p99 latency (a message to
//! the bot's answer), and the ratios the performance goals are stated in.
//!
//! With `BOTMESH_TEST_POSTGRES_URL` / `BOTMESH_TEST_REDIS_URL` set, the same workload also runs
//! on `PostgresKv` + `PostgresStore` and `RedisKv` + `RedisStore`, beside the raw ceiling of the
//! same server in the same run: single-row INSERT commits per second through tokio-postgres
//! (one connection), and SET round trips per second through the redis crate (one connection).
//!
//! The machine's speed drifts (on the 2-core CI machine, by a factor of two for minutes at a
//! time), so the variants run in rounds (`SHOP_BENCH_REPEAT`, default 3): each round runs every
//! variant once, measuring each storage's raw ceiling right before and right after the variant
//! that uses it (the ratio takes their mean), and runs the memory variant in pairs
//! (`SHOP_BENCH_PAIRS`, default 5): `off, memory, off, memory, off, …`, each memory run's ratio
//! over the mean of the two no-durability runs around it (a run is a fraction of a second, so
//! one pair is noisy; see [`memory_pairs`]).
//! The table gives the median of the runs, with every run's figure beside it, and each
//! ratio is the median of the rounds' (memory: the pairs') ratios (a ratio taken within one
//! round compares figures measured seconds apart).
//!
//! The SQLite variant runs on a runtime of its own with one tokio worker fewer than the
//! machine's cores ([`SqliteStore::worker_threads_beside_writer`], as the shop binary), so
//! that the store's writer thread has a core (`SHOP_BENCH_SQLITE_WORKERS=2` runs it with
//! two workers instead); the other variants use a worker per core.
//!
//! Each durable variant's measured window ends with a read of the journal's due-time index
//! (`inbox().list(Done, 1)`, what the sweeper reads every second): `MemoryDurability` brings
//! that index up to date only when it is read, and the read puts the upkeep of the run's
//! writes inside the window, as it is under sustained load.
//!
//! Each run also prints the CPU time per message of tokio's worker threads and the share of
//! the run they spent on a CPU (and, for SQLite, the CPU time of its writer thread, and how
//! the writer's time splits between running requests and `COMMIT`), read from
//! `/proc/self/task/*/schedstat` on Linux, and the minor page faults per message, read from
//! `/proc/self/stat`.
//!
//! `cargo bench -p botmesh-examples --bench shop` (`SHOP_BENCH_CHATS`, `SHOP_BENCH_SECS` for
//! the length of each ceiling measurement (default 1 s), `SHOP_BENCH_ROUNDS` for the orders
//! each chat places (default 5), `SHOP_BENCH_REPEAT` for the rounds,
//! `SHOP_BENCH_ONLY=sqlite,off` to run only some variants, `SHOP_BENCH_DIR` to keep the
//! variants' files in that directory instead of a temporary one, `SHOP_BENCH_WORKERS` for the
//! tokio workers of the variants other than SQLite (default: one per core),
//! `SHOP_BENCH_PERF_CTL` to profile only the measured windows with `perf record`, see
//! [`perf_control`]).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh::durability::store::rusqlite;
use botmesh::durability::{FileDurability, FileOptions, InboxState, MemoryStore, SqliteStore};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use botmesh_examples::shop;
use common::{Figures, ORDER, Replies, Server, closed_loop, remove_run_data, store_and_journals};

/// The shop binary's allocator (see `src/bin/shop.rs`): the figures are the demo's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Variant {
    Off,
    Memory,
    File,
    Sqlite,
    Postgres,
    Redis,
}

/// Whether a chat's next message waits for the bot's `after` send hook (the send journaled
/// as sent, its ledger row written) instead of the provider's receipt of the reply:
/// `SHOP_BENCH_LOOP=after-send`, which measures the bot's bookkeeping of each send as well.
fn after_send_loop() -> bool {
    std::env::var("SHOP_BENCH_LOOP").is_ok_and(|v| v == "after-send")
}

async fn run(
    variant: Variant,
    chats: usize,
    rounds: usize,
    dir: &std::path::Path,
) -> (f64, Duration, Duration) {
    let mock = MockProvider::new();
    let mut builder = Bot::builder(mock.clone()).bot_id("shop");
    let mut sqlite = None;
    let mut data = None;
    match variant {
        Variant::Off => builder = builder.store(MemoryStore::new()),
        Variant::Memory => {
            builder = builder
                .store(MemoryStore::new())
                .durability(DurabilityOptions::memory())
        }
        Variant::File => {
            let path = dir.join(format!("journal-{}.json", fastrand_suffix()));
            let file = FileDurability::open(&path, FileOptions::new().append_log(true).fsync(true))
                .await
                .expect("file journal opens");
            builder = builder
                .store(MemoryStore::new())
                .durability(DurabilityOptions::backend(file))
        }
        Variant::Sqlite => {
            let store = SqliteStore::open(dir.join(format!("shop-{}.db", fastrand_suffix())));
            sqlite = Some(store.clone());
            builder = builder
                .store(store.clone())
                .durability(DurabilityOptions::backend(store.durability_kv()))
        }
        Variant::Postgres | Variant::Redis => {
            let (server, var, pool) = match variant {
                Variant::Postgres => (Server::Postgres, "BOTMESH_TEST_POSTGRES_URL", Some(32)),
                _ => (Server::Redis, "BOTMESH_TEST_REDIS_URL", None),
            };
            let url = std::env::var(var).expect(var);
            let prefix = format!("bench{}", fastrand_suffix() % 1_000_000);
            let (store, kv) = store_and_journals(server, &url, &prefix, pool)
                .await
                .expect("the server's store and journals");
            data = Some((server, url, prefix));
            builder = builder
                .store_arc(store)
                .durability(DurabilityOptions::shared(kv))
        }
    }
    let bot = shop::shop_bot(builder).expect("shop builds");
    let replies = Arc::new(Replies::default());
    if after_send_loop() {
        replies.count_after_sends(&bot);
    } else {
        replies.count_received(&mock);
    }
    bot.start().await.expect("bot starts");
    let io_before = written_bytes();
    let cpu_before = thread_cpu();
    let faults_before = minor_faults();
    perf_control("enable");
    let started = Instant::now();
    let latencies = closed_loop(std::slice::from_ref(&mock), &replies, chats, rounds).await;
    // The read of the due-time index the sweeper makes every second, inside the window:
    // `MemoryDurability` brings that index up to date only when it is read, so without this
    // read the upkeep the run's writes caused would fall after the window.
    if let Some(journals) = bot.durability() {
        journals
            .inbox()
            .list(InboxState::Done, 1)
            .await
            .expect("the journal lists");
    }
    let elapsed = started.elapsed();
    perf_control("disable");
    let cpu_after = thread_cpu();
    let faults = minor_faults().saturating_sub(faults_before) as f64;
    bot.idle().await;
    bot.stop().await.expect("bot stops");
    if let Some((server, url, prefix)) = data
        && let Err(e) = remove_run_data(server, &url, &prefix).await
    {
        tracing::warn!(server = server.name(), error = %e, "the run's data stays on the server");
    }
    if let Some(store) = sqlite {
        let stats = store.write_stats();
        println!(
            "  sqlite group commit ({chats} chats): {} write requests in {} transactions ({:.1} per transaction, at most {}), {:.1} per message",
            stats.requests,
            stats.transactions,
            stats.requests as f64 / stats.transactions.max(1) as f64,
            stats.largest_batch,
            stats.requests as f64 / (chats * ORDER.len() * rounds) as f64
        );
        let messages = (chats * ORDER.len() * rounds) as f64;
        println!(
            "  sqlite writer: {:.0} µs running requests + {:.0} µs in COMMIT (WAL write and fsync) per message; busy {:.0}% of the run",
            stats.statements.as_secs_f64() * 1e6 / messages,
            stats.commits.as_secs_f64() * 1e6 / messages,
            (stats.statements + stats.commits).as_secs_f64() / elapsed.as_secs_f64() * 100.0
        );
        println!(
            "  written to disk: {:.1} KiB per message",
            written_bytes().saturating_sub(io_before) as f64
                / 1024.0
                / (chats * ORDER.len() * rounds) as f64
        );
    }
    let (workers, writer) = cpu_per_message(&cpu_before, &cpu_after, chats * ORDER.len() * rounds);
    // The share of the run the workers spent on a CPU: below 100%, they waited for work.
    let busy = workers * (chats * ORDER.len() * rounds) as f64
        / (elapsed.as_secs_f64()
            * 1e6
            * tokio::runtime::Handle::current().metrics().num_workers() as f64)
        * 100.0;
    if variant == Variant::Sqlite {
        println!(
            "  CPU per message ({chats} chats): {workers:.1} µs on tokio's workers (busy {busy:.0}% of the run), {writer:.1} µs on the sqlite writer thread; {:.2} page faults",
            faults / (chats * ORDER.len() * rounds) as f64
        );
    } else {
        println!(
            "  CPU per message ({chats} chats): {workers:.1} µs on tokio's workers (busy {busy:.0}% of the run); {:.2} page faults",
            faults / (chats * ORDER.len() * rounds) as f64
        );
    }
    let figures = Figures::of(&latencies, elapsed);
    (figures.per_sec, figures.p50, figures.p99)
}

/// Bytes this process made the kernel write to storage so far (`/proc/self/io`; 0 elsewhere).
fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| {
                    l.strip_prefix("write_bytes: ")
                        .map(|v| v.trim().parse().ok())
                })
                .flatten()
        })
        .unwrap_or(0)
}

/// Minor page faults of this process so far (`/proc/self/stat`, field 10): each one a page of
/// fresh memory the kernel zeroed and mapped, which on a virtual machine can cost microseconds.
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // The command name (field 2) is in parentheses and may hold spaces: count after it.
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

fn fastrand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Single-row fsync'd commits per second through rusqlite (WAL, synchronous=FULL).
fn sqlite_ceiling(dir: &std::path::Path, secs: f64) -> f64 {
    let conn =
        rusqlite::Connection::open(dir.join(format!("ceiling-{}.db", fastrand_suffix()))).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)", [])
        .unwrap();
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        conn.execute("INSERT INTO t (v) VALUES (?1)", [vec![0u8; 200]])
            .unwrap();
        n += 1;
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Append + fsync per second on a plain file.
fn file_ceiling(dir: &std::path::Path, secs: f64) -> f64 {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("ceiling-{}.log", fastrand_suffix())))
        .unwrap();
    let line = [b'x'; 200];
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        f.write_all(&line).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Single-row INSERT commits per second through tokio-postgres, one connection.
async fn postgres_ceiling(url: &str, secs: f64) -> f64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let table = format!("bench_ceiling_{}", fastrand_suffix() % 1_000_000);
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (id bigserial PRIMARY KEY, v bytea)"
        ))
        .await
        .expect("create");
    let insert = client
        .prepare(&format!("INSERT INTO {table} (v) VALUES ($1)"))
        .await
        .expect("prepare");
    let payload = vec![0u8; 200];
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        client.execute(&insert, &[&payload]).await.expect("insert");
        n += 1;
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    let _ = client.batch_execute(&format!("DROP TABLE {table}")).await;
    rate
}

/// SET round trips per second through the redis crate, one connection.
async fn redis_ceiling(url: &str, secs: f64) -> f64 {
    let client = redis::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let key = format!("bench-ceiling-{}", fastrand_suffix());
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("x")
            .query_async(&mut conn)
            .await
            .expect("set");
        n += 1;
    }
    let _: Result<(), _> = redis::cmd("DEL").arg(&key).query_async(&mut conn).await;
    n as f64 / t0.elapsed().as_secs_f64()
}

/// The median of `values` (the upper one of an even count); 0 when empty.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// One round: every variant once (memory in [`SHOP_BENCH_PAIRS`](memory_pairs) pairs), each
/// storage's raw ceiling measured right before the variant that uses it (so a drift of the
/// machine's speed between rounds affects both sides of a ratio alike).
struct Round {
    rates: Vec<(Variant, (f64, Duration, Duration))>,
    /// Each storage's raw ceiling: the mean of the measurements right before and right after
    /// the variant's run.
    ceilings: HashMap<Variant, f64>,
    /// Each memory run's messages/s over the mean of the runs without durability right before
    /// and right after it.
    memory_ratios: Vec<f64>,
}

impl Round {
    /// A variant's messages/s over its reference, the raw ceiling of its storage: one ratio,
    /// or none without a ceiling. Memory has one ratio per pair ([`Round::memory_ratios`]).
    fn ratios(&self, v: Variant) -> Vec<f64> {
        if v == Variant::Memory {
            return self.memory_ratios.clone();
        }
        let rate = self.rates.iter().find(|(x, _)| *x == v).map(|(_, r)| r.0);
        match (rate, self.ceilings.get(&v)) {
            (Some(rate), Some(ceiling)) => vec![rate / ceiling],
            _ => Vec::new(),
        }
    }
}

/// How many times a round runs the memory variant (`SHOP_BENCH_PAIRS`, default 5), each run
/// followed by a run without durability: `off, memory, off, memory, off, …`. A run is 4,000
/// messages, a fraction of a second, and this machine's speed moves within a second, so one
/// ratio per round is noisy (0.69–0.92 over 45 rounds of the same binary); the median of
/// 15 pairs moves far less.
fn memory_pairs() -> usize {
    std::env::var("SHOP_BENCH_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1)
}

fn main() {
    let chats: usize = std::env::var("SHOP_BENCH_CHATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let secs: f64 = std::env::var("SHOP_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let rounds: usize = std::env::var("SHOP_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let repeat: usize = std::env::var("SHOP_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    // `SHOP_BENCH_DIR` keeps the variants' files (SQLite databases, file journals) for
    // inspection; by default they go to a temporary directory removed at exit.
    let kept = std::env::var_os("SHOP_BENCH_DIR").map(std::path::PathBuf::from);
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = match &kept {
        Some(kept) => {
            std::fs::create_dir_all(kept).expect("SHOP_BENCH_DIR");
            kept.as_path()
        }
        None => temp.path(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::env::var("SHOP_BENCH_WORKERS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
                }),
        )
        .enable_all()
        .build()
        .expect("runtime");
    // The SQLite variant runs as the shop binary does: on a runtime that leaves its writer
    // thread a core (`SHOP_BENCH_SQLITE_WORKERS` sets another worker count).
    let sqlite_workers = std::env::var("SHOP_BENCH_SQLITE_WORKERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(SqliteStore::worker_threads_beside_writer);
    let rt_sqlite = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(sqlite_workers)
        .enable_all()
        .build()
        .expect("sqlite runtime");
    let runtime = |v: Variant| {
        if v == Variant::Sqlite {
            &rt_sqlite
        } else {
            &rt
        }
    };
    let pg_url = std::env::var("BOTMESH_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let redis_url = std::env::var("BOTMESH_TEST_REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let mut variants = vec![
        Variant::Off,
        Variant::Memory,
        Variant::File,
        Variant::Sqlite,
    ];
    if pg_url.is_some() {
        variants.push(Variant::Postgres);
    }
    if redis_url.is_some() {
        variants.push(Variant::Redis);
    }
    // `SHOP_BENCH_ONLY=sqlite,memory` runs only those variants (to profile one of them).
    if let Ok(only) = std::env::var("SHOP_BENCH_ONLY") {
        let wanted: Vec<String> = only.split(',').map(|v| v.trim().to_lowercase()).collect();
        variants.retain(|v| wanted.contains(&format!("{v:?}").to_lowercase()));
    }
    for &variant in &variants {
        runtime(variant).block_on(run(variant, chats / 4, 1, dir)); // warm-up
    }
    let pairs = memory_pairs();
    let mut all_rounds = Vec::with_capacity(repeat);
    for round in 1..=repeat {
        println!("round {round} of {repeat}");
        let mut this = Round {
            rates: Vec::new(),
            ceilings: HashMap::new(),
            memory_ratios: Vec::new(),
        };
        for &variant in &variants {
            let ceiling = || match variant {
                Variant::Off | Variant::Memory => None,
                Variant::File => Some(file_ceiling(dir, secs)),
                Variant::Sqlite => Some(sqlite_ceiling(dir, secs)),
                Variant::Postgres => pg_url
                    .as_deref()
                    .map(|u| rt.block_on(postgres_ceiling(u, secs))),
                Variant::Redis => redis_url
                    .as_deref()
                    .map(|u| rt.block_on(redis_ceiling(u, secs))),
            };
            // The memory variant runs in pairs, each memory run between two runs without
            // durability (the round's first `off` run opens the sequence).
            let off_before = this.rates.iter().rev().find(|(x, _)| *x == Variant::Off);
            if let (Variant::Memory, Some(&(_, (first_off, _, _)))) = (variant, off_before) {
                let mut before = first_off;
                for _ in 0..pairs {
                    let memory = rt.block_on(run(Variant::Memory, chats, rounds, dir));
                    let after = rt.block_on(run(Variant::Off, chats, rounds, dir));
                    this.memory_ratios
                        .push(memory.0 / ((before + after.0) / 2.0));
                    this.rates.push((Variant::Memory, memory));
                    this.rates.push((Variant::Off, after));
                    before = after.0;
                }
                continue;
            }
            // The reference is measured on both sides of the run and averaged: the machine's
            // speed drifts within a round too.
            let before = ceiling();
            let r = runtime(variant).block_on(run(variant, chats, rounds, dir));
            this.rates.push((variant, r));
            if let (Some(b), Some(a)) = (before, ceiling()) {
                this.ceilings.insert(variant, (b + a) / 2.0);
            }
        }
        all_rounds.push(this);
    }
    println!(
        "shop conversation, {chats} concurrent chats x {rounds} orders of {} messages, MockProvider; {repeat} rounds (memory in {pairs} pairs with off a round), medians",
        ORDER.len()
    );
    println!(
        "tokio workers: {} (sqlite: {sqlite_workers}, beside its writer thread, as the shop binary)",
        rt.metrics().num_workers()
    );
    let ceiling = |v: Variant| {
        median(
            all_rounds
                .iter()
                .filter_map(|r| r.ceilings.get(&v).copied())
                .collect(),
        )
    };
    println!(
        "raw ceiling of this disk: {:>8.0} single-row fsync'd SQLite commits/s, {:>8.0} file append+fsync/s",
        ceiling(Variant::Sqlite),
        ceiling(Variant::File)
    );
    println!(
        "{:<10} {:>12} {:>10} {:>10}   messages/s of each run",
        "durability", "messages/s", "p50", "p99"
    );
    for &v in &variants {
        let mut runs: Vec<(f64, Duration, Duration)> = all_rounds
            .iter()
            .flat_map(|r| r.rates.iter().filter(|(x, _)| *x == v).map(|(_, r)| *r))
            .collect();
        let each = runs
            .iter()
            .map(|r| format!("{:.0}", r.0))
            .collect::<Vec<_>>()
            .join(" ");
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (rate, p50, p99) = runs[runs.len() / 2];
        println!(
            "{:<10} {rate:>12.0} {:>10} {:>10}   {each}",
            format!("{v:?}").to_lowercase(),
            format!("{p50:.1?}"),
            format!("{p99:.1?}")
        );
    }
    let ratio = |v: Variant| -> Option<(f64, String)> {
        let each: Vec<f64> = all_rounds.iter().flat_map(|r| r.ratios(v)).collect();
        if each.is_empty() {
            return None;
        }
        // Rounds apart by ` | ` (memory's pairs of one round together).
        let listed = all_rounds
            .iter()
            .map(|r| {
                r.ratios(v)
                    .iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join(" | ");
        Some((median(each), listed))
    };
    if let Some((m, each)) = ratio(Variant::Memory) {
        println!(
            "memory durability: {:.0}% of the throughput without durability, median of {pairs} pairs x {repeat} rounds: {each}",
            m * 100.0
        );
    }
    if let Some((m, each)) = ratio(Variant::Sqlite) {
        println!(
            "sqlite durable: {m:.2} messages per raw single-row commit (goal: at least 1.5, aim 3); each round: {each}"
        );
    }
    if let Some((m, each)) = ratio(Variant::File) {
        println!("file durable: {m:.2} messages per raw append+fsync; each round: {each}");
    }
    match ratio(Variant::Postgres) {
        Some((m, each)) => println!(
            "postgres: raw {:.0} single-row commits/s (1 connection); durable shop {m:.2} messages per raw commit; each round: {each}",
            ceiling(Variant::Postgres)
        ),
        None if pg_url.is_none() => {
            println!("postgres: skipped (BOTMESH_TEST_POSTGRES_URL not set)")
        }
        None => {}
    }
    match ratio(Variant::Redis) {
        Some((m, each)) => println!(
            "redis: raw {:.0} SET round trips/s (1 connection); durable shop {m:.3} messages per raw round trip; each round: {each}",
            ceiling(Variant::Redis)
        ),
        None if redis_url.is_none() => println!("redis: skipped (BOTMESH_TEST_REDIS_URL not set)"),
        None => {}
    }
}

/// CPU time (in nanoseconds, `schedstat`) used so far by this process's threads, summed by
/// thread name (`/proc/self/task`; empty elsewhere).
fn thread_cpu() -> std::collections::BTreeMap<String, u64> {
    let mut by_name = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        // `schedstat`'s first field: nanoseconds this thread ran on a CPU.
        let ns: u64 = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        *by_name.entry(name.trim().to_owned()).or_default() += ns;
    }
    by_name
}

/// Writes `command` (`enable`, `disable`) to the control FIFO of `perf record` named by
/// `SHOP_BENCH_PERF_CTL`, so that a profile holds only the measured windows (not the bots'
/// start, stop and teardown): `mkfifo /tmp/ctl; SHOP_BENCH_PERF_CTL=/tmp/ctl perf record -D -1
/// --control fifo:/tmp/ctl -- <bench binary> --bench`.
fn perf_control(command: &str) {
    if let Ok(path) = std::env::var("SHOP_BENCH_PERF_CTL") {
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("SHOP_BENCH_PERF_CTL names perf's control FIFO");
        fifo.write_all(format!("{command}\n").as_bytes())
            .expect("perf reads its control FIFO");
    }
}

/// CPU µs per message spent by the tokio workers and by SQLite's writer thread in a run
/// (`before` and `after` from [`thread_cpu`], in nanoseconds).
fn cpu_per_message(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
    messages: usize,
) -> (f64, f64) {
    let spent = |prefix: &str| -> f64 {
        after
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, t)| t.saturating_sub(before.get(name).copied().unwrap_or(0)))
            .sum::<u64>() as f64
            / 1_000.0
            / messages as f64
    };
    (spent("tokio-rt"), spent("botmesh-sqlite"))
}
