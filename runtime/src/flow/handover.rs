//! Hand-over of a conversation step cut short (`Coordination::handover`).
//!
//! Before a persistent flow takes a message as its answer, the executor records that answer
//! in the chat's checkpoint (a [`Cut`]: the answer and its inbound record). The step then
//! runs; its commit writes the next checkpoint, without the cut. When the step is cut short
//! instead (its replica lost the chat's turn, stopped, or died after the inbound was
//! accepted), the checkpoint still carries the answer, and whichever replica gets the chat
//! next finishes the step:
//!
//! | the chat's next work | what runs |
//! | --- | --- |
//! | the replay of the cut step's own message | the step, as usual (its sends made before the cut are answered from the outbox) |
//! | another message | the cut step with the recorded answer (its sends keyed by the recorded inbound record, so those made before the cut are not sent again), then the message as the answer to the question the flow asks now; the recorded record's later replay is recognised as fed |
//! | an idle timeout or a cancel | the cut step with the recorded answer; the interrupt no longer applies |
//!
//! Each hand-over is counted (`handovers`) and emitted ([`CoordinationEvent::HandedOver`],
//! and the flow event `handed_over`). This module does not record the answer (the executor
//! does, before the step) and does not decide when a stack steps (`conversation` does).
//!
//! [`CoordinationEvent::HandedOver`]: crate::coordination::CoordinationEvent::HandedOver

use std::sync::Arc;

use crate::events::BotEvent;
use crate::flow::api::Input;
use crate::flow::executor::{drive_fed, top_name};
use crate::flow::resume;
use crate::flow::stack::{Cut, Stack};
use crate::kernel::context::Ctx;

/// What finishing a cut step came to.
pub(crate) enum Finished {
    /// The flow waits again: the stack, for the message that found the cut.
    Waits(Stack),
    /// The flow ended with the step: the message that found the cut goes on as a fresh one.
    Ended,
    /// The step's commit failed: the message that found the cut is replayed, and finds it
    /// again.
    Failed,
}

/// Finishes the step `stack` was cut short in, with its recorded answer, on `ctx`'s behalf.
pub(crate) async fn finish(ctx: &Ctx, mut stack: Stack, cut: Cut) -> Finished {
    let k = Arc::clone(&ctx.0.bot.kernel);
    let chat = ctx.chat().clone();
    let flow = top_name(&stack);
    tracing::info!(chat = %chat, flow, answer_of = %cut.inbound, found_by = ?ctx.inbound_id(), "finishing a conversation step cut short");
    stack.hand(cut.inbound.clone());
    drive_fed(
        ctx,
        stack,
        Input::Answer(cut.answer),
        false,
        Some(cut.inbound.clone()),
    )
    .await;
    if ctx.journal_failed() {
        return Finished::Failed;
    }
    if let Some(coord) = k.coordination.as_deref() {
        coord
            .c
            .handed_over(chat.as_str(), flow, &cut.inbound, ctx.inbound_id());
    }
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: "handed_over".to_owned(),
    });
    match resume::current(&k, &chat).await {
        Some(stack) => Finished::Waits(stack),
        None => Finished::Ended,
    }
}
