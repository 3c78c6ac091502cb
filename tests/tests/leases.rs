//! A live process keeps its leases however long its work takes: while a message waits in its
//! chat's queue behind a slow handler, and through a heartbeat that failed once because the
//! backend was away for a moment (inbox and outbox). Each case runs one handler and one send
//! per message, and ends with every record done, no stale lease, no dead letter and no send
//! of unknown outcome.
//!
//! The tests run on tokio's paused clock, and the bot's wall clock follows it
//! ([`TokioClock`]): leases expire, heartbeats beat and slow handlers end in virtual time.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use botmesh::clock::TokioClock;
use botmesh::durability::kv::WritePoint;
use botmesh::durability::retries::Backoff;
use botmesh::durability::{DurabilityConfig, InboxState, MemoryKv};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::{Crashable, MockProvider, crashable};

/// A memory backend whose write at `point` the crash harness fails once (`fail_once`).
fn blip(point: WritePoint) -> Crashable<MemoryKv> {
    let kv = crashable(Arc::new(MemoryKv::new()));
    kv.fail_once(point);
    kv
}

/// Leases of 300 ms (heartbeats every 100 ms), a sweeper every 20 ms.
fn config() -> DurabilityConfig {
    let mut c = DurabilityConfig::default();
    c.poll = Duration::from_millis(20);
    c.inbox.lease = Duration::from_millis(300);
    c.outbox.lease = Duration::from_millis(300);
    c.inbox.backoff = Backoff::fixed(Duration::from_millis(10), Duration::from_millis(10));
    c
}

/// What a case ends with.
struct Outcome {
    bot: Bot,
    mock: MockProvider,
    events: Vec<String>,
    /// How often the handler ran for `slow` (0) and for any other text (1).
    runs: Arc<[AtomicUsize; 2]>,
}

impl Outcome {
    /// Checks that each handler `expected` names (by its index in `runs`) ran once and that
    /// the journals are clean.
    async fn assert_clean(&self, expected: &[(&str, usize)]) {
        for (what, i) in expected {
            assert_eq!(self.runs[*i].load(Ordering::SeqCst), 1, "{what} ran once");
        }
        let d = self.bot.durability().unwrap();
        let metrics = d.metrics();
        assert_eq!(metrics.stale_leases, 0, "{metrics:?}");
        assert_eq!(metrics.inbound_dead, 0, "{metrics:?}");
        assert_eq!(metrics.outbox_ambiguous, 0, "{metrics:?}");
        for state in [
            InboxState::Pending,
            InboxState::Processing,
            InboxState::Dead,
        ] {
            let left = d.inbox().list(state, 10).await.unwrap();
            assert!(left.is_empty(), "{state:?}: {left:?}");
        }
        assert!(
            !self
                .events
                .iter()
                .any(|e| e == "durability:dead" || e == "durability:ambiguous"),
            "{:?}",
            self.events
        );
    }
}

/// Starts a bot on `kv` whose handler waits `slow` for the text `slow`, feeds `texts` to one
/// chat, and waits until they are answered and a lease or two more have passed.
async fn run(
    kv: Crashable<MemoryKv>,
    slow: Duration,
    texts: &[&str],
    send_delay: Option<Duration>,
) -> Outcome {
    let runs: Arc<[AtomicUsize; 2]> = Arc::default();
    let mock = MockProvider::new();
    mock.set_send_delay(send_delay);
    let bot = Bot::builder(mock.clone())
        .clock(TokioClock::new(1_767_225_600_000))
        .durability(
            DurabilityOptions::backend(kv)
                .config(config())
                .instance_id("i1"),
        )
        .build()
        .unwrap();
    let counted = runs.clone();
    bot.catch_all(move |ctx: Ctx| {
        let runs = counted.clone();
        async move {
            let n = usize::from(ctx.text() != "slow");
            runs[n].fetch_add(1, Ordering::SeqCst);
            if ctx.text() == "slow" {
                tokio::time::sleep(slow).await;
            }
            ctx.reply(format!("{}:done", ctx.text())).await?;
            Ok(())
        }
    });
    let mut subscribed = bot.subscribe();
    bot.start().await.unwrap();
    for (n, text) in texts.iter().enumerate() {
        mock.say("alice", &format!("m{n}"), text).await.unwrap();
    }
    assert_eq!(
        mock.wait_for_sends(texts.len(), Duration::from_secs(10))
            .await,
        texts.len()
    );
    // A lease and more: long enough for an expired lease to be claimed again.
    tokio::time::sleep(Duration::from_millis(700)).await;
    bot.idle().await;
    let mut events = Vec::new();
    while let Ok(event) = subscribed.try_recv() {
        if let BotEvent::Durability(event) = event {
            events.push(event.name().to_owned());
        }
    }
    let expected: Vec<String> = texts.iter().map(|t| format!("{t}:done")).collect();
    assert_eq!(mock.texts("alice"), expected, "each reply once, in order");
    Outcome {
        bot,
        mock,
        events,
        runs,
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_waiting_behind_a_slow_handler_keeps_its_lease() {
    // Nothing armed: no failure, only the wait.
    let kv = crashable(Arc::new(MemoryKv::new()));
    // The second message waits 1.5 s, five leases, behind the first.
    let outcome = run(kv, Duration::from_millis(1500), &["slow", "fast"], None).await;
    outcome
        .assert_clean(&[("the slow handler", 0), ("the queued handler", 1)])
        .await;
    outcome.bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_inbox_heartbeat_that_fails_once_keeps_beating() {
    let kv = blip(WritePoint::InboxHeartbeat);
    let outcome = run(kv.clone(), Duration::from_millis(1200), &["slow"], None).await;
    assert_eq!(kv.failed_once(), 1, "the heartbeat failed once");
    outcome.assert_clean(&[("the handler", 0)]).await;
    outcome.bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_outbox_heartbeat_that_fails_once_keeps_beating() {
    let kv = blip(WritePoint::OutboxHeartbeat);
    // A provider call of 1.2 s, four send leases.
    let outcome = run(
        kv.clone(),
        Duration::ZERO,
        &["fast"],
        Some(Duration::from_millis(1200)),
    )
    .await;
    assert_eq!(kv.failed_once(), 1, "the heartbeat failed once");
    outcome.assert_clean(&[("the handler", 1)]).await;
    assert_eq!(outcome.mock.sent().len(), 1, "one provider call");
    outcome.bot.stop().await.unwrap();
}
