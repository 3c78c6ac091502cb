//! Routes and hooks: what a bot author registers, and the registry that holds it.
//!
//! A route pairs a trigger (a command, a [`Matcher`], every message, the catch-all, a call)
//! with a [`Handler`]. Hooks run before and after messages, sends and provider events; a
//! `before` send hook may abort or rewrite the send. Every registration remembers the plugin
//! that made it, so `unplug` removes exactly what a plugin added. This module only stores;
//! the dispatcher decides the order in which routes are tried.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use regex::Regex;

use crate::error::{HandlerError, HandlerResult};
use crate::kernel::context::Ctx;
use crate::message::{ChatId, Content, MediaKind, MessageId, Outgoing};
use crate::provider::{CallEvent, EventKind, ProviderEvent};

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A message handler: any `Fn(Ctx) -> impl Future<Output = HandlerResult>`.
///
/// ```
/// # use botmesh::prelude::*;
/// async fn hello(ctx: Ctx) -> HandlerResult {
///     ctx.reply("Hello!").await?;
///     Ok(())
/// }
/// # let bot = Bot::builder(botmesh::testing::MockProvider::new()).build().unwrap();
/// bot.command("start", hello);
/// bot.when(botmesh::matcher::keyword(["hi", "hello"]), |ctx: Ctx| async move {
///     ctx.reply("Hi there").await?;
///     Ok(())
/// });
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Runs the handler.
    fn call(&self, ctx: Ctx) -> BoxFuture<HandlerResult>;
}

impl<F, Fut> Handler for F
where
    F: Fn(Ctx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn call(&self, ctx: Ctx) -> BoxFuture<HandlerResult> {
        Box::pin(self(ctx))
    }
}

/// What a `before` hook decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookFlow {
    /// Go on.
    Continue,
    /// Stop here: the message (or event) is not routed further.
    Stop,
}

/// A send as the `before` send hooks see it; a hook may rewrite any field.
#[derive(Debug, Clone, PartialEq)]
pub struct SendDraft {
    /// The chat.
    pub chat: ChatId,
    /// What will be sent.
    pub outgoing: Outgoing,
    /// `Some` when this is an edit of that message.
    pub edit_of: Option<MessageId>,
    /// Whether this is a live preview of `ctx.stream()` (transient, not journaled).
    pub preview: bool,
}

/// What a `before` send hook decides.
#[allow(clippy::large_enum_variant)] // built once per send, never stored
#[derive(Debug, Clone, PartialEq)]
pub enum SendDecision {
    /// Send this (possibly rewritten) draft.
    Proceed(SendDraft),
    /// Do not send: the caller gets `skipped: true`.
    Abort,
}

/// A send that went out, as the `after` send hooks see it.
#[derive(Debug, Clone, PartialEq)]
pub struct SentInfo {
    /// The chat.
    pub chat: ChatId,
    /// What was sent.
    pub outgoing: Outgoing,
    /// The provider's message id.
    pub message_id: Option<MessageId>,
    /// The send's key.
    pub key: Option<String>,
    /// Whether it was an edit.
    pub edit: bool,
}

/// When a [`Matcher`] route applies.
#[derive(Clone)]
pub enum Matcher {
    /// The text equals one of the keywords, ignoring case and surrounding spaces.
    Keyword(Vec<String>),
    /// The text matches the regex.
    Regex(Regex),
    /// The message carries this kind of media.
    Media(MediaKind),
    /// The message is a location.
    Location,
    /// An interaction whose data equals this id.
    Button(String),
    /// Any interaction.
    AnyInteraction,
    /// A function of the context.
    Func(Arc<dyn Fn(&Ctx) -> bool + Send + Sync>),
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Matcher::Keyword(k) => f.debug_tuple("Keyword").field(k).finish(),
            Matcher::Regex(r) => f.debug_tuple("Regex").field(&r.as_str()).finish(),
            Matcher::Media(k) => f.debug_tuple("Media").field(k).finish(),
            Matcher::Location => f.write_str("Location"),
            Matcher::Button(b) => f.debug_tuple("Button").field(b).finish(),
            Matcher::AnyInteraction => f.write_str("AnyInteraction"),
            Matcher::Func(_) => f.write_str("Func"),
        }
    }
}

impl Matcher {
    /// Whether the matcher applies to this context.
    pub fn matches(&self, ctx: &Ctx) -> bool {
        match self {
            Matcher::Keyword(words) => {
                let text = ctx.text().trim();
                !text.is_empty() && words.iter().any(|w| w.eq_ignore_ascii_case(text))
            }
            Matcher::Regex(re) => ctx.message().is_some() && re.is_match(ctx.text()),
            Matcher::Media(kind) => matches!(
                ctx.message().map(|m| &m.content),
                Some(Content::Media(m)) if m.kind == *kind
            ),
            Matcher::Location => {
                matches!(
                    ctx.message().map(|m| &m.content),
                    Some(Content::Location(_))
                )
            }
            Matcher::Button(id) => ctx.interaction().is_some_and(|i| &i.data == id),
            Matcher::AnyInteraction => ctx.interaction().is_some(),
            Matcher::Func(f) => f(ctx),
        }
    }
}

