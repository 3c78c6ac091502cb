//! The durable scheduler in one process, on the memory backend, with tokio's paused time and a
//! manual wall clock: jobs run at their occurrences and send through the outbox under keys
//! derived from the job and the occurrence; a job survives a restart on the same backend and
//! each missed-run policy plans the downtime's occurrences; two bots sharing a backend run an
//! occurrence once; reminders, failures, listing and cancelling.

#![allow(clippy::unwrap_used)]

// The server tests read BOTMESH_TEST_POSTGRES_URL and BOTMESH_TEST_REDIS_URL (the CI's
// full lane runs this file, once the servers are up).
#[cfg(any(feature = "postgres", feature = "redis"))]
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh::clock::ManualClock;
use botmesh::durability::{DurableKv, MemoryKv};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::schedule::{Job, JobCtx, JobState, MissedRuns, SchedulerOptions};
use botmesh::testing::MockProvider;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;

struct Replica {
    bot: Bot,
    mock: MockProvider,
    events: Arc<Mutex<Vec<BotEvent>>>,
}

/// One replica `a` on its own memory backend, started, and the wall clock it runs on.
async fn one_started() -> (ManualClock, Replica) {
    let kv = Arc::new(MemoryKv::new());
    let clock = ManualClock::new(T0);
    let r = replica(&kv, &clock, "a");
    r.bot.start().await.unwrap();
    (clock, r)
}

impl Replica {
    /// Schedules `job` (it must be accepted); its record.
    async fn schedule(&self, job: Job) -> botmesh::schedule::JobRecord {
        self.bot.schedule(job).await.unwrap()
    }
}

fn replica(kv: &Arc<MemoryKv>, clock: &ManualClock, instance: &str) -> Replica {
    let kv: Arc<dyn DurableKv> = kv.clone();
    replica_on(kv, clock, instance)
}

fn replica_on(kv: Arc<dyn DurableKv>, clock: &ManualClock, instance: &str) -> Replica {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .clock(clock.clone())
        .durability(DurabilityOptions::shared(kv).instance_id(instance))
        .scheduler(SchedulerOptions {
            poll: Duration::from_millis(100),
            lease: Duration::from_secs(5),
            grace: Duration::from_secs(2),
        })
        .build()
        .unwrap();
    // The task sends one message per run, to the ops chat, naming the occurrence.
    bot.task("tick", |job: JobCtx| async move {
        job.send("ops", format!("tick {}", (job.occurrence_ms() - T0) / 1000))
            .await?;
        Ok(())
    });
    let events = crate::common::events_picked(&bot, |e| Some(e.clone()));
    Replica { bot, mock, events }
}

/// Moves the wall clock and tokio's (paused) clock together.
async fn pass(clock: &ManualClock, by: Duration) {
    let step = Duration::from_millis(100);
    let mut left = by;
    while !left.is_zero() {
        let d = step.min(left);
        clock.advance(d);
        tokio::time::sleep(d).await;
        left -= d;
    }
}

fn sent_keys(events: &Mutex<Vec<BotEvent>>) -> Vec<String> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            BotEvent::Sent { key, .. } => key.clone(),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_job_runs_at_each_occurrence_and_sends_under_its_occurrence_key() {
    let (clock, r) = one_started().await;
    let job = r
        .schedule(Job::every("tick", Duration::from_secs(10)))
        .await;
    assert_eq!(job.next_ms, Some(T0 + 10_000));
    pass(&clock, Duration::from_millis(20_500)).await;
    assert_eq!(r.mock.texts("ops"), ["tick 10", "tick 20"]);
    let t10 = format!("job:tick@{}:1", T0 + 10_000);
    let t20 = format!("job:tick@{}:1", T0 + 20_000);
    assert_eq!(sent_keys(&r.events), [t10, t20]);
    let m = r.bot.metrics();
    assert_eq!((m.jobs_run, m.jobs_failed, m.jobs_missed), (2, 0, 0));
    let listed = r.bot.jobs(10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].runs, listed[0].next_ms, listed[0].state()),
        (2, Some(T0 + 30_000), JobState::Scheduled)
    );
    r.bot.stop().await.unwrap();
}

/// Scheduled, stopped before its first occurrence, started again 35 s later on the same
/// backend (occurrences 10, 20 and 30 missed, the latest 5 s late with a grace of 2 s).
async fn after_downtime(policy: MissedRuns) -> (Vec<String>, u64) {
    let kv = Arc::new(MemoryKv::new());
    let clock = ManualClock::new(T0);
    let first = replica(&kv, &clock, "a");
    first.bot.start().await.unwrap();
    let tick = || Job::every("tick", Duration::from_secs(10)).missed(policy);
    first.schedule(tick()).await;
    first.bot.stop().await.unwrap();
    clock.advance(Duration::from_secs(35));
    let second = replica(&kv, &clock, "a");
    // The code schedules its jobs at every start: the same definition keeps the job.
    second.schedule(tick()).await;
    second.bot.start().await.unwrap();
    pass(&clock, Duration::from_millis(1_000)).await;
    let texts = second.mock.texts("ops");
    let missed = second.bot.metrics().jobs_missed;
    // The next occurrence runs on time under every policy.
    pass(&clock, Duration::from_secs(5)).await;
    assert_eq!(
        second.mock.texts("ops").last().map(String::as_str),
        Some("tick 40")
    );
    second.bot.stop().await.unwrap();
    (texts, missed)
}

