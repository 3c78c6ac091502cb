//! An ask's idle timeout, kept as a one-off job of the durable scheduler: the ask that waits
//! with `.idle(…)` is armed as the job `botmesh.ask-timeout:<chat>` (task
//! [`TIMEOUT_TASK`]) at its deadline, in the journal the scheduler keeps its jobs in (the
//! durable journals; an in-memory one on a bot without them). When it is due, the replica
//! that claims the occurrence (under the scheduler's lease) resumes the flow with
//! `Err(Interrupt::Timeout)` through the normal step path, in the chat's queue: its sends go
//! through the outbox, its checkpoint is written as any step's.
//!
//! | what happens | the job |
//! | --- | --- |
//! | a step suspends at an ask with an idle timeout | stored (created, or replaced: one per chat) with the ask's identity (flow, run, step) and its deadline; the same ask again (a replayed step, a restart) keeps it as it is |
//! | the ask is answered, the flow ends, is replaced or cancelled | deleted |
//! | it fires | the chat's current stack (in memory, reconciled with the store, or loaded from its checkpoint) is resumed only when it still waits at that run and step and its deadline passed: an occurrence left from an earlier ask fires nothing |
//! | it fires while the chat is handed off to a human | nothing; armed again at the handoff's release |
//! | it fires and the step could not be written (the journal away) | armed again a second later |
//! | the bot starts | every restored conversation's timeout is armed again (a crash between a step's commit and its arming loses nothing) |
//!
//! Exactly one replica fires an occurrence (the scheduler's claim); a kill -9 before it is due
//! or while it runs leaves it to the next start (missed-run policy `run_once`: one timeout,
//! however late). A non-persistent flow lives in one process's memory: a replica that claims
//! its timeout without holding it forwards it to the live replica that does (`forward`), and
//! after a restart the timeout finds nothing. This module does not run or claim jobs
//! (the `schedule` layer does) and does not step flows (`conversation::fire_timeout` does, with
//! the executor).

use botmesh_durability::schedule::{JobDefinition, JobSchedule, MissedRuns};
use serde::{Deserialize, Serialize};

use crate::flow::stack::Stack;
use crate::kernel::Kernel;
use crate::message::ChatId;

/// The scheduler's task that fires the asks' idle timeouts.
pub(crate) const TIMEOUT_TASK: &str = "botmesh.ask-timeout";

/// How long after a timeout whose step could not be written it is tried again.
const RETRY_MS: i64 = 1_000;

/// The job of a chat's ask timeout (one per chat: a chat has one waiting ask).
pub(crate) fn job_id(chat: &ChatId) -> String {
    format!("{TIMEOUT_TASK}:{chat}")
}

/// The ask a timeout job is for, as its data: the stack's run and the step that suspended
/// at it (a new ask of the chat is another step), and the flow's name for an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Armed {
    flow: String,
    run: String,
    step: u64,
}

/// The job definition of `stack`'s ask timeout, due at `at_ms`.
fn definition(chat: &ChatId, stack: &Stack, at_ms: i64) -> JobDefinition {
    let armed = Armed {
        flow: stack.top_name().unwrap_or("").to_owned(),
        run: stack.run.clone(),
        step: stack.step,
    };
    JobDefinition {
        schedule: JobSchedule::At { at_ms },
        task: TIMEOUT_TASK.to_owned(),
        chat: Some(chat.0.clone()),
        data: serde_json::to_value(armed).unwrap_or_default(),
        missed: MissedRuns::RunOnce,
    }
}

/// What a step leaves of its chat's timeout job (`settle` decides it while it holds the
/// stack, and carries it out after the step's sends).
pub(crate) enum Timer {
    /// Nothing: the stack waits without a timeout, and waited without one.
    Keep,
    /// The stack waits at an ask with a timeout.
    Arm(JobDefinition),
    /// The stack waited with a timeout and no longer does (answered, ended).
    Disarm,
}

impl Timer {
    /// For a stack that waits (`Some`) or ended (`None`), that waited with a timeout before
    /// its step (`timed`).
    pub(crate) fn after_step(chat: &ChatId, stack: Option<&Stack>, timed: bool) -> Self {
        match stack.and_then(|s| s.deadline().map(|d| (s, d))) {
            Some((s, deadline)) => Timer::Arm(definition(chat, s, deadline)),
            None if timed => Timer::Disarm,
            None => Timer::Keep,
        }
    }

    /// Stores or deletes the job.
    pub(crate) async fn apply(self, k: &Kernel, chat: &ChatId) {
        match self {
            Timer::Keep => {}
            Timer::Arm(def) => store(k, chat, def).await,
            Timer::Disarm => disarm(k, chat).await,
        }
    }
}

/// Stores the timeout job of `chat` as `def` (kept as it is when it holds `def` already).
async fn store(k: &Kernel, chat: &ChatId, def: JobDefinition) {
    let at = |d: &JobDefinition, _now: i64| match d.schedule {
        JobSchedule::At { at_ms } => Some(at_ms),
        _ => None,
    };
    match k
        .jobs_store()
        .jobs()
        .schedule(&job_id(chat), def, true, at)
        .await
    {
        Ok((job, what)) => {
            tracing::debug!(chat = %chat, at_ms = ?job.next_ms, ?what, "ask timeout armed");
            k.jobs.activate();
        }
        Err(e) => k.events.error("flow:timeout", Some(chat), e),
    }
}

/// Deletes the chat's timeout job, if it has one.
pub(crate) async fn disarm(k: &Kernel, chat: &ChatId) {
    match k.jobs_store().jobs().cancel(&job_id(chat)).await {
        Ok(found) => tracing::trace!(chat = %chat, found, "ask timeout disarmed"),
        Err(e) => k.events.error("flow:timeout", Some(chat), e),
    }
}

/// The chat's handoff ended: a timeout that passed during it fires now.
pub(crate) async fn after_handoff(k: &Kernel, chat: &ChatId) {
    let now = k.clock.now_ms();
    let def = k.flows().with_stack(chat, |s| {
        s.deadline()
            .filter(|d| *d <= now)
            .map(|_| definition(chat, s, now))
    });
    if let Some(def) = def.flatten() {
        store(k, chat, def).await;
        k.jobs.wake.notify_one();
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum FireError {
    /// A timeout job without a chat.
    #[error("the ask timeout job has no chat")]
    NoChat,
    /// A timeout job whose data does not name an ask.
    #[error("the ask timeout job of chat `{chat}` does not name an ask: {source}")]
    Data {
        chat: String,
        source: serde_json::Error,
    },
}

/// The ask (run, step) a timeout job's data names.
pub(crate) fn armed_ask(
    chat: &ChatId,
    data: &serde_json::Value,
) -> Result<(String, u64), FireError> {
    let armed: Armed = serde_json::from_value(data.clone()).map_err(|source| FireError::Data {
        chat: chat.0.clone(),
        source,
    })?;
    Ok((armed.run, armed.step))
}

/// After a timeout's step: when the stack still waits at the same ask (the step was not
/// written, the journal away), its timeout is armed again to fire shortly.
pub(crate) async fn retry_unwritten(k: &Kernel, chat: &ChatId, run: &str, step: u64) {
    let retry = k.clock.now_ms().saturating_add(RETRY_MS);
    let again = k.flows().with_stack(chat, |s| {
        (s.run == run && s.step == step && s.deadline().is_some())
            .then(|| definition(chat, s, retry))
    });
    if let Some(def) = again.flatten() {
        store(k, chat, def).await;
    }
}
