//! Scheduled jobs: the durable records of the runtime's scheduler (`bot.schedule(…)`), kept
//! in the bot's own [`DurableKv`] scope through [`KvDurability::jobs`], so every backend
//! (memory, file, SQLite, Postgres, Redis) stores, claims and lists them through one code path,
//! and the `botmesh` command line lists and cancels them without the bot running.
//!
//! A job is a definition ([`JobDefinition`]: when it runs, the task that runs it, its chat and
//! data, its [`MissedRuns`] policy) plus its progress: the next occurrence not yet run, the
//! occurrence in hand and its lease, the counters. This crate does not evaluate cron
//! expressions: the runtime decides occurrences and passes them in (`plan` and `next`
//! closures), this module stores them with compare-and-set.
//!
//! | what | value |
//! | --- | --- |
//! | key | `s/<job id>` |
//! | `idx1` | `s/due/<16-digit ms>/<id>` (next occurrence), `s/run/<16-digit ms>/<id>` (lease expiry of the occurrence in hand), `s/done/<16-digit ms>/<id>` (a one-off job that ran or was skipped: kept, so scheduling the same job again does not run it twice) |
//!
//! Exactly one replica runs an occurrence: [`Jobs::claim`] moves a due job to `run` under a
//! [`LeaseRecord`] (the inbox and outbox's lease, decided by [`LeaseRecord::status`]) with a
//! fencing token that grows with every claim; [`Jobs::finish`] and [`Jobs::renew`] are refused
//! ([`ScheduleError::Stale`]) for a token that no longer holds. A holder that died leaves its
//! lease to expire (or to be taken at once by its own restarted instance id), and the
//! occurrence is claimed and run again: its sends keep their keys (derived from the job id and
//! the occurrence), so the outbox answers those already sent.

mod error;

pub use error::ScheduleError;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::journal::KvDurability;
use crate::kv::{CasOutcome, DurableKv, Entry, Index, KvOp};
use crate::leases::{LeaseRecord, LeaseStatus};

/// How many times a change re-reads a job after a conflict before giving up.
const MAX_CAS_RETRIES: usize = 64;

/// When a job runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobSchedule {
    /// A cron expression (evaluated in UTC by the runtime).
    Cron {
        /// The expression (`0 9 * * MON-FRI`, with an optional seconds field).
        expr: String,
    },
    /// Every `every_ms`, counted from `anchor_ms` (the first occurrence is `anchor + every`).
    Every {
        /// The period in milliseconds.
        every_ms: u64,
        /// When the count starts (Unix ms); `None`: when the job is first scheduled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        anchor_ms: Option<i64>,
    },
    /// Once, at `at_ms` (Unix ms).
    At {
        /// When it runs.
        at_ms: i64,
    },
}

impl JobSchedule {
    /// Whether the job runs more than once.
    pub fn recurring(&self) -> bool {
        !matches!(self, JobSchedule::At { .. })
    }
}

/// What a job does with the occurrences that passed while no replica ran it (downtime), or
/// that started more than the scheduler's grace late.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissedRuns {
    /// Runs none of them: the job goes on at its next occurrence (a one-off job is done
    /// without running).
    Skip,
    /// Runs once, for the latest missed occurrence, then goes on at its next one.
    #[default]
    RunOnce,
    /// Runs every missed occurrence, oldest first, each once.
    RunAll,
}

impl MissedRuns {
    /// `skip`, `run_once` or `run_all`.
    pub fn as_str(self) -> &'static str {
        match self {
            MissedRuns::Skip => "skip",
            MissedRuns::RunOnce => "run_once",
            MissedRuns::RunAll => "run_all",
        }
    }
}

/// What a job is: when, what runs it, for which chat, with which data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDefinition {
    /// When it runs.
    pub schedule: JobSchedule,
    /// The name of the task (registered by the bot's code) that runs it.
    pub task: String,
    /// The chat it runs for (a per-chat reminder), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    /// The task's input (JSON).
    #[serde(default)]
    pub data: serde_json::Value,
    /// The missed-run policy.
    #[serde(default)]
    pub missed: MissedRuns,
}