#[tokio::test(start_paused = true)]
async fn each_missed_run_policy_plans_the_downtime() {
    assert_eq!(after_downtime(MissedRuns::Skip).await, (vec![], 3));
    assert_eq!(
        after_downtime(MissedRuns::RunOnce).await,
        (vec!["tick 30".to_owned()], 2)
    );
    assert_eq!(
        after_downtime(MissedRuns::RunAll).await,
        (
            vec![
                "tick 10".to_owned(),
                "tick 20".to_owned(),
                "tick 30".to_owned()
            ],
            0
        )
    );
}

#[tokio::test(start_paused = true)]
async fn two_bots_sharing_a_backend_run_an_occurrence_once() {
    let kv = Arc::new(MemoryKv::new());
    let clock = ManualClock::new(T0);
    let (a, b) = (replica(&kv, &clock, "a"), replica(&kv, &clock, "b"));
    a.bot.start().await.unwrap();
    b.bot.start().await.unwrap();
    for r in [&a, &b] {
        r.schedule(Job::every("tick", Duration::from_secs(1))).await;
    }
    pass(&clock, Duration::from_millis(10_500)).await;
    let mut all: Vec<String> = a.mock.texts("ops");
    all.extend(b.mock.texts("ops"));
    all.sort_by_key(|t| t[5..].parse::<u32>().unwrap());
    let expected: Vec<String> = (1..=10).map(|i| format!("tick {i}")).collect();
    assert_eq!(all, expected, "each occurrence ran once, on one of the two");
    assert_eq!(a.bot.metrics().jobs_run + b.bot.metrics().jobs_run, 10);
    a.bot.stop().await.unwrap();
    b.bot.stop().await.unwrap();
}

/// Two replicas of one bot on a shared server backend, each polling every 50 ms: every
/// occurrence of a job due every second of the (manual) wall clock runs once, on one of them.
#[cfg(any(feature = "postgres", feature = "redis"))]
async fn one_occurrence_once_on(kv: Arc<dyn DurableKv>) {
    use crate::common::eventually::eventually;
    let clock = ManualClock::new(T0);
    let (a, b) = (
        replica_on(kv.clone(), &clock, "a"),
        replica_on(kv, &clock, "b"),
    );
    a.bot.start().await.unwrap();
    b.bot.start().await.unwrap();
    for r in [&a, &b] {
        r.schedule(Job::every("tick", Duration::from_secs(1))).await;
    }
    let runs = || a.bot.metrics().jobs_run + b.bot.metrics().jobs_run;
    for second in 1..=8 {
        clock.advance(Duration::from_secs(1));
        // The polls of both replicas and the server round trips run on the wall clock.
        let ran = eventually(Duration::from_secs(10), async || runs() >= second).await;
        assert!(ran, "occurrence {second} ran: {} runs", runs());
    }
    // One more poll on each replica, now: an occurrence either would run a second time is
    // still due, and would start here.
    for r in [&a, &b] {
        assert_eq!(
            r.bot.fire_flow_timeouts().await.unwrap(),
            0,
            "nothing left due"
        );
        r.bot.idle().await;
    }
    let mut all: Vec<String> = a.mock.texts("ops");
    all.extend(b.mock.texts("ops"));
    all.sort_by_key(|t| t[5..].parse::<u32>().unwrap());
    let expected: Vec<String> = (1..=8).map(|i| format!("tick {i}")).collect();
    assert_eq!(all, expected, "each occurrence ran once, on one of the two");
    a.bot.stop().await.unwrap();
    b.bot.stop().await.unwrap();
}

on_server_kvs!(
    one_occurrence_once_on("sched"):
    two_replicas_on_postgres_run_an_occurrence_once,
    two_replicas_on_redis_run_an_occurrence_once
);

