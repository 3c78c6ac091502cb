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
//! | module | what it does |
//! | --- | --- |
//! | `api` | the [`Flow`] trait the macro implements, [`FlowInfo`], [`FlowError`] |
//! | `cx` | [`FlowCx`]: sends with site keys, asks, calls, the step's input and outcome |
//! | `ask` | [`Ask`], [`Answer`], [`Interrupt`] |
//! | `effect` | `cx.effect`, `cx.now`, `cx.random`: recorded once per step |
//! | `registry` | type erasure, registration, `bot.flow` / `start_flow` / `cancel_flow` |
//! | `executor` | stepping a chat's flow stack, idle timeouts |
//! | `checkpoint` | saving and loading stacks, the version policy |
//!
//! A chat's next message while a flow waits is the flow's answer, unless it is a registered
//! command (commands route first). To let users cancel, register a command that calls
//! [`Bot::cancel_flow`](crate::Bot::cancel_flow).

mod api;
mod ask;
pub(crate) mod checkpoint;
pub(crate) mod commit;
mod cx;
mod effect;
mod executor;
pub(crate) mod registry;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

pub use api::{
    __Codec, __StepResult, __codec, __dec, __decode, __done, __enc, __encode, __erase_fn, __field,
    __finish, __output_of, __split_state, __take, __unknown_state, __wait, ByConstructor, ByValue,
    Checkpointable, DEFAULT_RESTART_NOTICE, Flow, FlowError, FlowFn, FlowInfo, FlowResult,
    IntoFlow, MigrateFn, Remaining, StartTrigger, StateInfo, Step, VersionPolicy, info, mermaid,
};
pub use ask::{Answer, Ask, Interrupt};
pub use cx::{Call, FlowCx, FlowSend};
pub use registry::{Erased, erase};

use crate::error::BotError;
use crate::kernel::Kernel;
use crate::kernel::context::Ctx;
use crate::message::ChatId;
use executor::Stack;

/// Re-exports for generated code.
#[doc(hidden)]
pub mod __private {
    pub use serde;
    pub use serde_json;
}

/// The flow executor's state inside a bot.
#[derive(Default)]
pub(crate) struct FlowRuntime {
    registry: RwLock<HashMap<&'static str, Erased>>,
    active: Mutex<HashMap<ChatId, Stack>>,
    generations: Mutex<HashMap<ChatId, u64>>,
    firing: Mutex<HashSet<ChatId>>,
    /// Chats whose flow ended while its checkpoint could not be deleted (and no message will
    /// be replayed to end it again): the leftover checkpoint must not bring the flow back. The
    /// delete is tried again before the chat's next flow stage; a new checkpoint clears it.
    /// In memory: a restart in another process finds the checkpoint and resumes it.
    ended: Mutex<HashSet<ChatId>>,
    /// The last millisecond a run started from code took, and how many took it.
    code_runs: Mutex<(i64, u32)>,
    kernel: OnceLock<Weak<Kernel>>,
    ticker: AtomicBool,
}