/// A stored job: its definition and its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's stable id.
    pub id: String,
    /// What it is.
    #[serde(flatten)]
    pub def: JobDefinition,
    /// The next occurrence not yet run (Unix ms); `None` once a one-off job is done.
    pub next_ms: Option<i64>,
    /// When it was first scheduled (Unix ms).
    pub created_ms: i64,
    /// The newest fencing token issued for its occurrences.
    pub fence: u64,
    /// The lease of the occurrence in hand, if one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseRecord>,
    /// The occurrence in hand (Unix ms), while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_ms: Option<i64>,
    /// Occurrences run (successfully or not).
    #[serde(default)]
    pub runs: u64,
    /// Runs whose task returned an error.
    #[serde(default)]
    pub failures: u64,
    /// Occurrences not run because of the missed-run policy.
    #[serde(default)]
    pub misses: u64,
    /// When the last run ended (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_ms: Option<i64>,
    /// The error of the last run, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for its next occurrence.
    Scheduled,
    /// An occurrence is running (or its holder died and the lease has not expired yet).
    Running,
    /// A one-off job that ran or was skipped.
    Done,
}

impl JobState {
    /// `scheduled`, `running` or `done`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Running => "running",
            JobState::Done => "done",
        }
    }
}

impl JobRecord {
    /// A job never run, created at `created_ms` with its first occurrence at `next_ms`.
    pub fn new(
        id: impl Into<String>,
        def: JobDefinition,
        next_ms: Option<i64>,
        created_ms: i64,
    ) -> Self {
        JobRecord {
            id: id.into(),
            def,
            next_ms,
            created_ms,
            fence: 0,
            lease: None,
            running_ms: None,
            runs: 0,
            failures: 0,
            misses: 0,
            last_run_ms: None,
            last_error: None,
        }
    }

    /// Where the job stands.
    pub fn state(&self) -> JobState {
        if self.lease.is_some() {
            JobState::Running
        } else if self.next_ms.is_some() {
            JobState::Scheduled
        } else {
            JobState::Done
        }
    }

    fn idx1(&self) -> String {
        let (tag, ms) = match (&self.lease, self.next_ms) {
            (Some(l), _) => ("run", l.expires_ms),
            (None, Some(next)) => ("due", next),
            (None, None) => ("done", self.last_run_ms.unwrap_or(self.created_ms)),
        };
        format!("s/{tag}/{:016}/{}", ms.max(0), self.id)
    }
}

/// What [`Jobs::schedule`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduled {
    /// The job did not exist: it was created.
    Created,
    /// It existed with the same definition: kept as it was (its progress included).
    Unchanged,
    /// It existed with another definition: replaced, its next occurrence computed again.
    Replaced,
}

/// What the runtime decided about a due job (the `plan` of [`Jobs::claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Run `occurrence_ms`, counting `missed` occurrences skipped before it.
    Run {
        /// The occurrence run (its sends are keyed after it).
        occurrence_ms: i64,
        /// Occurrences passed over.
        missed: u64,
    },
    /// Run nothing: `missed` occurrences passed over, the job goes on at `next_ms` (done when
    /// `None`).
    Skip {
        /// The next occurrence.
        next_ms: Option<i64>,
        /// Occurrences passed over.
        missed: u64,
    },
}

/// The occurrence a replica claimed: what it shows to renew and finish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobClaim {
    /// The job (as claimed).
    pub job: JobRecord,
    /// The occurrence (Unix ms).
    pub occurrence_ms: i64,
    /// The fencing token.
    pub token: u64,
    /// Whether this occurrence was claimed before by a holder whose lease expired (it is run
    /// again; sends already made are answered from the outbox).
    pub retaken: bool,
}

/// What [`Jobs::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// This replica runs the occurrence.
    Run(JobClaim),
    /// The plan skipped occurrences (and maybe the job is done).
    Skipped {
        /// The job after the skip.
        job: JobRecord,
        /// Occurrences passed over.
        missed: u64,
    },
    /// Not due, held by another replica, or gone (cancelled).
    Nothing,
}

