//! botmesh: chat bots that never lose a message and never send a reply twice.
//!
//! A [`Bot`] runs on a [`Provider`](provider::Provider) (a chat channel) and a
//! [`Store`](botmesh_durability::Store). Handlers are plain async functions of a [`Ctx`]:
//!
//! ```no_run
//! use botmesh::prelude::*;
//! # async fn demo(provider: botmesh::testing::MockProvider) -> Result<(), BotError> {
//! let bot = Bot::builder(provider).build()?;
//! bot.command("start", |ctx: Ctx| async move {
//!     ctx.reply("Welcome!").await?;
//!     Ok(())
//! });
//! bot.run().await
//! # }
//! ```
//!
//! The [`bot`] module maps the modules: the inbound path, the routing order, the outbound path
//! and the lifecycle.

#[allow(unused_extern_crates)]
extern crate self as botmesh;

pub mod bot;
pub mod clock;
pub mod codec;
pub mod config;
pub mod coordination;
pub mod durable;
pub mod error;
pub mod events;
pub mod flow;
mod kernel;
pub mod message;
pub mod metrics;
pub mod operating;
mod outbound;
pub mod provider;
pub mod schedule;
pub mod telemetry;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use bot::{
    Bot, BotBuilder, BroadcastOptions, BroadcastReport, Ctx, Handler, HookFlow, LifecycleStep,
    Matcher, Plugin, ReplyStream, RunState, SendDecision, SendDraft, SendOutcome, SentInfo,
    StopOptions, matcher,
};
pub use botmesh_durability as durability;
pub use botmesh_macros::{flow, persistent};
pub use config::{BotConfig, GroupMode, Pacing, RateLimitRetry};
pub use error::{BotError, HandlerError, HandlerResult};
pub use events::{BotEvent, DropReason};
/// What `#[flow]`'s expansion imports: `use ::botmesh::__gen::*;` (see `flow::__gen`).
#[doc(hidden)]
pub use flow::__gen;
pub use metrics::BotMetrics;

/// What a bot author needs, in one import.
pub mod prelude {
    pub use crate::bot::{
        Bot, BotBuilder, BroadcastOptions, Ctx, HookFlow, Matcher, Plugin, SendDecision, SendDraft,
        SendOutcome, SentInfo, StopOptions, matcher,
    };
    pub use crate::config::{GroupMode, Pacing};
    pub use crate::error::{BotError, HandlerError, HandlerResult};
    pub use crate::events::BotEvent;
    pub use crate::flow::{Answer, FlowCx, FlowResult, Interrupt};
    pub use crate::message::{Button, ChatId, Message, Outgoing, OutgoingContent, UserId};
    pub use crate::provider::{Provider, ProviderEvent};
    pub use botmesh_macros::{flow, persistent};
}
