//! Group commit: [`GroupCommit`] runs the flow steps ([`Store::commit_step`]) and value writes
//! (`set_value`, `delete_value`) that concurrent chats make at the same moment in one
//! transaction, the way SQLite's writer thread groups its requests.
//!
//! A commit costs the server a WAL flush and the client two round trips whatever it holds, so
//! one transaction for ten steps costs about what one step costs. A write is queued; a few
//! writer tasks (a quarter of the pool, at least one) each take every write queued (up to
//! [`MAX_GROUP`]) and commit them together, so the group grows with the load and a lone write
//! goes at once:
//!
//! | the group's transaction | answer |
//! | --- | --- |
//! | every operation applied, `COMMIT` answered | each step: `Committed` with its outcomes |
//! | an operation conflicted, a creation found its key taken, or a statement failed | rolled back; each write runs alone, in queue order (a conflict is answered as a conflict, a failed statement fails its own write only) |
//! | `BEGIN`, the connection or `COMMIT` failed | each write fails with that error (after a failed `COMMIT` it may have committed, as for a write alone) |
//!
//! A step alone is one transaction ([`DurableTable::commit`]), a value write alone one
//! statement, so the answers are those of the writes run one by one, in queue order. A write
//! whose caller stopped waiting is committed all the same.
//!
//! The writer tasks run on the runtime that opened the store (`open()`, which the bot's
//! `start()` calls: the bot's runtime), not on the runtime of whichever task wrote first: a
//! write made from a runtime that is not driven afterwards (a `block_on` of a helper runtime)
//! cannot leave the writers of every later write stalled there. They start with the first
//! write after `open()` and end after `close()` (once what was queued is committed) or when
//! every clone of the store is dropped. When the opening runtime has shut down, the next write
//! starts them on its own runtime.
//!
//! [`Store::commit_step`]: crate::Store::commit_step

use std::sync::{Arc, Mutex};

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use super::PgPool;
use super::table_writes::{TableWrites, ValueWrite};
use super::writes::Writes;
use crate::backends::postgres::PostgresError;
use crate::backends::postgres::kv::{Committed, DurableTable, GroupCommitted, GroupPart};
use crate::store::{StepCommit, StepCommitOutcome, StoreError};

/// The most writes one transaction holds.
pub(super) const MAX_GROUP: usize = 64;

/// What a write's caller is answered (a value write: `Committed` with no outcome).
type Answer = Result<StepCommitOutcome, StoreError>;

/// A write of the group commit.
pub(super) enum Write {
    /// A flow step ([`Store::commit_step`](crate::Store::commit_step)).
    Step(Box<StepCommit>),
    /// A value set (`value`: its JSON text) or removed (`None`).
    Value {
        /// `set_value` or `delete_value`, for errors.
        operation: &'static str,
        scope: String,
        key: String,
        value: Option<String>,
    },
}

impl Write {
    /// The store operation, for errors.
    fn operation(&self) -> &'static str {
        match self {
            Write::Step(_) => "commit_step",
            Write::Value { operation, .. } => operation,
        }
    }

    /// A [`StoreError::Query`] of this write.
    fn error(&self, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError::Query {
            operation: self.operation(),
            source: e.into(),
        }
    }
}

/// A queued write and where its answer goes.
struct Job {
    write: Write,
    reply: oneshot::Sender<Answer>,
}

/// What the writer tasks commit into: the store's pool, journal table and statements.
pub(super) struct Committer {
    pub(super) pool: PgPool,
    pub(super) journals: Arc<DurableTable>,
    pub(super) writes: Arc<Writes>,
}

/// The queue of flow steps and its writer tasks (see the [module documentation](self)).
#[derive(Default)]
pub(super) struct GroupCommit {
    queue: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    /// The runtime the writer tasks start on: the one that opened the store.
    runtime: Mutex<Option<Handle>>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}

impl GroupCommit {
    /// The store opened: writer tasks start on the runtime calling this from now on.
    pub(super) fn open(&self) {
        *lock(&self.runtime) = Handle::try_current().ok();
    }

    /// The store closed: the writer tasks commit what is queued, then end (the next write
    /// after an `open()` starts new ones).
    pub(super) fn close(&self) {
        lock(&self.queue).take();
    }

    /// A group commit with no writers yet, on the runtime this one starts them on (for a
    /// store that commits into another journal table).
    pub(super) fn successor(&self) -> Self {
        GroupCommit {
            queue: Mutex::default(),
            runtime: Mutex::new(lock(&self.runtime).clone()),
        }
    }

    /// Commits `write` with whatever other writes are queued with it; `committer` is built
    /// when the writer tasks start.
    pub(super) async fn commit(
        &self,
        write: Write,
        committer: impl Fn() -> Committer,
        writers: usize,
    ) -> Answer {
        let operation = write.operation();
        let fail = |reason: &str| StoreError::Query {
            operation,
            source: reason.into(),
        };
        let (reply, answer) = oneshot::channel();
        let mut job = Job { write, reply };
        // A second try, on the caller's runtime, when the writers ended with the runtime that
        // ran them.
        for attempt in 0..2 {
            let runtime = match lock(&self.runtime).clone() {
                Some(opener) if attempt == 0 => opener,
                _ => Handle::current(),
            };
            let queue = self.queue(&committer, writers, &runtime);
            match queue.send(job) {
                Ok(()) => {
                    return answer.await.unwrap_or_else(|_| {
                        Err(fail(
                            "the writer of PostgreSQL group commits ended before answering \
                             (its runtime shut down): the write may or may not be committed",
                        ))
                    });
                }
                Err(mpsc::error::SendError(back)) => {
                    job = back;
                    self.forget(&queue);
                }
            }
        }
        Err(fail(
            "the writers of PostgreSQL group commits cannot be started",
        ))
    }

