//! Non-persistent flows across a restart: a flow that keeps its state in memory is gone when
//! its process stops, and the user must not be left answering a question nobody asked.
//!
//! While a non-persistent flow waits, a small note in the store (keyed by chat, holding the
//! flow's name) says that this chat's conversation lives in memory. The note is written by
//! the commit of the stack's first suspension and deleted when the stack ends (both through
//! `commit`, the store's one writer of flow data), so a flow pays two store writes in its
//! whole life, not one per step. When the bot starts, every note left is a conversation the
//! restart lost:
//!
//! | at start | event | the chat's next message |
//! | --- | --- | --- |
//! | a note of flow `f` for a chat | `BotEvent::Flow { flow: f, what: "lost:restart", .. }` | routed as a fresh message (commands, handlers), never as an answer |
//!
//! This module does not keep states (the flows' runtime does, in memory) and does not make a
//! flow persistent (`#[persistent]` does). A non-persistent flow belongs to one process: with
//! several replicas and `Coordination::handover`, the note names the replica holding the
//! flow, a replica that starts leaves the notes of other live replicas alone, and a message
//! reaching another replica is forwarded to the holder, or, when the holder died, reported
//! as `lost:replica` (see `forward`). Without hand-over, a replica that starts reports the
//! notes of flows another replica still holds; run `#[persistent]` flows there.

use crate::events::BotEvent;
use crate::flow::commit::{self, LOST_SCOPE};
use crate::kernel::Kernel;
use crate::message::ChatId;

/// At start: every note left is a flow the restart lost. Emits `lost:restart` for each and
/// deletes the notes.
pub(crate) async fn report(k: &Kernel) {
    let notes = match k.store.values(LOST_SCOPE).await {
        Ok(notes) => notes,
        Err(e) => {
            k.events.error("flow:in-memory-note", None, e);
            return;
        }
    };
    for (chat, value) in notes {
        if held_by_other(k, &value).await {
            // Another live replica holds it (forwarding, see `forward`).
            continue;
        }
        let chat = ChatId::from(chat.as_str());
        let flow = value
            .get("flow")
            .and_then(|f| f.as_str())
            .unwrap_or_default();
        report_one(k, &chat, flow, "lost:restart").await;
    }
}

/// Reports `chat`'s non-persistent flow `flow` as lost (`what`: `lost:restart`, or
/// `lost:replica` when the replica holding it died, see `forward`) and deletes its note.
pub(crate) async fn report_one(k: &Kernel, chat: &ChatId, flow: &str, what: &str) {
    tracing::warn!(chat = %chat, flow, what, "a non-persistent flow was lost with the process that held it");
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: what.to_owned(),
    });
    commit::remove_lost_note(k, chat).await;
}

/// The replica a note names (with hand-over), if any.
pub(crate) fn holder(note: &serde_json::Value) -> Option<&str> {
    note.get("replica").and_then(serde_json::Value::as_str)
}

/// Whether a note names a live replica other than this one (`report` leaves those).
async fn held_by_other(k: &Kernel, note: &serde_json::Value) -> bool {
    let Some(coord) = k.coordination.as_deref() else {
        return false;
    };
    match holder(note).filter(|r| *r != coord.c.instance_id()) {
        // Unknown liveness: left for the holder, or for a replica that knows it dead.
        Some(r) => coord.c.is_alive(r).await.unwrap_or(true),
        None => false,
    }
}
