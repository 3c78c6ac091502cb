//! The durable inbox in the inbound pipeline: journal before dispatch, complete after the work
//! settled, heartbeat while it runs, and replay what was left unfinished.
//!
//! `journal` records an admitted event (as JSON text, a `Payload`) and leases it to this
//! process in one step (`journal_and_lease`): a redelivery of a recorded event is a duplicate. When
//! the store shares its transactions with the journal (SQLite and Postgres, store and journal
//! in one database), a message is journaled with its ledger row, chat and contact in that one
//! transaction, and the pipeline does not record it again. There, a live message's record is
//! usually not written before its dispatch starts ([`defer`]): it is leased in memory, and the
//! dispatch's first flow step writes it in the step's own transaction (or alone right before
//! the step runs an effect: [`recorded`]; or the dispatch writes it when it ends, or the
//! admission alone after [`STEP_WRITE_WINDOW`]); the admission answers the channel once it is
//! written ([`admitted`]).
//! `run_leased` runs a dispatch under the lease (heartbeat every third of `inbox.lease`, beside
//! the dispatch in the same task; a beat that fails on the backend is tried again at the next
//! one) and completes the record whatever the handler returned (a handler that errors is not
//! retried: its side effects ran). Before that, while the job waits in its chat's queue, the
//! lease is kept by [`waiting`](super::waiting).
//! `replay` turns a claimed record back into an event: decode, rehydrate media, and hand it to
//! the same admission as a live event minus gates, dedupe and journaling. An undecodable
//! record is dead-lettered with an error event, never dropped silently.

use std::future::Future;
use std::sync::Arc;

use std::time::Duration;

use botmesh_durability::StepCommitted;
use botmesh_durability::inbox::InboundRecord;
use botmesh_durability::inbox::NewInbound;
use botmesh_durability::inbox::{InboxJournalLease, Payload};
use botmesh_durability::leases::InboxLease;
use botmesh_durability::store::{CheckpointWrite, StepCommit};

use crate::durable::media;
use crate::kernel::Kernel;
use crate::kernel::context::{Ctx, CtxExtras};
use crate::kernel::journals::{
    Durable, LeaseSlot, RecordWrite, Unwritten, atomic, beats, with_heartbeat,
};
use crate::kernel::routes::BoxFuture;
use crate::message::{ChatId, Interaction, Message};
use crate::outbound::persistence::{self, InboundRows};
use crate::provider::ProviderEvent;

/// An admitted event, as the inbox journals it.
#[derive(Clone, Copy)]
pub(crate) enum InboundEvent<'a> {
    /// A message, shared with its dispatch.
    Message(&'a Arc<Message>),
    /// Any other event (an interaction), copied into the payload.
    Other(&'a ProviderEvent),
}

impl<'a> InboundEvent<'a> {
    pub(crate) fn chat(self) -> &'a ChatId {
        match self {
            InboundEvent::Message(m) => &m.chat,
            InboundEvent::Other(e) => e.chat(),
        }
    }
}

/// A message serialized as `ProviderEvent::Message` is (the payload of its journal record,
/// which a replay decodes as a `ProviderEvent`), from the `Message` its dispatch shares.
#[derive(serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum MessageEventRef<'a> {
    Message(&'a Message),
}

/// The outcome of journaling an inbound event.
pub(crate) enum Journaled {
    /// Recorded and leased: dispatch it under the lease. `recorded`: its ledger row, chat and
    /// contact were written in the same transaction (the store shares it with the journal),
    /// so the pipeline does not record the message again.
    Claimed { lease: InboxLease, recorded: bool },
    /// Recorded before: a redelivery.
    Duplicate,
    /// The journal could not record it.
    Unavailable(String),
}

