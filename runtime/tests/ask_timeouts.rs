//! Asks' idle timeouts are one-off jobs of the scheduler (`botmesh.ask-timeout:<chat>`), on
//! a bot without durable journals (an in-memory journal of its own) as on a durable one:
//! armed when the flow waits, fired once at the deadline through the normal step path,
//! gone when the ask is answered or the flow ends; a new ask has its own deadline, an
//! occurrence armed for another ask fires nothing, and a timeout that passed during a handoff
//! fires at its release. The bot's clock is a `ManualClock`; each check polls the scheduler
//! with `fire_flow_timeouts` (tokio's time paused: the runner's own polls see the same clock).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use botmesh::clock::ManualClock;
use botmesh::durable::DurabilityOptions;
use botmesh::flow::Interrupt;
use botmesh::prelude::*;
use botmesh::schedule::Job;
use botmesh::testing::MockProvider;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;

/// Two questions, a minute each.
#[flow(start = command("two"))]
#[persistent]
async fn two(cx: &mut FlowCx) -> FlowResult {
    match cx.ask("First?").idle(Duration::from_secs(60)).await {
        Ok(_) => {}
        Err(Interrupt::Timeout) => {
            cx.send("First timed out.").await?;
            return Ok(());
        }
        Err(Interrupt::Cancelled) => return cx.cancel(),
    }
    match cx.ask("Second?").idle(Duration::from_secs(60)).await {
        Ok(_) => cx.send("Done.").await?,
        Err(Interrupt::Timeout) => cx.send("Second timed out.").await?,
        Err(Interrupt::Cancelled) => return cx.cancel(),
    }
    Ok(())
}

struct Harness {
    bot: Bot,
    mock: MockProvider,
    clock: ManualClock,
}

async fn harness(durable: bool) -> Harness {
    let mock = MockProvider::new();
    let clock = ManualClock::new(T0);
    let mut builder = Bot::builder(mock.clone()).clock(clock.clone());
    if durable {
        builder = builder.durability(DurabilityOptions::memory());
    }
    let bot = builder.build().unwrap();
    bot.flow(two);
    bot.start().await.unwrap();
    Harness { bot, mock, clock }
}

impl Harness {
    async fn say(&self, id: &str, text: &str) {
        self.mock.say("alice", id, text).await.unwrap();
        self.bot.idle().await;
    }

    /// Moves the clock, polls the scheduler (the runner may have claimed what is due first:
    /// either way it runs once) and waits for what it started.
    async fn advance(&self, secs: u64) {
        self.clock.advance(Duration::from_secs(secs));
        self.bot.fire_flow_timeouts().await.unwrap();
        self.bot.idle().await;
    }

    fn texts(&self) -> Vec<String> {
        self.mock.texts("alice")
    }

    /// The next occurrence of alice's timeout job, if one is stored and due.
    async fn armed(&self) -> Option<i64> {
        let jobs = self.bot.jobs(10).await.unwrap();
        jobs.into_iter()
            .find(|j| j.id == "botmesh.ask-timeout:alice")
            .and_then(|j| j.next_ms)
    }
}

async fn fires_once_at_the_deadline(durable: bool) {
    let h = harness(durable).await;
    h.say("m1", "/two").await;
    assert_eq!(h.texts(), ["First?"]);
    assert_eq!(h.armed().await, Some(T0 + 60_000), "armed at the deadline");
    h.advance(59).await;
    assert_eq!(h.texts(), ["First?"]);
    h.advance(2).await;
    assert_eq!(h.texts(), ["First?", "First timed out."]);
    assert_eq!(h.armed().await, None, "the flow ended: the job is gone");
    assert!(h.bot.jobs(10).await.unwrap().is_empty());
    h.advance(60).await;
    assert_eq!(h.texts(), ["First?", "First timed out."]);
    h.bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_timeout_fires_once_at_its_deadline_without_journals() {
    fires_once_at_the_deadline(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_timeout_fires_once_at_its_deadline_with_journals() {
    fires_once_at_the_deadline(true).await;
}

#[tokio::test(start_paused = true)]
async fn an_answer_before_the_deadline_means_no_timeout_and_the_next_ask_has_its_own() {
    let h = harness(true).await;
    h.say("m1", "/two").await;
    h.advance(30).await;
    h.say("m2", "tea").await;
    assert_eq!(h.texts(), ["First?", "Second?"]);
    assert_eq!(
        h.armed().await,
        Some(T0 + 90_000),
        "the second ask's deadline replaced the first's"
    );
    // The first ask's deadline passes: nothing fires.
    h.advance(31).await;
    assert_eq!(h.texts(), ["First?", "Second?"]);
    h.advance(30).await;
    assert_eq!(h.texts(), ["First?", "Second?", "Second timed out."]);

    // Answered in time: no timeout, no job left.
    h.say("m3", "/two").await;
    h.say("m4", "tea").await;
    h.say("m5", "two").await;
    assert_eq!(h.texts()[3..], ["First?", "Second?", "Done."]);
    assert_eq!(h.armed().await, None, "the flow ended: the job is gone");
    h.advance(120).await;
    assert_eq!(h.texts().len(), 6, "{:?}", h.texts());
    h.bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_occurrence_armed_for_another_ask_fires_nothing() {
    let h = harness(true).await;
    h.say("m1", "/two").await;
    // An occurrence left from an earlier ask of alice's (another run, another step), due now.
    let stale = serde_json::json!({"flow": "two", "run": "in:earlier", "step": 1});
    h.bot
        .schedule(
            Job::at_ms("stale", T0)
                .task("botmesh.ask-timeout")
                .chat("alice")
                .data(stale),
        )
        .await
        .unwrap();
    h.advance(1).await;
    let jobs = h.bot.jobs(10).await.unwrap();
    let ran = jobs.iter().find(|j| j.id == "stale").map(|j| j.runs);
    assert_eq!(ran, Some(1), "the stale occurrence ran: {jobs:?}");
    assert_eq!(h.texts(), ["First?"], "and timed nothing out");
    h.advance(60).await;
    assert_eq!(h.texts(), ["First?", "First timed out."]);
    h.bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_timeout_that_passes_during_a_handoff_fires_at_its_release() {
    let h = harness(false).await;
    h.say("m1", "/two").await;
    h.bot.handoff("alice", None, None).await.unwrap();
    h.advance(61).await;
    assert_eq!(h.texts(), ["First?"], "the bot stays quiet in a handoff");
    assert_eq!(h.armed().await, None, "the occurrence ran, and did nothing");
    assert!(h.bot.release("alice").await.unwrap());
    h.advance(1).await;
    assert_eq!(h.texts(), ["First?", "First timed out."]);
    h.bot.stop().await.unwrap();
}