#[tokio::test(start_paused = true)]
async fn a_reminder_reaches_its_chat_once_even_when_scheduled_again() {
    let (clock, r) = one_started().await;
    let remind = || {
        Job::after("remind:alice:1", Duration::from_secs(60))
            .chat("alice")
            .remind("Time to stand up")
    };
    r.schedule(remind()).await;
    pass(&clock, Duration::from_secs(30)).await;
    // A replayed handler schedules it again: the first time stands.
    let again = r.schedule(remind()).await;
    assert_eq!(again.next_ms, Some(T0 + 60_000));
    pass(&clock, Duration::from_secs(31)).await;
    assert_eq!(r.mock.texts("alice"), ["Time to stand up"]);
    let done = r.bot.jobs(10).await.unwrap();
    assert_eq!(done[0].state(), JobState::Done);
    // Done, it stays done: scheduled again, it does not run twice.
    r.schedule(remind()).await;
    pass(&clock, Duration::from_secs(120)).await;
    assert_eq!(r.mock.texts("alice").len(), 1);
    r.bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failing_task_is_counted_reported_and_the_job_goes_on() {
    let kv = Arc::new(MemoryKv::new());
    let clock = ManualClock::new(T0);
    let r = replica(&kv, &clock, "a");
    r.bot.task("broken", |_job: JobCtx| async move {
        Err(HandlerError::from("the report service is down"))
    });
    r.bot.start().await.unwrap();
    r.schedule(Job::every("broken", Duration::from_secs(10)))
        .await;
    pass(&clock, Duration::from_millis(10_500)).await;
    assert_eq!(r.bot.metrics().jobs_failed, 1);
    let failed = r.events.lock().unwrap().iter().any(|e| {
        matches!(e, BotEvent::Job { what, error: Some(err), .. } if what == "failed" && err.contains("report service"))
    });
    assert!(failed, "a `failed` job event names the error");
    let job = &r.bot.jobs(10).await.unwrap()[0];
    assert_eq!(job.next_ms, Some(T0 + 20_000));
    assert!(
        job.last_error
            .as_deref()
            .unwrap()
            .contains("report service")
    );
    r.bot.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_job_runs_no_more_and_bad_jobs_are_refused() {
    let (clock, r) = one_started().await;
    r.schedule(Job::every("tick", Duration::from_secs(10)))
        .await;
    assert!(r.bot.cancel_job("tick").await.unwrap());
    assert!(!r.bot.cancel_job("tick").await.unwrap());
    pass(&clock, Duration::from_secs(25)).await;
    assert!(r.mock.texts("ops").is_empty());
    let err = r
        .bot
        .schedule(Job::cron("bad", "61 * * * *"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("invalid cron expression `61 * * * *`"),
        "{err}"
    );
    let err = r
        .bot
        .schedule(Job::every("", Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("job id ``"), "{err}");
    r.bot.stop().await.unwrap();
    // Without durable journals there is nowhere to keep a job.
    let plain = Bot::builder(MockProvider::new()).build().unwrap();
    let err = plain
        .schedule(Job::every("x", Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("durable"), "{err}");
}

/// Waits for an answer for a minute.
#[flow(start = command("confirm"))]
#[persistent]
async fn confirm(cx: &mut FlowCx) -> FlowResult {
    match cx.ask("Confirm?").idle(Duration::from_secs(60)).await {
        Ok(_) => cx.send("Confirmed.").await?,
        Err(Interrupt::Timeout) => cx.send("No answer: cancelled.").await?,
        Err(Interrupt::Cancelled) => return cx.cancel(),
    }
    Ok(())
}

/// An ask that times out while the bot is down, with no new message, times out once the bot
/// is back: its timeout is a job of the scheduler, in the SQLite file's journals.
#[tokio::test(start_paused = true)]
async fn a_durable_ask_times_out_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bot.db");
    let clock = ManualClock::new(T0);
    let build = |mock: &MockProvider| {
        let bot = Bot::builder(mock.clone())
            .clock(clock.clone())
            .store(botmesh::durability::SqliteStore::open(&path))
            .build()
            .unwrap();
        bot.flow(confirm);
        bot
    };
    let first_mock = MockProvider::new();
    let first = build(&first_mock);
    first.start().await.unwrap();
    first_mock.say("alice", "m1", "/confirm").await.unwrap();
    first.idle().await;
    assert_eq!(first_mock.texts("alice"), ["Confirm?"]);
    first.stop().await.unwrap();
    drop(first);

    // Down for two minutes: the deadline passed while nobody ran the flow.
    clock.advance(Duration::from_secs(120));
    let mock = MockProvider::new();
    let second = build(&mock);
    second.start().await.unwrap();
    // The restored conversation's timeout is armed again (the same job, kept as it was).
    let jobs = second.jobs(10).await.unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].id, "botmesh.ask-timeout:alice");
    assert_eq!(jobs[0].next_ms, Some(T0 + 60_000), "at the ask's deadline");
    // Polls of the scheduler now (its runner polls too: one of them claims it), until the
    // flow's step is done: SQLite answers in real time, the test's clock is paused.
    for _ in 0..500 {
        second.fire_flow_timeouts().await.unwrap();
        second.idle().await;
        if !mock.texts("alice").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mock.texts("alice"), ["No answer: cancelled."]);
    assert!(second.store().checkpoint("alice").await.unwrap().is_none());
    assert!(
        second.jobs(10).await.unwrap().is_empty(),
        "the flow ended: its timeout job is gone"
    );
    second.stop().await.unwrap();
}
