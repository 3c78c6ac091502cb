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
//! So a queued job registers its lease here ([`WaitingLeases::enter`]) until it starts (or is
//! dropped), and the lease keeper ([`keep`]) renews, every third of the lease, each lease that
//! has waited that long since its last renewal. The lease of a job dropped unstarted (a
//! `stop()` without drain drops the queued jobs) is kept aside and given back to the journal
//! by [`release_dropped`] when the bot stops, so that a restart replays the message at once
//! rather than after the lease ran out. Leases of jobs that start at once are never
//! renewed: the registration is one map insert and one removal. It does not renew the leases
//! of running jobs (their heartbeat does) and does not touch the queue.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use botmesh_durability::InboxLease;
use tokio::time::Instant;

use crate::bot::kernel::Kernel;

/// A lease waiting in a queue, and when it was last taken or renewed.
#[derive(Debug)]
struct Entry {
    lease: InboxLease,
    since: Instant,
}

/// The leases of the queued jobs of one bot (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct WaitingLeases {
    next: AtomicU64,
    leases: Mutex<BTreeMap<u64, Entry>>,
    /// Leases of jobs dropped before they started.
    dropped: Mutex<Vec<InboxLease>>,
}

impl WaitingLeases {
    fn leases(&self) -> MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `lease` for a job about to be queued; the returned ticket removes it when the
    /// job starts ([`Waiting::started`], first thing) or is dropped unrun (the lease is then
    /// kept for [`release_dropped`]). `None` without a lease.
    pub(crate) fn enter(k: &Arc<Kernel>, lease: Option<&InboxLease>) -> Option<Waiting> {
        let (dur, lease) = (k.durable.as_ref()?, lease?);
        let ticket = dur.waiting.next.fetch_add(1, Ordering::Relaxed);
        dur.waiting.leases().insert(
            ticket,
            Entry {
                lease: lease.clone(),
                since: Instant::now(),
            },
        );
        Some(Waiting {
            kernel: Arc::downgrade(k),
            ticket,
            started: false,
        })
    }

    /// The leases that waited `every` since they were taken or last renewed.
    fn due(&self, every: Duration) -> Vec<(u64, InboxLease)> {
        let now = Instant::now();
        self.leases()
            .iter()
            .filter(|(_, e)| now.duration_since(e.since) >= every)
            .map(|(ticket, e)| (*ticket, e.lease.clone()))
            .collect()
    }
}

/// A queued job's registration in [`WaitingLeases`]: removed when the job starts; dropped
/// before that, its lease is kept for [`release_dropped`].
#[derive(Debug)]
pub(crate) struct Waiting {
    kernel: Weak<Kernel>,
    ticket: u64,
    started: bool,
}

impl Waiting {
    /// The job starts: its own heartbeat keeps the lease from now on.
    pub(crate) fn started(mut self) {
        self.started = true;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(k) = self.kernel.upgrade() else {
            return;
        };
        let Some(dur) = k.durable.as_ref() else {
            return;
        };
        let entry = dur.waiting.leases().remove(&self.ticket);
        if let (false, Some(entry)) = (self.started, entry) {
            dur.waiting
                .dropped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(entry.lease);
        }
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
pub(crate) async fn keep(kernel: Weak<Kernel>) {
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
            if !dur.waiting.leases().contains_key(&ticket) {
                continue;
            }
            match dur.d.inbox().heartbeat(&lease).await {
                Ok(_) => {
                    if let Some(entry) = dur.waiting.leases().get_mut(&ticket) {
                        entry.since = Instant::now();
                    }
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(id = %lease.id, error = %e, "renewing a queued message's lease failed; trying again");
                }
                Err(e) => {
                    tracing::warn!(id = %lease.id, error = %e, "a queued message's lease is gone");
                    dur.waiting.leases().remove(&ticket);
                }
            }
        }
    }
}
