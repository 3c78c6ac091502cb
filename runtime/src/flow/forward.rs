//! Forwarding non-persistent flows between replicas (`Coordination::handover`).
//!
//! A non-persistent flow lives in the memory of the replica that asked its question. With
//! hand-over on, the note that the chat's flow waits in memory (see `lost`) also names that
//! replica, and each replica keeps a lease of its own (`replica:<instance id>`, renewed every
//! third of the leader lease, given back on stop). A replica that takes a chat's turn for a
//! message and finds no flow of the chat in its memory nor a checkpoint reads the note:
//!
//! | the note names | what happens to the message |
//! | --- | --- |
//! | no one, or this replica | routed as usual |
//! | another replica, alive (its lease held) | put on that replica's forward queue (store scope `botmesh:forwards:<instance id>`, keyed in ingress order), counted (`forwards`) and emitted (`CoordinationEvent::Forwarded`, flow event `forwarded`); its inbound record is done here |
//! | another replica, dead (its lease expired) | the lost-flow path: `lost:replica` (see `lost`), the note goes, the message is routed as a fresh one |
//!
//! An ask's idle timeout is a job of the durable scheduler, which any replica may claim: the
//! replica that claims it for a chat whose flow is not in its memory reads the note the same
//! way, and puts the timeout on the live holder's forward queue (`timeout_held_elsewhere`),
//! where it fires.
//!
//! Every replica keeps its lease and drains its own forward queue (`bot/forwards.rs`): each
//! message is journaled in the inbox as this replica's (taken off the queue in the same
//! transaction where the store shares the journal's) and dispatched in its chat's queue and
//! turn, where the flow in memory takes it as its answer; each timeout fires there. This module does not hold flows (the flows' runtime does), does not drain
//! queues (`bot/forwards.rs` does) and does not decide liveness
//! (`botmesh_durability::coordination`'s replica leases do).

use std::sync::Arc;

use serde_json::Value;

use crate::events::BotEvent;
use crate::flow::commit::LOST_SCOPE;
use crate::flow::lost;
use crate::kernel::Kernel;
use crate::kernel::context::Ctx;
use crate::message::ChatId;
use crate::provider::ProviderEvent;

/// The store scope of replica `instance`'s forward queue (drained by `bot/forwards.rs`).
pub(crate) fn queue_scope(instance: &str) -> String {
    format!("botmesh:forwards:{instance}")
}

/// Who holds a chat's non-persistent flow, as its note says.
enum Holder {
    /// No one else: the message or timeout is this replica's to handle.
    Here,
    /// Another replica, alive: `to` (its instance id) holds flow `flow`.
    Alive { to: String, flow: String },
    /// Another replica whose liveness could not be read (the store away).
    Unknown,
}

/// Reads `chat`'s note (hand-over on): the live replica other than this one holding the chat's
/// non-persistent flow. A note naming a dead replica is the lost-flow path: `lost:replica`
/// is reported, the note goes, and the chat is this replica's.
async fn holder(k: &Kernel, chat: &ChatId) -> Holder {
    let Some(coord) = k
        .coordination
        .as_deref()
        .filter(|c| c.options.is_handover())
    else {
        return Holder::Here;
    };
    let note = match k.store.get_value(LOST_SCOPE, chat.as_str()).await {
        Ok(Some(note)) => note,
        Ok(None) => return Holder::Here,
        Err(e) => {
            k.events.error("flow:in-memory-note", Some(chat), e);
            return Holder::Here;
        }
    };
    let Some(to) = lost::holder(&note).filter(|r| *r != coord.c.instance_id()) else {
        return Holder::Here;
    };
    let flow = note.get("flow").and_then(Value::as_str).unwrap_or_default();
    match coord.c.is_alive(to).await {
        Ok(true) => Holder::Alive {
            to: to.to_owned(),
            flow: flow.to_owned(),
        },
        Ok(false) => {
            lost::report_one(k, chat, flow, "lost:replica").await;
            Holder::Here
        }
        Err(e) => {
            k.events.error("flow:forward", Some(chat), e);
            Holder::Unknown
        }
    }
}

/// Puts `entry` on replica `to`'s forward queue, keyed in ingress order; counts and emits
/// the forward.
async fn enqueue(
    k: &Kernel,
    chat: &ChatId,
    to: &str,
    flow: &str,
    entry: Forwarded,
) -> Result<(), botmesh_durability::StoreError> {
    let key = format!("{:020}", k.ticket(None));
    let value = serde_json::to_value(entry).unwrap_or_default();
    k.store.set_value(&queue_scope(to), &key, &value).await?;
    if let Some(coord) = k.coordination.as_deref() {
        coord.c.forwarded(chat.as_str(), to);
    }
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: "forwarded".to_owned(),
    });
    Ok(())
}

/// The "held elsewhere" stage (nothing in memory, no checkpoint): `true` when the message was
/// forwarded to the live replica holding the chat's non-persistent flow (or must be replayed:
/// the forward could not be written); `false` when it goes on as a fresh message.
pub(crate) async fn held_elsewhere(ctx: &Ctx) -> bool {
    let k = Arc::clone(&ctx.0.bot.kernel);
    let chat = ctx.chat();
    let (to, flow) = match holder(&k, chat).await {
        Holder::Here => return false,
        Holder::Alive { to, flow } => (to, flow),
        Holder::Unknown => {
            // Unknown: the message is replayed rather than taken from the flow.
            ctx.fail_journal();
            return true;
        }
    };
    let event = match (ctx.message(), ctx.interaction()) {
        (Some(m), _) => ProviderEvent::Message(m.clone()),
        (None, Some(i)) => ProviderEvent::Interaction(i.clone()),
        (None, None) => return false,
    };
    let entry = Forwarded::Event {
        event: Box::new(event),
        admitted_ms: k.clock.now_ms(),
    };
    if let Err(e) = enqueue(&k, chat, &to, &flow, entry).await {
        k.events.error("flow:forward", Some(chat), e);
        ctx.fail_journal();
    }
    true
}

/// An ask timeout this replica's scheduler claimed for a chat whose flow is not in its
/// memory: `true` when it was forwarded to the live replica holding the chat's
/// non-persistent flow (or when that replica's liveness is unknown, left to fire there or
/// nowhere rather than here, where nothing waits); `false` when it is this replica's.
pub(crate) async fn timeout_held_elsewhere(
    k: &Kernel,
    chat: &ChatId,
    data: &serde_json::Value,
    now_ms: i64,
) -> Result<bool, botmesh_durability::StoreError> {
    match holder(k, chat).await {
        Holder::Here => Ok(false),
        Holder::Unknown => Ok(true),
        Holder::Alive { to, flow } => {
            let entry = Forwarded::Timeout {
                chat: chat.0.clone(),
                data: data.clone(),
                now_ms,
            };
            enqueue(k, chat, &to, &flow, entry).await.map(|()| true)
        }
    }
}

/// An entry of a forward queue.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum Forwarded {
    /// A message or interaction for the flow in the holder's memory, with the time it was
    /// admitted (for `max_age`).
    Event {
        event: Box<ProviderEvent>,
        admitted_ms: i64,
    },
    /// An ask timeout (the scheduler job's data) for the flow in the holder's memory, with
    /// the time by which the replica that claimed it judged it due (the holder's clock may
    /// lag).
    Timeout {
        chat: String,
        data: serde_json::Value,
        now_ms: i64,
    },
}