pub(crate) async fn journal(
    k: &Kernel,
    dur: &Durable,
    event: InboundEvent<'_>,
    record_id: &str,
) -> Journaled {
    let new = match new_inbound(k, event, record_id) {
        Ok(new) => new,
        Err(reason) => return Journaled::Unavailable(reason),
    };
    if let InboundEvent::Message(m) = event {
        if atomic(k) {
            if let Some(rows) = persistence::inbound_rows(k, m) {
                return journal_with_rows(k, dur, new, rows).await;
            }
        }
    }
    match dur.d.inbox().journal_and_lease(new).await {
        Ok(InboxJournalLease::Leased(lease)) => Journaled::Claimed {
            lease,
            recorded: false,
        },
        Ok(InboxJournalLease::Duplicate) => Journaled::Duplicate,
        Err(e) => Journaled::Unavailable(e.to_string()),
    }
}

/// The journal record of an admitted event: its payload (the event as JSON) and, for a
/// message, a serializable reference to its media. `Err`: the event does not encode.
fn new_inbound(k: &Kernel, event: InboundEvent<'_>, record_id: &str) -> Result<NewInbound, String> {
    let payload = match event {
        InboundEvent::Message(m) => Payload::encode(&MessageEventRef::Message(m)),
        InboundEvent::Other(e) => Payload::encode(e),
    }
    .map_err(|e| format!("event not encodable: {e}"))?;
    let mut new = NewInbound {
        id: record_id.to_owned(),
        chat: event.chat().0.clone(),
        payload,
        media_ref: None,
    };
    if let InboundEvent::Message(m) = event {
        if let Some(r) = media::serialize_for_journal(k, m) {
            new = new.with_media_ref(r);
        }
    }
    Ok(new)
}

/// How many times journaling retries after a conflict it resolved (a record purged between
/// the conflict and the read of it).
const MAX_JOURNAL_TRIES: usize = 8;

/// How long a live message's record waits for the first flow step of its dispatch to write it
/// in the step's own transaction, before its admission writes it alone.
pub(crate) const STEP_WRITE_WINDOW: Duration = Duration::from_millis(50);

/// A live message's record, leased in memory and not written, when its dispatch may write it
/// in the transaction of its first flow step (one write for both, and one commit less before
/// the reply): the store shares the journals' transactions, the bot runs as one replica, and
/// `fail_open` is off. `None` (journal it now) otherwise.
///
/// Nothing is read first: a redelivery of a message an earlier run took is found when its
/// record is written, by the transaction of a flow step that writes it (which rolls back),
/// or before the dispatch does anything a redelivery must not do again ([`acting`]).
///
/// The channel's acknowledgement still waits for the record (see [`admitted`]): until it is
/// written, a crash loses nothing the channel does not deliver again.
pub(crate) fn defer(
    k: &Kernel,
    dur: &Durable,
    m: &Arc<Message>,
    record_id: &str,
) -> Option<Arc<LeaseSlot>> {
    if !atomic(k) || k.coordination.is_some() || dur.d.config().fail_open {
        return None;
    }
    // An event that does not encode is journaled now, which reports it.
    let new = new_inbound(k, InboundEvent::Message(m), record_id).ok()?;
    let rows = persistence::inbound_rows(k, m);
    let (ledger, chat, contact) = match rows {
        Some(r) => (Some(r.entry), Some(r.chat), Some(r.contact)),
        None => (None, None, None),
    };
    Some(LeaseSlot::unwritten(Unwritten {
        leased: dur.d.lease_inbound(new, ledger.is_some()),
        ledger,
        chat,
        contact,
    }))
}

/// Makes sure the context's message is not a redelivery of one an earlier run took, before the
/// dispatch does what a redelivery must not do again: run a handler or a hook of the bot's
/// author, run a flow's effect, end a flow the message replaces. A record not written yet is
/// looked up once (a flow step that only computes and sends needs no lookup: its transaction
/// writes the record and rolls back with it). Whether the dispatch may go on: `false` when the
/// message is a duplicate (which its admission drops) or its record could not be written (the
/// admission refuses the message, which the channel delivers again).
pub(crate) async fn acting(ctx: &Ctx) -> bool {
    let (slot, dur) = match unsettled(ctx) {
        Ok(unsettled) => unsettled,
        Err(go_on) => return go_on,
    };
    match dur.d.inbox().get(&slot.lease.id).await {
        Ok(None) => {
            slot.checked();
            true
        }
        // Found (a redelivery) or unreadable: written now, which tells which.
        Ok(Some(_)) | Err(_) => {
            write_unwritten(&ctx.0.bot.kernel, dur, slot, false).await == RecordWrite::Written
        }
    }
}

