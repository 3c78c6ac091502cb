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
//! Every replica keeps its lease and drains its own forward queue (`bot/forwards.rs`): each
//! message is dispatched in its chat's queue and turn, where the flow in memory takes it as
//! its answer. This module does not hold flows (the flows' runtime does), does not drain
//! queues (`bot/forwards.rs` does) and does not decide liveness
//! (`botmesh_durability::coordination`'s replica leases do).

use std::sync::Arc;

use serde_json::Value;

use crate::events::BotEvent;
use crate::flow::commit::LOST_SCOPE;
use crate::flow::lost;
use crate::kernel::context::Ctx;
use crate::provider::ProviderEvent;

/// The store scope of replica `instance`'s forward queue (drained by `bot/forwards.rs`).
pub(crate) fn queue_scope(instance: &str) -> String {
    format!("botmesh:forwards:{instance}")
}

/// The "held elsewhere" stage (nothing in memory, no checkpoint): `true` when the message was
/// forwarded to the live replica holding the chat's non-persistent flow (or must be replayed:
/// the forward could not be written); `false` when it goes on as a fresh message.
pub(crate) async fn held_elsewhere(ctx: &Ctx) -> bool {
    let k = Arc::clone(&ctx.0.bot.kernel);
    let Some(coord) = k
        .coordination
        .as_deref()
        .filter(|c| c.options.is_handover())
    else {
        return false;
    };
    let chat = ctx.chat();
    let note = match k.store.get_value(LOST_SCOPE, chat.as_str()).await {
        Ok(Some(note)) => note,
        Ok(None) => return false,
        Err(e) => {
            k.events.error("flow:in-memory-note", Some(chat), e);
            return false;
        }
    };
    let Some(to) = lost::holder(&note).filter(|r| *r != coord.c.instance_id()) else {
        return false;
    };
    let flow = note.get("flow").and_then(Value::as_str).unwrap_or_default();
    match coord.c.is_alive(to).await {
        Ok(true) => {}
        Ok(false) => {
            lost::report_one(&k, chat, flow, "lost:replica").await;
            return false;
        }
        Err(e) => {
            // Unknown: the message is replayed rather than taken from the flow.
            k.events.error("flow:forward", Some(chat), e);
            ctx.fail_journal();
            return true;
        }
    }
    let event = match (ctx.message(), ctx.interaction()) {
        (Some(m), _) => ProviderEvent::Message(m.clone()),
        (None, Some(i)) => ProviderEvent::Interaction(i.clone()),
        (None, None) => return false,
    };
    let key = format!("{:020}", k.ticket(None));
    let value = serde_json::json!({ "event": event, "admitted_ms": k.clock.now_ms() });
    if let Err(e) = k.store.set_value(&queue_scope(to), &key, &value).await {
        k.events.error("flow:forward", Some(chat), e);
        ctx.fail_journal();
        return true;
    }
    coord.c.forwarded(chat.as_str(), to);
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: "forwarded".to_owned(),
    });
    true
}
