//! [`Bot`]: the facade a bot author holds, and the top layer of the runtime. Its methods carry
//! the documentation and delegate to the modules of this layer and the layers below (the
//! layers are listed in the `kernel` module), one concept each:
//!
//! | module | what it does |
//! | --- | --- |
//! | `compose` | the builder: defaults, store, subsystems, in a fixed order |
//! | `lifecycle` | `start()` / `stop()` as ordered steps with rollback and drain |
//! | `inbound` | provider events → gates → dedupe → persistence → group mode → queue |
//! | `dispatcher` | the routing stages, in order |
//! | `plugin_host` | `plug` / `unplug` |
//! | `ops` | trigger, send, broadcast, handoffs |
//! | `signals` | the signals that stop the bot with a drain |
//! | `forwards` | with hand-over: this replica's lease and the draining of its forward queue (non-persistent flows) |
//!
//! Below: the kernel (`Kernel`, `Ctx`, routes, queues, gates), the outbound path (sends and
//! edits through hooks, pacing, ledger, parts and the durable outbox; presence; the
//! interaction ack; `ctx.stream()`), durable inbound processing, and the flows.
//!
//! A `Bot` is cheap to clone. A plugin receives a *scoped* `Bot` (same kernel, its own owner
//! tag), so whatever it registers is removed by `unplug`.

pub(crate) mod compose;
pub(crate) mod dispatcher;
pub(crate) mod forwards;
pub(crate) mod inbound;
pub(crate) mod leader;
pub(crate) mod lifecycle;
pub(crate) mod ops;
pub(crate) mod plugin_host;
pub(crate) mod signals;
pub(crate) mod turns;

use std::future::Future;
use std::sync::Arc;

use botmesh_durability::Store;
use tokio::sync::broadcast;

pub use crate::kernel::context::Ctx;
pub use crate::kernel::lang::{LangResolver, normalize as normalize_lang};
pub use crate::kernel::lifecycle::LifecycleStep;
pub use crate::kernel::routes::{
    BoxFuture, Handler, HookFlow, Matcher, SendDecision, SendDraft, SentInfo, matcher,
};
pub use crate::kernel::{Bot, RunState};
pub use crate::outbound::stream::ReplyStream;
pub use crate::outbound::{KeyRule, SendOutcome, part_key, split_text};
pub use compose::BotBuilder;
pub use lifecycle::StopOptions;
pub use ops::{BroadcastOptions, BroadcastReport};
pub use plugin_host::Plugin;

use crate::error::{BotError, HandlerError, HandlerResult};
use crate::events::BotEvent;
use crate::kernel::routes::{self, Acts, Reg, Route};
use crate::message::{ChatId, Outgoing, UserId};
use crate::metrics::BotMetrics;
use crate::provider::{CallEvent, EventKind, Provider, ProviderEvent, TransportStatus};

impl Bot {
    /// Starts building a bot on a provider.
    pub fn builder(provider: impl Provider) -> BotBuilder {
        BotBuilder::new(Arc::new(provider))
    }

    /// Starts building a bot on a shared provider.
    pub fn builder_arc(provider: Arc<dyn Provider>) -> BotBuilder {
        BotBuilder::new(provider)
    }

    fn reg<T>(&self, item: T) -> Reg<T> {
        Reg {
            owner: self.owner,
            item,
        }
    }