/// As [`acting`], for a flow step about to run an effect (`cx.effect`): a record not written
/// yet is written now rather than looked up. The write answers the same question (a
/// redelivery is found as a duplicate), and the step's own commit, which would otherwise
/// write the record, is further away than one write (the effect runs, then its result is
/// recorded): written now, the record lets the message's admission answer the channel (and a
/// poller fetch the next batch) while the effect runs.
pub(crate) async fn recorded(ctx: &Ctx) -> bool {
    let (slot, dur) = match unsettled(ctx) {
        Ok(unsettled) => unsettled,
        Err(go_on) => return go_on,
    };
    write_unwritten(&ctx.0.bot.kernel, dur, slot, false).await == RecordWrite::Written
}

/// The slot of the context's message (and the journals) while its record is neither written
/// nor cleared by a lookup; else `Err` with whether the dispatch goes on.
fn unsettled(ctx: &Ctx) -> Result<(&LeaseSlot, &Durable), bool> {
    let (Some(slot), Some(dur)) = (ctx.0.lease.as_deref(), ctx.0.bot.kernel.durable.as_ref())
    else {
        return Err(true);
    };
    match slot.write_outcome() {
        Some(outcome) => Err(outcome == RecordWrite::Written),
        None if slot.is_checked() => Err(true),
        None => Ok((slot, dur)),
    }
}

/// At the end of a message's routing, before the `after` hooks and the `message` event: a
/// record no step wrote and no lookup cleared is written now when nothing runs after (`last`;
/// completed unless the journal failed under the dispatch: the write the end of the dispatch
/// would make), else looked up ([`acting`]). A redelivery runs no hook and emits no event.
pub(crate) async fn routed(ctx: &Ctx, last: bool) -> bool {
    let (slot, dur) = match unsettled(ctx) {
        Ok(unsettled) => unsettled,
        Err(go_on) => return go_on,
    };
    if !last {
        return acting(ctx).await;
    }
    let done = !ctx.journal_failed();
    write_unwritten(&ctx.0.bot.kernel, dur, slot, done).await == RecordWrite::Written
}

/// The admission's wait for a record it deferred: the first flow step of the dispatch writes
/// it, or the dispatch ends and writes it (completed), within [`STEP_WRITE_WINDOW`]; past
/// that, or at once when the job went behind other work of its chat, the admission writes it
/// alone.
pub(crate) async fn admitted(k: &Kernel, dur: &Durable, slot: &LeaseSlot) -> RecordWrite {
    if !slot.is_behind() {
        tokio::select! {
            outcome = slot.wait_written() => return outcome,
            () = tokio::time::sleep(STEP_WRITE_WINDOW) => {}
        }
    }
    write_unwritten(k, dur, slot, false).await
}

/// Writes a slot's record alone (completed when `done`), unless it was written or taken to be
/// written: then how that went, once it is known. A record already written answers at once.
pub(crate) async fn write_unwritten(
    k: &Kernel,
    dur: &Durable,
    slot: &LeaseSlot,
    done: bool,
) -> RecordWrite {
    let Some(record) = slot.take_unwritten() else {
        return slot.wait_written().await;
    };
    let mut journal = dur.d.step();
    let mut step = StepCommit::new(dur.d.scope().clone(), CheckpointWrite::Keep);
    let outcome = match record.add_to(&mut journal, &mut step, done) {
        Err(e) => RecordWrite::Unavailable(e.to_string()),
        Ok(()) => match journal
            .commit(&*k.store, &mut step, MAX_JOURNAL_TRIES)
            .await
        {
            Ok(StepCommitted::Written(_)) => RecordWrite::Written,
            Ok(StepCommitted::InboundDuplicate(_)) => RecordWrite::Duplicate,
            Err(e) => RecordWrite::Unavailable(format!("inbound {}: {e}", slot.lease.id)),
        },
    };
    if done && outcome == RecordWrite::Written {
        slot.settle();
    }
    slot.written(outcome.clone());
    outcome
}

