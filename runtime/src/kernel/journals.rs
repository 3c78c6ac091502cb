//! The state of the durable journals in a running bot, which the kernel holds: the journals
//! themselves ([`KvDurability`]), the inbound options, the sweeper's handle, the leases of
//! queued jobs; and the lease slot of an inbound record, which a context carries. The
//! journaling, replay and sweeping are the `durable` layer's; the outbox is the outbound
//! layer's.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_durability::leases::InboxLease;
use botmesh_durability::{DurabilityError, KvDurability};
use tokio::task::JoinHandle;

use crate::kernel::Kernel;
use crate::kernel::lifecycle::StepTask;
use crate::kernel::waiting;

/// What to do with a message that arrives long after it was sent (after downtime, a bot
/// should not answer yesterday's messages as if they were new).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StalePolicy {
    /// Do not dispatch it: complete its record and emit `Dropped { reason: Stale }`.
    Skip,
    /// Dispatch it with `ctx.is_stale()` true, so the handler can answer differently.
    MarkStale,
}

/// `inbox.max_age`: the age over which a message is stale, and the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxAge {
    /// Age measured from the message's timestamp to its admission.
    pub age: Duration,
    /// What to do with a stale message.
    pub policy: StalePolicy,
}

/// The durability of a running bot (`bot.durability()`): the journals and their operator API.
pub(crate) struct Durable {
    pub(crate) d: KvDurability,
    pub(crate) max_age: Option<MaxAge>,
    /// The event forwarder (runs until the next start or the bot is dropped, so events of the
    /// drain still reach the bot's listeners).
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The sweeper, stopped gracefully: it finishes the record in hand.
    pub(crate) sweeper: StepTask,
    /// The leases of inbound records whose jobs wait in their chat's queue.
    pub(crate) waiting: waiting::WaitingLeases,
    /// Keeps the default instance id unique among live processes (see `instance`).
    pub(crate) _instance_lock: Option<std::fs::File>,
}

/// The lease of the inbound record a dispatch runs for, shared by its context and the durable
/// layer's `run_leased`: a persistent flow step that completed the record in its own
/// transaction marks it settled, and `run_leased` then leaves it alone. While its job waits
/// behind another of its chat, the slot also holds its ticket among the
/// [`WaitingLeases`](super::waiting::WaitingLeases).
#[derive(Debug)]
pub(crate) struct LeaseSlot {
    pub(crate) lease: InboxLease,
    settled: AtomicBool,
    /// The ticket of its registration as a waiting lease; [`NOT_WAITING`] when none.
    waiting: AtomicU64,
}

/// [`LeaseSlot::waiting`] when the lease is not registered as waiting.
const NOT_WAITING: u64 = u64::MAX;

impl LeaseSlot {
    pub(crate) fn new(lease: InboxLease) -> Arc<Self> {
        Arc::new(Self {
            lease,
            settled: AtomicBool::new(false),
            waiting: AtomicU64::new(NOT_WAITING),
        })
    }

    /// The record was completed (by a flow step's commit).
    pub(crate) fn settle(&self) {
        self.settled.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(Ordering::SeqCst)
    }

    /// The lease was registered as waiting under `ticket`.
    pub(crate) fn waiting_as(&self, ticket: u64) {
        self.waiting.store(ticket, Ordering::SeqCst);
    }

    /// The job starts (or is dropped): the ticket of its waiting registration, if it has one.
    pub(crate) fn started(&self) -> Option<u64> {
        let ticket = self.waiting.swap(NOT_WAITING, Ordering::SeqCst);
        (ticket != NOT_WAITING).then_some(ticket)
    }
}

/// Whether a flow step's commit and the inbound record's completion are one transaction: the
/// store shares its transactions with the journals' backend.
pub(crate) fn atomic(k: &Kernel) -> bool {
    k.durable
        .as_ref()
        .is_some_and(|dur| k.store.shares_transactions_with(&**dur.d.kv()))
}

/// The heartbeats of a lease on record `id` of `journal` (`inbox`, `outbox`), for
/// [`with_heartbeat`]: every `every`, `renew` extends the lease (as last renewed), until
/// `settled` says the work is over or the lease is gone. A heartbeat that fails because the
/// backend is away for a moment is tried again at the next tick: the lease still runs, and a
/// slow handler or provider call is not taken for an abandoned one.
pub(crate) async fn beats<L: Clone, R: Future<Output = Result<L, DurabilityError>>>(
    (journal, id): (&str, &str),
    every: Duration,
    lease: &L,
    settled: impl Fn() -> bool,
    mut renew: impl FnMut(L) -> R,
) {
    let mut current = lease.clone();
    loop {
        tokio::time::sleep(every).await;
        if settled() {
            return;
        }
        // Boxed: heartbeats are rare, and the call would otherwise sit in every dispatch's and
        // every send's future.
        match Box::pin(renew(current.clone())).await {
            Ok(renewed) => current = renewed,
            Err(e) if e.is_transient() => {
                tracing::warn!(journal, id, error = %e, "heartbeat failed; trying again");
            }
            Err(e) => {
                tracing::warn!(journal, id, error = %e, "heartbeat stopped: the lease is gone");
                return;
            }
        }
    }
}

/// Runs `work` to completion while `beats` runs beside it, in the same task: the lease
/// heartbeat of a handler or a provider call. `beats` sleeps before its first heartbeat, and
/// `work` is polled first, so a call that completes at once never arms a timer, and none ever
/// spawns a task. When `beats` ends (a heartbeat failed), `work` still runs to its end; when
/// `work` ends, `beats` is dropped, cancelling a heartbeat in flight (the fencing token of the
/// lease is unchanged by a heartbeat, so the completion that follows holds either way).
pub(crate) async fn with_heartbeat<W: Future, B: Future<Output = ()>>(
    work: W,
    beats: B,
) -> W::Output {
    let mut work = pin!(work);
    let mut beats = pin!(beats);
    tokio::select! {
        biased;
        out = &mut work => out,
        () = &mut beats => work.await,
    }
}
