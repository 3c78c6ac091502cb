//! The durable scheduler: jobs with stable ids, stored in the bot's durable journals, that
//! survive restarts with a missed-run policy and run on one replica per occurrence.
//!
//! ```no_run
//! use botmesh::prelude::*;
//! use botmesh::schedule::{Job, JobCtx, MissedRuns};
//! use std::time::Duration;
//! # async fn demo(bot: Bot) -> Result<(), BotError> {
//! // The code that runs a job is a task, registered under a name at every start.
//! bot.task("digest", |job: JobCtx| async move {
//!     job.send("ops-room", format!("daily digest for {}", job.occurrence_ms())).await?;
//!     Ok(())
//! });
//! // Scheduling the same job again (the next start) keeps it as it is, progress included.
//! bot.schedule(Job::cron("digest", "0 9 * * MON-FRI").missed(MissedRuns::RunOnce)).await?;
//! // A per-chat reminder, from a handler: the built-in reminder task sends the text.
//! bot.schedule(Job::after("remind:alice:42", Duration::from_secs(600)).chat("alice").remind("Stand up!"))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! | what | how |
//! | --- | --- |
//! | stored | in the journals' backend (`KvDurability::jobs`, `botmesh_durability::schedule`): every backend, one code path; the job's definition and its progress |
//! | one replica per occurrence | a due occurrence is claimed under a lease with a fencing token; the holder renews it while the task runs; a holder that died is taken over when its lease expires (at once by its own restarted instance id) |
//! | sends | `JobCtx::send` / `reply` go through the outbox under `job:<id>@<occurrence ms>:<n>`: an occurrence run again after a crash sends nothing twice |
//! | missed runs | after downtime (or more than [`SchedulerOptions::grace`] late): [`MissedRuns::Skip`], [`RunOnce`](MissedRuns::RunOnce) (the default) or [`RunAll`](MissedRuns::RunAll) (see `when`) |
//! | a task's error | counted (`jobs_failed`), reported (`job` event `failed`), kept on the job (`last_error`); the job goes on at its next occurrence: a run is not retried, like a handler |
//! | operating | `bot.jobs()`, `bot.cancel_job(id)`, the `botmesh jobs list` / `jobs cancel` commands on the store, the admin page's job list |
//! | asks' idle timeouts | each one a one-off job `botmesh.ask-timeout:<chat>` of the built-in task `botmesh.ask-timeout`, armed by the flows (`flow::timeout`): it resumes the chat's flow with the timeout when it still waits at that ask |
//!
//! Counters: `jobs_run`, `jobs_failed`, `jobs_missed` ([`BotMetrics`](crate::BotMetrics)).
//! Events: [`BotEvent::Job`] with `what` = `ran`, `failed` or `missed`. Each run is a root
//! `bot.task` tracing span ([`crate::telemetry::task_span`]). A bot without durable journals
//! refuses `schedule` with a configuration error (a job kept in memory would not survive the
//! restart it is meant to); its flows' ask timeouts run on the same scheduler over an
//! in-memory journal of its own (`kernel::jobs`).

mod runner;
pub(crate) mod when;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use botmesh_durability::schedule::JobDefinition;
pub use botmesh_durability::schedule::{
    JobRecord, JobSchedule, JobState, MissedRuns, ScheduleError, Scheduled,
};
use serde::de::DeserializeOwned;

pub(crate) use runner::SchedulerStep;

use crate::error::{BotError, HandlerResult};
#[cfg(doc)]
use crate::events::BotEvent;
use crate::flow::{conversation, timeout};
use crate::kernel::Bot;
use crate::kernel::lifecycle::StepTask;
use crate::kernel::routes::BoxFuture;
use crate::message::{ChatId, Outgoing};
use crate::outbound::{KeyRule, SendOutcome, SendRequest};

/// The task the reminders of [`Job::remind`] run: it sends the job's `text` to its chat.
pub const REMIND_TASK: &str = "botmesh.remind";

/// How the scheduler polls and leases ([`BotBuilder::scheduler`](crate::BotBuilder::scheduler)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// How often due jobs are looked for (default 1 s).
    pub poll: Duration,
    /// The lease of a running occurrence, renewed every third while its task runs (default
    /// 60 s): a replica that dies mid-run leaves the occurrence to another after it.
    pub lease: Duration,
    /// How late an occurrence may start and still count as on time (default 60 s); later, it
    /// is missed and the job's [`MissedRuns`] policy decides.
    pub grace: Duration,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            poll: Duration::from_secs(1),
            lease: Duration::from_secs(60),
            grace: Duration::from_secs(60),
        }
    }
}