/// Journals `new` with its ledger row, chat and contact in one transaction of the store (one
/// write instead of two): what `journal_and_claim` and `record_inbound` write, all or none.
async fn journal_with_rows(
    k: &Kernel,
    dur: &Durable,
    new: NewInbound,
    rows: InboundRows,
) -> Journaled {
    journal_in_step(k, dur, new, |step| {
        step.ledger = vec![rows.entry];
        step.chat = Some(rows.chat);
        step.contact = Some(rows.contact);
    })
    .await
}

/// Journals `new`, leased to this process, in one transaction of the store with what `with`
/// adds to the step (the store shares the journal's transactions). The record says its
/// message is recorded: its rows are in that transaction, or were written before.
async fn journal_in_step(
    k: &Kernel,
    dur: &Durable,
    new: NewInbound,
    with: impl FnOnce(&mut StepCommit),
) -> Journaled {
    let id = new.id.clone();
    let mut journal = dur.d.step();
    let lease = match journal.journal_inbound(new) {
        Ok(lease) => lease,
        Err(e) => return Journaled::Unavailable(e.to_string()),
    };
    let mut step = StepCommit::new(dur.d.scope().clone(), CheckpointWrite::Keep);
    with(&mut step);
    match journal
        .commit(&*k.store, &mut step, MAX_JOURNAL_TRIES)
        .await
    {
        Ok(StepCommitted::Written(_)) => Journaled::Claimed {
            lease,
            recorded: true,
        },
        Ok(StepCommitted::InboundDuplicate(_)) => Journaled::Duplicate,
        Err(e) => Journaled::Unavailable(format!("inbound {id}: {e}")),
    }
}

/// Journals an event another replica forwarded to this one (see `flow::forward`) as this
/// replica's, leased to it, and takes it off the forward queue (`queued`: its scope and key).
/// Where the store shares the journal's transactions, both are one transaction; otherwise
/// the record is written first and the entry removed after (a crash between leaves the entry,
/// which the next drain finds journaled: a duplicate, removed then). The record id is the
/// event's own with `@forwarded`, so a message forwarded twice (the receiving replica
/// replayed it) is journaled once. Its ledger row was written by the replica that received
/// it: the message is not recorded again (on a replay either, where the record is written in
/// the store's transaction).
pub(crate) async fn journal_forwarded(
    k: &Kernel,
    dur: &Durable,
    event: &ProviderEvent,
    queued: (String, String),
) -> Journaled {
    let chat = event.chat();
    let received_id = match event {
        ProviderEvent::Message(m) => m.id.as_str().to_owned(),
        ProviderEvent::Interaction(i) => i.dedupe_id(),
        _ => return Journaled::Unavailable("only messages and interactions are forwarded".into()),
    };
    let id = format!(
        "{}@forwarded",
        Kernel::inbound_record_id(chat.as_str(), &received_id)
    );
    let payload = match Payload::encode(event) {
        Ok(p) => p,
        Err(e) => return Journaled::Unavailable(format!("event not encodable: {e}")),
    };
    let new = NewInbound {
        id,
        chat: chat.0.clone(),
        payload,
        media_ref: None,
    };
    if !atomic(k) {
        let journaled = match dur.d.inbox().journal_and_lease(new).await {
            Ok(InboxJournalLease::Leased(lease)) => Journaled::Claimed {
                lease,
                recorded: true,
            },
            Ok(InboxJournalLease::Duplicate) => Journaled::Duplicate,
            Err(e) => return Journaled::Unavailable(e.to_string()),
        };
        if let Err(e) = k.store.delete_value(&queued.0, &queued.1).await {
            k.events.error("flow:forward", Some(chat), e);
        }
        return journaled;
    }
    journal_in_step(k, dur, new, |step| step.delete_values = vec![queued]).await
}

