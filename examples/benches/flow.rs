//! The shop's order conversation as a `#[flow]` (`shop::shop_bot`) against the same
//! conversation written by hand on the runtime API (`shop::hand_written_bot`), side by side:
//!
//! - steps per second: answered messages per second over 200 concurrent chats, each a closed
//!   loop (a chat writes its next message once the bot answered the previous one) running the
//!   4-message order `/order` → `coffee` → `2` → `yes` several times, on `MockProvider` and
//!   `MemoryStore`, durability off (the best of 3 runs, variants interleaved);
//! - checkpoint bytes per step: one chat, one order, the store read after each step: the
//!   serialized size of the flow's `FlowCheckpoint.state` JSON against the hand-written
//!   `conversation:<chat>` state value (the last step writes nothing: both delete their state).
//!
//! It does not measure durability (see the `shop` bench) nor the cost of a restart.
//!
//! `cargo bench -p botmesh-examples --bench flow` (`FLOW_BENCH_CHATS`, `FLOW_BENCH_ROUNDS` to
//! change the load).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use botmesh::durability::{MemoryStore, Store};
use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use botmesh_examples::shop;
use common::{Figures, ORDER, Replies, closed_loop};

/// The demo binaries' allocator (see `examples/src/bin/shop.rs`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Flow,
    HandWritten,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Flow => "#[flow]",
            Variant::HandWritten => "hand-written",
        }
    }

    fn build(self, builder: BotBuilder) -> Bot {
        match self {
            Variant::Flow => shop::shop_bot(builder),
            Variant::HandWritten => shop::hand_written_bot(builder),
        }
        .expect("the shop builds")
    }
}

/// Messages answered per second, p50 and p99 (a message to the bot's first answer, counted
/// by the bot's `after` send hook).
async fn throughput(variant: Variant, chats: usize, rounds: usize) -> Figures {
    let mock = MockProvider::new();
    let bot = variant.build(
        Bot::builder(mock.clone())
            .bot_id("shop")
            .store(MemoryStore::new()),
    );
    let replies = Arc::new(Replies::default());
    replies.count_after_sends(&bot);
    bot.start().await.expect("bot starts");
    let started = Instant::now();
    let latencies = closed_loop(std::slice::from_ref(&mock), &replies, chats, rounds).await;
    let figures = Figures::of(&latencies, started.elapsed());
    bot.idle().await;
    bot.stop().await.expect("bot stops");
    figures
}

/// The size of the conversation state the store holds for `chat` after each step of one
/// order (0 once the conversation ended and deleted it), and the last state written.
async fn state_sizes(variant: Variant) -> (Vec<usize>, String) {
    let mock = MockProvider::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let bot = variant.build(
        Bot::builder(mock.clone())
            .bot_id("shop")
            .store_arc(store.clone()),
    );
    bot.start().await.expect("bot starts");
    let chat = "alice";
    let mut sizes = Vec::new();
    let mut sample = String::new();
    for (i, text) in ORDER.iter().enumerate() {
        mock.say(chat, &format!("m{i}"), text)
            .await
            .expect("accepted");
        bot.idle().await;
        let state = match variant {
            Variant::Flow => store.checkpoint(chat).await.unwrap().map(|cp| cp.state),
            Variant::HandWritten => store
                .get_value(&format!("conversation:{chat}"), "state")
                .await
                .unwrap(),
        };
        let json = state.map(|s| serde_json::to_string(&s).unwrap());
        sizes.push(json.as_ref().map_or(0, String::len));
        if let Some(json) = json {
            sample = json;
        }
    }
    bot.stop().await.expect("bot stops");
    (sizes, sample)
}

fn main() {
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let chats = env("FLOW_BENCH_CHATS", 200);
    let rounds = env("FLOW_BENCH_ROUNDS", 10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let variants = [Variant::Flow, Variant::HandWritten];
    for v in variants {
        rt.block_on(throughput(v, chats / 4, 1)); // warm-up
    }
    let mut best: HashMap<&str, Figures> = HashMap::new();
    for _ in 0..3 {
        for v in variants {
            let r = rt.block_on(throughput(v, chats, rounds));
            let e = best.entry(v.name()).or_insert(r);
            if r.per_sec > e.per_sec {
                *e = r;
            }
        }
    }
    let sizes: Vec<(Variant, (Vec<usize>, String))> = variants
        .iter()
        .map(|v| (*v, rt.block_on(state_sizes(*v))))
        .collect();

    println!(
        "shop order conversation: {chats} concurrent chats x {rounds} orders x {} messages, \
         MockProvider + MemoryStore, no durability (best of 3)",
        ORDER.len()
    );
    println!(
        "{:<13} {:>8} {:>9} {:>9}   {:>24} {:>13} {:>11}",
        "conversation",
        "steps/s",
        "p50",
        "p99",
        "state bytes after step",
        "avg/written",
        "per order"
    );
    for (v, (per_step, _)) in &sizes {
        let Figures {
            per_sec: rate,
            p50,
            p99,
        } = best[v.name()];
        let written: Vec<usize> = per_step.iter().copied().filter(|n| *n > 0).collect();
        let total: usize = written.iter().sum();
        let avg = total as f64 / written.len().max(1) as f64;
        let steps = per_step
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" / ");
        println!(
            "{:<13} {rate:>8.0} {:>9} {:>9}   {steps:>24} {avg:>13.1} {total:>11}",
            v.name(),
            format!("{p50:.1?}"),
            format!("{p99:.1?}"),
        );
    }
    let rate = |v: Variant| best[v.name()].per_sec;
    println!(
        "#[flow] runs at {:.0}% of the hand-written steps/s",
        rate(Variant::Flow) / rate(Variant::HandWritten) * 100.0
    );
    for (v, (_, sample)) in &sizes {
        println!("last state written, {}: {sample}", v.name());
    }
}
