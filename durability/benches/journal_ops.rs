//! What each journal operation of one message costs on `MemoryDurability`, alone.
//!
//! `cargo bench -p botmesh-durability --bench journal_ops` runs, for each of
//! `JOURNAL_BENCH_N` messages (default 20,000; 200 chats in turn), the four journal writes the
//! bot makes for a message answered by one reply, exactly as its runtime calls them:
//!
//! | row | call |
//! | --- | --- |
//! | inbound journaled and leased | `inbox().journal_and_lease` |
//! | send journaled and leased | `outbox().journal_and_lease` (the per-chat order check included) |
//! | send marked sent | `outbox().mark_sent` |
//! | inbound completed | `inbox().complete` |
//! | sweeper's index read | `inbox().list(Done, 1)` every 1,000 messages, as the sweeper reads `idx1` every second |
//!
//! and prints the mean time of each, per message. Nothing else runs between them, so the
//! figures are what the journal code costs when it is hot in the caches; inside the bot (the
//! shop benchmark of `botmesh-examples`) the same calls take about twice as long, the rest of
//! a message's work running between them. The records accumulate, as in a bot between two
//! purges. The global allocator is mimalloc, as in the demo and the shop benchmark.
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use botmesh_durability::inbox::{InboxJournalLease, InboxState, NewInbound};
use botmesh_durability::keys::Fingerprint;
use botmesh_durability::keys::KeyKind;
use botmesh_durability::keys::SendKey;
use botmesh_durability::kv::Scope;
use botmesh_durability::outbox::NewSend;
use botmesh_durability::outbox::{JournalLeased, Payload};
use botmesh_durability::{DurabilityConfig, MemoryDurability};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An inbound event and a reply, the size of the shop's.
#[derive(serde::Serialize, Clone)]
struct Event {
    chat: String,
    id: String,
    text: String,
    sender: String,
    timestamp_ms: i64,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let n: usize = std::env::var("JOURNAL_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let d = MemoryDurability::memory(
        Scope::new("bench", "test", "shop", "mock"),
        DurabilityConfig::default(),
    )?;
    let mut spent = [Duration::ZERO; 5];
    let started = Instant::now();
    for i in 0..n {
        let chat = format!("chat{}", i % 200);
        let event = Event {
            chat: chat.clone(),
            id: format!("m{i}"),
            text: "Coffee".to_owned(),
            sender: chat.clone(),
            timestamp_ms: 1,
        };
        let t0 = Instant::now();
        let new = NewInbound::new(chat.clone(), &event.id, Payload::encode(&event)?);
        let InboxJournalLease::Leased(inbound) = d.inbox().journal_and_lease(new).await? else {
            return Err(format!("message {i} taken for a duplicate").into());
        };
        let t1 = Instant::now();
        // The runtime's sends carry a fingerprint computed only if a replay compares it.
        let fingerprint = Fingerprint::deferred(|| Fingerprint::of("", &serde_json::Value::Null));
        let send = NewSend::new(
            SendKey::with_kind(format!("{chat}/m{i}:reply"), KeyKind::Derived),
            chat.clone(),
            Payload::encode(&event)?,
        )
        .with_fingerprint(fingerprint);
        let JournalLeased::Leased(lease) = d.outbox().journal_and_lease(send).await? else {
            return Err(format!("send {i} not leased by its journal write").into());
        };
        let t2 = Instant::now();
        d.outbox().mark_sent(&lease, Some(format!("p{i}"))).await?;
        let t3 = Instant::now();
        d.inbox().complete(&inbound).await?;
        let t4 = Instant::now();
        for (slot, (from, to)) in spent
            .iter_mut()
            .zip([(t0, t1), (t1, t2), (t2, t3), (t3, t4)])
        {
            *slot += to - from;
        }
        if i % 1000 == 999 {
            let t = Instant::now();
            d.inbox().list(InboxState::Done, 1).await?;
            spent[4] += t.elapsed();
        }
    }
    let total = started.elapsed();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!("memory journal, {n} messages (200 chats), mean per message:");
    let rows = [
        "inbound journaled and leased",
        "send journaled and leased",
        "send marked sent",
        "inbound completed",
        "sweeper's index read",
    ];
    for (name, d) in rows.iter().zip(spent) {
        println!("  {name:<30} {:>6.2} µs", per(d));
    }
    println!(
        "  {:<30} {:>6.2} µs (the journal), {:.2} µs with the loop's own work",
        "all",
        per(spent.iter().sum()),
        per(total)
    );
    Ok(())
}
