//! Leases of inbound records whose job waits in its chat's queue.
//!
//! An inbound record is leased to this process when it is journaled (or claimed for a
//! replay), but its job may wait in the chat's queue behind a slow handler of the same chat;
//! the job's own heartbeat ([`run_leased`](super::inbound::run_leased)) only starts when the
//! job does. Without renewal, a wait longer than `inbox.lease` would let the lease expire: the
//! sweeper of this process (or another replica's) would claim the record again, charge an
//! attempt and run it a second time, and after `inbox.max_attempts` such waits dead-letter a
//! message that was handled.
//!
//! So a job queued behind another job of its chat registers its lease here
//! ([`WaitingLeases::register`], called by the queue as it appends the job) until it starts,
//! and the lease keeper ([`keep`]) renews, every third of the lease, each lease that has waited
//! that long since its last renewal. A job that starts a worker of its own (its chat had no
//! work) is not registered: it waits only for tokio to poll its new task, as any heartbeat
//! does. Every queued job holds a [`Waiting`] guard: the lease of a job dropped unstarted (a
//! `stop()` without drain drops the queued jobs) is kept aside and given back to the journal
//! by [`release_dropped`] when the bot stops, so that a restart replays the message at once
//! rather than after the lease ran out. It does not renew the leases of running jobs (their
//! heartbeat does) and does not touch the queue.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use botmesh_durability::leases::InboxLease;
use tokio::time::Instant;

use crate::kernel::Kernel;
use crate::kernel::journals::LeaseSlot;

/// A lease waiting in a queue, and when it was last taken or renewed.
#[derive(Debug)]
struct Entry {
    slot: Arc<LeaseSlot>,
    since: Instant,
}

/// The registered leases and the next ticket.
#[derive(Debug, Default)]
struct Registered {
    next: u64,
    leases: BTreeMap<u64, Entry>,
}

/// The leases of the jobs queued behind another job of their chat, for one bot (see the
/// module documentation).
#[derive(Debug, Default)]
pub(crate) struct WaitingLeases {
    registered: Mutex<Registered>,
    /// Leases of jobs dropped before they started.
    dropped: Mutex<Vec<InboxLease>>,
}

impl WaitingLeases {
    fn registered(&self) -> MutexGuard<'_, Registered> {
        self.registered.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the lease of `slot`, whose job is being queued behind another job of its
    /// chat: renewed by [`keep`] until the job starts ([`Waiting::start`] removes it).
    pub(crate) fn register(&self, slot: &Arc<LeaseSlot>) {
        let mut registered = self.registered();
        let ticket = registered.next;
        registered.next += 1;
        registered.leases.insert(
            ticket,
            Entry {
                slot: Arc::clone(slot),
                since: Instant::now(),
            },
        );
        slot.waiting_as(ticket);
    }

    /// Removes the registration `ticket`, if it is still there.
    fn remove(&self, ticket: u64) {
        self.registered().leases.remove(&ticket);
    }

    /// The job of `slot` starts or is dropped: its registration, if it has one, goes.
    fn leave(&self, slot: &LeaseSlot) {
        if let Some(ticket) = slot.started() {
            self.remove(ticket);
        }
    }

    /// The leases that waited `every` since they were taken or last renewed.
    fn due(&self, every: Duration) -> Vec<(u64, InboxLease)> {
        let now = Instant::now();
        self.registered()
            .leases
            .iter()
            // A record not written yet has no lease to renew (it is written soon after).
            .filter(|(_, e)| e.slot.is_written() && now.duration_since(e.since) >= every)
            .map(|(ticket, e)| (*ticket, e.slot.lease.clone()))
            .collect()
    }
}

/// A queued job's hold on its kernel and inbound lease until it starts: dropped unstarted
/// (its queue was dropped at `stop()`), it keeps the lease for [`release_dropped`].
pub(crate) struct Waiting {
    kernel: Option<Arc<Kernel>>,
    slot: Option<Arc<LeaseSlot>>,
}

impl Waiting {
    /// The hold of a job of `kernel` on `slot` (`None` without durability).
    pub(crate) fn new(kernel: Arc<Kernel>, slot: Option<Arc<LeaseSlot>>) -> Self {
        Self {
            kernel: Some(kernel),
            slot,
        }
    }

    /// The job starts: its lease leaves the waiting ones (its own heartbeat keeps it from
    /// now on). Returns what the job runs with.
    pub(crate) fn start(mut self) -> (Option<Arc<Kernel>>, Option<Arc<LeaseSlot>>) {
        let (kernel, slot) = (self.kernel.take(), self.slot.take());
        if let (Some(dur), Some(slot)) = (kernel.as_ref().and_then(|k| k.durable.as_ref()), &slot) {
            dur.waiting.leave(slot);
        }
        (kernel, slot)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let (Some(k), Some(slot)) = (self.kernel.take(), self.slot.take()) else {
            return;
        };
        let Some(dur) = k.durable.as_ref() else {
            return;
        };
        dur.waiting.leave(&slot);
        dur.waiting
            .dropped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot.lease.clone());
    }
}

/// Gives back to the journal the leases of the jobs dropped unstarted (a `stop()` without
/// drain): their records are pending again, with the attempt they were charged undone, and a
/// restart replays them at once. A lease that cannot be released runs out as after a crash.
pub(crate) async fn release_dropped(k: &Kernel) {
    let Some(dur) = k.durable.as_ref() else {
        return;
    };
    let dropped = std::mem::take(
        &mut *dur
            .waiting
            .dropped
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    );
    for lease in dropped {
        if let Err(e) = dur.d.inbox().release(&lease, Duration::ZERO).await {
            tracing::warn!(id = %lease.id, error = %e, "could not release the lease of a dropped queued message; it is replayed once the lease runs out");
        }
    }
}

/// The lease keeper: every third of `inbox.lease`, renews the leases that waited that long,
/// until the bot is gone.
pub(crate) async fn keep(kernel: std::sync::Weak<Kernel>) {
    let every = match kernel
        .upgrade()
        .and_then(|k| k.durable.as_ref().map(|d| d.d.config().inbox.lease))
    {
        Some(lease) => (lease / 3).max(Duration::from_millis(10)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(k) = kernel.upgrade() else { return };
        let Some(dur) = k.durable.as_ref() else {
            return;
        };
        for (ticket, lease) in dur.waiting.due(every) {
            // The job may have started meanwhile: its own heartbeat has it then.
            if !dur.waiting.registered().leases.contains_key(&ticket) {
                continue;
            }
            match dur.d.inbox().heartbeat(&lease).await {
                Ok(_) => {
                    if let Some(entry) = dur.waiting.registered().leases.get_mut(&ticket) {
                        entry.since = Instant::now();
                    }
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(id = %lease.id, error = %e, "renewing a queued message's lease failed; trying again");
                }
                Err(e) => {
                    tracing::warn!(id = %lease.id, error = %e, "a queued message's lease is gone");
                    dur.waiting.remove(ticket);
                }
            }
        }
    }
}
