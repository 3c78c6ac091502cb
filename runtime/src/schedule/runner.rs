//! The `jobs` lifecycle step (after `transport`: a job may send as soon as it runs): a
//! background runner that polls the due jobs, claims each due occurrence, runs its task and
//! records the outcome.
//!
//! | found by the poll | what the runner does |
//! | --- | --- |
//! | a job whose task this bot has not registered | leaves it (another version or replica may run it), warns once |
//! | a due job | plans it (`when::plan`), claims it: run one occurrence, or skip the missed ones (`jobs_missed`, event `missed`) |
//! | a running occurrence whose lease expired | claims it again, same occurrence: its sends keep their keys |
//! | a claimed occurrence | runs the task in the job's chat queue (a job without a chat in a queue of its own), renewing the lease every third of it; then finishes it (`jobs_run`, `jobs_failed`) and moves the job to its next occurrence |
//!
//! A run cut short by `stop()` (aborted after the stop timeout) is not finished: its lease
//! expires, or the next start of the same instance id takes it at once, and runs it again.
//! This module does not compute occurrences (`when`) or store anything itself (the durability
//! crate's `schedule` records).

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use botmesh_durability::schedule::{Claimed, JobClaim, JobRecord, ScheduleError};
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::error::BotError;
use crate::events::BotEvent;
use crate::kernel::isolated::run_isolated;
use crate::kernel::lifecycle::LifecycleStep;
use crate::kernel::{Bot, Kernel, RunState};
use crate::message::ChatId;
use crate::metrics::Counters;
use crate::schedule::{JobCtx, when};

/// How many due jobs one poll claims at most.
const BATCH: usize = 64;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The `jobs` lifecycle step.
pub(crate) struct SchedulerStep;

#[async_trait]
impl LifecycleStep for SchedulerStep {
    fn name(&self) -> &str {
        "jobs"
    }

    fn produces_work(&self) -> bool {
        true
    }

    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        let k = &bot.kernel;
        let s = k.scheduler();
        // Jobs stored by an earlier run (reminders, ask timeouts) need polling even when no
        // task of this run is registered yet; so do the jobs other replicas store (an ask
        // timeout armed on a replica that dies is fired by another).
        if !k.jobs.is_active()
            && (k.coordination.is_some() || !k.jobs_store().jobs().list(1).await?.is_empty())
        {
            k.jobs.activate();
        }
        let weak = Arc::downgrade(k);
        s.runner.spawn(|stop| run(weak, stop));
        Ok(())
    }

    async fn stop(&self, bot: &Bot) -> Result<(), BotError> {
        let s = bot.kernel.scheduler();
        s.runner.stop(bot.kernel.config.stop_timeout).await;
        Ok(())
    }
}

/// Polls until stopped.
async fn run(weak: Weak<Kernel>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut unknown: HashSet<String> = HashSet::new();
    loop {
        let Some(k) = weak.upgrade() else { return };
        let poll = k.scheduler().options.poll;
        if k.jobs.is_active() && k.run_state() == RunState::Running {
            if let Err(e) = poll_once(&k, &mut unknown).await {
                tracing::warn!(error = %e, "scheduler poll failed");
                k.events.error("scheduler", None, e);
            }
        }
        let wake = Arc::clone(&k.jobs.wake);
        drop(k);
        let wake = wake.notified();
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(poll) => {}
            () = wake => {}
        }
    }
}

/// One poll now, outside the runner's loop (`Bot::fire_flow_timeouts`): how many occurrences
/// it started.
pub(crate) async fn poll_now(k: &Arc<Kernel>) -> Result<usize, BotError> {
    poll_once(k, &mut HashSet::new()).await
}

/// Claims and starts every due occurrence found now; returns how many it started.
async fn poll_once(k: &Arc<Kernel>, unknown: &mut HashSet<String>) -> Result<usize, BotError> {
    let jobs = k.jobs_store().jobs();
    let opts = k.scheduler().options;
    let now = k.clock.now_ms();
    let mut started = 0;
    for job in jobs.due(now, BATCH).await? {
        if k.scheduler().task(&job.def.task).is_none() {
            if unknown.insert(job.id.clone()) {
                tracing::warn!(job = %job.id, task = %job.def.task, "no task registered under this name: the job waits");
            }
            continue;
        }
        let grace = ms(opts.grace);
        let claimed = jobs
            .claim(&job.id, ms(opts.lease), |r, now| when::plan(r, now, grace))
            .await?;
        match claimed {
            Claimed::Nothing => {}
            Claimed::Skipped { job: after, missed } => {
                missed_runs(k, &after, job.next_ms.unwrap_or(now), missed);
            }
            Claimed::Run(claim) => {
                let missed = claim.job.misses.saturating_sub(job.misses);
                if missed > 0 {
                    missed_runs(k, &claim.job, job.next_ms.unwrap_or(now), missed);
                }
                start(k, claim);
                started += 1;
            }
        }
    }
    Ok(started)
}

