//! Persistent flows on a durable bot, crashed at each journal write point: the conversation
//! resumes where it was, a replayed answer is never taken as the answer to the next question,
//! no question is asked twice, and every reply goes out exactly once (except a send reported
//! ambiguous). Also: a `cx.effect` cut by a crash runs once in total.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use botmesh::durability::kv::WritePhase;
use botmesh::durability::{
    Backoff, DurabilityConfig, MemoryKv, MemoryStore, OnAmbiguous, WritePoint,
};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::{CrashableProvider, MockProvider, crashable};

static CHARGES: AtomicUsize = AtomicUsize::new(0);
static CHARGES_ALONE: AtomicUsize = AtomicUsize::new(0);

/// The same order, with a counter of its own (tests run in parallel).
#[flow(start = command("order"))]
#[persistent]
async fn order_alone(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx.ask("What would you like?").await?.text().to_owned();
    let qty: String = cx.ask("How many?").await?.text().to_owned();
    let receipt: String = cx
        .effect(async {
            CHARGES_ALONE.fetch_add(1, Ordering::SeqCst);
            "receipt-1".to_owned()
        })
        .await?;
    cx.send(format!("Ordered {qty} x {item} ({receipt})"))
        .await?;
    Ok(())
}

/// Takes an order in two questions, then charges once.
#[flow(start = command("order"))]
#[persistent]
async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx.ask("What would you like?").await?.text().to_owned();
    let qty: String = cx.ask("How many?").await?.text().to_owned();
    let receipt: String = cx
        .effect(async {
            CHARGES.fetch_add(1, Ordering::SeqCst);
            "receipt-1".to_owned()
        })
        .await?;
    cx.send(format!("Ordered {qty} x {item} ({receipt})"))
        .await?;
    Ok(())
}

fn config() -> DurabilityConfig {
    let mut c = DurabilityConfig::default();
    c.poll = Duration::from_millis(20);
    c.outbox.on_ambiguous = OnAmbiguous::Skip;
    c.inbox.backoff = Backoff::fixed(Duration::from_millis(10), Duration::from_millis(10));
    c.outbox.backoff = Backoff::fixed(Duration::from_millis(10), Duration::from_millis(10));
    c
}

async fn settle(bot: &Bot) {
    for _ in 0..3 {
        let _ = tokio::time::timeout(Duration::from_secs(2), bot.idle()).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
}

const SCRIPT: [(&str, &str); 3] = [("m1", "/order"), ("m2", "pears"), ("m3", "2")];
const EXPECTED: [&str; 3] = [
    "What would you like?",
    "How many?",
    "Ordered 2 x pears (receipt-1)",
];

/// Bot A takes the conversation until it crashes at `point` (`occurrence`-th passage); bot B
/// (same instance id, backend and store) recovers; the channel redelivers what A did not
/// acknowledge and the user goes on with the rest of the script.
async fn run(
    point: WritePoint,
    phase: WritePhase,
    occurrence: u32,
    register: fn(&Bot),
) -> (Vec<String>, usize) {
    let shared = Arc::new(MemoryKv::new());
    let switch = crashable(shared.clone());
    switch.crash_at(point, phase, occurrence);
    let store = MemoryStore::new();
    let mock_a = MockProvider::new();
    let bot_a = Bot::builder(CrashableProvider::new(mock_a.clone(), &switch))
        .store(store.clone())
        .durability(
            DurabilityOptions::backend(switch.clone())
                .config(config())
                .instance_id("i1"),
        )
        .build()
        .unwrap();
    register(&bot_a);
    bot_a.start().await.unwrap();
    // The first message the channel must deliver to B: one A did not acknowledge, or the
    // one after the message during which A crashed (acknowledged: B's recovery replays it).
    let mut resume_from = SCRIPT.len();
    for (i, (id, text)) in SCRIPT.iter().enumerate() {
        if mock_a.say("alice", id, text).await.is_err() {
            resume_from = i;
            break;
        }
        settle(&bot_a).await;
        if switch.is_crashed() {
            resume_from = i + 1;
            break;
        }
    }
    bot_a.stop().await.unwrap();

    let mock_b = MockProvider::new();
    let bot_b = Bot::builder(mock_b.clone())
        .store(store.clone())
        .durability(
            DurabilityOptions::shared(shared)
                .config(config())
                .instance_id("i1"),
        )
        .build()
        .unwrap();
    register(&bot_b);
    let mut events = bot_b.subscribe();
    bot_b.start().await.unwrap();
    settle(&bot_b).await;
    // The channel redelivers the message A did not acknowledge (if any), and the user goes on.
    for (id, text) in SCRIPT.iter().skip(resume_from) {
        mock_b.say("alice", id, text).await.unwrap();
        settle(&bot_b).await;
    }
    let mut ambiguous = 0;
    while let Ok(e) = events.try_recv() {
        if matches!(e, BotEvent::Durability { ref name, .. } if name == "ambiguous") {
            ambiguous += 1;
        }
    }
    bot_b.stop().await.unwrap();
    let mut sent = mock_a.texts("alice");
    sent.extend(mock_b.texts("alice"));
    (sent, ambiguous)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_flow_survives_a_crash_at_every_journal_write() {
    let points = [
        WritePoint::InboxJournal,
        WritePoint::InboxComplete,
        WritePoint::OutboxJournal,
        WritePoint::OutboxBeginAttempt,
        WritePoint::OutboxMarkSent,
    ];
    for point in points {
        for phase in [WritePhase::Before, WritePhase::After] {
            for occurrence in 1..=3 {
                let (sent, ambiguous) = run(point, phase, occurrence, |b| {
                    b.flow(order);
                })
                .await;
                let row = format!("{} {phase:?} #{occurrence}", point.as_str());
                for text in EXPECTED {
                    let n = sent.iter().filter(|s| s.as_str() == text).count();
                    if ambiguous == 0 {
                        assert_eq!(n, 1, "{row}: {text:?} sent {n} times: {sent:?}");
                    } else {
                        assert!(n <= 1, "{row}: {text:?} sent {n} times: {sent:?}");
                    }
                }
                assert!(
                    !sent.iter().any(|s| s.contains("Ordered pears")),
                    "{row}: a replayed answer was taken for the next question: {sent:?}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_cut_by_a_crash_runs_once() {
    // The third message's step: the effect ran, then the crash hit the send's journal write.
    let (sent, _) = run(WritePoint::OutboxJournal, WritePhase::Before, 3, |b| {
        b.flow(order_alone);
    })
    .await;
    assert_eq!(
        CHARGES_ALONE.load(Ordering::SeqCst),
        1,
        "the card was charged once in total"
    );
    assert_eq!(
        sent.iter().filter(|s| s.starts_with("Ordered")).count(),
        1,
        "{sent:?}"
    );
}
