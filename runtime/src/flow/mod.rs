//! Flows: conversations compiled by `#[flow]` into checkpointable state machines, and the
//! executor that starts, steps, suspends, checkpoints and resumes them per chat.
//!
//! This module is the dispatcher's seam for the "active conversation" and "dormant resume"
//! stages and the lifecycle's "restore conversations" step.

use crate::bot::context::Ctx;
use crate::bot::kernel::Kernel;
use crate::error::BotError;
use crate::message::ChatId;

/// The flow executor's state inside a bot.
#[derive(Debug, Default)]
pub(crate) struct FlowRuntime {}

/// The "active conversation" stage: a flow waiting in this chat takes the message as its answer.
pub(crate) async fn active_conversation(_ctx: &Ctx) -> bool {
    false
}

/// The "dormant resume" stage: a persistent flow checkpointed in the store resumes.
pub(crate) async fn dormant_resume(_ctx: &Ctx) -> bool {
    false
}

/// Restores persistent conversations on `start()`.
pub(crate) async fn restore(_k: &Kernel) -> Result<(), BotError> {
    Ok(())
}

/// Aborts in-memory conversations on `stop()` (checkpoints are kept).
pub(crate) async fn abort_all(_k: &Kernel) {}

/// Ends every flow of a chat (the user blocked the bot, or `cancel_flow`).
pub(crate) async fn end_chat(_k: &Kernel, _chat: &ChatId, _reason: &str) {}