fn missed_runs(k: &Kernel, job: &JobRecord, from_ms: i64, missed: u64) {
    k.counters
        .jobs_missed
        .fetch_add(missed, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(job = %job.id, missed, from_ms, policy = job.def.missed.as_str(), "missed occurrences not run");
    k.events.emit(BotEvent::Job {
        id: job.id.clone(),
        chat: job.def.chat.as_deref().map(ChatId::from),
        occurrence_ms: from_ms,
        what: "missed".to_owned(),
        missed,
        error: None,
    });
}

/// Runs a claimed occurrence in its queue, renewing its lease until the run ends.
fn start(k: &Arc<Kernel>, claim: JobClaim) {
    let queue = match &claim.job.def.chat {
        Some(chat) => ChatId::from(chat.as_str()),
        // A queue of its own: a job's occurrences run one after the other.
        None => ChatId::from(format!("\u{0}job:{}", claim.job.id)),
    };
    let (done_tx, done_rx) = oneshot::channel();
    let kernel = Arc::clone(k);
    let c = claim.clone();
    k.queues.push(
        &queue,
        Box::pin(async move {
            let error = run_task(&kernel, &c).await;
            let _ = done_tx.send(error);
        }),
    );
    let kernel = Arc::clone(k);
    tokio::spawn(async move {
        let lease = kernel.scheduler().options.lease;
        let renew_every = lease / 3;
        let mut done_rx = done_rx;
        let error = loop {
            tokio::select! {
                r = &mut done_rx => break r,
                () = tokio::time::sleep(renew_every) => {
                    if let Err(e) = kernel.jobs_store().jobs().renew(&claim, ms(lease)).await {
                        tracing::warn!(job = %claim.job.id, error = %e, "cannot renew the job's lease");
                    }
                }
            }
        };
        // Dropped unrun or aborted by `stop()`: left to its lease, run again later.
        let Ok(error) = error else { return };
        finish(&kernel, &claim, error).await;
    });
}

/// Runs the task in a task of its own (a panic is an error), under a root `bot.task` span.
async fn run_task(k: &Arc<Kernel>, claim: &JobClaim) -> Option<String> {
    let Some(task) = k.scheduler().task(&claim.job.def.task) else {
        return Some(format!("no task `{}` registered", claim.job.def.task));
    };
    let bot = Bot::from_kernel(Arc::clone(k));
    let ctx = JobCtx::new(bot, claim.job.clone(), claim.occurrence_ms, claim.retaken);
    let span = crate::telemetry::task_span(&claim.job.id);
    span.in_scope(|| {
        tracing::debug!(
            task = %claim.job.def.task,
            chat = claim.job.def.chat.as_deref().unwrap_or(""),
            occurrence_ms = claim.occurrence_ms,
            retaken = claim.retaken,
            "job run"
        );
    });
    run_isolated(task(ctx).instrument(span)).await.err()
}

/// Records the run and moves the job to its next occurrence.
async fn finish(k: &Arc<Kernel>, claim: &JobClaim, error: Option<String>) {
    let job = &claim.job;
    let chat = job.def.chat.as_deref().map(ChatId::from);
    Counters::inc(&k.counters.jobs_run);
    if let Some(e) = &error {
        Counters::inc(&k.counters.jobs_failed);
        tracing::warn!(job = %job.id, occurrence_ms = claim.occurrence_ms, error = %e, "job failed");
    }
    k.events.emit(BotEvent::Job {
        id: job.id.clone(),
        chat,
        occurrence_ms: claim.occurrence_ms,
        what: if error.is_some() { "failed" } else { "ran" }.to_owned(),
        missed: 0,
        error: error.clone(),
    });
    match k
        .jobs_store()
        .jobs()
        .finish(claim, error, |r, occurrence| {
            when::next_after(&r.def, occurrence)
        })
        .await
    {
        Ok(after) => {
            if after.next_ms.is_some_and(|n| n <= k.clock.now_ms()) {
                // Missed occurrences run one after the other, without waiting for the poll.
                k.jobs.wake.notify_one();
            }
        }
        // Cancelled while it ran (by an operator, or an ask timeout's flow that ended): there
        // is nothing left to record.
        Err(ScheduleError::Stale { current: None, .. }) => {
            tracing::debug!(job = %job.id, "the job was cancelled while it ran");
        }
        Err(e) => {
            tracing::warn!(job = %job.id, error = %e, "the job's run could not be recorded");
            k.events.error("scheduler", None, e);
        }
    }
}
