#![allow(clippy::print_stdout)]
//! Throughput and latency of the runtime: 10,000 messages from 100 chats through a bot on
//! `MockProvider`, each answered by one reply. Prints messages per second and p50/p99 latency
//! (from delivery to the reply leaving through the provider).
//!
//! Run with `cargo bench -p botmesh --bench throughput`. This is the baseline that durability
//! is measured against. `BOTMESH_BENCH_ONLY=none` (or `memory`) runs one variant alone, for a
//! profile (`perf record`) or an instruction count (`perf stat`) of that variant.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;

/// The demo binaries' allocator (see `examples/src/bin/shop.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CHATS: usize = 100;
const PER_CHAT: usize = 100;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn run_once(durable: bool) -> Result<(f64, Duration, Duration), BotError> {
    let mock = MockProvider::new();
    let mut builder = Bot::builder(mock.clone());
    if durable {
        builder = builder.durability(DurabilityOptions::memory());
    }
    let bot = builder.build()?;
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    bot.catch_all(|ctx: Ctx| async move {
        let id = ctx.message().map(|m| m.id.to_string()).unwrap_or_default();
        ctx.reply(format!("{}|{id}", ctx.chat())).await?;
        Ok(())
    });
    let (s, l) = (started.clone(), latencies.clone());
    bot.after_send(move |info: SentInfo| {
        let (s, l) = (s.clone(), l.clone());
        async move {
            let key = info.outgoing.content.text().to_owned();
            if let Some(t0) = s.lock().map(|mut m| m.remove(&key)).ok().flatten() {
                if let Ok(mut l) = l.lock() {
                    l.push(t0.elapsed());
                }
            }
        }
    });
    bot.start().await?;
    let t0 = Instant::now();
    let mut feeders = Vec::new();
    for c in 0..CHATS {
        let mock = mock.clone();
        let started = started.clone();
        feeders.push(tokio::spawn(async move {
            let chat = format!("chat{c}");
            for i in 0..PER_CHAT {
                let id = format!("m{i}");
                if let Ok(mut m) = started.lock() {
                    m.insert(format!("{chat}|{id}"), Instant::now());
                }
                let _ = mock.say(&chat, &id, "hello").await;
            }
        }));
    }
    for f in feeders {
        let _ = f.await;
    }
    bot.idle().await;
    let elapsed = t0.elapsed();
    bot.stop().await?;
    let mut lat = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    lat.sort();
    let total = CHATS * PER_CHAT;
    assert_eq!(lat.len(), total, "every message answered once");
    Ok((
        total as f64 / elapsed.as_secs_f64(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
    ))
}

fn main() -> Result<(), BotError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| BotError::Step {
            step: "bench".into(),
            message: e.to_string(),
        })?;
    rt.block_on(async {
        let only = std::env::var("BOTMESH_BENCH_ONLY").ok();
        let mut results = Vec::new();
        for (name, durable) in [("no durability", false), ("MemoryDurability", true)] {
            match only.as_deref() {
                Some("none") if durable => continue,
                Some("memory") if !durable => continue,
                _ => {}
            }
            // Warm-up, then the median of three runs.
            run_once(durable).await?;
            let mut runs = Vec::new();
            for _ in 0..3 {
                runs.push(run_once(durable).await?);
            }
            runs.sort_by(|a, b| a.0.total_cmp(&b.0));
            results.push((name, runs[runs.len() / 2]));
        }
        println!(
            "runtime throughput: {CHATS} chats x {PER_CHAT} messages, one reply each, MockProvider"
        );
        println!(
            "{:<18} {:>12} {:>12} {:>12}",
            "durability", "messages/s", "p50", "p99"
        );
        for (name, (rate, p50, p99)) in &results {
            println!(
                "{name:<18} {rate:>12.0} {:>12} {:>12}",
                format!("{p50:.2?}"),
                format!("{p99:.2?}")
            );
        }
        if let [(_, (base, ..)), (_, (mem, ..))] = results[..] {
            println!(
                "MemoryDurability overhead: {:.1}% of the throughput without durability",
                (1.0 - mem / base) * 100.0
            );
        }
        Ok(())
    })
}
