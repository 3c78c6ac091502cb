//! The inbound pipeline: the provider's event stream → access gates → dedupe → persistence →
//! group mode → the chat's FIFO queue → the dispatcher.
//!
//! Calls pass the access and handoff gates, then the `call` hooks, the bot event and the call
//! handlers. Reactions, polls, group changes, presence and receipts run their `before`/`after`
//! event hooks and become bot events. A `Blocked` event ends the chat's flows.
//! [`EventSink::deliver`](crate::provider::EventSink::deliver) returns once the event was
//! accepted (queued, or dropped on purpose), not once it was handled. This module does not
//! route: the dispatcher does.

use std::sync::{Arc, Weak};

use async_trait::async_trait;

use botmesh_durability::leases::InboxLease;

use crate::bot::dispatcher;
use crate::config::GroupMode;
use crate::durable::inbound::{InboundEvent, Journaled, Readmitted};
use crate::durable::{self, StalePolicy};
use crate::events::{BotEvent, DropReason};
use crate::kernel::Kernel;
use crate::kernel::context::{CtxExtras, CtxSource};
use crate::kernel::journals::{Durable, LeaseSlot, RecordWrite};
use crate::kernel::routes::BoxFuture;
use crate::kernel::routes::{HookFlow, Reg, Routes};
use crate::message::{ChatId, Interaction, Message};
use crate::metrics::Counters;
use crate::outbound::persistence;
use crate::provider::{
    Accepted, EventKind, InboundPipeline, ProviderEvent, Rejected, TransportStatus,
};
use crate::telemetry;
use tracing::Instrument;

/// The bot's side of the [`crate::provider::EventSink`]. Holds the kernel weakly, so a
/// provider that outlives the bot does not keep it alive.
pub(crate) struct Pipeline(pub(crate) Weak<Kernel>);

#[async_trait]
impl InboundPipeline for Pipeline {
    async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
        let Some(k) = self.0.upgrade() else {
            return Err(Rejected::NotRunning);
        };
        if !k.is_accepting() {
            return Err(Rejected::NotRunning);
        }
        Counters::inc(&k.counters.received);
        match event {
            ProviderEvent::Message(m) => {
                let span = telemetry::inbound_span(m.chat.as_str(), "message", false);
                admit_message(&k, m).instrument(span).await
            }
            ProviderEvent::Interaction(i) => {
                let span = telemetry::inbound_span(i.chat.as_str(), "interaction", false);
                admit_interaction(&k, i).instrument(span).await
            }
            ProviderEvent::Call(call) => {
                if !k.gates.admits(&call.chat, &call.sender) {
                    drop_event(&k, &call.chat, DropReason::Blocked);
                    return Ok(Accepted::Handled);
                }
                if k.gates.is_handed_off(&call.chat) {
                    drop_event(&k, &call.chat, DropReason::Handoff);
                    return Ok(Accepted::Handled);
                }
                let event = ProviderEvent::Call(call.clone());
                if before_event(&k, &event).await == HookFlow::Continue {
                    k.events.emit(BotEvent::Call(call.clone()));
                    let handlers: Vec<_> = {
                        let r = k.routes.read().unwrap_or_else(|e| e.into_inner());
                        r.calls.iter().map(|r| r.item.clone()).collect()
                    };
                    for h in handlers {
                        if let Err(e) = h(call.clone()).await {
                            Counters::inc(&k.counters.handler_errors);
                            k.events.error("call_handler", Some(&call.chat), e);
                        }
                    }
                    after_event(&k, &event).await;
                }
                Ok(Accepted::Handled)
            }
            ProviderEvent::Blocked { chat } => {
                let event = ProviderEvent::Blocked { chat: chat.clone() };
                Counters::inc(&k.counters.provider_events);
                crate::flow::end_chat(&k, &chat, "blocked").await;
                k.events.emit(BotEvent::Provider {
                    kind: event.kind(),
                    event: Box::new(event),
                });
                Ok(Accepted::Handled)
            }
            other => {
                Counters::inc(&k.counters.provider_events);
                if before_event(&k, &other).await == HookFlow::Continue {
                    if let ProviderEvent::Status(s) = &other {
                        k.events.emit(BotEvent::Status(s.clone()));
                    }
                    k.events.emit(BotEvent::Provider {
                        kind: other.kind(),
                        event: Box::new(other.clone()),
                    });
                    after_event(&k, &other).await;
                }
                Ok(Accepted::Handled)
            }
        }
    }

    fn transport_status(&self, status: TransportStatus) {
        if let Some(k) = self.0.upgrade() {
            k.set_transport_status(status);
        }
    }

    fn end_of_input(&self) {
        if let Some(k) = self.0.upgrade() {
            let _ = k.input_ended.send_replace(true);
        }
    }
}

