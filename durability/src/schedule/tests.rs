//! The job records on the memory backend: scheduling is idempotent per definition, one
//! replica claims an occurrence, a dead holder's occurrence is taken over, a stale holder is
//! refused.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::config::DurabilityConfig;
use crate::kv::{MemoryKv, Scope};

fn replica(kv: &Arc<MemoryKv>, clock: &Arc<ManualClock>, instance: &str) -> KvDurability<MemoryKv> {
    let mut config = DurabilityConfig::default();
    config.instance_id = Some(instance.to_owned());
    KvDurability::builder(Arc::clone(kv), Scope::custom("bot"))
        .config(config)
        .shared_clock(clock.clone())
        .build()
        .unwrap()
}

fn every(ms: u64) -> JobDefinition {
    JobDefinition {
        schedule: JobSchedule::Every {
            every_ms: ms,
            anchor_ms: None,
        },
        task: "tick".into(),
        chat: None,
        data: serde_json::Value::Null,
        missed: MissedRuns::RunAll,
    }
}

fn first(def: &JobDefinition, now: i64) -> Option<i64> {
    match def.schedule {
        JobSchedule::Every { every_ms, .. } => Some(now + every_ms as i64),
        JobSchedule::At { at_ms } => Some(at_ms),
        JobSchedule::Cron { .. } => None,
    }
}

fn run_next(r: &JobRecord, _now: i64) -> Plan {
    Plan::Run {
        occurrence_ms: r.next_ms.unwrap(),
        missed: 0,
    }
}

/// The shared backend and the clock of a test's replicas, at `now`.
fn backend(now: i64) -> (Arc<MemoryKv>, Arc<ManualClock>) {
    (Arc::new(MemoryKv::new()), Arc::new(ManualClock::new(now)))
}

/// Schedules job `id` by `def`, replacing another definition.
async fn schedule(
    d: &KvDurability<MemoryKv>,
    id: &str,
    def: JobDefinition,
) -> (JobRecord, Scheduled) {
    d.jobs().schedule(id, def, true, first).await.unwrap()
}

/// What claiming job `id` under a lease of `lease_ms` finds.
async fn claimed(d: &KvDurability<MemoryKv>, id: &str, lease_ms: i64) -> Claimed {
    d.jobs().claim(id, lease_ms, run_next).await.unwrap()
}

/// Claims job `id`'s due occurrence to run it, under a lease of `lease_ms`.
async fn run(d: &KvDurability<MemoryKv>, id: &str, lease_ms: i64) -> JobClaim {
    match claimed(d, id, lease_ms).await {
        Claimed::Run(claim) => claim,
        other => panic!("`{id}` is not run: {other:?}"),
    }
}

#[tokio::test]
async fn the_same_definition_keeps_the_job_and_another_replaces_it() {
    let (kv, clock) = backend(1_000);
    let d = replica(&kv, &clock, "a");
    let (r, what) = schedule(&d, "j", every(100)).await;
    assert_eq!((what, r.next_ms), (Scheduled::Created, Some(1_100)));
    clock.advance(Duration::from_millis(50));
    let (r, what) = schedule(&d, "j", every(100)).await;
    assert_eq!((what, r.next_ms), (Scheduled::Unchanged, Some(1_100)));
    let (r, what) = schedule(&d, "j", every(500)).await;
    assert_eq!((what, r.next_ms), (Scheduled::Replaced, Some(1_550)));
    assert!(matches!(
        d.jobs().schedule("", every(1), true, first).await,
        Err(ScheduleError::InvalidId { .. })
    ));
}

