//! The shop on Telegram, end to end: a fake Bot API on 127.0.0.1 (the one the provider tests
//! use), N chats each ordering in a closed loop (`/order` → item → quantity → `yes`), the bot
//! built with the public API; for no store, a SQLite store without journals, SQLite durable,
//! Postgres durable and Redis durable over long polling, then no store and SQLite durable over
//! Telegram's webhook mode. See [`harness`] for what is measured and `docs/performance.md`.
//!
//! The fake and the chats run on a thread of their own (`fake-telegram`, a current-thread
//! runtime, as a separate server would), whose CPU time is not counted; the bot runs on a
//! runtime built as the shop binary builds it.
//!
//! `cargo bench -p botmesh-examples --features telegram --bench channel`; `CHANNEL_BENCH_CHATS`
//! (default 1000), `CHANNEL_BENCH_ORDERS` (orders per chat, default 3), `CHANNEL_BENCH_ONLY`
//! (e.g. `none,sqlite`; `webhook` for the webhook rows), `CHANNEL_BENCH_DIR` (where the SQLite
//! files go; default a temporary directory), `CHANNEL_BENCH_WORKERS` (the bot's tokio workers;
//! default as the shop binary); `BOTMESH_TEST_POSTGRES_URL` and
//! `BOTMESH_TEST_REDIS_URL` for the server rows.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../providers/tests/fakes/mod.rs"]
mod fakes;
mod harness;

use harness::{Mode, Outcome, Run, Storage};

/// The shop binary's allocator (see `src/bin/shop.rs`): the figures are the demo's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let chats = env_usize("CHANNEL_BENCH_CHATS", 1000);
    let orders = env_usize("CHANNEL_BENCH_ORDERS", 3);
    let only: Option<Vec<String>> = std::env::var("CHANNEL_BENCH_ONLY")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
    let wanted = |key: &str| only.as_ref().is_none_or(|o| o.iter().any(|k| k == key));
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dir = std::env::var("CHANNEL_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().to_owned());
    let run = Run { chats, orders, dir };

    // The fake Bot API and the chats: one thread of their own.
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let fake_thread = std::thread::Builder::new()
        .name(harness::FAKE_THREAD.to_owned())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the fake's runtime");
            handle_tx.send(rt.handle().clone()).expect("handle");
            rt.block_on(async {
                let _ = stop_rx.await;
            });
        })
        .expect("the fake's thread");
    let fake_rt = handle_rx.recv().expect("the fake's runtime handle");

    // As the shop binary: SQLite's writer thread keeps a core of its own.
    let workers = env_usize(
        "CHANNEL_BENCH_WORKERS",
        botmesh::durability::SqliteStore::worker_threads_beside_writer(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("the bot's runtime");

    println!(
        "shop on a fake Telegram Bot API: {chats} chats x {orders} orders x {} messages, closed loop; the bot on {workers} tokio workers",
        harness::SCRIPT.len()
    );
    let mut rows: Vec<(Mode, Storage, Outcome)> = Vec::new();
    let mut skipped = Vec::new();
    let mut cases: Vec<(Mode, Storage)> =
        Storage::ALL.iter().map(|s| (Mode::Polling, *s)).collect();
    cases.push((Mode::Webhook, Storage::None));
    cases.push((Mode::Webhook, Storage::SqliteDurable));
    for (mode, storage) in cases {
        let key_ok = wanted(storage.key()) && (mode == Mode::Polling || wanted("webhook"));
        if !key_ok {
            continue;
        }
        if let Some(var) = storage.server_var()
            && std::env::var(var).is_err()
        {
            skipped.push(format!("{} skipped: {var} is not set", storage.label()));
            continue;
        }
        match rt.block_on(harness::run(&fake_rt, storage, mode, &run)) {
            Ok(outcome) => {
                println!(
                    "  {} {}: {:.0} messages/s, p50 {:.1} ms",
                    mode.label(),
                    storage.label(),
                    outcome.rate(),
                    outcome.latency(0.5).as_secs_f64() * 1e3
                );
                if let Some(w) = outcome.sqlite_writes {
                    let n = outcome.messages.max(1) as f64;
                    println!(
                        "    sqlite writer: {:.2} write requests and {:.3} transactions per message; {:.0} µs running requests + {:.0} µs in COMMIT per message, busy {:.0}% of the run",
                        w.requests as f64 / n,
                        w.transactions as f64 / n,
                        w.statements.as_secs_f64() * 1e6 / n,
                        w.commits.as_secs_f64() * 1e6 / n,
                        (w.statements + w.commits).as_secs_f64() / outcome.elapsed.as_secs_f64()
                            * 100.0
                    );
                }
                if let Some(commits) = outcome.server_commits {
                    println!(
                        "    postgres: {:.2} transactions per message (pg_stat_database.xact_commit of the database, the bench's reads included)",
                        commits as f64 / outcome.messages.max(1) as f64
                    );
                }
                if let Some((all, scripts)) = outcome.server_commands {
                    let n = outcome.messages.max(1) as f64;
                    println!(
                        "    redis: {:.2} scripts (EVALSHA) per message, {:.2} commands in all with the ones the scripts run (INFO commandstats, server-wide: other clients count too)",
                        scripts as f64 / n,
                        all as f64 / n
                    );
                }
                rows.push((mode, storage, outcome));
            }
            Err(e) => {
                println!("  {} {}: failed: {e}", mode.label(), storage.label());
            }
        }
    }
    println!();
    println!(
        "| channel | bot | messages/s | of no store | reply p50 | reply p99 | peak RSS | CPU per message | written per message |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (mode, storage, o) in &rows {
        let base = rows
            .iter()
            .find(|(m, s, _)| m == mode && *s == Storage::None)
            .map(|(_, _, b)| b.rate());
        let share = match base {
            Some(b) if *storage != Storage::None => format!("{:.0}%", o.rate() / b * 100.0),
            _ => String::new(),
        };
        let written = if storage.server_var().is_some() {
            "(server)".to_owned()
        } else {
            format!("{:.0} B", o.written as f64 / o.messages.max(1) as f64)
        };
        println!(
            "| {} | {} | {:.0} | {share} | {:.1} ms | {:.1} ms | {} | {:.0} µs | {written} |",
            mode.label(),
            storage.label(),
            o.rate(),
            o.latency(0.5).as_secs_f64() * 1e3,
            o.latency(0.99).as_secs_f64() * 1e3,
            o.peak_rss.map_or_else(
                || "?".to_owned(),
                |b| format!("{:.0} MiB", b as f64 / 1048576.0)
            ),
            o.cpu.as_secs_f64() * 1e6 / o.messages.max(1) as f64,
        );
    }
    for line in skipped {
        println!("{line}");
    }
    let _ = stop_tx.send(());
    let _ = fake_thread.join();
}
