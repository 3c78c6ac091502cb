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
//! (default 1000), `CHANNEL_BENCH_ORDERS` (orders per chat, default 10), `CHANNEL_BENCH_ROUNDS`
//! (how many times every case runs, default 3: the table shows each case's median round and
//! the medians of the rounds' ratios), `CHANNEL_BENCH_ONLY`
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

/// Prints one run's line (and the storage's own counters).
fn print_run(mode: Mode, storage: Storage, outcome: &Outcome) {
    println!(
        "  {} {}: {:.0} messages/s, p50 {:.1} ms",
        mode.label(),
        storage.label(),
        outcome.rate(),
        p50(outcome) * 1e3
    );
    let n = outcome.messages.max(1) as f64;
    if let Some(w) = outcome.sqlite_writes {
        println!(
            "    sqlite writer: {:.2} write requests and {:.3} transactions per message; {:.0} µs running requests + {:.0} µs in COMMIT per message, busy {:.0}% of the run",
            w.requests as f64 / n,
            w.transactions as f64 / n,
            w.statements.as_secs_f64() * 1e6 / n,
            w.commits.as_secs_f64() * 1e6 / n,
            (w.statements + w.commits).as_secs_f64() / outcome.elapsed.as_secs_f64() * 100.0
        );
    }
    if let Some(commits) = outcome.server_commits {
        println!(
            "    postgres: {:.2} transactions per message (pg_stat_database.xact_commit of the database, the bench's reads included)",
            commits as f64 / n
        );
    }
    if let Some((all, scripts)) = outcome.server_commands {
        println!(
            "    redis: {:.2} scripts (EVALSHA) per message, {:.2} commands in all with the ones the scripts run (INFO commandstats, server-wide: other clients count too)",
            scripts as f64 / n,
            all as f64 / n
        );
    }
}

/// The reply latency p50, in seconds.
fn p50(outcome: &Outcome) -> f64 {
    outcome.latency(0.5).as_secs_f64()
}

/// The outcome whose `key` is the median of `outcomes`' (the lower middle of an even count).
fn median_by(outcomes: &[Outcome], key: fn(&Outcome) -> f64) -> Option<&Outcome> {
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by(|a, b| key(a).total_cmp(&key(b)));
    sorted.get(sorted.len().saturating_sub(1) / 2).copied()
}

/// The median of the rounds' `ratio` (round i of `outcomes` against round i of `base`),
/// formatted with `show`, with the range when there are several rounds.
fn ratio_cell(
    outcomes: &[Outcome],
    base: &[Outcome],
    ratio: fn(&Outcome, &Outcome) -> f64,
    show: fn(f64) -> String,
) -> String {
    let mut ratios: Vec<f64> = outcomes
        .iter()
        .zip(base)
        .map(|(o, b)| ratio(o, b))
        .collect();
    ratios.sort_by(f64::total_cmp);
    let (Some(low), Some(high)) = (ratios.first(), ratios.last()) else {
        return String::new();
    };
    let median = ratios[(ratios.len() - 1) / 2];
    if ratios.len() > 1 {
        format!("{} ({}–{})", show(median), show(*low), show(*high))
    } else {
        show(median)
    }
}

fn main() {
    let chats = env_usize("CHANNEL_BENCH_CHATS", 1000);
    let orders = env_usize("CHANNEL_BENCH_ORDERS", 10);
    let rounds = env_usize("CHANNEL_BENCH_ROUNDS", 3).max(1);
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
    let mut cases: Vec<(Mode, Storage)> =
        Storage::ALL.iter().map(|s| (Mode::Polling, *s)).collect();
    cases.push((Mode::Webhook, Storage::None));
    cases.push((Mode::Webhook, Storage::SqliteDurable));
    let mut skipped = Vec::new();
    cases.retain(|(mode, storage)| {
        if !wanted(storage.key()) || (*mode == Mode::Webhook && !wanted("webhook")) {
            return false;
        }
        if let Some(var) = storage.server_var()
            && std::env::var(var).is_err()
        {
            skipped.push(format!("{} skipped: {var} is not set", storage.label()));
            return false;
        }
        true
    });
    // Every case once a round, each mode's no-store run right before the stores it is
    // compared with: the machine's speed drifts, so ratios are taken within a round.
    let mut rows: Vec<((Mode, Storage), Vec<Outcome>)> =
        cases.iter().map(|case| (*case, Vec::new())).collect();
    for round in 1..=rounds {
        println!("round {round} of {rounds}");
        for ((mode, storage), outcomes) in &mut rows {
            match rt.block_on(harness::run(&fake_rt, *storage, *mode, &run)) {
                Ok(outcome) => {
                    print_run(*mode, *storage, &outcome);
                    outcomes.push(outcome);
                }
                Err(e) => println!("  {} {}: failed: {e}", mode.label(), storage.label()),
            }
        }
    }
    println!();
    println!(
        "| channel | bot | messages/s | of no store | reply p50 | p50 of no store's | reply p99 | peak RSS | CPU per message | written per message |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for ((mode, storage), outcomes) in &rows {
        let Some(o) = median_by(outcomes, Outcome::rate) else {
            continue;
        };
        let base = rows
            .iter()
            .find(|((m, s), _)| m == mode && *s == Storage::None)
            .map(|(_, b)| b);
        let (share, slower) = match base {
            Some(base) if *storage != Storage::None => (
                ratio_cell(
                    outcomes,
                    base,
                    |o, b| o.rate() / b.rate(),
                    |r| format!("{:.0}%", r * 100.0),
                ),
                ratio_cell(
                    outcomes,
                    base,
                    |o, b| p50(o) / p50(b),
                    |r| format!("{r:.1}×"),
                ),
            ),
            _ => (String::new(), String::new()),
        };
        let written = if storage.server_var().is_some() {
            "(server)".to_owned()
        } else {
            format!("{:.0} B", o.written as f64 / o.messages.max(1) as f64)
        };
        println!(
            "| {} | {} | {:.0} | {share} | {:.1} ms | {slower} | {:.1} ms | {} | {:.0} µs | {written} |",
            mode.label(),
            storage.label(),
            o.rate(),
            p50(o) * 1e3,
            o.latency(0.99).as_secs_f64() * 1e3,
            o.peak_rss.map_or_else(
                || "?".to_owned(),
                |b| format!("{:.0} MiB", b as f64 / 1048576.0)
            ),
            o.cpu.as_secs_f64() * 1e6 / o.messages.max(1) as f64,
        );
    }
    if rounds > 1 {
        println!(
            "\nEach row is its median round (by messages/s); the ratios are the medians of the rounds' ratios (each against the no-store run of the same round), their range in brackets."
        );
    }
    for line in skipped {
        println!("{line}");
    }
    let _ = stop_tx.send(());
    let _ = fake_thread.join();
}
