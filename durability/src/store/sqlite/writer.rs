//! The writer thread: the one connection that writes, and group commit.
//!
//! Requests arrive on a channel. The thread takes the first one, then every request already
//! queued (up to `max_batch`), and runs them in one `IMMEDIATE` transaction, taking in the
//! requests that arrive while it runs them (up to `max_batch` in all) before its `COMMIT`. It
//! first runs the group as it is ("optimistic"): requests rarely fail, and a savepoint per
//! request costs the writer a copy of every page a request changes (SQLite's statement
//! journal) and two statements. When a request fails, the group is rolled back and run again
//! "isolated":
//!
//! | step | on success | on failure |
//! | --- | --- | --- |
//! | `BEGIN IMMEDIATE` | run the requests | every request of the group fails with that error |
//! | optimistic: each request in turn | the request waits for `COMMIT` | `ROLLBACK`, run the group again isolated (a request that panicked is not run again: it fails) |
//! | isolated: `SAVEPOINT` + request + `RELEASE` | the request waits for `COMMIT` | `ROLLBACK TO` its savepoint: only this request fails |
//! | a failure that ended the whole transaction | — | the requests run before it fail; the rest run in a new transaction |
//! | `COMMIT` | every successful request gets its value | every successful request fails with the commit error |
//!
//! A request may so run twice; its closure is `FnMut` and must keep to its statements.
//!
//! A shutdown message ends the thread after the requests queued before it; requests queued
//! after it are dropped unanswered, which their callers see as [`StoreError::Closed`]. The
//! thread also ends when every sender is gone (the store was dropped). It does not retry.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use super::{SqliteStoreOptions, query_error, schema};
use crate::store::StoreError;

/// Why a request's writes were not committed although the request itself succeeded.
type Failure = Arc<dyn std::error::Error + Send + Sync>;

/// Counters of the writer thread, as given by
/// [`SqliteStore::write_stats`](super::SqliteStore::write_stats).
///
/// `statements` and `commits` tell where the writer's time goes: when their sum is close to
/// the time elapsed, the writer is the bottleneck, and their ratio says whether SQLite's
/// B-tree work or the disk (`COMMIT`: writing the WAL and syncing it) limits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SqliteWriteStats {
    /// Transactions committed or lost by the writer (one per group of requests; the rolled
    /// back first pass of a group run again is not counted, see `isolated_reruns`).
    pub transactions: u64,
    /// Write requests run (a request run twice, in a group run again, counts once).
    pub requests: u64,
    /// The most requests run in one transaction so far.
    pub largest_batch: usize,
    /// Time spent running requests (their statements and savepoints).
    pub statements: Duration,
    /// Time spent in `COMMIT` (writing the WAL, syncing it at the store's `synchronous`
    /// level, and the automatic checkpoints it triggers).
    pub commits: Duration,
    /// Groups rolled back and run again with a savepoint per request, because one of their
    /// requests failed.
    pub isolated_reruns: u64,
}

/// The shared, lock-free counters behind [`SqliteWriteStats`].
#[derive(Debug, Default)]
pub(super) struct Stats {
    transactions: AtomicU64,
    requests: AtomicU64,
    largest_batch: AtomicUsize,
    statement_nanos: AtomicU64,
    commit_nanos: AtomicU64,
    isolated_reruns: AtomicU64,
}

impl Stats {
    pub(super) fn snapshot(&self) -> SqliteWriteStats {
        SqliteWriteStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            largest_batch: self.largest_batch.load(Ordering::Relaxed),
            statements: Duration::from_nanos(self.statement_nanos.load(Ordering::Relaxed)),
            commits: Duration::from_nanos(self.commit_nanos.load(Ordering::Relaxed)),
            isolated_reruns: self.isolated_reruns.load(Ordering::Relaxed),
        }
    }

    fn add(counter: &AtomicU64, since: Instant) {
        let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        counter.fetch_add(nanos, Ordering::Relaxed);
    }

    fn record(&self, batch: usize) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(batch as u64, Ordering::Relaxed);
        self.largest_batch.fetch_max(batch, Ordering::Relaxed);
    }
}

