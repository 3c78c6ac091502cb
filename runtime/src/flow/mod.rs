//! Flows: conversations compiled by `#[flow]` into checkpointable state machines, and the
//! executor that starts, steps, suspends, checkpoints and resumes them per chat.
//!
//! ```no_run
//! use botmesh::prelude::*;
//!
//! /// Takes an order in two questions.
//! #[flow(start = command("order"))]
//! #[persistent]
//! async fn order(cx: &mut FlowCx) -> FlowResult {
//!     let item: String = cx.ask("What would you like?").await?.text().to_owned();
//!     let qty: u32 = cx.ask("How many?").parse::<u32>("A number, please.").await?;
//!     cx.send(format!("Ordered {qty} x {item}")).await?;
//!     Ok(())
//! }
//!
//! # async fn demo(bot: Bot) -> Result<(), BotError> {
//! bot.flow(order); // installs `/order`; `bot.start_flow(chat, order)` starts it from code
//! println!("{}", botmesh::flow::mermaid(order)); // the state graph
//! # Ok(()) }
//! ```
//!
//! `#[flow]` replaces the function by a constructor of the same name (`order()`, or
//! `ask_name(greeting)` for a flow with arguments) returning a hidden struct that implements
//! [`Flow`]. This module is the dispatcher's seam for the "active conversation" and "dormant resume"
//! stages and the lifecycle's "restore conversations" step. The pieces:
//!
//! | module | what it does | names (in this folder) |
//! | --- | --- | --- |
//! | `ask` | [`Ask`], [`Answer`], [`Interrupt`] | — |
//! | `sends` | the sends of an atomic step, collected for its commit | — |
//! | `api` | the [`Flow`] trait the macro implements, its erased form [`Erased`], [`FlowInfo`], [`FlowError`], [`FlowCx`] (a step's input, what it asks the executor for, calls) | `ask`, `sends` |
//! | `cx` | [`FlowCx`]'s sends with site keys and asks | `api`, `ask`, `sends` |
//! | `effect` | `cx.effect`, `cx.now`, `cx.random`: recorded once per step | `api` |
//! | `stack` | a chat's flow stack | `api` |
//! | `checkpoint` | encoding and decoding stacks, the version policy (pure: no store) | `api`, `stack` |
//! | `commit` | a step's outcome as one value (`FlowCommit`) and the one writer of the store's flow data | `api`, `checkpoint`, `sends` |
//! | `runtime` | the flows' in-memory state in a bot | `api`, `stack` |
//! | `resume` | a chat's stack: in memory reconciled with the store, or loaded from its checkpoint | `checkpoint`, `commit`, `stack` |
//! | `timeout` | an ask's idle timeout as a one-off job of the durable scheduler: armed, disarmed, its identity | `stack` |
//! | `executor` | one step of a stack: run, hand its commit to `commit`, settle (its timeout armed or disarmed) | `api`, `ask`, `checkpoint`, `commit`, `resume`, `sends`, `stack`, `timeout` |
//! | `handover` | a step cut short, finished with the answer its checkpoint carries (`Coordination::handover`) | `api`, `executor`, `resume`, `stack` |
//! | `lost` | a non-persistent flow a restart lost: `lost:restart` at start, from the notes `commit` writes | `commit` |
//! | `forward` | a message of a non-persistent flow another live replica holds, forwarded to it; `lost:replica` when it died (`Coordination::handover`) | `commit`, `lost` |
//! | `conversation` | when a stack steps (start, answer, resume, restart, timeout, cancel) and ends | `api`, `ask`, `checkpoint`, `commit`, `executor`, `forward`, `handover`, `lost`, `resume`, `stack`, `timeout` |
//! | `registry` | `bot.flow` / `register_flow` / `start_flow` / `cancel_flow` | `api`, `conversation` |
//!
//! No module names one that names it back (`tests/architecture.rs` checks it).
//!
//! A chat's next message while a flow waits is the flow's answer, unless it is a registered
//! command (commands route first). To let users cancel, register a command that calls
//! [`Bot::cancel_flow`](crate::Bot::cancel_flow).