/// Runs `work` under the inbox lease (heartbeats while it runs), then settles the record:
/// completed, or, when `work` reports that the journal failed under it (a send could not be
/// journaled), charged as a retryable failure so the sweeper replays the message (its sends
/// already made are answered from the outbox). A settle write that fails is retried a few
/// times; past that, the lease expires and the record is replayed.
pub(crate) async fn run_leased<F: Future<Output = bool>>(
    k: &Arc<Kernel>,
    slot: Arc<LeaseSlot>,
    work: F,
) {
    let lease = &slot.lease;
    let Some(dur) = k.durable.as_ref() else {
        work.await;
        return;
    };
    let every = (dur.d.config().inbox.lease / 3).max(Duration::from_millis(10));
    let beats = beats(
        ("inbox", &lease.id),
        every,
        lease,
        || slot.is_settled(),
        |l| {
            // A record not written yet has nothing to renew: its lease starts when it is.
            let written = slot.is_written();
            async move {
                if written {
                    dur.d.inbox().heartbeat(&l).await
                } else {
                    Ok(l)
                }
            }
        },
    );
    let journal_failed = with_heartbeat(work, beats).await;
    // A record no flow step wrote is written now, completed unless the journal failed under
    // the dispatch; one found a duplicate or not accepted is not this dispatch's to settle.
    match write_unwritten(k, dur, &slot, !journal_failed).await {
        RecordWrite::Written => {}
        RecordWrite::Duplicate | RecordWrite::Unavailable(_) => return,
    }
    if slot.is_settled() {
        // A flow step completed the record in the transaction of its checkpoint (or the
        // record was written completed just now).
        return;
    }
    // The heartbeat may have renewed the lease; `complete` and `fail` check the fencing token,
    // which a heartbeat does not change. A write that failed because the backend went away is
    // retried.
    Box::pin(settle_retrying(k, dur, lease, journal_failed)).await;
}

/// Settles a leased record through the backend's futures: completed, or charged as a
/// retryable failure when `journal_failed`. A settle write that fails because the backend
/// went away is retried (the chat's queue waits, so its order holds) for up to half the
/// lease; past that the lease expires and the record is replayed.
async fn settle_retrying(k: &Kernel, dur: &Durable, lease: &InboxLease, journal_failed: bool) {
    let give_up = tokio::time::Instant::now() + dur.d.config().inbox.lease / 2;
    let mut wait = Duration::from_millis(100);
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let result = if journal_failed {
            dur.d
                .inbox()
                .fail(
                    lease,
                    "the journal was unavailable while the handler ran",
                    true,
                )
                .await
                .map(|_| ())
        } else {
            dur.d.inbox().complete(lease).await.map(|_| ())
        };
        match result {
            Ok(()) => return,
            // A backend that went away may come back (a restart, a failover); one that is
            // closed or crashed (the crash harness) will not.
            Err(e)
                if crate::outbound::outbox::backend_unavailable(&e)
                    && tokio::time::Instant::now() + wait < give_up =>
            {
                tracing::warn!(id = %lease.id, error = %e, attempt, "settling the inbound record failed: retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                k.events.error("durability:inbox.settle", None, e);
                return;
            }
        }
    }
}

/// Marks a leased record done without dispatching it (a group message ignored, a stale one):
/// a record not written yet is written completed.
pub(crate) async fn complete(k: &Kernel, slot: &LeaseSlot) {
    if let Some(dur) = k.durable.as_ref() {
        if write_unwritten(k, dur, slot, true).await != RecordWrite::Written || slot.is_settled() {
            return;
        }
        if let Err(e) = dur.d.inbox().complete(&slot.lease).await {
            k.events.error("durability:inbox.complete", None, e);
        }
    }
}

/// Charges a failed attempt that happened before the handlers ran (the store was down):
/// retried with `inbox.backoff`, dead-lettered after `inbox.max_attempts`.
pub(crate) async fn fail_before_handlers(k: &Kernel, slot: &LeaseSlot, error: &str) {
    if let Some(dur) = k.durable.as_ref() {
        if write_unwritten(k, dur, slot, false).await != RecordWrite::Written {
            return;
        }
        if let Err(e) = dur.d.inbox().fail(&slot.lease, error, true).await {
            k.events.error("durability:inbox.fail", None, e);
        }
    }
}

