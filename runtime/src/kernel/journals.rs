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
use botmesh_durability::store::{ChatRecord, ContactRecord, LedgerEntry, StepCommit};
use botmesh_durability::{DurabilityError, KvDurability, LeasedInbound, StepJournal};
use tokio::sync::watch;
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
///
/// A live message's record may not be written yet when its dispatch starts (see
/// `durable::inbound::defer`): the slot then holds it ([`Unwritten`]) until the dispatch's
/// first flow step writes it in its own transaction ([`take_unwritten`](Self::take_unwritten)),
/// or the admission, or the end of the dispatch, writes it alone; [`written`](Self::written)
/// tells everyone waiting how that went.
#[derive(Debug)]
pub(crate) struct LeaseSlot {
    pub(crate) lease: InboxLease,
    settled: AtomicBool,
    /// The ticket of its registration as a waiting lease; [`NOT_WAITING`] when none.
    waiting: AtomicU64,
    /// The record while it is not written (`None` once taken to be written).
    unwritten: Mutex<Option<Unwritten>>,
    /// How writing it went: `Some` once written (or found a duplicate, or failed); `Some` from
    /// the start for a record written before its dispatch was queued.
    outcome: watch::Sender<Option<RecordWrite>>,
    /// Its job was queued behind other work of its chat: the record is written at once, not
    /// kept for a step that cannot come soon.
    behind: AtomicBool,
    /// The record, not written yet, was looked up and is not in the journal: the message is
    /// no redelivery of one an earlier run took.
    checked: AtomicBool,
}

/// An inbound record leased in memory and not written yet, with the rows its message records
/// in the same transaction (its ledger row, chat and contact; none with the ledger off).
#[derive(Debug)]
pub(crate) struct Unwritten {
    pub(crate) leased: LeasedInbound,
    pub(crate) ledger: Option<LedgerEntry>,
    pub(crate) chat: Option<ChatRecord>,
    pub(crate) contact: Option<ContactRecord>,
}

impl Unwritten {
    /// Adds the record (completed when `done`) and its rows to a step's journal and commit.
    pub(crate) fn add_to(
        self,
        journal: &mut StepJournal<'_>,
        step: &mut StepCommit,
        done: bool,
    ) -> Result<(), DurabilityError> {
        journal.journal_leased(self.leased, done)?;
        step.ledger.extend(self.ledger);
        step.chat = self.chat;
        step.contact = self.contact;
        Ok(())
    }
}

/// How writing a slot's record went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecordWrite {
    /// It is in the journal (completed when the slot is settled).
    Written,
    /// A record of the same id was there: the message is a redelivery, handled before.
    Duplicate,
    /// The journal could not write it: the message is not accepted.
    Unavailable(String),
}

/// [`LeaseSlot::waiting`] when the lease is not registered as waiting.
const NOT_WAITING: u64 = u64::MAX;

impl LeaseSlot {
    /// The slot of a record already written.
    pub(crate) fn new(lease: InboxLease) -> Arc<Self> {
        Self::with(lease, None, Some(RecordWrite::Written))
    }

    /// The slot of a record not written yet (see [`Unwritten`]).
    pub(crate) fn unwritten(record: Unwritten) -> Arc<Self> {
        let lease = record.leased.lease().clone();
        Self::with(lease, Some(record), None)
    }

    fn with(
        lease: InboxLease,
        unwritten: Option<Unwritten>,
        outcome: Option<RecordWrite>,
    ) -> Arc<Self> {
        Arc::new(Self {
            lease,
            settled: AtomicBool::new(false),
            waiting: AtomicU64::new(NOT_WAITING),
            unwritten: Mutex::new(unwritten),
            outcome: watch::Sender::new(outcome),
            behind: AtomicBool::new(false),
            checked: AtomicBool::new(false),
        })
    }

    /// The record was completed (by a flow step's commit).
    pub(crate) fn settle(&self) {
        self.settled.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(Ordering::SeqCst)
    }

    /// Takes the record to write it, when it is not written and nobody took it yet.
    pub(crate) fn take_unwritten(&self) -> Option<Unwritten> {
        self.unwritten
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Tells how writing the record went (by whoever took it).
    pub(crate) fn written(&self, outcome: RecordWrite) {
        self.outcome.send_replace(Some(outcome));
    }

    /// How writing the record went; `None` while it is not written.
    pub(crate) fn write_outcome(&self) -> Option<RecordWrite> {
        self.outcome.borrow().clone()
    }

    /// Waits until the record is written (or found a duplicate, or failed).
    pub(crate) async fn wait_written(&self) -> RecordWrite {
        let mut rx = self.outcome.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone().unwrap_or(RecordWrite::Written),
            // The sender lives in `self`: not reached.
            Err(_) => RecordWrite::Unavailable("the inbound record's slot is gone".to_owned()),
        }
    }

    /// Whether the record is written (a lease of a record not written yet is not renewed:
    /// there is nothing to renew).
    pub(crate) fn is_written(&self) -> bool {
        self.outcome.borrow().is_some()
    }

    /// The record was looked up and not found (see the field `checked`).
    pub(crate) fn checked(&self) {
        self.checked.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_checked(&self) -> bool {
        self.checked.load(Ordering::SeqCst)
    }

    /// Its job was queued behind other work of its chat.
    pub(crate) fn queued_behind(&self) {
        self.behind.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_behind(&self) -> bool {
        self.behind.load(Ordering::SeqCst)
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