/// Counts, logs and reports an inbound message dropped for `reason`.
pub(crate) fn drop_event(k: &Kernel, chat: &ChatId, reason: DropReason) {
    let counter = match reason {
        DropReason::Blocked => &k.counters.dropped_blocked,
        DropReason::Duplicate => &k.counters.dropped_duplicate,
        DropReason::Group => &k.counters.dropped_group,
        DropReason::Handoff => &k.counters.dropped_handoff,
        DropReason::Hook => &k.counters.dropped_hook,
        DropReason::Stale => &k.counters.dropped_stale,
    };
    Counters::inc(counter);
    tracing::debug!(chat = %chat, ?reason, "inbound dropped");
    k.events.emit(BotEvent::Dropped {
        chat: chat.clone(),
        reason,
    });
}

/// The hooks of `event`'s kind in the list `list` picks, copied out of the routes' lock.
fn event_hooks<H: Clone>(
    k: &Kernel,
    event: &ProviderEvent,
    list: impl Fn(&Routes) -> &Vec<Reg<(EventKind, H)>>,
) -> Vec<H> {
    let kind = event.kind();
    let routes = k.routes.read().unwrap_or_else(|e| e.into_inner());
    list(&routes)
        .iter()
        .filter(|r| r.item.0 == kind)
        .map(|r| r.item.1.clone())
        .collect()
}

async fn before_event(k: &Kernel, event: &ProviderEvent) -> HookFlow {
    for h in event_hooks(k, event, |r| &r.before_event) {
        if h(event.clone()).await == HookFlow::Stop {
            return HookFlow::Stop;
        }
    }
    HookFlow::Continue
}

async fn after_event(k: &Kernel, event: &ProviderEvent) {
    for h in event_hooks(k, event, |r| &r.after_event) {
        h(event.clone()).await;
    }
}

async fn admit_message(k: &Arc<Kernel>, m: Message) -> Result<Accepted, Rejected> {
    if !k.gates.admits(&m.chat, &m.sender) {
        drop_event(k, &m.chat, DropReason::Blocked);
        return Ok(Accepted::Handled);
    }
    if !k.dedupe.first_sight(&m.chat, m.id.as_str()) {
        drop_event(k, &m.chat, DropReason::Duplicate);
        return Ok(Accepted::Duplicate);
    }
    let record_id = Kernel::inbound_record_id(m.chat.as_str(), m.id.as_str());
    // Shared from here on: by the dispatch's context and by the journal record's payload.
    let m = Arc::new(m);
    if let Some(dur) = k.durable.as_ref() {
        if let Some(slot) = durable::inbound::defer(k, dur, &m, &record_id) {
            return admit_deferred(k, dur, m, slot).await;
        }
    }
    let (lease, recorded) = match journal(k, InboundEvent::Message(&m), &record_id).await {
        Ok(claimed) => claimed,
        Err(JournalOutcome::Duplicate) => {
            drop_event(k, &m.chat, DropReason::Duplicate);
            return Ok(Accepted::Duplicate);
        }
        Err(JournalOutcome::Rejected(r)) => {
            k.dedupe.forget(&m.chat, m.id.as_str());
            return Err(r);
        }
    };
    let slot = lease.map(LeaseSlot::new);
    Ok(process_message(k, m, slot, CtxExtras::default(), recorded).await)
}

/// Admits a message whose record is not written yet (see [`durable::inbound::defer`]): its
/// dispatch starts, and the message is accepted once the record is written (by the first flow
/// step of the dispatch, in the step's transaction, or alone). A duplicate found then is
/// dropped; a record that could not be written is refused, as when journaling fails.
async fn admit_deferred(
    k: &Arc<Kernel>,
    dur: &Durable,
    m: Arc<Message>,
    slot: Arc<LeaseSlot>,
) -> Result<Accepted, Rejected> {
    let chat = m.chat.clone();
    let id = m.id.clone();
    let accepted = process_message(k, m, Some(Arc::clone(&slot)), CtxExtras::default(), true).await;
    match durable::inbound::admitted(k, dur, &slot)
        .instrument(telemetry::persist_span(chat.as_str()))
        .await
    {
        RecordWrite::Written => Ok(accepted),
        RecordWrite::Duplicate => {
            drop_event(k, &chat, DropReason::Duplicate);
            Ok(Accepted::Duplicate)
        }
        RecordWrite::Unavailable(reason) => {
            k.events
                .error("durability:inbox.journal", Some(&chat), &reason);
            k.dedupe.forget(&chat, id.as_str());
            Err(Rejected::JournalUnavailable {
                id: slot.lease.id.clone(),
                reason,
            })
        }
    }
}

enum JournalOutcome {
    Duplicate,
    Rejected(Rejected),
}

