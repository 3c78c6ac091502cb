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

use crate::bot::context::{Ctx, CtxSource};
use crate::bot::kernel::Kernel;
use crate::bot::routes::HookFlow;
use crate::bot::{Bot, dispatcher, lang, persistence};
use crate::config::GroupMode;
use crate::events::{BotEvent, DropReason};
use crate::message::{ChatId, Interaction, Message};
use crate::metrics::Counters;
use crate::provider::{Accepted, InboundPipeline, ProviderEvent, Rejected, TransportStatus};

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
            ProviderEvent::Message(m) => Ok(admit_message(&k, m).await),
            ProviderEvent::Interaction(i) => Ok(admit_interaction(&k, i).await),
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
            let _ = k.input_ended.send(true);
        }
    }
}

fn drop_event(k: &Kernel, chat: &ChatId, reason: DropReason) {
    let counter = match reason {
        DropReason::Blocked => &k.counters.dropped_blocked,
        DropReason::Duplicate => &k.counters.dropped_duplicate,
        DropReason::Group => &k.counters.dropped_group,
        DropReason::Handoff => &k.counters.dropped_handoff,
        DropReason::Hook | DropReason::Stale => &k.counters.dropped_hook,
    };
    Counters::inc(counter);
    tracing::debug!(chat = %chat, ?reason, "inbound dropped");
    k.events.emit(BotEvent::Dropped {
        chat: chat.clone(),
        reason,
    });
}

async fn before_event(k: &Kernel, event: &ProviderEvent) -> HookFlow {
    let kind = event.kind();
    let hooks: Vec<_> = {
        let r = k.routes.read().unwrap_or_else(|e| e.into_inner());
        r.before_event
            .iter()
            .filter(|r| r.item.0 == kind)
            .map(|r| r.item.1.clone())
            .collect()
    };
    for h in hooks {
        if h(event.clone()).await == HookFlow::Stop {
            return HookFlow::Stop;
        }
    }
    HookFlow::Continue
}

async fn after_event(k: &Kernel, event: &ProviderEvent) {
    let kind = event.kind();
    let hooks: Vec<_> = {
        let r = k.routes.read().unwrap_or_else(|e| e.into_inner());
        r.after_event
            .iter()
            .filter(|r| r.item.0 == kind)
            .map(|r| r.item.1.clone())
            .collect()
    };
    for h in hooks {
        h(event.clone()).await;
    }
}

async fn admit_message(k: &Arc<Kernel>, m: Message) -> Accepted {
    if !k.gates.admits(&m.chat, &m.sender) {
        drop_event(k, &m.chat, DropReason::Blocked);
        return Accepted::Handled;
    }
    if !k.dedupe.first_sight(&m.chat, m.id.as_str()) {
        drop_event(k, &m.chat, DropReason::Duplicate);
        return Accepted::Duplicate;
    }
    if let Err(e) = persistence::record_inbound(k, &m).await {
        k.events.error("persistence:inbound", Some(&m.chat), e);
    }
    if m.is_group {
        let is_command =
            crate::bot::context::parse_command(m.text_content(), &k.config.command_prefixes)
                .is_some();
        let admitted = match k.config.group_mode {
            GroupMode::All => true,
            GroupMode::MentionsOrCommands => m.mentions_bot || is_command,
            GroupMode::Ignore => false,
        };
        if !admitted {
            drop_event(k, &m.chat, DropReason::Group);
            return Accepted::Handled;
        }
    }
    let inbound_id = Kernel::inbound_record_id(m.chat.as_str(), m.id.as_str());
    let chat = m.chat.clone();
    let kernel = k.clone();
    k.queues.push(
        &chat,
        Box::pin(async move {
            let ctx = make_ctx(&kernel, CtxSource::Message(m), Some(inbound_id)).await;
            dispatcher::dispatch(ctx).await;
        }),
    );
    Accepted::Queued
}

async fn admit_interaction(k: &Arc<Kernel>, i: Interaction) -> Accepted {
    if !k.gates.admits(&i.chat, &i.sender) {
        drop_event(k, &i.chat, DropReason::Blocked);
        return Accepted::Handled;
    }
    let dedupe_id = format!("interaction:{}", i.id);
    if !k.dedupe.first_sight(&i.chat, &dedupe_id) {
        drop_event(k, &i.chat, DropReason::Duplicate);
        return Accepted::Duplicate;
    }
    let inbound_id = Kernel::inbound_record_id(i.chat.as_str(), &dedupe_id);
    let chat = i.chat.clone();
    let kernel = k.clone();
    k.queues.push(
        &chat,
        Box::pin(async move {
            let ctx = make_ctx(&kernel, CtxSource::Interaction(i), Some(inbound_id)).await;
            crate::bot::interaction_ack::arm_deadline(&ctx);
            dispatcher::dispatch(ctx).await;
        }),
    );
    Accepted::Queued
}

/// The context factory: resolves the language and builds the `Ctx`.
pub(crate) async fn make_ctx(
    k: &Arc<Kernel>,
    source: CtxSource,
    inbound_id: Option<String>,
) -> Ctx {
    let chat = match &source {
        CtxSource::Message(m) => m.chat.clone(),
        CtxSource::Interaction(i) => i.chat.clone(),
        CtxSource::Trigger { chat, .. } => chat.clone(),
    };
    let stored = match k.store.chat(chat.as_str()).await {
        Ok(c) => c.and_then(|c| c.lang),
        Err(e) => {
            k.events.error("persistence:chat", Some(&chat), e);
            None
        }
    };
    let message = match &source {
        CtxSource::Message(m) => Some(m),
        _ => None,
    };
    let lang = lang::resolve(
        stored.as_deref(),
        k.lang_resolver.as_ref(),
        message,
        &k.config.default_lang,
    );
    Ctx::new(Bot::from_kernel(k.clone()), source, inbound_id, lang)
}