/// The scheduler's records of one bot scope: [`KvDurability::jobs`].
#[derive(Debug)]
pub struct Jobs<'a, K: ?Sized = dyn DurableKv> {
    d: &'a KvDurability<K>,
}

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// The scheduled jobs of this scope.
    pub fn jobs(&self) -> Jobs<'_, K> {
        Jobs { d: self }
    }
}

/// The longest job id accepted.
pub const MAX_ID_LEN: usize = 200;

/// Refuses an empty id, one longer than [`MAX_ID_LEN`] bytes, or one with control characters.
pub fn check_id(id: &str) -> Result<(), ScheduleError> {
    let reason = if id.trim().is_empty() {
        "is empty"
    } else if id.len() > MAX_ID_LEN {
        "is longer than 200 bytes"
    } else if id.chars().any(char::is_control) {
        "contains a control character"
    } else {
        return Ok(());
    };
    Err(ScheduleError::InvalidId {
        id: id.to_owned(),
        reason,
    })
}

fn key(id: &str) -> String {
    format!("s/{id}")
}

enum Step<T> {
    Write(Box<JobRecord>, T),
    Delete(T),
    Keep(T),
}

impl<K: DurableKv + ?Sized> Jobs<'_, K> {
    fn backend(
        &self,
        id: &str,
        operation: &'static str,
    ) -> impl Fn(crate::KvError) -> ScheduleError {
        let id = id.to_owned();
        move |source| ScheduleError::Backend {
            id: id.clone(),
            operation,
            source,
        }
    }

    fn decode(id: &str, bytes: &[u8]) -> Result<JobRecord, ScheduleError> {
        serde_json::from_slice(bytes).map_err(|e| ScheduleError::Corrupt {
            id: id.to_owned(),
            reason: e.to_string(),
        })
    }

    async fn read(
        &self,
        id: &str,
        operation: &'static str,
    ) -> Result<Option<(u64, JobRecord)>, ScheduleError> {
        let found = self
            .d
            .kv()
            .get(self.d.scope(), &key(id))
            .await
            .map_err(self.backend(id, operation))?;
        match found {
            None => Ok(None),
            Some(v) => Ok(Some((v.version, Self::decode(id, &v.value)?))),
        }
    }

    /// Reads, decides with `f`, writes when `f` says so, until the write lands.
    async fn modify<T>(
        &self,
        id: &str,
        operation: &'static str,
        mut f: impl FnMut(Option<JobRecord>, i64) -> Result<Step<T>, ScheduleError>,
    ) -> Result<T, ScheduleError> {
        for _ in 0..MAX_CAS_RETRIES {
            let found = self.read(id, operation).await?;
            let version = found.as_ref().map(|(v, _)| *v);
            let now = self.d.clock().now_ms();
            let op = match f(found.map(|(_, r)| r), now)? {
                Step::Keep(out) => return Ok(out),
                Step::Write(record, out) => {
                    let record = *record;
                    let value =
                        serde_json::to_vec(&record).map_err(|e| ScheduleError::Corrupt {
                            id: id.to_owned(),
                            reason: e.to_string(),
                        })?;
                    let idx1 = Some(record.idx1());
                    (
                        KvOp::Cas {
                            key: key(id),
                            expected: version,
                            entry: Entry {
                                value,
                                idx1,
                                idx2: None,
                            },
                        },
                        out,
                    )
                }
                Step::Delete(out) => match version {
                    Some(expected) => (
                        KvOp::Delete {
                            key: key(id),
                            expected,
                        },
                        out,
                    ),
                    None => return Ok(out),
                },
            };
            let (op, out) = op;
            match self
                .d
                .kv()
                .apply(self.d.scope(), op)
                .await
                .map_err(self.backend(id, operation))?
            {
                CasOutcome::Ok { .. } => return Ok(out),
                CasOutcome::Conflict { .. } => {}
            }
        }
        Err(ScheduleError::Contention {
            id: id.to_owned(),
            operation,
        })
    }

    /// The job `id`, if it exists.
    pub async fn get(&self, id: &str) -> Result<Option<JobRecord>, ScheduleError> {
        Ok(self.read(id, "get").await?.map(|(_, r)| r))
    }

    /// Every job: the running ones, then the scheduled ones by next occurrence, then the done
    /// ones; at most `limit`.
    pub async fn list(&self, limit: usize) -> Result<Vec<JobRecord>, ScheduleError> {
        let mut out = Vec::new();
        for tag in ["run", "due", "done"] {
            if out.len() >= limit {
                break;
            }
            let (from, to) = (format!("s/{tag}/"), format!("s/{tag}0"));
            out.extend(self.jobs_in(&from, &to, limit - out.len(), "list").await?);
        }
        Ok(out)
    }

    /// The jobs due by `now_ms` (next occurrence passed) and those whose running occurrence's
    /// lease expired, at most `limit` of each, oldest first.
    pub async fn due(&self, now_ms: i64, limit: usize) -> Result<Vec<JobRecord>, ScheduleError> {
        let until = format!("s/{{}}/{:016}", now_ms.max(-1).saturating_add(1));
        let mut ids = Vec::new();
        for tag in ["due", "run"] {
            let from = format!("s/{tag}/");
            let to = until.replace("{}", tag);
            ids.extend(self.jobs_in(&from, &to, limit, "due").await?);
        }
        Ok(ids)
    }

    /// The jobs whose `idx1` is in `from..to`, at most `limit`, in its order.
    async fn jobs_in(
        &self,
        from: &str,
        to: &str,
        limit: usize,
        operation: &'static str,
    ) -> Result<Vec<JobRecord>, ScheduleError> {
        let found = self
            .d
            .kv()
            .range(self.d.scope(), Index::One, from, to, limit)
            .await
            .map_err(self.backend("*", operation))?;
        found
            .iter()
            .map(|r| Self::decode(r.key.strip_prefix("s/").unwrap_or(&r.key), &r.entry.value))
            .collect()
    }

    /// Creates the job `id`, or replaces its definition when it changed and `replace` is set
    /// (`first` gives the first occurrence of a definition from a time). The same definition
    /// again keeps the job as it is, progress and missed occurrences included: a bot that
    /// schedules its jobs at every start does not reset them.
    pub async fn schedule(
        &self,
        id: &str,
        def: JobDefinition,
        replace: bool,
        first: impl Fn(&JobDefinition, i64) -> Option<i64>,
    ) -> Result<(JobRecord, Scheduled), ScheduleError> {
        check_id(id)?;
        self.modify(id, "schedule", |found, now| match found {
            Some(r) if r.def == def || !replace => Ok(Step::Keep((r, Scheduled::Unchanged))),
            Some(mut r) => {
                r.next_ms = first(&def, now);
                r.def = def.clone();
                Ok(Step::Write(Box::new(r.clone()), (r, Scheduled::Replaced)))
            }
            None => {
                let r = JobRecord::new(id, def.clone(), first(&def, now), now);
                Ok(Step::Write(Box::new(r.clone()), (r, Scheduled::Created)))
            }
        })
        .await
    }

    /// Claims the job's due occurrence for `lease_ms`: a job whose next occurrence passed is
    /// planned by `plan` (run one occurrence, or skip), a job whose running occurrence's
    /// holder let its lease expire (or died, under this instance id) is taken over with the
    /// same occurrence. Anything else (not due, held, gone) is [`Claimed::Nothing`].
    pub async fn claim(
        &self,
        id: &str,
        lease_ms: i64,
        mut plan: impl FnMut(&JobRecord, i64) -> Plan,
    ) -> Result<Claimed, ScheduleError> {
        let me = self.d.incarnation().clone();
        self.modify(id, "claim", |found, now| {
            let Some(mut r) = found else {
                return Ok(Step::Keep(Claimed::Nothing));
            };
            let (occurrence_ms, retaken) = match (&r.lease, r.running_ms) {
                (Some(l), Some(running)) => match l.status(&me, now) {
                    LeaseStatus::Expired | LeaseStatus::Abandoned => (running, true),
                    LeaseStatus::Live | LeaseStatus::Mine => {
                        return Ok(Step::Keep(Claimed::Nothing));
                    }
                },
                _ => match r.next_ms {
                    Some(next) if next <= now => match plan(&r, now) {
                        Plan::Run {
                            occurrence_ms,
                            missed,
                        } => {
                            r.misses = r.misses.saturating_add(missed);
                            (occurrence_ms, false)
                        }
                        Plan::Skip { next_ms, missed } => {
                            r.misses = r.misses.saturating_add(missed);
                            r.next_ms = next_ms;
                            if next_ms.is_none() {
                                r.last_run_ms = Some(now);
                            }
                            return Ok(Step::Write(
                                Box::new(r.clone()),
                                Claimed::Skipped { job: r, missed },
                            ));
                        }
                    },
                    _ => return Ok(Step::Keep(Claimed::Nothing)),
                },
            };
            r.fence = r.fence.saturating_add(1);
            r.lease = Some(LeaseRecord {
                owner: Arc::clone(&me.instance_id),
                incarnation: Arc::clone(&me.boot_id),
                token: r.fence,
                taken_ms: now,
                expires_ms: now.saturating_add(lease_ms),
            });
            r.running_ms = Some(occurrence_ms);
            let claim = JobClaim {
                job: r.clone(),
                occurrence_ms,
                token: r.fence,
                retaken,
            };
            Ok(Step::Write(Box::new(r), Claimed::Run(claim)))
        })
        .await
    }

    fn holds(r: &JobRecord, claim: &JobClaim) -> bool {
        r.fence == claim.token && r.lease.as_ref().is_some_and(|l| l.token == claim.token)
    }

    fn stale(id: &str, r: Option<&JobRecord>, claim: &JobClaim) -> ScheduleError {
        ScheduleError::Stale {
            id: id.to_owned(),
            token: claim.token,
            current: r.map(|r| r.fence),
        }
    }

    /// Extends the lease of a running occurrence to now + `lease_ms`.
    pub async fn renew(&self, claim: &JobClaim, lease_ms: i64) -> Result<(), ScheduleError> {
        let id = claim.job.id.as_str();
        self.modify(id, "renew", |found, now| match found {
            Some(mut r) if Self::holds(&r, claim) => {
                if let Some(l) = r.lease.as_mut() {
                    l.expires_ms = now.saturating_add(lease_ms);
                }
                Ok(Step::Write(Box::new(r), ()))
            }
            other => Err(Self::stale(id, other.as_ref(), claim)),
        })
        .await
    }

    /// Ends a running occurrence: counts the run (and its error), and moves the job to its
    /// next occurrence, `next(job, occurrence)` (`None`: the job is done).
    pub async fn finish(
        &self,
        claim: &JobClaim,
        error: Option<String>,
        next: impl Fn(&JobRecord, i64) -> Option<i64>,
    ) -> Result<JobRecord, ScheduleError> {
        let id = claim.job.id.as_str();
        self.modify(id, "finish", |found, now| match found {
            Some(mut r) if Self::holds(&r, claim) => {
                r.lease = None;
                r.running_ms = None;
                r.runs = r.runs.saturating_add(1);
                r.last_run_ms = Some(now);
                if error.is_some() {
                    r.failures = r.failures.saturating_add(1);
                }
                r.last_error.clone_from(&error);
                // A definition replaced while this occurrence ran already set its own next.
                if r.def == claim.job.def {
                    r.next_ms = next(&r, claim.occurrence_ms);
                }
                Ok(Step::Write(Box::new(r.clone()), r))
            }
            other => Err(Self::stale(id, other.as_ref(), claim)),
        })
        .await
    }

    /// Deletes the job `id` (an occurrence running now finishes, and its finish is refused as
    /// stale). Returns whether it existed.
    pub async fn cancel(&self, id: &str) -> Result<bool, ScheduleError> {
        self.modify(id, "cancel", |found, _| {
            Ok(match found {
                Some(_) => Step::Delete(true),
                None => Step::Keep(false),
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests;