    fn routes_mut(&self) -> std::sync::RwLockWriteGuard<'_, routes::Routes> {
        self.kernel
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }

    // ----- routes -----

    /// Routes `/name` (any configured prefix) to `handler`. Commands are tried first.
    pub fn command(&self, name: &str, handler: impl Handler) -> &Self {
        self.route_command(name, handler, Acts::Freely)
    }

    /// Routes what `matcher` accepts to `handler` (matchers are tried in registration order,
    /// after commands and conversations; the first match wins).
    pub fn when(&self, matcher: Matcher, handler: impl Handler) -> &Self {
        self.route_when(matcher, handler, Acts::Freely)
    }

    /// [`command`](Self::command), saying what the handler does (a flow's start trigger only
    /// starts its flow).
    pub(crate) fn route_command(&self, name: &str, handler: impl Handler, acts: Acts) -> &Self {
        let name = name.trim_start_matches('/').to_ascii_lowercase();
        let handler = Arc::new(handler);
        let reg = self.reg((name, Route { handler, acts }));
        self.routes_mut().commands.push(reg);
        self
    }

    /// [`when`](Self::when), saying what the handler does.
    pub(crate) fn route_when(&self, matcher: Matcher, handler: impl Handler, acts: Acts) -> &Self {
        let handler = Arc::new(handler);
        let reg = self.reg((matcher, Route { handler, acts }));
        self.routes_mut().matchers.push(reg);
        self
    }

    /// Routes every message (not interactions) that reaches the matcher stage at this point
    /// of the matcher order.
    pub fn on_message(&self, handler: impl Handler) -> &Self {
        self.when(matcher::func(|ctx| ctx.message().is_some()), handler)
    }

    /// Handles what no other route took (the last registered catch-all wins).
    pub fn catch_all(&self, handler: impl Handler) -> &Self {
        let reg = self.reg(Arc::new(handler) as Arc<dyn Handler>);
        self.routes_mut().catch_all.push(reg);
        self
    }

    /// Handles incoming calls (after the access and handoff gates and the `call` hooks).
    pub fn on_call<F, Fut>(&self, f: F) -> &Self
    where
        F: Fn(CallEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let reg = self.reg(
            Arc::new(move |c| Box::pin(f(c)) as BoxFuture<HandlerResult>) as routes::CallHandler,
        );
        self.routes_mut().calls.push(reg);
        self
    }

    // ----- hooks -----

    /// A hook before routing: return `HookFlow::Stop` to drop the message.
    pub fn before_message<F, Fut>(&self, f: F) -> &Self
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HookFlow, HandlerError>> + Send + 'static,
    {
        let reg = self
            .reg(Arc::new(move |c| Box::pin(f(c)) as BoxFuture<_>) as routes::BeforeMessageHook);
        self.routes_mut().before_message.push(reg);
        self
    }

    /// A hook after routing.
    pub fn after_message<F, Fut>(&self, f: F) -> &Self
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let reg =
            self.reg(Arc::new(move |c| Box::pin(f(c)) as BoxFuture<_>) as routes::AfterMessageHook);
        self.routes_mut().after_message.push(reg);
        self
    }

    /// A hook before every send and edit: rewrite the draft or abort it.
    pub fn before_send<F, Fut>(&self, f: F) -> &Self
    where
        F: Fn(SendDraft) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = SendDecision> + Send + 'static,
    {
        let reg =
            self.reg(Arc::new(move |d| Box::pin(f(d)) as BoxFuture<_>) as routes::BeforeSendHook);
        self.routes_mut().before_send.push(reg);
        self
    }

    /// A hook after every send and edit that went out.
    pub fn after_send<F, Fut>(&self, f: F) -> &Self
    where
        F: Fn(SentInfo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let reg =
            self.reg(Arc::new(move |s| Box::pin(f(s)) as BoxFuture<_>) as routes::AfterSendHook);
        self.routes_mut().after_send.push(reg);
        self
    }

    /// A hook before a provider event of `kind` (call, reaction, poll, group, presence,
    /// status) becomes a bot event; `HookFlow::Stop` swallows it.
    pub fn before_event<F, Fut>(&self, kind: EventKind, f: F) -> &Self
    where
        F: Fn(ProviderEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HookFlow> + Send + 'static,
    {
        let hook = Arc::new(move |e| Box::pin(f(e)) as BoxFuture<_>) as routes::BeforeEventHook;
        let reg = self.reg((kind, hook));
        self.routes_mut().before_event.push(reg);
        self
    }

    /// A hook after a provider event of `kind` became a bot event.
    pub fn after_event<F, Fut>(&self, kind: EventKind, f: F) -> &Self
    where
        F: Fn(ProviderEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let hook = Arc::new(move |e| Box::pin(f(e)) as BoxFuture<_>) as routes::AfterEventHook;
        let reg = self.reg((kind, hook));
        self.routes_mut().after_event.push(reg);
        self
    }

    // ----- events and metrics -----

    /// Calls `listener` for every bot event, synchronously (keep it short).
    pub fn on_event(&self, listener: impl Fn(&BotEvent) + Send + Sync + 'static) -> &Self {
        self.kernel
            .events
            .add_listener(self.owner, Arc::new(listener));
        self
    }

    /// A receiver of every bot event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<BotEvent> {
        self.kernel.events.subscribe()
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> BotMetrics {
        self.kernel.counters.snapshot()
    }

    // ----- plugins -----

    /// Installs a plugin: what it registers is tagged and removed by [`unplug`](Self::unplug).
    pub async fn plug(&self, plugin: impl Plugin) -> Result<(), BotError> {
        plugin_host::plug(self, &plugin).await
    }

    /// Removes everything a plugin registered.
    pub fn unplug(&self, name: &str) -> Result<(), BotError> {
        plugin_host::unplug(self, name)
    }

    /// The number of routes and hooks registered (all owners).
    pub fn registrations(&self) -> usize {
        self.kernel
            .routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    // ----- lifecycle -----

    /// Starts the bot: storage, the durability backend (with durability), restore, features,
    /// transport, custom steps. On failure the started steps are rolled back in reverse order.
    pub async fn start(&self) -> Result<(), BotError> {
        lifecycle::start(self).await
    }

    /// Stops the bot without draining: queued work not yet started is dropped (its journaled
    /// messages are replayed at the next start), running handlers get up to
    /// [`BotConfig::stop_timeout`](crate::config::BotConfig::stop_timeout) to end, then are
    /// aborted. Once it returns, no handler of this bot runs or sends.
    pub async fn stop(&self) -> Result<(), BotError> {
        lifecycle::stop(self, StopOptions::default()).await
    }

    /// Stops the bot with options (e.g. a drain).
    pub async fn stop_with(&self, opts: StopOptions) -> Result<(), BotError> {
        lifecycle::stop(self, opts).await
    }

    /// Starts, runs until the provider's input ends or the process is told to stop (Ctrl-C,
    /// and on Unix SIGTERM and SIGHUP: what `docker stop`, systemd and Kubernetes send), then
    /// stops with a drain of up to
    /// [`BotConfig::drain_timeout`](crate::config::BotConfig::drain_timeout): no new message is
    /// accepted (a webhook answers 503, so the channel redelivers it later), the accepted ones
    /// are handled and their replies sent, and what has not settled by then is left to the
    /// journals for the next start.
    pub async fn run(&self) -> Result<(), BotError> {
        self.start().await?;
        let mut ended = self.kernel.input_ended.subscribe();
        tokio::select! {
            _ = ended.wait_for(|e| *e) => tracing::info!("input ended: stopping"),
            signal = signals::stop_requested() => tracing::info!(%signal, "stopping with a drain"),
        }
        self.stop_with(StopOptions {
            drain: true,
            timeout: self.kernel.config.drain_timeout,
        })
        .await
    }

    /// Waits until every queued and running piece of work has settled.
    pub async fn idle(&self) {
        self.kernel.queues.tracker.wait_idle().await;
    }

    /// Where the bot is in its lifecycle.
    pub fn run_state(&self) -> RunState {
        self.kernel.run_state()
    }

    /// The transport's state as the provider last reported it.
    pub fn transport_status(&self) -> TransportStatus {
        self.kernel.transport_status()
    }

    // ----- operations -----

    /// Sends to a chat outside any handler (keyed by `outgoing`'s explicit key, or randomly).
    pub async fn send(
        &self,
        chat: impl Into<ChatId>,
        outgoing: impl Into<Outgoing>,
    ) -> Result<SendOutcome, BotError> {
        ops::send(self, chat.into(), outgoing.into()).await
    }

    /// Sends one message to many chats, `concurrency` at a time; cancelled by `stop()`.
    pub async fn broadcast<I, C>(
        &self,
        chats: I,
        outgoing: impl Into<Outgoing>,
        opts: BroadcastOptions,
    ) -> BroadcastReport
    where
        I: IntoIterator<Item = C>,
        C: Into<ChatId>,
    {
        ops::broadcast(
            self,
            chats.into_iter().map(Into::into).collect(),
            outgoing.into(),
            opts,
        )
        .await
    }

    /// Runs `handler` for a chat as if the chat had written: access lists, the chat's queue
    /// slot, the handoff gate and language resolution apply; dedupe, persistence, message
    /// hooks and matchers do not. Returns once the handler ran.
    pub async fn trigger(
        &self,
        chat: impl Into<ChatId>,
        handler: impl Handler,
    ) -> Result<(), BotError> {
        ops::trigger(self, chat.into(), Arc::new(handler)).await
    }

    /// Hands a chat to a human: the bot stops answering it until [`release`](Self::release).
    pub async fn handoff(
        &self,
        chat: impl Into<ChatId>,
        agent: Option<String>,
        reason: Option<String>,
    ) -> Result<(), BotError> {
        ops::handoff(self, chat.into(), agent, reason).await
    }

    /// Ends a handoff; `true` when there was one.
    pub async fn release(&self, chat: impl Into<ChatId>) -> Result<bool, BotError> {
        ops::release(self, &chat.into()).await
    }

    /// Whether a chat is handed off.
    pub fn is_handed_off(&self, chat: &ChatId) -> bool {
        self.kernel.gates.is_handed_off(chat)
    }

    /// Refuses a sender from now on.
    pub fn block_user(&self, user: impl Into<UserId>) {
        let user = user.into();
        self.kernel.gates.update_access(|a| {
            a.block_users.insert(user);
        });
    }

    /// Admits a sender again.
    pub fn unblock_user(&self, user: &UserId) {
        self.kernel.gates.update_access(|a| {
            a.block_users.remove(user);
        });
    }

    /// The store.
    pub fn store(&self) -> Arc<dyn Store> {
        self.kernel.store.clone()
    }

    /// The provider.
    pub fn provider(&self) -> Arc<dyn Provider> {
        self.kernel.provider.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &crate::config::BotConfig {
        &self.kernel.config
    }
}
