//! The background sweeper and the start-up recovery of the durable journals.
//!
//! Recovery (the `durability` lifecycle step, before the transport starts): resolve sends left
//! in flight by a dead incarnation (`on_ambiguous`), queue on each chat's queue the delivery
//! of the sends it journaled and did not send (so a draining `stop()` waits for them), then
//! replay every unfinished inbound record. The sweeper then runs every `poll` (its first pass
//! one `poll` after the start): it replays inbound records that became due
//! (retries, expired leases of another replica), delivers due sends in per-chat order, and
//! purges `done`/`sent` records older than `retention`: at its first pass, then once a minute,
//! each time until nothing older is left (in slices of [`PURGE_SLICE`], so a backlog is worked
//! off over several passes without holding up replays and sends). With coordination, the same
//! purge deletes the turn records of chats nobody has held or waited for during a turn lease
//! (and a leader lease gone idle as long), so the coordination records do not grow with every
//! chat ever seen. A failing pass is reported as an
//! `error` event and the next pass runs as usual: a bad record never stops the sweeper.

use std::sync::{Arc, Weak};
use std::time::Duration;

use botmesh_durability::OutboxState;
use tokio::time::Instant;

use crate::durable::inbound::{self, Admit};
use crate::error::BotError;
use crate::kernel::Kernel;
use crate::kernel::journals::Durable;
use crate::outbound::outbox as outbound;

/// Records per pass.
/// How many `unknown` sends recovery looks at for their own ambiguity policy.
const UNKNOWN_SCAN: usize = 1024;
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
async fn purge(k: &Kernel, dur: &Durable, schedule: &mut PurgeSchedule) -> Result<(), BotError> {
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
    if let Some(coord) = k.coordination.as_deref() {
        let idle_for = coord.options.config().turn_lease;
        let purged = coord.c.purge_idle(idle_for, PURGE_MAX).await?;
        if purged >= PURGE_MAX {
            schedule.next = Instant::now();
        }
    }
    Ok(())
}

/// Recovery's first half, when the journal opens (before `restore`): resolves the sends of
/// unknown outcome (`on_ambiguous`) and queues the sends left unsent.
pub(crate) async fn recover_sends(k: &Arc<Kernel>, dur: &Durable) -> Result<(), BotError> {
    let resolved = dur.d.outbox().recover_ambiguous().await?;
    if !resolved.is_empty() {
        tracing::warn!(
            count = resolved.len(),
            "sends of unknown outcome after a crash resolved"
        );
    }
    // Every send left `unknown` (those just resolved, and any an earlier run resolved and died
    // before sending again) gets its own policy applied.
    match dur
        .d
        .outbox()
        .list(OutboxState::Unknown, UNKNOWN_SCAN)
        .await
    {
        Ok(unknown) => outbound::resend_by_own_policy(k, dur, &unknown).await,
        Err(e) => k.events.error("durability:recovery", None, e),
    }
    let chats = queue_left_sends(k, dur).await?;
    if chats > 0 {
        tracing::info!(
            chats,
            "sends journaled and not sent before the restart: queued"
        );
    }
    Ok(())
}

/// Recovery's second half, in the `durability` step (after `restore`): replays the unfinished
/// inbound records.
pub(crate) async fn replay_unfinished(
    k: &Arc<Kernel>,
    dur: &Durable,
    admit: Admit,
) -> Result<(), BotError> {
    let replayed = replay_due(k, dur, admit).await?;
    if replayed > 0 {
        tracing::info!(count = replayed, "unfinished inbound records replayed");
    }
    Ok(())
}

/// Queues, on each chat's queue, the delivery of the sends an earlier incarnation journaled
/// and did not send (a step committed with its sends, then the process died): ahead of the
/// chat's replayed messages and of its new ones, and as queued work, so that a `stop()` that
/// drains waits for them (left to the sweeper, a restart that stopped soon after its start
/// left them unsent). Each job delivers the chat's due sends in order, one attempt each; a
/// send that fails is left to the sweeper's retries. Returns the chats queued.
async fn queue_left_sends(k: &Arc<Kernel>, dur: &Durable) -> Result<usize, BotError> {
    // `due` gives the first open send of each chat; at most `LEFT_CHATS` chats here, the
    // sweeper delivers the rest.
    let firsts = match dur.d.outbox().due(LEFT_CHATS).await {
        Ok(firsts) => firsts,
        // Not a reason to refuse the start: the sweeper's passes deliver them.
        Err(e) => {
            k.events.error("durability:recovery", None, e);
            return Ok(0);
        }
    };
    let n = firsts.len();
    for first in firsts {
        let chat = crate::message::ChatId(first.chat.clone());
        let kernel = Arc::clone(k);
        let queue = chat.clone();
        k.queues.push(
            &queue,
            Box::pin(async move {
                let Some(dur) = kernel.durable.as_ref() else {
                    return;
                };
                let mut record = first;
                for _ in 0..LEFT_SENDS_PER_CHAT {
                    let key = record.key.clone();
                    outbound::deliver_due(&kernel, dur, record).await;
                    match dur.d.outbox().next_due_of_chat(&chat.0).await {
                        Ok(Some(next)) if next.key != key => record = next,
                        Ok(_) => return,
                        Err(e) => {
                            kernel.events.error("durability:recovery", Some(&chat), e);
                            return;
                        }
                    }
                }
            }),
        );
    }
    Ok(n)
}

/// The most chats whose left-over sends recovery queues (the sweeper delivers the others).
const LEFT_CHATS: usize = 256;
/// The most left-over sends one chat's recovery job delivers (the sweeper delivers the rest).
const LEFT_SENDS_PER_CHAT: usize = 64;

async fn replay_due(k: &Arc<Kernel>, dur: &Durable, admit: Admit) -> Result<usize, BotError> {
    let mut total = 0;
    loop {
        let claimed = dur.d.inbox().claim_due(BATCH).await?;
        let n = claimed.len();
        for c in claimed {
            inbound::replay(k, c.record, c.lease, admit).await;
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
    admit: Admit,
) -> Result<(), BotError> {
    replay_due(k, dur, admit).await?;
    // Resolved here rather than inside `due`, so that each send's own policy applies.
    let resolved = dur.d.outbox().recover_ambiguous().await?;
    outbound::resend_by_own_policy(k, dur, &resolved).await;
    for record in dur.d.outbox().due(BATCH).await? {
        // Stopping: leave the rest for the next start (the record in hand was finished).
        if dur.sweeper.stopping() {
            return Ok(());
        }
        outbound::deliver_due(k, dur, record).await;
    }
    purge(k, dur, schedule).await
}

/// Runs passes every `poll` until the bot is gone or stopping.
pub(crate) async fn run(
    kernel: Weak<Kernel>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    admit: Admit,
) {
    let poll = match kernel
        .upgrade()
        .and_then(|k| k.durable.as_ref().map(|d| d.d.config().poll))
    {
        Some(p) => p,
        None => return,
    };
    // The first pass one `poll` after the start: recovery has just queued the replays and
    // the left-over sends on the chats' queues (where a draining stop waits for them); a pass
    // at once would race them for the same sends, and a send it leased first would leave
    // the rest of its chat's to its next pass, after a stop.
    let mut tick = tokio::time::interval_at(Instant::now() + poll, poll);
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
        if let Err(e) = pass(&k, dur, &mut schedule, admit).await {
            k.events.error("durability:sweeper", None, e);
        }
    }
}