mod api;
mod ask;
pub(crate) mod checkpoint;
mod commit;
pub(crate) mod conversation;
mod cx;
mod effect;
mod executor;
mod forward;
mod handover;
mod lost;
mod registry;
pub(crate) mod resume;
mod runtime;
mod sends;
mod stack;
pub(crate) mod timeout;

pub use api::{
    __Codec, __Fresh, __MaybeCodec, __RESTART, __Resumed, __START, __Some, __StepResult, __codec,
    __done, __erase_fn, __info, __later, __output_of, __resumed, __state, __wait, ByConstructor,
    ByValue, Call, Checkpointable, DEFAULT_RESTART_NOTICE, Erased, Flow, FlowCx, FlowError, FlowFn,
    FlowInfo, FlowResult, IntoFlow, MigrateFn, Remaining, StartTrigger, StateInfo, Step,
    VersionPolicy, erase, info, mermaid,
};
pub use ask::{Answer, Ask, Interrupt};
pub use cx::FlowSend;
pub(crate) use forward::{Forwarded, queue_scope as forward_queue};
pub(crate) use runtime::FlowRuntime;

use crate::error::BotError;
use crate::kernel::Kernel;
use crate::kernel::context::Ctx;
use crate::message::ChatId;

/// Re-exports for generated code.
#[doc(hidden)]
pub mod __private {
    pub use serde;
    pub use serde_json;
}

/// What `#[flow]`'s expansion imports (`use ::botmesh::__gen::*;` in the block that
/// holds a flow's state enum and `Flow` impl): every name starts with `__`, so that the flow's
/// own code, which the step function holds, sees no name of its own shadowed.
#[doc(hidden)]
pub mod __gen {
    pub use super::StartTrigger::{
        Command as __Command, Keyword as __Keyword, Matcher as __Matcher, None as __NoStart,
        Regex as __Regex,
    };
    pub use super::{
        __Codec, __Fresh, __MaybeCodec, __RESTART, __START, __Some, __StepResult, __codec, __done,
        __erase_fn, __info, __later, __output_of, __resumed, __state, __wait,
    };
    pub use super::{
        Ask as __Ask, Checkpointable as __Checkpointable, Erased as __Erased, Flow as __Flow,
        FlowCx as __FlowCx, FlowInfo as __FlowInfo, StartTrigger as __StartTrigger,
        StateInfo as __StateInfo, VersionPolicy as __VersionPolicy,
    };
    pub use crate::kernel::context::Ctx as __Ctx;
    pub use core::option::Option as __Option;
    pub use serde::{Deserialize as __Deserialize, Serialize as __Serialize};
}

/// The "active conversation" stage: a flow waiting in this chat takes the message as its answer.
pub(crate) async fn active_conversation(ctx: &Ctx) -> bool {
    conversation::active(ctx).await
}

/// The "dormant resume" stage: a persistent flow checkpointed in the store resumes.
pub(crate) async fn dormant_resume(ctx: &Ctx) -> bool {
    conversation::dormant(ctx).await
}

/// Restores persistent conversations on `start()`, and reports the non-persistent ones a
/// restart lost (`lost:restart`).
pub(crate) async fn restore(k: &Kernel) -> Result<(), BotError> {
    conversation::restore(k).await
}

/// Aborts in-memory conversations on `stop()` (checkpoints are kept).
pub(crate) async fn abort_all(k: &Kernel) {
    k.flows().abort_all();
}

/// Ends every flow of a chat (the user blocked the bot, or `cancel_flow`).
pub(crate) async fn end_chat(k: &Kernel, chat: &ChatId, reason: &str) {
    conversation::end_chat(k, chat, reason).await;
}
