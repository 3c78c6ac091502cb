//! The per-chat FIFO queue: each chat's work runs in arrival order, one item at a time, while
//! different chats run concurrently. Also the [`WorkTracker`] that `stop()` drains.
//!
//! A chat's worker task exists only while the chat has work; it exits when its queue empties.
//! Once [`ChatQueues::close`] was called (a `stop()` without drain), a worker finishes the job
//! it runs and drops the rest of its queue unstarted, until [`ChatQueues::reopen`].
//! This module does not know what the work is (dispatch, a trigger, a flow resume).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, mpsc};
use tokio::task::AbortHandle;

use crate::kernel::routes::BoxFuture;
use crate::message::ChatId;

/// Counts work in flight and wakes waiters when it reaches zero.
#[derive(Debug, Default)]
pub(crate) struct WorkTracker {
    count: AtomicUsize,
    idle: Notify,
}

impl WorkTracker {
    pub(crate) fn begin(self: &Arc<Self>) -> WorkGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        WorkGuard(self.clone())
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until no work is in flight.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Marks one unit of work; dropping it ends the unit.
#[derive(Debug)]
pub(crate) struct WorkGuard(Arc<WorkTracker>);

impl Drop for WorkGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

type Job = (BoxFuture<()>, WorkGuard);

struct ChatWorker {
    tx: mpsc::UnboundedSender<Job>,
    abort: Option<AbortHandle>,
    /// Jobs sent to the worker and not finished (a worker whose queue just emptied lingers
    /// until its task removes it: a job sent to it then does not wait).
    unfinished: Arc<AtomicUsize>,
}

/// The per-chat queues.
#[derive(Default)]
pub(crate) struct ChatQueues {
    workers: Arc<Mutex<HashMap<ChatId, ChatWorker>>>,
    pub(crate) tracker: Arc<WorkTracker>,
    /// Set by [`close`](Self::close): workers start no further job.
    closed: Arc<AtomicBool>,
}

impl ChatQueues {
    /// Appends `job` to the chat's queue; it runs after every job queued before it for that chat.
    pub(crate) fn push(&self, chat: &ChatId, job: BoxFuture<()>) {
        self.push_behind(chat, job, || {});
    }

    /// As [`push`](Self::push), calling `queued_behind` first when the job goes behind work
    /// of its chat (a job of the chat runs, this one waits its turn), before the worker can
    /// take it; not when the job starts a worker of its own, nor when it goes to a worker
    /// whose jobs are all done.
    pub(crate) fn push_behind(
        &self,
        chat: &ChatId,
        job: BoxFuture<()>,
        queued_behind: impl FnOnce(),
    ) {
        let guard = self.tracker.begin();
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let job = match workers.get(chat) {
            Some(w) => {
                if w.unfinished.fetch_add(1, Ordering::SeqCst) > 0 {
                    queued_behind();
                }
                match w.tx.send((job, guard)) {
                    Ok(()) => return,
                    Err(mpsc::error::SendError(job)) => job,
                }
            }
            None => (job, guard),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // A fresh receiver is alive: this send cannot fail.
        let _ = tx.send(job);
        let unfinished = Arc::new(AtomicUsize::new(1));
        let handle = tokio::spawn(run_worker(
            self.workers.clone(),
            self.closed.clone(),
            chat.clone(),
            rx,
            Arc::clone(&unfinished),
        ));
        workers.insert(
            chat.clone(),
            ChatWorker {
                tx,
                abort: Some(handle.abort_handle()),
                unfinished,
            },
        );
    }

    /// Lets every worker finish the job it runs, and drops the jobs not started yet (their
    /// futures are dropped unpolled): `in_flight` then reaches zero as the running jobs end.
    pub(crate) fn close(&self) {
        // Each worker sees the flag before taking its next job.
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Undoes [`close`](Self::close) (the bot starts again).
    pub(crate) fn reopen(&self) {
        self.closed.store(false, Ordering::SeqCst);
    }

    /// Aborts every worker (work not yet started is dropped).
    pub(crate) fn abort_all(&self) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        for (_, w) in workers.drain() {
            if let Some(a) = w.abort {
                a.abort();
            }
        }
    }
}

async fn run_worker(
    workers: Arc<Mutex<HashMap<ChatId, ChatWorker>>>,
    closed: Arc<AtomicBool>,
    chat: ChatId,
    mut rx: mpsc::UnboundedReceiver<Job>,
    unfinished: Arc<AtomicUsize>,
) {
    loop {
        if closed.load(Ordering::SeqCst) {
            // Drop the jobs not started (with their work guards), and this worker.
            let mut map = workers.lock().unwrap_or_else(|e| e.into_inner());
            map.remove(&chat);
            drop(map);
            rx.close();
            while rx.try_recv().is_ok() {}
            return;
        }
        let next = match rx.try_recv() {
            Ok(job) => Some(job),
            Err(_) => {
                let mut map = workers.lock().unwrap_or_else(|e| e.into_inner());
                match rx.try_recv() {
                    Ok(job) => Some(job),
                    Err(_) => {
                        map.remove(&chat);
                        None
                    }
                }
            }
        };
        let Some((job, guard)) = next else { return };
        job.await;
        unfinished.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
    }
}