/// Journals an admitted event when durability is on; `Ok((None, false))` without durability
/// (or with `fail_open` when the journal is unavailable). The flag: the message's ledger row,
/// chat and contact were written with its journal record.
async fn journal(
    k: &Arc<Kernel>,
    event: InboundEvent<'_>,
    record_id: &str,
) -> Result<(Option<InboxLease>, bool), JournalOutcome> {
    let Some(dur) = k.durable.as_ref() else {
        return Ok((None, false));
    };
    let persisted = durable::inbound::journal(k, dur, event, record_id)
        .instrument(telemetry::persist_span(event.chat().as_str()))
        .await;
    match persisted {
        Journaled::Claimed { lease, recorded } => Ok((Some(lease), recorded)),
        Journaled::Duplicate => Err(JournalOutcome::Duplicate),
        Journaled::Unavailable(reason) => {
            k.events
                .error("durability:inbox.journal", Some(event.chat()), &reason);
            if dur.d.config().fail_open {
                tracing::warn!(id = %record_id, "journal unavailable: dispatching without it (fail_open)");
                Ok((None, false))
            } else {
                Err(JournalOutcome::Rejected(Rejected::JournalUnavailable {
                    id: record_id.to_owned(),
                    reason,
                }))
            }
        }
    }
}

/// Admits a record the durable layer replayed (its `Admit`): without gates or journaling.
pub(crate) fn readmit(k: Arc<Kernel>, readmitted: Readmitted) -> BoxFuture<()> {
    Box::pin(async move {
        match readmitted {
            Readmitted::Message {
                message,
                lease,
                extras,
                recorded,
            } => {
                let span = telemetry::inbound_span(message.chat.as_str(), "message", true);
                process_message(&k, message, Some(LeaseSlot::new(lease)), extras, recorded)
                    .instrument(span)
                    .await;
            }
            Readmitted::Interaction {
                interaction,
                lease,
                extras,
            } => {
                let span = telemetry::inbound_span(interaction.chat.as_str(), "interaction", true);
                process_interaction(&k, interaction, Some(LeaseSlot::new(lease)), extras)
                    .instrument(span)
                    .await;
            }
        }
    })
}

/// What follows admission (live or replayed): persistence, `inbox.max_age`, group mode, then
/// the chat's queue. A leased record is completed here when the message goes no further.
/// `recorded`: the message's ledger row, chat and contact were written with its journal
/// record, and are not written again.
pub(crate) async fn process_message(
    k: &Arc<Kernel>,
    m: Arc<Message>,
    lease: Option<Arc<LeaseSlot>>,
    mut extras: CtxExtras,
    recorded: bool,
) -> Accepted {
    let stored = if recorded {
        Ok(())
    } else {
        persistence::record_inbound(k, &m)
            .instrument(telemetry::persist_span(m.chat.as_str()))
            .await
    };
    if let Err(e) = stored {
        k.events.error("persistence:inbound", Some(&m.chat), &e);
        if let Some(lease) = &lease {
            // Before the handlers: retried with the inbox backoff, dead-lettered at the end.
            durable::inbound::fail_before_handlers(k, lease, &e.to_string()).await;
            return Accepted::Queued;
        }
    }
    if let Some(max) = k.durable.as_ref().and_then(|d| d.max_age) {
        // Measured at admission: a message the bot accepted fresh stays fresh when it is
        // replayed after downtime (the channel already has its acknowledgement).
        let admitted = extras.admitted_ms.unwrap_or_else(|| k.clock.now_ms());
        let age = admitted.saturating_sub(m.timestamp_ms);
        if age > i64::try_from(max.age.as_millis()).unwrap_or(i64::MAX) {
            match max.policy {
                StalePolicy::Skip => {
                    drop_event(k, &m.chat, DropReason::Stale);
                    if let Some(lease) = &lease {
                        durable::inbound::complete(k, lease).await;
                    }
                    return Accepted::Handled;
                }
                StalePolicy::MarkStale => extras.stale = true,
            }
        }
    }
    if m.is_group {
        let is_command =
            crate::kernel::context::parse_command(m.text_content(), &k.config.command_prefixes)
                .is_some();
        let admitted = match k.config.group_mode {
            GroupMode::All => true,
            GroupMode::MentionsOrCommands => m.mentions_bot || is_command,
            GroupMode::Ignore => false,
        };
        if !admitted {
            drop_event(k, &m.chat, DropReason::Group);
            if let Some(lease) = &lease {
                durable::inbound::complete(k, lease).await;
            }
            return Accepted::Handled;
        }
    }
    let inbound_id = Kernel::inbound_record_id(m.chat.as_str(), m.id.as_str());
    let chat = m.chat.clone();
    queue_dispatch(k, chat, inbound_id, CtxSource::Message(m), lease, extras)
}