    /// The queue, with its writer tasks started on `runtime` if there are none.
    fn queue(
        &self,
        committer: &impl Fn() -> Committer,
        writers: usize,
        runtime: &Handle,
    ) -> mpsc::UnboundedSender<Job> {
        let mut queue = lock(&self.queue);
        if let Some(sender) = queue.as_ref().filter(|s| !s.is_closed()) {
            return sender.clone();
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        let committer = Arc::new(committer());
        for _ in 0..writers.max(1) {
            runtime.spawn(write_groups(Arc::clone(&committer), Arc::clone(&receiver)));
        }
        *queue = Some(sender.clone());
        sender
    }

    /// Drops `dead` (its writers ended), unless another queue replaced it already.
    fn forget(&self, dead: &mpsc::UnboundedSender<Job>) {
        let mut queue = lock(&self.queue);
        if queue.as_ref().is_some_and(|q| q.same_channel(dead)) {
            *queue = None;
        }
    }
}

/// `mutex`'s guard, also after a panic of another holder.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A writer task: takes the first queued step and every step queued behind it (up to
/// [`MAX_GROUP`]), commits them, and again, until the queue is closed.
async fn write_groups(
    committer: Arc<Committer>,
    receiver: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>,
) {
    loop {
        let mut group = Vec::new();
        {
            let mut queue = receiver.lock().await;
            let Some(first) = queue.recv().await else {
                return;
            };
            group.push(first);
            while group.len() < MAX_GROUP {
                match queue.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
        }
        committer.commit_group(group).await;
    }
}

/// The merged table writes of `writes` (see [`TableWrites`]), in their order.
fn table_writes<'a>(writes: impl IntoIterator<Item = &'a Write>) -> TableWrites<'a> {
    let mut tables = TableWrites::default();
    for write in writes {
        match write {
            Write::Step(step) => tables.step(step),
            Write::Value {
                scope, key, value, ..
            } => tables.value(ValueWrite {
                scope,
                key,
                value: value.as_deref(),
            }),
        }
    }
    tables.finish();
    tables
}

impl Committer {
    /// Commits `group` (see the [module documentation](self)) and answers each step.
    async fn commit_group(&self, mut group: Vec<Job>) {
        if group.len() == 1 {
            if let Some(job) = group.pop() {
                let answer = self.alone(&job.write).await;
                let _ = job.reply.send(answer);
            }
            return;
        }
        tracing::trace!(
            target: "botmesh_durability::postgres",
            writes = group.len(),
            "writes committed together"
        );
        match self.together(&group).await {
            Ok(GroupCommitted::Ok(outcomes)) => {
                for (job, outcomes) in group.into_iter().zip(outcomes) {
                    let _ = job.reply.send(Ok(StepCommitOutcome::Committed(outcomes)));
                }
            }
            Ok(GroupCommitted::Split) => {
                tracing::debug!(
                    target: "botmesh_durability::postgres",
                    writes = group.len(),
                    "a group of writes conflicted or failed: each write runs alone"
                );
                for job in group {
                    let answer = self.alone(&job.write).await;
                    let _ = job.reply.send(answer);
                }
            }
            Err(error) => {
                let error = Arc::new(error);
                for job in group {
                    let answer = Err(job.write.error(Arc::clone(&error)));
                    let _ = job.reply.send(answer);
                }
            }
        }
    }

    /// Runs `group` in one transaction.
    async fn together(&self, group: &[Job]) -> Result<GroupCommitted, PostgresError> {
        self.journals.ensure(&self.pool).await?;
        let client = self.pool.write_client().await?;
        let tables = table_writes(group.iter().map(|j| &j.write));
        let parts = group
            .iter()
            .map(|job| match &job.write {
                Write::Step(step) => GroupPart {
                    scope: step.scope.id(),
                    ops: &step.journal,
                },
                Write::Value { .. } => GroupPart {
                    scope: "",
                    ops: &[],
                },
            })
            .collect();
        self.journals
            .commit_group(client, parts, tables.statements(&self.writes))
            .await
    }

    /// Commits `write` alone, in a transaction of its own: a step's journal operations,
    /// then the rest (the first conflict rolls everything back and is answered); a value
    /// write's one statement.
    async fn alone(&self, write: &Write) -> Answer {
        let err = |e| write.error(e);
        self.journals.ensure(&self.pool).await.map_err(err)?;
        let client = self.pool.write_client().await.map_err(err)?;
        let tables = table_writes([write]);
        let then = tables.statements(&self.writes);
        let (scope, ops) = match write {
            Write::Step(step) => (step.scope.id(), &step.journal[..]),
            Write::Value { scope, .. } => (scope.as_str(), &[][..]),
        };
        let committed = self
            .journals
            .commit(client, scope, ops, then, true)
            .await
            .map_err(err)?;
        Ok(match committed {
            Committed::Ok(outcomes) => StepCommitOutcome::Committed(outcomes),
            Committed::Conflict { op, current } => StepCommitOutcome::Conflict { op, current },
        })
    }
}
