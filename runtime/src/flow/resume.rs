//! Finding a chat's flow stack: the one in memory, reconciled with the store (another replica
//! may have moved the flow on or ended it), or one loaded from its stored checkpoint (decoded
//! by `checkpoint`, the version policy's writes made by `commit`); and the leftover
//! checkpoint of a flow that ended, which must not bring it back.

use std::sync::Arc;

use botmesh_durability::store::FlowCheckpoint;

use crate::events::BotEvent;
use crate::flow::checkpoint::{self, Loaded, Note};
use crate::flow::commit;
use crate::flow::stack::Stack;
use crate::kernel::Kernel;
use crate::message::ChatId;

fn emit(k: &Kernel, chat: &ChatId, flow: &str, what: impl Into<String>) {
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: what.into(),
    });
}

/// Decodes a stored checkpoint (see `checkpoint`) and carries out what the version policy
/// asked for: its events, and the checkpoint's removal or resave.
pub(crate) async fn load(k: &Kernel, cp: FlowCheckpoint) -> Loaded {
    let chat = ChatId::from(cp.chat.as_str());
    let decoded = checkpoint::decode(cp, |name| k.flows().lookup(name), k.clock.now_ms());
    for note in decoded.notes {
        match note {
            Note::Event { flow, what } => emit(k, &chat, flow, what),
            Note::Error { context, error } => k.events.error(context, Some(&chat), error),
            Note::Drop => {
                commit::remove_checkpoint(k, chat.as_str()).await;
            }
            Note::Resave(cp) => {
                if let Err(e) = commit::save_checkpoint(k, cp).await {
                    k.events.error("flow:migrate", Some(&chat), e);
                }
            }
        }
    }
    decoded.loaded
}

/// Takes the chat's stack, reconciled with the store for persistent flows.
pub(crate) async fn current(k: &Arc<Kernel>, chat: &ChatId) -> Option<Stack> {
    let stack = k.flows().take(chat)?;
    if !stack.checkpointed {
        return Some(stack);
    }
    // Only the step first: the whole checkpoint (its state decoded) only when another process
    // moved the flow on.
    let gone = || {
        tracing::debug!(chat = %chat, "flow ended elsewhere: dropping the in-memory copy");
        None
    };
    // The step and the inbound that fed it: another run of the flow (started on another
    // replica) may have reached the same step.
    match k.store.checkpoint_head(chat.as_str()).await {
        Ok(None) => gone(),
        Ok(Some(head)) if head.step != stack.step || head.inbound_id != stack.fed_by => {
            match k.store.checkpoint(chat.as_str()).await {
                Ok(None) => gone(),
                Ok(Some(cp)) => match load(k, cp).await {
                    Loaded::Ready(s) => Some(s),
                    // A restart waits for the dormant stage, with the message that starts it.
                    Loaded::Gone | Loaded::Restart { .. } => None,
                },
                Err(e) => {
                    k.events.error("flow:checkpoint", Some(chat), e);
                    Some(stack)
                }
            }
        }
        Ok(Some(_)) => Some(stack),
        Err(e) => {
            k.events.error("flow:checkpoint", Some(chat), e);
            Some(stack)
        }
    }
}

/// Whether the chat's stored checkpoint is the leftover of a flow that ended (its delete
/// failed): the delete is tried again, and either way the flow is not resumed.
pub(crate) async fn ended_leftover(k: &Kernel, chat: &ChatId) -> bool {
    if !k.flows().is_ended(chat) {
        return false;
    }
    if commit::remove_checkpoint(k, chat.as_str()).await {
        tracing::debug!(chat = %chat, "the leftover checkpoint of an ended flow is deleted");
    }
    true
}