/// A write request, type-erased for the channel.
pub(super) trait WriteJob: Send {
    /// Runs the request's statements; `false` when it failed. May be called again after the
    /// transaction was rolled back (the new result replaces the old); a request whose closure
    /// panicked is not run again and keeps failing with its panic.
    fn run(&mut self, tx: &Transaction<'_>) -> bool;
    /// Records that the request could not run (its savepoint could not be set).
    fn fail(&mut self, error: rusqlite::Error);
    /// Answers the caller, given whether the transaction that ran it committed.
    fn complete(self: Box<Self>, commit: Result<(), Failure>);
}

/// A write request returning `T`.
pub(super) struct TypedJob<T, F> {
    operation: &'static str,
    f: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> TypedJob<T, F>
where
    T: Send + 'static,
    F: FnMut(&Transaction<'_>) -> Result<T, rusqlite::Error> + Send + 'static,
{
    pub(super) fn boxed(
        operation: &'static str,
        f: F,
        reply: oneshot::Sender<Result<T, StoreError>>,
    ) -> Box<dyn WriteJob> {
        Box::new(Self {
            operation,
            f: Some(f),
            result: None,
            reply,
        })
    }
}

impl<T, F> WriteJob for TypedJob<T, F>
where
    T: Send + 'static,
    F: FnMut(&Transaction<'_>) -> Result<T, rusqlite::Error> + Send + 'static,
{
    fn run(&mut self, tx: &Transaction<'_>) -> bool {
        let Some(f) = self.f.as_mut() else {
            return false;
        };
        let result = match catch_unwind(AssertUnwindSafe(|| f(tx))) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(query_error(self.operation, error)),
            Err(panic) => {
                // Not run again: its state may be half-changed.
                self.f = None;
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-string payload".to_owned());
                tracing::error!(operation = self.operation, panic = %what, "sqlite write panicked");
                Err(query_error(self.operation, Panicked(what)))
            }
        };
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn fail(&mut self, error: rusqlite::Error) {
        self.f = None;
        self.result = Some(Err(query_error(self.operation, error)));
    }

    fn complete(self: Box<Self>, commit: Result<(), Failure>) {
        let answer = match (self.result, commit) {
            (Some(Err(error)), _) => Err(error),
            (Some(Ok(value)), Ok(())) => Ok(value),
            (_, Err(failure)) => Err(query_error(self.operation, failure)),
            (None, Ok(())) => Err(query_error(self.operation, Panicked("never run".into()))),
        };
        // The caller may have stopped waiting; the write stands all the same.
        let _ = self.reply.send(answer);
    }
}

/// A request whose closure panicked.
#[derive(Debug)]
struct Panicked(String);

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the write closure panicked: {}", self.0)
    }
}

impl std::error::Error for Panicked {}

/// A failure that ended the whole transaction, for the requests it took down.
#[derive(Debug)]
struct TransactionLost(String);

impl std::fmt::Display for TransactionLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the group-commit transaction ended before COMMIT, its writes are lost: {}",
            self.0
        )
    }
}

impl std::error::Error for TransactionLost {}

enum Message {
    Write(Box<dyn WriteJob>),
    Shutdown(oneshot::Sender<()>),
}