pub(crate) type BeforeMessageHook =
    Arc<dyn Fn(Ctx) -> BoxFuture<Result<HookFlow, HandlerError>> + Send + Sync>;
pub(crate) type AfterMessageHook = Arc<dyn Fn(Ctx) -> BoxFuture<()> + Send + Sync>;
pub(crate) type BeforeSendHook = Arc<dyn Fn(SendDraft) -> BoxFuture<SendDecision> + Send + Sync>;
pub(crate) type AfterSendHook = Arc<dyn Fn(SentInfo) -> BoxFuture<()> + Send + Sync>;
pub(crate) type BeforeEventHook = Arc<dyn Fn(ProviderEvent) -> BoxFuture<HookFlow> + Send + Sync>;
pub(crate) type AfterEventHook = Arc<dyn Fn(ProviderEvent) -> BoxFuture<()> + Send + Sync>;
pub(crate) type CallHandler = Arc<dyn Fn(CallEvent) -> BoxFuture<HandlerResult> + Send + Sync>;

/// One registration, with the plugin that made it.
pub(crate) struct Reg<T> {
    pub(crate) owner: Option<u64>,
    pub(crate) item: T,
}

/// What a route's handler may do before its message's record is written (see
/// `durable::inbound::acting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acts {
    /// Anything (a handler of the bot's author): the record is written before it runs.
    Freely,
    /// Only start a flow, whose first step writes the record in its own transaction (a flow's
    /// start trigger).
    InSteps,
}

/// A command's or a matcher's handler, with what it does.
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) acts: Acts,
}

/// Everything registered on a bot.
#[derive(Default)]
pub(crate) struct Routes {
    pub(crate) commands: Vec<Reg<(String, Route)>>,
    pub(crate) matchers: Vec<Reg<(Matcher, Route)>>,
    pub(crate) catch_all: Vec<Reg<Arc<dyn Handler>>>,
    pub(crate) calls: Vec<Reg<CallHandler>>,
    pub(crate) before_message: Vec<Reg<BeforeMessageHook>>,
    pub(crate) after_message: Vec<Reg<AfterMessageHook>>,
    pub(crate) before_send: Vec<Reg<BeforeSendHook>>,
    pub(crate) after_send: Vec<Reg<AfterSendHook>>,
    pub(crate) before_event: Vec<Reg<(EventKind, BeforeEventHook)>>,
    pub(crate) after_event: Vec<Reg<(EventKind, AfterEventHook)>>,
}

impl Routes {
    /// Removes every registration of a plugin.
    pub(crate) fn remove_owner(&mut self, owner: u64) {
        fn keep<T>(v: &mut Vec<Reg<T>>, owner: u64) {
            v.retain(|r| r.owner != Some(owner));
        }
        keep(&mut self.commands, owner);
        keep(&mut self.matchers, owner);
        keep(&mut self.catch_all, owner);
        keep(&mut self.calls, owner);
        keep(&mut self.before_message, owner);
        keep(&mut self.after_message, owner);
        keep(&mut self.before_send, owner);
        keep(&mut self.after_send, owner);
        keep(&mut self.before_event, owner);
        keep(&mut self.after_event, owner);
    }

    /// The number of registrations (for tests and the flow inventory).
    pub(crate) fn len(&self) -> usize {
        self.commands.len()
            + self.matchers.len()
            + self.catch_all.len()
            + self.calls.len()
            + self.before_message.len()
            + self.after_message.len()
            + self.before_send.len()
            + self.after_send.len()
            + self.before_event.len()
            + self.after_event.len()
    }
}

/// Matcher constructors, for `bot.when(…)`.
pub mod matcher {
    use super::*;

    /// The text equals one of the words (case-insensitive).
    pub fn keyword<I, S>(words: I) -> Matcher
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Matcher::Keyword(words.into_iter().map(Into::into).collect())
    }

    /// The text matches the regex. Panics only on an invalid literal pattern; use
    /// [`try_regex`] for patterns from input.
    ///
    /// # Panics
    /// When `pattern` is not a valid regex.
    #[allow(clippy::expect_used)]
    pub fn regex(pattern: &str) -> Matcher {
        try_regex(pattern).expect("invalid regex literal in matcher::regex")
    }

    /// The text matches the regex, or the regex error.
    pub fn try_regex(pattern: &str) -> Result<Matcher, regex::Error> {
        Regex::new(pattern).map(Matcher::Regex)
    }

    /// The message carries this kind of media.
    pub fn media(kind: MediaKind) -> Matcher {
        Matcher::Media(kind)
    }

    /// The message is a location.
    pub fn location() -> Matcher {
        Matcher::Location
    }

    /// An interaction with this button id.
    pub fn button(id: impl Into<String>) -> Matcher {
        Matcher::Button(id.into())
    }

    /// Any interaction.
    pub fn interaction() -> Matcher {
        Matcher::AnyInteraction
    }

    /// A function of the context.
    pub fn func(f: impl Fn(&Ctx) -> bool + Send + Sync + 'static) -> Matcher {
        Matcher::Func(Arc::new(f))
    }
}
