//! The shop on several replicas of one bot: 1, 2 and 3 replicas with coordination (chat
//! turns, the send fence) on one Postgres and on one Redis, against one replica without
//! coordination on the same server (the cost of coordination).
//!
//! Each replica is a `Bot` of its own in this process, with its own `MockProvider` (its end
//! of the channel), its own connection pool to the server and its own instance id, all on one
//! table / key prefix (fresh per run). The chats run a closed loop (`/order` → item →
//! quantity → `yes`, each message once the previous one was answered), each message sent to a
//! random replica, as a load balancer without chat affinity does. A reply counts when the
//! replica's provider receives it. Prints messages/s and the p50 / p99 reply latency per
//! variant, and each coordinated variant's throughput as a share of the uncoordinated one.
//!
//! `cargo bench -p botmesh-examples --bench replicas` with `BOTMESH_TEST_POSTGRES_URL` and / or
//! `BOTMESH_TEST_REDIS_URL` set (a server not given is skipped); `REPLICAS_BENCH_CHATS`
//! (default 60), `REPLICAS_BENCH_ROUNDS` (orders per chat, default 3), `REPLICAS_BENCH_REPEAT`
//! (runs per variant, the median is printed; default 3). One process: replicas share its
//! cores, as replicas on one small host would.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Instant;

use botmesh::coordination::Coordination;
use botmesh::durability::backends::postgres::PostgresConfig;
use botmesh::durability::{DurableKv, PostgresStore, Store};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use botmesh_examples::shop;
use common::{Figures, ORDER, Replies, Server, closed_loop, remove_run_data, store_and_journals};

/// The shop binary's allocator (see `src/bin/shop.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A replica's own store and journals on `server`, under `prefix`: on Postgres the journals
/// share the store's pool, on Redis each has its own connection.
async fn open(server: Server, url: &str, prefix: &str) -> (Arc<dyn Store>, Arc<dyn DurableKv>) {
    if server == Server::Redis {
        return store_and_journals(server, url, prefix, None)
            .await
            .expect("redis store and journals");
    }
    let config = PostgresConfig::new().table_prefix(format!("{prefix}_"));
    let store = PostgresStore::connect_with(url, config)
        .await
        .expect("postgres store");
    let kv = Arc::new(store.durability_kv());
    (Arc::new(store), kv)
}

/// `replicas` replicas of the shop on `server`, coordinated or not, under the closed loop.
async fn run(
    server: Server,
    url: &str,
    replicas: usize,
    coordinated: bool,
    chats: usize,
    rounds: usize,
) -> Figures {
    let prefix = format!(
        "bench_rep{}_{}",
        std::process::id(),
        fastrand::u32(..1_000_000)
    );
    let replies = Arc::new(Replies::default());
    let mut bots = Vec::new();
    let mut mocks = Vec::new();
    for i in 0..replicas {
        let (store, kv) = open(server, url, &prefix).await;
        let mock = MockProvider::new();
        let mut builder = Bot::builder(mock.clone())
            .bot_id("shop")
            .store_arc(store)
            .durability(DurabilityOptions::shared(kv).instance_id(format!("replica-{i}")));
        if coordinated {
            builder = builder.coordination(Coordination::replicas());
        }
        let bot = shop::shop_bot(builder).expect("the shop builds");
        replies.count_received(&mock);
        bot.start().await.expect("the shop starts");
        bots.push(bot);
        mocks.push(mock);
    }
    let started = Instant::now();
    let latencies = closed_loop(&mocks, &replies, chats, rounds).await;
    let elapsed = started.elapsed();
    for bot in &bots {
        bot.stop().await.expect("the shop stops");
    }
    if let Err(e) = remove_run_data(server, url, &prefix).await {
        tracing::warn!(server = server.name(), error = %e, "the run's data stays on the server");
    }
    Figures::of(&latencies, elapsed)
}

fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let chats = env_usize("REPLICAS_BENCH_CHATS", 60);
    let rounds = env_usize("REPLICAS_BENCH_ROUNDS", 3);
    let repeat = env_usize("REPLICAS_BENCH_REPEAT", 3).max(1);
    let servers = [
        (Server::Postgres, "BOTMESH_TEST_POSTGRES_URL"),
        (Server::Redis, "BOTMESH_TEST_REDIS_URL"),
    ];
    println!(
        "the shop on replicas: {chats} chats x {rounds} orders ({} messages a run), each message to a random replica; median of {repeat} runs",
        chats * rounds * ORDER.len()
    );
    for (server, var) in servers {
        let Some(url) = std::env::var(var).ok().filter(|u| !u.is_empty()) else {
            println!("{}: skipped ({var} is not set)", server.name());
            continue;
        };
        println!(
            "\n| {} | messages/s | p50 | p99 | vs. one replica without coordination |",
            server.name()
        );
        println!("| --- | ---: | ---: | ---: | ---: |");
        let mut baseline = None;
        for (replicas, coordinated) in [(1, false), (1, true), (2, true), (3, true)] {
            let mut runs = Vec::new();
            for _ in 0..repeat {
                runs.push(run(server, &url, replicas, coordinated, chats, rounds).await);
            }
            runs.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
            let median = runs[runs.len() / 2];
            let base = *baseline.get_or_insert(median.per_sec);
            let all: Vec<String> = runs.iter().map(|r| format!("{:.0}", r.per_sec)).collect();
            println!(
                "| {replicas} replica{}, {} | {:.0} ({}) | {:.1} ms | {:.1} ms | {:.0}% |",
                if replicas == 1 { "" } else { "s" },
                if coordinated {
                    "coordinated"
                } else {
                    "no coordination"
                },
                median.per_sec,
                all.join(", "),
                median.p50.as_secs_f64() * 1e3,
                median.p99.as_secs_f64() * 1e3,
                median.per_sec / base * 100.0
            );
        }
    }
}