impl std::fmt::Debug for FlowRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowRuntime")
            .field("flows", &self.read_registry().len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Kernel {
    /// The flows' state in this kernel (which keeps it as `dyn Any`: the flows are a layer
    /// above the kernel).
    pub(crate) fn flows(&self) -> &FlowRuntime {
        match self.flow_state.downcast_ref::<FlowRuntime>() {
            Some(runtime) => runtime,
            None => unreachable!("`BotBuilder::build` gives every kernel a `FlowRuntime`"),
        }
    }
}

impl FlowRuntime {
    fn read_registry(&self) -> std::sync::RwLockReadGuard<'_, HashMap<&'static str, Erased>> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers the kernel (for queued timeouts and restarts) and starts the timeout ticker.
    pub(crate) fn bind(&self, k: &Arc<Kernel>) {
        let _ = self.kernel.set(Arc::downgrade(k));
        self.spawn_ticker();
    }

    fn spawn_ticker(&self) {
        let Some(weak) = self.kernel.get().cloned() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err()
            || self.ticker.swap(true, Ordering::SeqCst)
        {
            return;
        }
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(k) = weak.upgrade() else { return };
                if k.run_state() == crate::kernel::RunState::Running {
                    executor::fire_due(&k);
                }
            }
        });
    }

    /// Registers `flow` and the sub-flows it calls; registering one again does nothing. Refuses
    /// another flow of a name already taken (checkpoints find their flow by name).
    pub(crate) fn register(&self, flow: Erased) -> Result<(), DuplicateFlow> {
        let name = flow.0.info().name;
        if let Some(known) = self.read_registry().get(name) {
            if known.0.state_type() == flow.0.state_type() {
                return Ok(());
            }
            return Err(DuplicateFlow { name });
        }
        let callees = flow.0.callees();
        self.registry
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, flow);
        for c in callees {
            self.register(c)?;
        }
        Ok(())
    }

    pub(crate) fn lookup(&self, name: &str) -> Option<Erased> {
        self.read_registry().get(name).cloned()
    }

    pub(crate) fn take(&self, chat: &ChatId) -> Option<Stack> {
        lock(&self.firing).remove(chat);
        lock(&self.active).remove(chat)
    }

    pub(crate) fn put(&self, chat: &ChatId, stack: Stack) {
        lock(&self.active).insert(chat.clone(), stack);
    }

    pub(crate) fn generation(&self, chat: &ChatId) -> u64 {
        lock(&self.generations).get(chat).copied().unwrap_or(0)
    }

    fn bump(&self, chat: &ChatId) {
        *lock(&self.generations).entry(chat.clone()).or_insert(0) += 1;
    }

    pub(crate) fn active_name(&self, chat: &ChatId) -> Option<&'static str> {
        lock(&self.active).get(chat).and_then(Stack::top_name)
    }

    pub(crate) fn step_of(&self, chat: &ChatId) -> Option<u64> {
        lock(&self.active).get(chat).map(|s| s.step)
    }

    pub(crate) fn deadline_of(&self, chat: &ChatId) -> Option<i64> {
        lock(&self.active).get(chat).and_then(Stack::deadline)
    }

    /// The id of a run started from code at `now_ms`: the millisecond, then `-2`, `-3`, … for
    /// the further runs started within it.
    pub(crate) fn run_from_code(&self, now_ms: i64) -> String {
        let mut last = lock(&self.code_runs);
        if last.0 == now_ms {
            last.1 += 1;
            format!("{now_ms}-{}", last.1)
        } else {
            *last = (now_ms, 1);
            now_ms.to_string()
        }
    }

    /// The chat's flow ended but its checkpoint is still stored (see `ended`).
    pub(crate) fn mark_ended(&self, chat: &ChatId) {
        lock(&self.ended).insert(chat.clone());
    }

    /// The chat's checkpoint was deleted or replaced.
    pub(crate) fn clear_ended(&self, chat: &ChatId) {
        lock(&self.ended).remove(chat);
    }

    pub(crate) fn is_ended(&self, chat: &ChatId) -> bool {
        lock(&self.ended).contains(chat)
    }

    pub(crate) fn clear_firing(&self, chat: &ChatId) {
        lock(&self.firing).remove(chat);
    }

    /// Chats whose deadline passed, that are not already queued for a timeout and not `held`.
    pub(crate) fn due(&self, now: i64, held: impl Fn(&ChatId) -> bool) -> Vec<(ChatId, u64)> {
        let active = lock(&self.active);
        let mut firing = lock(&self.firing);
        let mut out: Vec<(ChatId, u64)> = active
            .iter()
            .filter(|(c, s)| {
                s.deadline().is_some_and(|d| d <= now) && !firing.contains(*c) && !held(c)
            })
            .map(|(c, s)| (c.clone(), s.step))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        for (c, _) in &out {
            firing.insert(c.clone());
        }
        out
    }
}

/// Two different flows under one name.
#[derive(Debug, thiserror::Error)]
#[error(
    "two different flows are named `{name}` (in two modules): checkpoints find their flow by its function name, so rename one of them"
)]
pub(crate) struct DuplicateFlow {
    name: &'static str,
}

/// The "active conversation" stage: a flow waiting in this chat takes the message as its answer.
pub(crate) async fn active_conversation(ctx: &Ctx) -> bool {
    executor::active(ctx).await
}

/// The "dormant resume" stage: a persistent flow checkpointed in the store resumes.
pub(crate) async fn dormant_resume(ctx: &Ctx) -> bool {
    executor::dormant(ctx).await
}

/// Restores persistent conversations on `start()`.
pub(crate) async fn restore(k: &Kernel) -> Result<(), BotError> {
    k.flows().spawn_ticker();
    for cp in k.store.checkpoints().await? {
        let chat = ChatId::from(cp.chat.as_str());
        if executor::ended_leftover(k, &chat).await {
            continue;
        }
        match checkpoint::load(k, cp).await {
            checkpoint::Loaded::Ready(stack) => k.flows().put(&chat, stack),
            checkpoint::Loaded::Gone => {}
            // Restarted by the chat's next message (with the notice), which then starts the
            // flow instead of answering its first question.
            checkpoint::Loaded::Restart { .. } => {}
        }
    }
    Ok(())
}

/// Aborts in-memory conversations on `stop()` (checkpoints are kept).
pub(crate) async fn abort_all(k: &Kernel) {
    let chats: Vec<ChatId> = lock(&k.flows().active).drain().map(|(c, _)| c).collect();
    for c in &chats {
        k.flows().bump(c);
    }
    lock(&k.flows().firing).clear();
}

/// Ends every flow of a chat (the user blocked the bot, or `cancel_flow`).
pub(crate) async fn end_chat(k: &Kernel, chat: &ChatId, reason: &str) {
    k.flows().bump(chat);
    match k.flows().take(chat) {
        Some(stack) => executor::end_stack(k, chat, stack, reason).await,
        None => {
            if let Ok(Some(cp)) = k.store.checkpoint(chat.as_str()).await {
                checkpoint::drop_checkpoint(k, chat.as_str()).await;
                k.events.emit(crate::events::BotEvent::Flow {
                    chat: chat.clone(),
                    flow: cp.flow,
                    what: format!("ended:{reason}"),
                });
            }
        }
    }
}
