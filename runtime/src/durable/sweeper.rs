//! The background sweeper and the start-up recovery of the durable journals.
//!
//! Recovery (the `durability` lifecycle step, before the transport starts): resolve sends left
//! in flight by a dead incarnation (`on_ambiguous`), then replay every unfinished inbound
//! record. The sweeper then runs every `poll`: it replays inbound records that became due
//! (retries, expired leases of another replica), delivers due sends in per-chat order, and
//! purges `done`/`sent` records older than `retention`: at its first pass, then once a minute,
//! each time until nothing older is left (in slices of [`PURGE_SLICE`], so a backlog is worked
//! off over several passes without holding up replays and sends). A failing pass is reported as an
//! `error` event and the next pass runs as usual: a bad record never stops the sweeper.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::bot::kernel::Kernel;
use crate::durable::{Durable, inbound, outbound};
use crate::error::BotError;

/// Records per pass.
const BATCH: usize = 64;
/// How often the retention purge runs (when it has no backlog).
const PURGE_PERIOD: Duration = Duration::from_secs(60);
/// Records per state and purge call.
const PURGE_MAX: usize = 1000;
/// The longest one pass purges; a backlog left goes on at the next pass.
const PURGE_SLICE: Duration = Duration::from_millis(200);

/// When the retention purge runs next.
#[derive(Debug)]
struct PurgeSchedule {
    next: Instant,
}

impl PurgeSchedule {
    /// Due at once (the first pass purges).
    fn new() -> Self {
        Self {
            next: Instant::now(),
        }
    }
}

/// Purges records past retention for up to [`PURGE_SLICE`]; with a backlog left, the next
/// pass goes on, else the next purge is [`PURGE_PERIOD`] away.
async fn purge(dur: &Durable, schedule: &mut PurgeSchedule) -> Result<(), BotError> {
    if Instant::now() < schedule.next {
        return Ok(());
    }
    let started = Instant::now();
    let (mut inbound, mut outbound) = (0, 0);
    // A failing purge is tried again a period later (not at every pass).
    schedule.next = Instant::now() + PURGE_PERIOD;
    let backlog = loop {
        let report = dur.d.purge(PURGE_MAX).await?;
        inbound += report.inbound;
        outbound += report.outbound;
        let more = report.inbound >= PURGE_MAX || report.outbound >= PURGE_MAX;
        if !more || started.elapsed() >= PURGE_SLICE {
            break more;
        }
    };
    if backlog {
        schedule.next = Instant::now();
    }
    if inbound + outbound > 0 {
        tracing::debug!(inbound, outbound, backlog, "retention purge");
    }
    Ok(())
}

pub(crate) async fn recover(k: &Arc<Kernel>, dur: &Durable) -> Result<(), BotError> {
    let resolved = dur.d.outbox().recover_ambiguous().await?;
    if !resolved.is_empty() {
        tracing::warn!(
            count = resolved.len(),
            "sends of unknown outcome after a crash resolved"
        );
    }
    let replayed = replay_due(k, dur).await?;
    if replayed > 0 {
        tracing::info!(count = replayed, "unfinished inbound records replayed");
    }
    Ok(())
}

async fn replay_due(k: &Arc<Kernel>, dur: &Durable) -> Result<usize, BotError> {
    let mut total = 0;
    loop {
        let claimed = dur.d.inbox().claim_due(BATCH).await?;
        let n = claimed.len();
        for c in claimed {
            inbound::replay(k, c.record, c.lease).await;
        }
        total += n;
        if n < BATCH {
            return Ok(total);
        }
    }
}

async fn pass(
    k: &Arc<Kernel>,
    dur: &Durable,
    schedule: &mut PurgeSchedule,
) -> Result<(), BotError> {
    replay_due(k, dur).await?;
    for record in dur.d.outbox().due(BATCH).await? {
        // Stopping: leave the rest for the next start (the record in hand was finished).
        if *dur.stop_sweeper.borrow() {
            return Ok(());
        }
        outbound::deliver_due(k, dur, record).await;
    }
    purge(dur, schedule).await
}

/// Runs passes every `poll` until the bot is gone or stopping.
pub(crate) async fn run(kernel: Weak<Kernel>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let poll = match kernel
        .upgrade()
        .and_then(|k| k.durable.as_ref().map(|d| d.d.config().poll))
    {
        Some(p) => p,
        None => return,
    };
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut schedule = PurgeSchedule::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some(k) = kernel.upgrade() else { return };
        if *stop.borrow() {
            return;
        }
        let Some(dur) = k.durable.as_ref() else {
            return;
        };
        if let Err(e) = pass(&k, dur, &mut schedule).await {
            k.events.error("durability:sweeper", None, e);
        }
    }
}