/// A replayed record, decoded and its media rehydrated, for the inbound path to admit.
pub(crate) enum Readmitted {
    /// A message; `recorded` when its ledger row, chat and contact were written with its
    /// journal record.
    Message {
        message: Arc<Message>,
        lease: InboxLease,
        extras: CtxExtras,
        recorded: bool,
    },
    /// An interaction.
    Interaction {
        interaction: Interaction,
        lease: InboxLease,
        extras: CtxExtras,
    },
}

/// How a replayed record is admitted: the bot's inbound path (`bot::inbound::readmit`), given
/// to this layer (which journals and replays, and does not dispatch) by the layer above.
pub(crate) type Admit = fn(Arc<Kernel>, Readmitted) -> BoxFuture<()>;

/// Replays a claimed record: decode, rehydrate media, admit without gates or journaling.
pub(crate) async fn replay(
    k: &Arc<Kernel>,
    record: InboundRecord,
    lease: InboxLease,
    admit: Admit,
) {
    let mut event: ProviderEvent = match record.payload.decode() {
        Ok(e) => e,
        Err(e) => {
            let error = format!(
                "inbound record {} does not decode as an event: {e}",
                record.id
            );
            tracing::error!(id = %record.id, %error, "undecodable inbound record: dead-lettered");
            if let Some(dur) = k.durable.as_ref() {
                if let Err(e) = dur.d.inbox().fail(&lease, &error, false).await {
                    k.events.error("durability:inbox.fail", None, e);
                }
            }
            k.events.error("durability:replay", None, error);
            return;
        }
    };
    let media_issue = media::rehydrate(k, record.media_ref.as_ref(), &mut event);
    let extras = CtxExtras {
        replay: true,
        media_issue,
        stale: false,
        lease: None,
        admitted_ms: Some(record.created_ms),
    };
    match event {
        ProviderEvent::Message(m) => {
            k.dedupe.first_sight(&m.chat, m.id.as_str());
            // A message journaled with its ledger row, chat and contact (a store sharing the
            // journal's transactions) is not recorded again; one journaled alone (another
            // backend then, the ledger off then, an older version) is.
            let recorded = record.rows_recorded;
            let readmitted = Readmitted::Message {
                message: Arc::new(m),
                lease,
                extras,
                recorded,
            };
            admit(Arc::clone(k), readmitted).await;
        }
        ProviderEvent::Interaction(i) => {
            k.dedupe.first_sight(&i.chat, &i.dedupe_id());
            let readmitted = Readmitted::Interaction {
                interaction: i,
                lease,
                extras,
            };
            admit(Arc::clone(k), readmitted).await;
        }
        other => {
            tracing::warn!(kind = ?other.kind(), id = %record.id, "journaled event of a kind that is not replayed");
            complete(k, &LeaseSlot::new(lease)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use botmesh_durability::inbox::Payload;

    use super::MessageEventRef;
    use crate::message::{Message, MessageId};
    use crate::provider::ProviderEvent;

    /// A message journaled from the `Message` its dispatch shares encodes as the
    /// `ProviderEvent` a replay decodes.
    #[test]
    fn a_shared_message_encodes_as_its_provider_event() {
        let mut plain = Message::text("m1", "alice", "hello \"there\"");
        plain.timestamp_ms = 1_764_720_065_123;
        let mut full = plain.clone();
        full.sender_name = Some("Alice".to_owned());
        full.is_group = true;
        full.mentions_bot = true;
        full.reply_to = Some(MessageId("m0".to_owned()));
        full.lang_hint = Some("pt-BR".to_owned());
        for m in [plain, full] {
            let want = serde_json::to_string(&ProviderEvent::Message(m.clone())).unwrap();
            let encoded = Payload::encode(&MessageEventRef::Message(&m)).unwrap();
            assert_eq!(encoded.as_json(), want);
            let replayed: ProviderEvent = encoded.decode().unwrap();
            assert_eq!(replayed, ProviderEvent::Message(m));
        }
    }
}