/// The store's handle on its writer thread.
pub(super) struct WriterHandle {
    sender: Sender<Message>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl WriterHandle {
    /// Starts the thread, which opens (creates, migrates) the file; returns once it did.
    pub(super) async fn start(
        path: &Path,
        options: &SqliteStoreOptions,
        stats: Arc<Stats>,
    ) -> Result<Self, StoreError> {
        let (sender, receiver) = channel();
        let (ready_tx, ready_rx) = oneshot::channel();
        let file = path.to_path_buf();
        let options = options.clone();
        let thread = std::thread::Builder::new()
            .name("botmesh-sqlite-writer".into())
            .spawn(move || {
                let conn = match schema::open_writer(&file, &options) {
                    Ok(conn) => conn,
                    Err(error) => {
                        let _ = ready_tx.send(Err(error));
                        return;
                    }
                };
                if ready_tx.send(Ok(())).is_err() {
                    return;
                }
                run(conn, &receiver, options.max_batch, &stats);
            })
            .map_err(|e| StoreError::Open {
                file: path.to_path_buf(),
                source: Box::new(e),
            })?;
        let opened = ready_rx.await.unwrap_or_else(|_| {
            Err(StoreError::Open {
                file: path.to_path_buf(),
                source: "the sqlite writer thread ended while opening".into(),
            })
        });
        if let Err(error) = opened {
            // The thread has returned or is about to: nothing to wait for.
            drop(thread);
            return Err(error);
        }
        Ok(Self {
            sender,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues a request; [`StoreError::Closed`] when the thread is gone.
    pub(super) fn submit(&self, job: Box<dyn WriteJob>) -> Result<(), StoreError> {
        self.sender
            .send(Message::Write(job))
            .map_err(|_| StoreError::Closed)
    }

    /// Stops the thread after the requests queued so far, and waits until its connection
    /// closed.
    pub(super) async fn stop(&self) {
        let (done_tx, done_rx) = oneshot::channel();
        if self.sender.send(Message::Shutdown(done_tx)).is_ok() {
            let _ = done_rx.await;
        }
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            // The thread has answered and is returning: joining does not wait long.
            if let Err(error) = tokio::task::spawn_blocking(move || thread.join()).await {
                tracing::warn!(%error, "sqlite writer thread could not be joined");
            }
        }
    }
}

/// The requests waiting for the writer thread, and the shutdown queued after them.
struct Queue<'a> {
    receiver: &'a Receiver<Message>,
    max_batch: usize,
    /// A shutdown taken from the channel: nothing queued after it is taken.
    shutdown: Option<oneshot::Sender<()>>,
}

impl Queue<'_> {
    /// A request already queued, if any (none once a shutdown was taken).
    fn ready(&mut self) -> Option<Box<dyn WriteJob>> {
        if self.shutdown.is_some() {
            return None;
        }
        match self.receiver.try_recv() {
            Ok(Message::Write(job)) => Some(job),
            Ok(Message::Shutdown(done)) => {
                self.shutdown = Some(done);
                None
            }
            Err(_) => None,
        }
    }
}

/// The writer thread's loop.
fn run(mut conn: Connection, receiver: &Receiver<Message>, max_batch: usize, stats: &Stats) {
    let mut batch = VecDeque::with_capacity(max_batch);
    let mut queue = Queue {
        receiver,
        max_batch,
        shutdown: None,
    };
    loop {
        match receiver.recv() {
            Ok(Message::Write(job)) => batch.push_back(job),
            Ok(Message::Shutdown(done)) => queue.shutdown = Some(done),
            // Every sender is gone: the store was dropped.
            Err(_) => break,
        }
        while batch.len() < max_batch {
            match queue.ready() {
                Some(job) => batch.push_back(job),
                None => break,
            }
        }
        run_batch(&mut conn, &mut batch, &mut queue, stats);
        if let Some(done) = queue.shutdown.take() {
            close(conn);
            let _ = done.send(());
            return;
        }
    }
    close(conn);
}

fn close(conn: Connection) {
    if let Err((_, error)) = conn.close() {
        tracing::warn!(%error, "sqlite writer connection did not close cleanly");
    }
}

/// Runs a group of requests, in as few transactions as failures allow; empties `pending`.
/// Optimistic (no savepoints) until a request fails; isolated (a savepoint per request) for
/// that group's rerun and whatever follows it in `pending`. An optimistic transaction also
/// takes the requests queued while it runs (up to `max_batch` in all), so that they share its
/// `COMMIT` rather than wait for it and then pay for one of their own.
fn run_batch(
    conn: &mut Connection,
    pending: &mut VecDeque<Box<dyn WriteJob>>,
    queue: &mut Queue<'_>,
    stats: &Stats,
) {
    let mut isolated = false;
    while !pending.is_empty() {
        let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(tx) => tx,
            Err(error) => {
                let failure: Failure = Arc::new(error);
                for job in pending.drain(..) {
                    job.complete(Err(Arc::clone(&failure)));
                }
                return;
            }
        };
        let mut done: Vec<Box<dyn WriteJob>> = Vec::with_capacity(pending.len());
        let mut lost = None;
        let mut ran = 0;
        let running = Instant::now();
        let mut rerun = false;
        loop {
            let next = match pending.pop_front() {
                Some(job) => Some(job),
                None if !isolated && ran < queue.max_batch => queue.ready(),
                None => None,
            };
            let Some(mut job) = next else { break };
            ran += 1;
            let step = if isolated {
                run_one(&tx, job.as_mut())
            } else {
                run_optimistic(&tx, job.as_mut())
            };
            match step {
                Step::Ok => done.push(job),
                Step::Failed if isolated => job.complete(Ok(())),
                Step::Failed => {
                    // Undo the group, and run it again with a savepoint per request.
                    done.push(job);
                    rerun = true;
                    break;
                }
                Step::Lost(reason) => {
                    lost = Some((job, reason));
                    break;
                }
            }
        }
        Stats::add(&stats.statement_nanos, running);
        if rerun {
            if let Err(error) = tx.rollback() {
                // The connection may be left inside the transaction: the requests of the group
                // fail, and the next `BEGIN` tells whether the writer can go on.
                tracing::warn!(%error, "sqlite group commit could not roll back for its rerun");
                let failure: Failure = Arc::new(TransactionLost(error.to_string()));
                for job in done {
                    job.complete(Err(Arc::clone(&failure)));
                }
                continue;
            }
            stats.isolated_reruns.fetch_add(1, Ordering::Relaxed);
            for job in done.into_iter().rev() {
                pending.push_front(job);
            }
            isolated = true;
            continue;
        }
        stats.record(ran);
        if let Some((culprit, reason)) = lost {
            tracing::warn!(%reason, "sqlite group commit lost its transaction");
            drop(tx);
            let failure: Failure = Arc::new(TransactionLost(reason));
            // Its own error if it failed, else the loss of its writes.
            culprit.complete(Err(Arc::clone(&failure)));
            for job in done {
                job.complete(Err(Arc::clone(&failure)));
            }
            continue;
        }
        let committing = Instant::now();
        let commit = tx.commit().map_err(|e| Arc::new(e) as Failure);
        Stats::add(&stats.commit_nanos, committing);
        if let Err(error) = &commit {
            tracing::warn!(%error, "sqlite group commit failed");
        }
        for job in done {
            job.complete(commit.clone());
        }
    }
}

