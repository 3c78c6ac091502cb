//! The background sweeper and the start-up recovery of the durable journals.
//!
//! Recovery (the `durability` lifecycle step, before the transport starts): resolve sends left
//! in flight by a dead incarnation (`on_ambiguous`), then replay every unfinished inbound
//! record. The sweeper then runs every `poll`: it replays inbound records that became due
//! (retries, expired leases of another replica), delivers due sends in per-chat order, and
//! purges `done`/`sent` records older than `retention`. A failing pass is reported as an
//! `error` event and the next pass runs as usual: a bad record never stops the sweeper.

use std::sync::{Arc, Weak};

use crate::bot::kernel::Kernel;
use crate::durable::{Durable, inbound, outbound};
use crate::error::BotError;

/// Records per pass.
const BATCH: usize = 64;
/// Purge every this many passes.
const PURGE_EVERY: u64 = 60;

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

async fn pass(k: &Arc<Kernel>, dur: &Durable, n: u64) -> Result<(), BotError> {
    replay_due(k, dur).await?;
    for record in dur.d.outbox().due(BATCH).await? {
        // Stopping: leave the rest for the next start (the record in hand was finished).
        if *dur.stop_sweeper.borrow() {
            return Ok(());
        }
        outbound::deliver_due(k, dur, record).await;
    }
    if n.is_multiple_of(PURGE_EVERY) {
        let report = dur.d.purge(1000).await?;
        if report.inbound + report.outbound > 0 {
            tracing::debug!(
                inbound = report.inbound,
                outbound = report.outbound,
                "retention purge"
            );
        }
    }
    Ok(())
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
    let mut n: u64 = 0;
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
        n += 1;
        if let Err(e) = pass(&k, dur, n).await {
            k.events.error("durability:sweeper", None, e);
        }
    }
}
