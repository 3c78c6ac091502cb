//! Tracing: the `tracing` spans the bot opens around each stage of a message's path (below),
//! and the W3C trace context a flow checkpoint keeps so that a conversation resumed after a
//! restart (or on another replica) links its first turn to the turn that wrote it.
//!
//! | span | opened by | fields | parent |
//! | --- | --- | --- | --- |
//! | [`INBOUND`] `bot.inbound` | a provider event admitted (or a journaled record replayed) | `chat`, `kind`, `replayed` | none (a root) |
//! | [`PERSIST`] `bot.persist` | journaling the event and writing its chat, contact and ledger row | `chat` | `bot.inbound` |
//! | [`DISPATCH`] `bot.dispatch` | the routing of the message, in the chat's turn | `chat`, `route` | `bot.inbound` |
//! | [`HANDLER`] `bot.handler` | a command, matcher or catch-all handler | `chat`, `handler` | `bot.dispatch` |
//! | [`TURN`] `bot.turn` | one step of a conversation, between two waits | `chat`, `flow`, `step` | `bot.dispatch` (or the scheduler's `bot.task`, or none) |
//! | [`PACE`] `bot.pace` | the pacer's delay (and typing) before a text reply | `chat` | the sender |
//! | [`SEND`] `bot.send` | every attempt of a message (or an edit) at the channel | `chat`, `key`, `edit` | the sender (none for the outbox sweeper) |
//! | [`TASK`] `bot.task` | each run of a scheduled job | `job` | none (a root), see [`task_span`] |
//!
//! Spans wrap the stages without changing their order or timing; with no subscriber
//! interested, a span costs a relaxed load. Export is the application's choice: any
//! `tracing` subscriber sees them, and feature `otel` adds [`otel`], which sends them through
//! `tracing-opentelemetry` and the OTLP exporter, and fills the checkpoint's trace context
//! (without it, checkpoints carry none).

#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;

use serde::{Deserialize, Serialize};
use tracing::Span;

/// Name of the span of a provider event (a root span).
pub const INBOUND: &str = "bot.inbound";
/// Name of the span of the event's persistence (journal, chat, contact, ledger row).
pub const PERSIST: &str = "bot.persist";
/// Name of the span of the routing of a message or interaction.
pub const DISPATCH: &str = "bot.dispatch";
/// Name of the span of a plain handler (command, matcher, catch-all).
pub const HANDLER: &str = "bot.handler";
/// Name of the span of one conversation turn (a flow step between two waits).
pub const TURN: &str = "bot.turn";
/// Name of the span of the pacer's delay before a text reply.
pub const PACE: &str = "bot.pace";
/// Name of the span of one attempt of a message at the channel.
pub const SEND: &str = "bot.send";
/// Name of the root span of one scheduled job run.
pub const TASK: &str = "bot.task";

/// A W3C trace context (`traceparent`, and `tracestate` when there is one): where a span sits
/// in a distributed trace. A flow checkpoint keeps the one of the turn that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// `00-<trace id>-<span id>-<flags>`.
    pub traceparent: String,
    /// Vendor entries, when the trace has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// The trace context of the current span, when an OpenTelemetry layer records it (feature
/// `otel`); `None` otherwise.
pub(crate) fn current_context() -> Option<TraceContext> {
    #[cfg(feature = "otel")]
    {
        otel::context_of(&Span::current())
    }
    #[cfg(not(feature = "otel"))]
    {
        None
    }
}

/// Links `span` to the span `context` names (the turn that wrote a checkpoint); nothing
/// without feature `otel`.
pub(crate) fn link(span: &Span, context: &TraceContext) {
    #[cfg(feature = "otel")]
    otel::link(span, context);
    #[cfg(not(feature = "otel"))]
    let _ = (span, context);
}

/// The root span of a provider event of `chat`.
pub(crate) fn inbound_span(chat: &str, kind: &'static str, replayed: bool) -> Span {
    tracing::info_span!(parent: None, "bot.inbound", chat, kind, replayed)
}

/// The span of an event's persistence.
pub(crate) fn persist_span(chat: &str) -> Span {
    tracing::info_span!("bot.persist", chat)
}

/// The span of a message's routing, child of its `bot.inbound` span (`parent`).
pub(crate) fn dispatch_span(parent: &Span, chat: &str) -> Span {
    tracing::info_span!(parent: parent, "bot.dispatch", chat, route = tracing::field::Empty)
}

/// The span of a plain handler.
pub(crate) fn handler_span(chat: &str, handler: &'static str) -> Span {
    tracing::info_span!("bot.handler", chat, handler)
}

/// The span of one conversation turn of `flow` in `chat`.
pub(crate) fn turn_span(chat: &str, flow: &'static str, step: u64) -> Span {
    tracing::info_span!("bot.turn", chat, flow, step)
}

/// The span of the pacer's delay.
pub(crate) fn pace_span(chat: &str) -> Span {
    tracing::info_span!("bot.pace", chat)
}

/// The span of one attempt of a message (or of an edit) at the channel.
pub(crate) fn send_span(chat: &str, key: Option<&str>, edit: bool) -> Span {
    tracing::info_span!("bot.send", chat, key, edit)
}

/// The root span of one run of the scheduled job `job`: the scheduler enters it around the
/// run (`run.instrument(task_span(id))`), so the job's sends and the conversation turns it
/// starts are its children.
pub fn task_span(job: &str) -> Span {
    tracing::info_span!(parent: None, "bot.task", job)
}