enum Step {
    /// The request succeeded; its writes wait for `COMMIT`.
    Ok,
    /// The request failed: isolated, its savepoint was rolled back; optimistic, the group
    /// must be rolled back and run again.
    Failed,
    /// The transaction itself ended (the request failed, or broke it): the requests run
    /// before in this transaction lost their writes.
    Lost(String),
}

/// Runs one request without a savepoint (the optimistic pass). `Failed` means the whole
/// transaction must be rolled back before the group runs again.
fn run_optimistic(tx: &Transaction<'_>, job: &mut dyn WriteJob) -> Step {
    let ok = job.run(tx);
    if tx.is_autocommit() {
        return Step::Lost("a statement ended the transaction".to_owned());
    }
    if ok { Step::Ok } else { Step::Failed }
}

/// Runs one request inside its own savepoint. A failed request has recorded its error.
fn run_one(tx: &Transaction<'_>, job: &mut dyn WriteJob) -> Step {
    if let Err(error) = run_cached(tx, "SAVEPOINT botmesh_request") {
        // Cannot isolate the request: give up the transaction, the request fails with it.
        let reason = error.to_string();
        job.fail(error);
        return Step::Lost(reason);
    }
    let ok = job.run(tx);
    if tx.is_autocommit() {
        return Step::Lost("a statement ended the transaction".to_owned());
    }
    let end = if ok {
        run_cached(tx, "RELEASE botmesh_request")
    } else {
        tx.execute_batch("ROLLBACK TO botmesh_request; RELEASE botmesh_request")
    };
    match end {
        Ok(()) if ok => Step::Ok,
        Ok(()) => Step::Failed,
        Err(error) => Step::Lost(error.to_string()),
    }
}

/// Runs a statement without parameters through the connection's statement cache (the
/// savepoint statements run twice per request: parsing them each time shows in profiles).
fn run_cached(tx: &Transaction<'_>, sql: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(sql)?.execute([])?;
    Ok(())
}