async fn admit_interaction(k: &Arc<Kernel>, i: Interaction) -> Result<Accepted, Rejected> {
    if !k.gates.admits(&i.chat, &i.sender) {
        drop_event(k, &i.chat, DropReason::Blocked);
        return Ok(Accepted::Handled);
    }
    let dedupe_id = i.dedupe_id();
    if !k.dedupe.first_sight(&i.chat, &dedupe_id) {
        drop_event(k, &i.chat, DropReason::Duplicate);
        return Ok(Accepted::Duplicate);
    }
    let record_id = Kernel::inbound_record_id(i.chat.as_str(), &dedupe_id);
    let event = ProviderEvent::Interaction(i);
    let lease = match journal(k, InboundEvent::Other(&event), &record_id).await {
        // Interactions have no ledger row: never recorded with their journal record.
        Ok((lease, _)) => lease,
        Err(JournalOutcome::Duplicate) => {
            drop_event(k, event.chat(), DropReason::Duplicate);
            return Ok(Accepted::Duplicate);
        }
        Err(JournalOutcome::Rejected(r)) => {
            k.dedupe.forget(event.chat(), &dedupe_id);
            return Err(r);
        }
    };
    let ProviderEvent::Interaction(i) = event else {
        return Ok(Accepted::Handled);
    };
    Ok(process_interaction(k, i, lease.map(LeaseSlot::new), CtxExtras::default()).await)
}

/// What follows the admission of an interaction (live or replayed): the chat's queue.
pub(crate) async fn process_interaction(
    k: &Arc<Kernel>,
    i: Interaction,
    lease: Option<Arc<LeaseSlot>>,
    extras: CtxExtras,
) -> Accepted {
    let inbound_id = Kernel::inbound_record_id(i.chat.as_str(), &i.dedupe_id());
    let chat = i.chat.clone();
    queue_dispatch(
        k,
        chat,
        inbound_id,
        CtxSource::Interaction(i),
        lease,
        extras,
    )
}

/// Queues the dispatch of an admitted message or interaction (`source`) in `chat`'s queue:
/// the job builds its context when it starts, dispatches it in the chat's turn, and holds the
/// inbox `lease` (renewed while it runs) until the dispatch ends. An interaction's
/// acknowledgement deadline is armed before the dispatch.
fn queue_dispatch(
    k: &Arc<Kernel>,
    chat: ChatId,
    inbound_id: String,
    source: CtxSource,
    lease: Option<Arc<LeaseSlot>>,
    mut extras: CtxExtras,
) -> Accepted {
    let is_interaction = matches!(source, CtxSource::Interaction(_));
    let ticket = k.ticket(extras.admitted_ms);
    // A child of the event's `bot.inbound`, though it runs later, in the chat's queue.
    let span = telemetry::dispatch_span(&tracing::Span::current(), chat.as_str());
    queue_job(k, &chat.clone(), lease, move |waiting| {
        Box::pin(async move {
            let (Some(kernel), slot) = waiting.start() else {
                return;
            };
            extras.lease = slot.clone();
            let work = async {
                let ctx = crate::kernel::context::make_ctx_with(
                    &kernel,
                    source,
                    Some(inbound_id),
                    extras,
                );
                if is_interaction {
                    crate::outbound::interaction_ack::arm_deadline(&ctx);
                }
                dispatcher::dispatch(ctx.clone()).await;
                ctx.journal_failed()
            }
            .instrument(span);
            let work = crate::bot::turns::in_turn(&kernel, &chat, ticket, work);
            // Pinned here, in the job's own future: `run_leased` holds a reference to it,
            // so the dispatch is neither copied into it nor boxed.
            let work = std::pin::pin!(work);
            match slot {
                Some(slot) => durable::inbound::run_leased(&kernel, slot, work).await,
                None => {
                    work.await;
                }
            }
        })
    });
    Accepted::Queued
}

/// Queues the job `make` builds in `chat`'s queue, holding its `lease` (see
/// [`durable::waiting`]): the lease is renewed while the job waits behind the chat's earlier
/// work, and given back if the job is dropped unstarted.
fn queue_job(
    k: &Arc<Kernel>,
    chat: &ChatId,
    slot: Option<Arc<LeaseSlot>>,
    make: impl FnOnce(crate::kernel::waiting::Waiting) -> crate::kernel::routes::BoxFuture<()>,
) {
    let register = slot.clone();
    let job = make(crate::kernel::waiting::Waiting::new(k.clone(), slot));
    k.queues.push_behind(chat, job, || {
        if let (Some(slot), Some(dur)) = (&register, k.durable.as_ref()) {
            slot.queued_behind();
            dur.waiting.register(slot);
        }
    });
}