impl SchedulerOptions {
    /// Refuses a zero poll period or lease.
    pub(crate) fn validate(&self) -> Result<(), BotError> {
        if self.poll.is_zero() {
            return Err(BotError::config("scheduler.poll", "must be above zero"));
        }
        if self.lease < Duration::from_millis(20) {
            return Err(BotError::config(
                "scheduler.lease",
                "must be at least 20 ms",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum When {
    Cron(String),
    Every(Duration),
    At(i64),
    After(Duration),
}

/// A job to schedule: when it runs, the task that runs it, its chat and data, its missed-run
/// policy. Give it to [`Bot::schedule`].
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    id: String,
    when: When,
    task: Option<String>,
    chat: Option<ChatId>,
    data: serde_json::Value,
    missed: MissedRuns,
}

fn unix_ms(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

impl Job {
    fn new(id: impl Into<String>, when: When) -> Self {
        Job {
            id: id.into(),
            when,
            task: None,
            chat: None,
            data: serde_json::Value::Null,
            missed: MissedRuns::default(),
        }
    }

    /// Runs at the times of a cron expression, in UTC: 5 fields (minute first), or 6 with
    /// seconds first; `@hourly`, `@daily`, … Refused by [`Bot::schedule`] when it does not parse.
    pub fn cron(id: impl Into<String>, expr: impl Into<String>) -> Self {
        Job::new(id, When::Cron(expr.into()))
    }

    /// Runs every `period`, the first time one period after it is first scheduled.
    pub fn every(id: impl Into<String>, period: Duration) -> Self {
        Job::new(id, When::Every(period))
    }

    /// Runs once, at `at`.
    pub fn at(id: impl Into<String>, at: SystemTime) -> Self {
        Job::new(id, When::At(unix_ms(at)))
    }

    /// Runs once, at `at_ms` (Unix ms, the bot's clock).
    pub fn at_ms(id: impl Into<String>, at_ms: i64) -> Self {
        Job::new(id, When::At(at_ms))
    }

    /// Runs once, `delay` after it is first scheduled. Scheduling it again while it exists
    /// (a replayed handler, the next start) keeps the first one: its time does not move.
    pub fn after(id: impl Into<String>, delay: Duration) -> Self {
        Job::new(id, When::After(delay))
    }

    /// The task that runs it (registered with [`Bot::task`]); by default the job's id.
    pub fn task(mut self, name: impl Into<String>) -> Self {
        self.task = Some(name.into());
        self
    }

    /// The chat it runs for: its task runs in the chat's queue (after the chat's earlier
    /// messages), and [`JobCtx::reply`] sends there.
    pub fn chat(mut self, chat: impl Into<ChatId>) -> Self {
        self.chat = Some(chat.into());
        self
    }

    /// The task's input, as JSON ([`JobCtx::data`] reads it back).
    pub fn data(mut self, data: serde_json::Value) -> Self {
        self.data = data;
        self
    }

    /// A reminder: the built-in [`REMIND_TASK`] sends `text` to the job's chat.
    pub fn remind(mut self, text: impl Into<String>) -> Self {
        self.task = Some(REMIND_TASK.to_owned());
        self.data = serde_json::json!({ "text": text.into() });
        self
    }

    /// What to do with occurrences missed during downtime (default [`MissedRuns::RunOnce`]).
    pub fn missed(mut self, policy: MissedRuns) -> Self {
        self.missed = policy;
        self
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn definition(&self, now: i64) -> Result<JobDefinition, BotError> {
        let schedule = match &self.when {
            When::Cron(expr) => {
                when::parse_cron(expr).map_err(|e| {
                    BotError::config(
                        "schedule.cron",
                        format!("job `{}`: invalid cron expression `{expr}`: {e}", self.id),
                    )
                })?;
                JobSchedule::Cron { expr: expr.clone() }
            }
            When::Every(period) => {
                if period.is_zero() {
                    return Err(BotError::config(
                        "schedule.every",
                        format!("job `{}`: the period must be above zero", self.id),
                    ));
                }
                JobSchedule::Every {
                    every_ms: u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
                    anchor_ms: None,
                }
            }
            When::At(at_ms) => JobSchedule::At { at_ms: *at_ms },
            When::After(delay) => JobSchedule::At {
                at_ms: now.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)),
            },
        };
        Ok(JobDefinition {
            schedule,
            task: self.task.clone().unwrap_or_else(|| self.id.clone()),
            chat: self.chat.as_ref().map(|c| c.0.clone()),
            data: self.data.clone(),
            missed: self.missed,
        })
    }
}

/// A task: the code that runs a job's occurrence.
pub(crate) type TaskFn = Arc<dyn Fn(JobCtx) -> BoxFuture<HandlerResult> + Send + Sync>;

/// The scheduler's state in the kernel: the tasks, the options, the runner. Where the jobs are
/// stored, and the runner's wake-up, are the kernel's (`kernel::jobs`): the flows arm their
/// asks' idle timeouts there.
pub(crate) struct Scheduler {
    pub(crate) options: SchedulerOptions,
    tasks: RwLock<HashMap<String, TaskFn>>,
    runner: StepTask,
}

impl crate::kernel::Kernel {
    /// The scheduler's state.
    pub(crate) fn scheduler(&self) -> &Scheduler {
        match self.scheduler_state.downcast_ref::<Scheduler>() {
            Some(s) => s,
            None => unreachable!("`BotBuilder::build` gives every kernel a `Scheduler`"),
        }
    }
}

impl Scheduler {
    pub(crate) fn new(options: SchedulerOptions) -> Self {
        let remind: TaskFn = Arc::new(|job: JobCtx| {
            Box::pin(async move {
                let text = job
                    .data_json()
                    .get("text")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                job.reply(text).await?;
                Ok(())
            })
        });
        // The flows' ask timeouts (`flow::timeout`): the job's chat and data name the ask.
        let timeout: TaskFn = Arc::new(|job: JobCtx| {
            Box::pin(async move {
                let k = Arc::clone(&job.bot().kernel);
                let chat = job.chat();
                let now = k.clock.now_ms();
                conversation::fire_timeout(&k, chat, job.data_json(), now).await
            })
        });
        Scheduler {
            options,
            tasks: RwLock::new(HashMap::from([
                (REMIND_TASK.to_owned(), remind),
                (timeout::TIMEOUT_TASK.to_owned(), timeout),
            ])),
            runner: StepTask::default(),
        }
    }

    pub(crate) fn task(&self, name: &str) -> Option<TaskFn> {
        self.tasks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}

/// What a task receives: the job, the occurrence it runs, and sends keyed after both.
#[derive(Clone)]
pub struct JobCtx(Arc<JobCtxInner>);

struct JobCtxInner {
    bot: Bot,
    job: JobRecord,
    occurrence_ms: i64,
    retaken: bool,
    sends: AtomicU32,
}

impl std::fmt::Debug for JobCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobCtx")
            .field("id", &self.0.job.id)
            .field("occurrence_ms", &self.0.occurrence_ms)
            .field("retaken", &self.0.retaken)
            .finish_non_exhaustive()
    }
}

impl JobCtx {
    pub(crate) fn new(bot: Bot, job: JobRecord, occurrence_ms: i64, retaken: bool) -> Self {
        JobCtx(Arc::new(JobCtxInner {
            bot,
            job,
            occurrence_ms,
            retaken,
            sends: AtomicU32::new(0),
        }))
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        &self.0.job.id
    }

    /// The occurrence this run is for (Unix ms): the time it was due, not the time it runs.
    pub fn occurrence_ms(&self) -> i64 {
        self.0.occurrence_ms
    }

    /// Whether this occurrence was started before by a replica that died (or stalled past
    /// its lease): the sends it made already are answered from the outbox.
    pub fn is_retaken(&self) -> bool {
        self.0.retaken
    }

    /// The job's chat, for a per-chat job.
    pub fn chat(&self) -> Option<ChatId> {
        self.0.job.def.chat.as_deref().map(ChatId::from)
    }

    /// The job's stored record (definition and progress as of the claim).
    pub fn job(&self) -> &JobRecord {
        &self.0.job
    }

    /// The job's data, as JSON.
    pub fn data_json(&self) -> &serde_json::Value {
        &self.0.job.def.data
    }

    /// The job's data, decoded.
    pub fn data<T: DeserializeOwned>(&self) -> Result<T, BotError> {
        serde_json::from_value(self.0.job.def.data.clone()).map_err(|e| {
            BotError::config(
                "schedule.data",
                format!("job `{}`: the data does not decode: {e}", self.0.job.id),
            )
        })
    }

    /// The bot.
    pub fn bot(&self) -> &Bot {
        &self.0.bot
    }

    /// Sends to `chat` through the outbox under `job:<id>@<occurrence>:<n>` (the n-th send of
    /// this run), unless `outgoing` carries its own key.
    pub async fn send(
        &self,
        chat: impl Into<ChatId>,
        outgoing: impl Into<Outgoing>,
    ) -> Result<SendOutcome, BotError> {
        let outgoing = outgoing.into();
        let key = match &outgoing.idempotency_key {
            Some(k) => KeyRule::Explicit(k.clone()),
            None => {
                let n = self.0.sends.fetch_add(1, Ordering::SeqCst) + 1;
                KeyRule::Explicit(format!(
                    "job:{}@{}:{n}",
                    self.0.job.id, self.0.occurrence_ms
                ))
            }
        };
        crate::outbound::send(
            &self.0.bot.kernel,
            SendRequest {
                chat: chat.into(),
                outgoing,
                key,
                paced: false,
                inline_rate_limit_retry: false,
            },
        )
        .await
    }

    /// Sends to the job's chat (see [`send`](Self::send)); a job without a chat is refused.
    pub async fn reply(&self, outgoing: impl Into<Outgoing>) -> Result<SendOutcome, BotError> {
        let Some(chat) = self.chat() else {
            return Err(BotError::config(
                "schedule.chat",
                format!("job `{}` has no chat to reply to", self.0.job.id),
            ));
        };
        self.send(chat, outgoing).await
    }
}

impl Bot {
    /// Registers `task` under `name`: the code that runs the jobs naming it (a job names its
    /// task with [`Job::task`], or is its own task by id). Register tasks before `start()`,
    /// at every start: the jobs are stored, the code is not.
    pub fn task<F, Fut>(&self, name: impl Into<String>, task: F) -> &Self
    where
        F: Fn(JobCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let task: TaskFn = Arc::new(move |job| Box::pin(task(job)) as BoxFuture<HandlerResult>);
        self.kernel
            .scheduler()
            .tasks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.into(), task);
        self.kernel.jobs.activate();
        self
    }

    fn journals(&self) -> Result<&botmesh_durability::KvDurability, BotError> {
        match &self.kernel.durable {
            Some(dur) => Ok(&dur.d),
            None => Err(BotError::config(
                "schedule",
                "the scheduler keeps its jobs in the durable journals: build the bot with a durable store or DurabilityOptions",
            )),
        }
    }

    /// Stores `job` (see [`Job`]): created when its id is new; kept as it is when it exists
    /// with the same definition (a bot that schedules its jobs at every start resumes them,
    /// missed occurrences included) or was made by [`Job::after`]; otherwise replaced, its next
    /// occurrence computed again. Call it once the bot started (`start()` opens the backend).
    pub async fn schedule(&self, job: Job) -> Result<JobRecord, BotError> {
        let d = self.journals()?;
        let now = self.kernel.clock.now_ms();
        let def = job.definition(now)?;
        let replace = !matches!(job.when, When::After(_));
        let (record, what) = d
            .jobs()
            .schedule(&job.id, def, replace, when::first)
            .await?;
        tracing::debug!(job = %record.id, ?what, next_ms = ?record.next_ms, "job scheduled");
        self.kernel.jobs.activate();
        self.kernel.jobs.wake.notify_one();
        Ok(record)
    }

    /// The stored jobs: running, then scheduled by next occurrence, then done; at most `limit`.
    /// The flows' ask timeouts are among them (task `botmesh.ask-timeout`, id
    /// `botmesh.ask-timeout:<chat>`); on a bot without durable journals, only those, in memory.
    pub async fn jobs(&self, limit: usize) -> Result<Vec<JobRecord>, BotError> {
        Ok(self.kernel.jobs_store().jobs().list(limit).await?)
    }

    /// Cancels (deletes) the job `id`; `false` when there is none. An occurrence running now
    /// goes on, and its completion is dropped. A job the code schedules at every start comes
    /// back at the next start: remove it from the code too. Cancelling a chat's ask timeout
    /// leaves its ask waiting without one.
    pub async fn cancel_job(&self, id: &str) -> Result<bool, BotError> {
        Ok(self.kernel.jobs_store().jobs().cancel(id).await?)
    }

    /// Runs one poll of the scheduler now, by the bot's clock: starts every due occurrence
    /// (the asks' idle timeouts among them) in its chat's queue, and returns how many it
    /// started. The runner polls on its own every [`SchedulerOptions::poll`]; tests with a
    /// `ManualClock` call this after moving the clock, then `bot.idle()`.
    pub async fn fire_flow_timeouts(&self) -> Result<usize, BotError> {
        runner::poll_now(&self.kernel).await
    }
}