#[tokio::test]
async fn one_replica_claims_an_occurrence_and_finishes_it() {
    let (kv, clock) = backend(1_000);
    let (a, b) = (replica(&kv, &clock, "a"), replica(&kv, &clock, "b"));
    a.jobs()
        .schedule("j", every(100), true, first)
        .await
        .unwrap();
    assert!(a.jobs().due(1_099, 10).await.unwrap().is_empty());
    assert!(
        matches!(claimed(&a, "j", 1_000).await, Claimed::Nothing),
        "not due yet"
    );
    clock.set(1_100);
    assert_eq!(a.jobs().due(1_100, 10).await.unwrap()[0].id, "j");
    let claim = run(&a, "j", 1_000).await;
    assert_eq!((claim.occurrence_ms, claim.retaken), (1_100, false));
    assert!(matches!(claimed(&b, "j", 1_000).await, Claimed::Nothing));
    assert_eq!(
        a.jobs().get("j").await.unwrap().unwrap().state(),
        JobState::Running
    );
    let done = a
        .jobs()
        .finish(&claim, None, |_, occ| Some(occ + 100))
        .await
        .unwrap();
    assert_eq!(
        (done.runs, done.next_ms, done.state()),
        (1, Some(1_200), JobState::Scheduled)
    );
    assert!(matches!(
        a.jobs().finish(&claim, None, |_, _| None).await,
        Err(ScheduleError::Stale { .. })
    ));
}

#[tokio::test]
async fn a_dead_holders_occurrence_is_taken_over_and_the_old_holder_is_fenced() {
    let (kv, clock) = backend(0);
    let (a, b) = (replica(&kv, &clock, "a"), replica(&kv, &clock, "b"));
    let def = JobDefinition {
        schedule: JobSchedule::At { at_ms: 10 },
        ..every(1)
    };
    schedule(&a, "once", def).await;
    clock.set(10);
    let old = run(&a, "once", 1_000).await;
    clock.set(500);
    assert!(
        b.jobs().due(500, 10).await.unwrap().is_empty(),
        "the lease is live"
    );
    clock.set(1_010);
    assert_eq!(b.jobs().due(1_010, 10).await.unwrap()[0].id, "once");
    let new = run(&b, "once", 1_000).await;
    assert_eq!((new.occurrence_ms, new.retaken), (10, true));
    assert!(new.token > old.token);
    assert!(matches!(
        a.jobs().renew(&old, 1_000).await,
        Err(ScheduleError::Stale { .. })
    ));
    let done = b
        .jobs()
        .finish(&new, Some("boom".into()), |_, _| None)
        .await
        .unwrap();
    assert_eq!(done.state(), JobState::Done);
    assert_eq!(
        (done.failures, done.last_error.as_deref()),
        (1, Some("boom"))
    );
}

#[tokio::test]
async fn a_restarted_instance_takes_its_own_occurrence_at_once() {
    let (kv, clock) = backend(0);
    let first_boot = replica(&kv, &clock, "a");
    schedule(&first_boot, "j", every(10)).await;
    clock.set(10);
    let Claimed::Run(_) = claimed(&first_boot, "j", 60_000).await else {
        panic!("claimed");
    };
    clock.set(20);
    let second_boot = replica(&kv, &clock, "a");
    let Claimed::Run(again) = claimed(&second_boot, "j", 60_000).await else {
        panic!("the abandoned lease of the same instance id is taken at once");
    };
    assert!(again.retaken);
}

#[tokio::test]
async fn skipping_moves_the_job_on_and_cancel_deletes_it() {
    let (kv, clock) = backend(0);
    let d = replica(&kv, &clock, "a");
    d.jobs()
        .schedule("j", every(10), true, first)
        .await
        .unwrap();
    d.jobs()
        .schedule("k", every(1_000), true, first)
        .await
        .unwrap();
    clock.set(35);
    let skipped = d
        .jobs()
        .claim("j", 1_000, |_, _| Plan::Skip {
            next_ms: Some(40),
            missed: 3,
        })
        .await
        .unwrap();
    let Claimed::Skipped { job, missed } = skipped else {
        panic!("skipped");
    };
    assert_eq!((missed, job.misses, job.next_ms), (3, 3, Some(40)));
    let ids: Vec<String> = d
        .jobs()
        .list(10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, ["j", "k"], "scheduled jobs by next occurrence");
    assert!(d.jobs().cancel("j").await.unwrap());
    assert!(!d.jobs().cancel("j").await.unwrap());
    assert!(d.jobs().get("j").await.unwrap().is_none());
}
