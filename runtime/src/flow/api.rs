//! The contract between `#[flow]`-generated code and the executor: the [`Flow`] trait and its
//! type-erased form ([`Erased`]: in-memory states are `Box<dyn Any + Send>`, checkpointed
//! states JSON), what a flow declares about itself ([`FlowInfo`], [`StartTrigger`],
//! [`VersionPolicy`]), what a step receives ([`FlowCx`], its input) and returns ([`Step`], and
//! what it asks the executor for), and the flow errors ([`FlowError`], [`FlowResult`]).
//!
//! The trait, its erased handle and the context name each other, so they live together; the
//! context's sends and asks are in `cx`, its effects in `effect`. Bot authors do not implement
//! [`Flow`] by hand (they may: the executor only relies on this trait); the macro emits one
//! impl per `#[flow]` function. Nothing here runs a flow: the executor does.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::HandlerError;
use crate::flow::ask::{Answer, Interrupt};
use crate::flow::sends::StepBuffer;
use crate::kernel::context::Ctx;
use crate::message::{ChatId, UserId};
use crate::outbound::KeyRule;

/// What a flow function returns: `Ok(value)` ends the flow (a sub-flow hands `value` to its
/// caller), `Err` ends it with an error (an [`Interrupt`](crate::flow::Interrupt) error ends it
/// as cancelled or timed out, not as a failure).
pub type FlowResult<T = ()> = Result<T, HandlerError>;

/// What one step of a flow did: it suspended at an ask (or a sub-flow call), or it ended.
#[derive(Debug)]
pub enum Step<S, O> {
    /// The flow waits: this is its state.
    Suspend(S),
    /// The flow ended with this value.
    Done(O),
}

/// How a flow starts on its own (besides `bot.start_flow` and `cx.call`).
#[derive(Debug, Clone, Copy)]
pub enum StartTrigger {
    /// Only from code.
    None,
    /// A command: `/name`.
    Command(&'static str),
    /// A keyword: the text equals it, ignoring case and surrounding spaces.
    Keyword(&'static str),
    /// A regex over the text.
    Regex(&'static str),
    /// A matcher function.
    Matcher(fn(&Ctx) -> bool),
}

/// A user's migration of a checkpoint written by another layout: the old state and the old
/// layout fingerprint in, the state for the running code out. A state is JSON named after the
/// identity of the ask (or sub-flow call) it waits at, `{"<identity>": {<kept locals>}}`
/// (`{"age": {"name": "Ann"}}`), so a migration maps asks by identity: rename the key to the
/// ask the conversation should wait at now, and give its locals.
pub type MigrateFn = fn(serde_json::Value, u64) -> Result<serde_json::Value, String>;

/// The notice a conversation restarted by [`VersionPolicy::Restart`] sends first, unless the
/// flow names its own (`on_version_mismatch = restart(notice = "…")`).
pub const DEFAULT_RESTART_NOTICE: &str =
    "This conversation was updated while you were away, so we are starting it again.";

/// What happens to a checkpoint written by another layout of the flow (another layout
/// fingerprint), when it cannot simply resume.
///
/// A checkpoint resumes where it waited, whatever the policy, when the running code still has
/// that ask (same identity), its answer is read the same way (same `parse`/`validate`) and
/// its kept locals decode: event `version_mismatch:resumed`. Otherwise:
///
/// | policy | the checkpoint | the chat's next message | event |
/// | --- | --- | --- | --- |
/// | `Restart` (default) | dropped | starts the flow again after the notice; it is not an answer | `version_mismatch:restarted` |
/// | `Abandon` | dropped | routed as a fresh message | `version_mismatch:abandoned` |
/// | `Migrate(f)` | `f(state, old fingerprint)`, resaved | the answer of the ask `f` chose | `version_mismatch:migrated` (`abandoned` when `f` fails or its state does not decode) |
///
/// A flow with parameters restarts with the parameters it was first started with (its
/// checkpoint keeps them); when they no longer decode (a parameter's type changed), `Restart`
/// abandons it.
#[derive(Debug, Clone, Copy)]
pub enum VersionPolicy {
    /// Drop the checkpoint; the chat's next message starts the flow again from the top
    /// (after `notice`, when there is one) instead of answering a question.
    Restart {
        /// What the user is told first.
        notice: Option<&'static str>,
    },
    /// Drop the checkpoint and end the flow.
    Abandon,
    /// Rewrite the old state with a function (see [`MigrateFn`]).
    Migrate(MigrateFn),
}

impl Default for VersionPolicy {
    fn default() -> Self {
        __RESTART
    }
}

/// What `#[flow]` knows about a flow at compile time.
#[derive(Debug, Clone, Copy)]
pub struct FlowInfo {
    /// The flow's name (the function's name): the prefix of its send sites and its registry key.
    pub name: &'static str,
    /// The layout fingerprint, computed by `#[flow]` from its model of the flow: the sites'
    /// identities, each state's kept locals and their types, answer sides and control
    /// structure. Equal fingerprints: a checkpoint and its keys mean the same in both builds.
    pub layout_hash: u64,
    /// Whether the flow is `#[persistent]` (checkpointed at every suspension).
    pub persistent: bool,
    /// How it starts on its own.
    pub start: StartTrigger,
    /// What to do with a checkpoint of another layout.
    pub on_version_mismatch: VersionPolicy,
    /// The state graph the macro built (states, asks, sends, transitions), as Mermaid.
    pub mermaid: &'static str,
    /// The states, `Start` first.
    pub states: &'static [StateInfo],
}

impl FlowInfo {
    /// The state of this name (`Start`, or the identity of the ask or call it waits at).
    pub fn state(&self, name: &str) -> Option<&'static StateInfo> {
        self.states.iter().find(|s| s.name == name)
    }
}

/// A state of a flow, as `#[flow]` compiled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateInfo {
    /// Its name in checkpoints: `Start`, or the identity of the ask or sub-flow call it waits
    /// at (`ask-1f0c9a2e`, or the author's `.id("age")`).
    pub name: &'static str,
    /// The fingerprint of what an answer there becomes (the ask's `parse`/`validate`, the
    /// call's callee); `0` for `Start`.
    pub answer: u64,
}

/// A conversation compiled into a state machine. `#[flow]` implements it; the executor
/// drives it through type erasure.
pub trait Flow: Send + Sync + Sized + 'static {
    /// The state enum: one variant per suspension point plus `Start`.
    type State: Send + 'static;
    /// What the flow returns to a caller (`cx.call`).
    type Output: Send + 'static;

    /// What the macro knows about the flow.
    fn info() -> FlowInfo;

    /// The start state (carries the flow's arguments). A flow without arguments need not
    /// implement it: its start state is [`fresh`](Flow::fresh)'s.
    ///
    /// # Panics
    ///
    /// When neither this nor `fresh` is implemented (`#[flow]` implements one of them for
    /// every flow).
    fn into_start(self) -> Self::State {
        match Self::fresh() {
            Some(start) => start,
            None => panic!(
                "flow `{}` implements neither `into_start` nor `fresh`",
                Self::info().name
            ),
        }
    }

    /// Runs one step: from `state` to the next suspension or the end.
    fn step(
        cx: &mut FlowCx,
        state: Self::State,
    ) -> impl Future<Output = Result<Step<Self::State, Self::Output>, HandlerError>> + Send + '_;

    /// How a state is saved in a checkpoint: `Some` for a `#[persistent]` flow (`#[flow]`
    /// derives serde on its state enum), `None` for a flow whose state lives in memory only.
    fn codec() -> Option<__Codec<Self::State>> {
        None
    }

    /// Serializes a state (persistent flows; others answer [`FlowError::NotPersistent`]).
    fn encode(state: &Self::State) -> Result<serde_json::Value, FlowError> {
        let flow = Self::info().name;
        let (encode, _) = Self::codec().ok_or(FlowError::NotPersistent { flow })?;
        encode(state).map_err(|reason| FlowError::Encode { flow, reason })
    }

    /// Deserializes a state written by the same layout.
    fn decode(value: serde_json::Value) -> Result<Self::State, FlowError> {
        let flow = Self::info().name;
        let (_, decode) = Self::codec().ok_or(FlowError::NotPersistent { flow })?;
        decode(value).map_err(|reason| FlowError::Decode {
            flow: flow.to_owned(),
            reason,
        })
    }

    /// The start state of a flow without arguments (`None` for a flow with some): what a
    /// start trigger starts, and the `Restart` version policy. `#[flow]` implements it for
    /// a flow without parameters.
    fn fresh() -> Option<Self::State> {
        None
    }

    /// The flow a start trigger starts for the message `ctx` (its arguments built from the
    /// message or the bot's state: `#[flow(start = …, args = build)]`); `None` when a trigger
    /// cannot start it this way (a trigger starts a flow without arguments from
    /// [`fresh`](Flow::fresh)).
    fn from_trigger(ctx: &Ctx) -> Option<Self> {
        let _ = ctx;
        None
    }

    /// The sub-flows this flow calls, registered with it (so a checkpoint that holds one can
    /// be restored).
    fn register_callees(_reg: &mut dyn FnMut(Erased)) {}
}

/// A flow's constructor: the function `#[flow]` leaves in place of the flow function
/// (`order`, `ask_name(greeting)`), returning the flow value. Implemented for functions of up
/// to four arguments that return a [`Flow`].
pub trait FlowFn<Args>: Copy + Send + Sync + 'static {
    /// The flow it makes.
    type Flow: Flow;
}

macro_rules! flow_fn {
    ($($a:ident),*) => {
        impl<F, T: Flow, $($a),*> FlowFn<($($a,)*)> for F
        where
            F: Fn($($a),*) -> T + Copy + Send + Sync + 'static,
        {
            type Flow = T;
        }
    };
}
flow_fn!();
flow_fn!(A1);
flow_fn!(A1, A2);
flow_fn!(A1, A2, A3);
flow_fn!(A1, A2, A3, A4);

/// Marks [`IntoFlow`] for a flow value.
#[derive(Debug)]
pub enum ByValue {}
/// Marks [`IntoFlow`] for a constructor without arguments.
#[derive(Debug)]
pub enum ByConstructor {}

/// What `bot.start_flow` and `cx.call` take: a flow value (`ask_name("Hi".into())`) or the
/// constructor of a flow without arguments (`order`).
pub trait IntoFlow<Marker>: Send + 'static {
    /// The flow.
    type Flow: Flow;
    /// The flow value.
    fn into_flow(self) -> Self::Flow;
}

impl<T: Flow> IntoFlow<ByValue> for T {
    type Flow = T;
    fn into_flow(self) -> T {
        self
    }
}

impl<F, T: Flow> IntoFlow<ByConstructor> for F
where
    F: Fn() -> T + Send + 'static,
{
    type Flow = T;
    fn into_flow(self) -> T {
        self()
    }
}

/// A boxed state or value.
pub(crate) type AnyBox = Box<dyn Any + Send>;
type StepFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Step<AnyBox, AnyBox>, HandlerError>> + Send + 'a>>;

/// The executor's view of a flow.
pub(crate) trait DynFlow: Send + Sync + 'static {
    fn info(&self) -> FlowInfo;
    fn step<'a>(&'a self, cx: &'a mut FlowCx, state: AnyBox) -> StepFuture<'a>;
    fn encode(&self, state: &AnyBox) -> Result<serde_json::Value, FlowError>;
    fn decode(&self, value: serde_json::Value) -> Result<AnyBox, FlowError>;
    fn callees(&self) -> Vec<Erased>;
    fn fresh(&self) -> Option<AnyBox>;
    /// The flow's state type: two flows of one name (in two modules) have two.
    fn state_type(&self) -> std::any::TypeId;
}

/// A type-erased flow handle.
#[derive(Clone)]
pub struct Erased(pub(crate) Arc<dyn DynFlow>);

impl std::fmt::Debug for Erased {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Erased").field(&self.0.info().name).finish()
    }
}

struct Wrap<F>(PhantomData<fn() -> F>);

impl<F: Flow> DynFlow for Wrap<F> {
    fn info(&self) -> FlowInfo {
        F::info()
    }

    fn state_type(&self) -> std::any::TypeId {
        std::any::TypeId::of::<F::State>()
    }

    fn step<'a>(&'a self, cx: &'a mut FlowCx, state: AnyBox) -> StepFuture<'a> {
        Box::pin(async move {
            let state = state.downcast::<F::State>().map_err(|_| {
                Box::new(FlowError::StateType {
                    flow: F::info().name,
                }) as HandlerError
            })?;
            Ok(match F::step(cx, *state).await? {
                Step::Suspend(s) => Step::Suspend(Box::new(s) as AnyBox),
                Step::Done(o) => Step::Done(Box::new(o) as AnyBox),
            })
        })
    }

    fn encode(&self, state: &AnyBox) -> Result<serde_json::Value, FlowError> {
        let s = state
            .downcast_ref::<F::State>()
            .ok_or(FlowError::StateType {
                flow: F::info().name,
            })?;
        F::encode(s)
    }

    fn decode(&self, value: serde_json::Value) -> Result<AnyBox, FlowError> {
        Ok(Box::new(F::decode(value)?))
    }

    fn fresh(&self) -> Option<AnyBox> {
        F::fresh().map(|s| Box::new(s) as AnyBox)
    }

    fn callees(&self) -> Vec<Erased> {
        let mut out = Vec::new();
        F::register_callees(&mut |e| out.push(e));
        out
    }
}

/// The erased handle of a flow type (generated code uses it to list callees).
pub fn erase<F: Flow>() -> Erased {
    Erased(Arc::new(Wrap::<F>(PhantomData)))
}

/// What fed a step.
pub(crate) enum Input {
    /// The flow starts.
    Start,
    /// The chat answered.
    Answer(Answer),
    /// The idle deadline passed.
    Timeout,
    /// Cancelled from outside.
    Cancelled,
    /// A sub-flow returned (or failed).
    Returned(Result<Box<dyn Any + Send>, FlowError>),
}

/// What a suspending step asked the executor for.
pub(crate) enum Pending {
    /// Wait for an answer (with an idle timeout).
    Ask {
        idle: Option<Duration>,
        site: String,
    },
    /// The answer failed validation: the re-ask went out, keep waiting.
    Reask,
    /// Run a sub-flow first.
    Call {
        flow: Erased,
        start: Box<dyn Any + Send>,
    },
}

/// Uses of each site within one step, across its frames.
pub(crate) type Occurrences = Arc<Mutex<HashMap<String, u32>>>;

/// A flow's context: `cx` in `async fn order(cx: &mut FlowCx) -> FlowResult`.
pub struct FlowCx {
    pub(crate) ctx: Ctx,
    pub(crate) flow: &'static str,
    pub(crate) run: String,
    pub(crate) step: u64,
    pub(crate) inbound: String,
    pub(crate) input: Mutex<Option<Input>>,
    pub(crate) pending: Mutex<Option<Pending>>,
    /// Uses of each send and effect site in this step, shared by every frame the step runs
    /// (a sub-flow called twice in one step counts on where the first call stopped).
    pub(crate) occurrences: Occurrences,
    /// The effect records this step read or wrote, as (scope, key): deleted with the step's
    /// commit (see `effect`).
    pub(crate) effects: Mutex<Vec<(String, String)>>,
    /// The step's sends, when the step commits in one transaction (see `commit`).
    pub(crate) buffer: Option<Arc<StepBuffer>>,
}

impl std::fmt::Debug for FlowCx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowCx")
            .field("flow", &self.flow)
            .field("chat", self.ctx.chat())
            .field("run", &self.run)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FlowCx {
    pub(crate) fn new(ctx: Ctx, flow: &'static str, run: String, step: u64, input: Input) -> Self {
        let inbound = match ctx.inbound_id() {
            Some(id) => id.to_owned(),
            None => format!("{}/flow:{run}:{step}", ctx.chat()),
        };
        Self {
            ctx,
            flow,
            run,
            step,
            inbound,
            input: Mutex::new(Some(input)),
            pending: Mutex::new(None),
            occurrences: Occurrences::default(),
            effects: Mutex::new(Vec::new()),
            buffer: None,
        }
    }

    /// The handler context of the message that fed this step.
    pub fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// The chat.
    pub fn chat(&self) -> &ChatId {
        self.ctx.chat()
    }

    /// Who wrote the message that fed this step.
    pub fn sender(&self) -> &UserId {
        self.ctx.sender()
    }

    /// The flow's name.
    pub fn flow_name(&self) -> &'static str {
        self.flow
    }

    /// The step counter of this flow run (1 for the first step).
    pub fn step_number(&self) -> u64 {
        self.step
    }

    /// The key a send at `site` gets now (counts the use).
    pub(crate) fn site_key(&self, site: &str) -> KeyRule {
        let mut occ = lock(&self.occurrences);
        let n = occ.entry(site.to_owned()).or_insert(0);
        *n += 1;
        KeyRule::Site {
            inbound: Some(self.inbound.clone()),
            site: format!("{site}#{n}"),
        }
    }

    pub(crate) fn next_occurrence(&self, site: &str) -> u32 {
        let mut occ = lock(&self.occurrences);
        let n = occ.entry(site.to_owned()).or_insert(0);
        *n += 1;
        *n
    }

    /// Calls a sub-flow; `.await` it inside a `#[flow]`: the caller waits until the sub-flow
    /// ends and gets its value.
    pub fn call<M, I: IntoFlow<M>>(&self, flow: I) -> Call<I::Flow> {
        Call(flow.into_flow())
    }

    /// Records a sub-flow call (generated code at a suspension).
    #[doc(hidden)]
    pub fn __call<F: Flow>(&mut self, call: Call<F>) {
        *lock(&self.pending) = Some(Pending::Call {
            flow: erase::<F>(),
            start: Box::new(call.0.into_start()),
        });
    }

    pub(crate) fn take_pending(&self) -> Option<Pending> {
        lock(&self.pending).take()
    }
}

/// A sub-flow call: `.await` it inside a `#[flow]`.
#[derive(Debug)]
pub struct Call<F>(F);

/// The state graph `#[flow]` built for a flow, as Mermaid: `botmesh::flow::mermaid(order)`.
pub fn mermaid<A, F: FlowFn<A>>(_flow: F) -> &'static str {
    <F::Flow as Flow>::info().mermaid
}

/// What `#[flow]` knows about a flow: `botmesh::flow::info(order)`.
pub fn info<A, F: FlowFn<A>>(_flow: F) -> FlowInfo {
    <F::Flow as Flow>::info()
}

/// The output type of a flow constructor (generated code).
#[doc(hidden)]
pub fn __output_of<A, F: FlowFn<A>>(
    _flow: F,
) -> std::marker::PhantomData<<F::Flow as Flow>::Output> {
    std::marker::PhantomData
}

/// The erased handle of a flow constructor (generated code).
#[doc(hidden)]
pub fn __erase_fn<A, F: FlowFn<A>>(_flow: F) -> Erased {
    erase::<F::Flow>()
}

/// Errors of flows, each naming the flow (and chat) concerned.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// A state could not be serialized for a checkpoint.
    #[error("flow `{flow}`: cannot encode its state: {reason}")]
    Encode {
        /// The flow.
        flow: &'static str,
        /// Why.
        reason: String,
    },
    /// A checkpoint's state could not be decoded.
    #[error("flow `{flow}`: cannot decode a checkpoint: {reason}")]
    Decode {
        /// The flow.
        flow: String,
        /// Why.
        reason: String,
    },
    /// A non-persistent flow was asked to encode its state.
    #[error("flow `{flow}` is not #[persistent]: its state lives in memory only")]
    NotPersistent {
        /// The flow.
        flow: &'static str,
    },
    /// A checkpoint names a flow this bot does not know.
    #[error(
        "chat {chat}: the checkpoint names flow `{flow}`, which is not registered (bot.flow / bot.register_flow)"
    )]
    Unknown {
        /// The chat.
        chat: String,
        /// The flow.
        flow: String,
    },
    /// The executor handed a flow a state of the wrong type (a bug).
    #[error("flow `{flow}`: the executor passed a state of another type")]
    StateType {
        /// The flow.
        flow: &'static str,
    },
    /// A sub-flow ended with an error.
    #[error("sub-flow `{flow}` in chat {chat} failed: {reason}")]
    Subflow {
        /// The sub-flow.
        flow: String,
        /// The chat.
        chat: String,
        /// Its error.
        reason: String,
    },
    /// A sub-flow was interrupted (cancelled or timed out).
    #[error("sub-flow `{flow}` ended: {interrupt}")]
    SubflowInterrupted {
        /// The sub-flow.
        flow: String,
        /// How.
        interrupt: Interrupt,
    },
    /// The store did not take a checkpoint.
    #[error("flow `{flow}` in chat {chat}: the checkpoint was not written: {source}")]
    CheckpointWrite {
        /// The flow (its top frame).
        flow: String,
        /// The chat.
        chat: String,
        /// The store's error.
        #[source]
        source: botmesh_durability::StoreError,
    },
    /// Coordination refused the checkpoint: this replica lost the chat's turn.
    #[error("flow `{flow}` in chat {chat}: checkpoint refused: {source}")]
    TurnLost {
        /// The flow (its top frame).
        flow: String,
        /// The chat.
        chat: String,
        /// The refusal (`Fenced`, naming the chat and the tokens).
        #[source]
        source: Box<botmesh_durability::coordination::CoordinationError>,
    },
    /// The store failed while recording an effect.
    #[error("flow `{flow}` in chat {chat}: effect record `{key}`: {reason}")]
    Effect {
        /// The flow.
        flow: &'static str,
        /// The chat.
        chat: String,
        /// The record key.
        key: String,
        /// Why.
        reason: String,
    },
}

/// Maps what the flow body produced to a step result (generated code calls this).
#[doc(hidden)]
pub fn __done<S, O>(r: FlowResult<O>) -> Result<Step<S, O>, HandlerError> {
    r.map(Step::Done)
}

/// The answer (or sub-flow output) a resumed step was fed (generated code). The lowering
/// reads it exactly once per step (in a loop resumed mid-iteration, in the rest of that
/// iteration, which runs once), through a slot so that a loop's body may name it.
#[doc(hidden)]
#[derive(Debug)]
pub struct __Resumed<T>(pub(crate) Option<T>);

impl<T> __Resumed<T> {
    /// Takes the value (generated code).
    #[doc(hidden)]
    pub fn __take(&mut self) -> T {
        match self.0.take() {
            Some(v) => v,
            None => unreachable!("#[flow] lowering reads a resumed answer once"),
        }
    }
}

/// The arm of the states a segment of the step function does not resume (each state is
/// resumed in its own segment; generated code).
#[doc(hidden)]
pub fn __later<T>() -> T {
    unreachable!("#[flow] lowering resumes a later state in its own segment")
}

/// `Some`, for generated patterns (`let __botmesh::__Some(x) = … else { … }`).
#[doc(hidden)]
pub use ::core::option::Option::Some as __Some;

/// How a state is saved (generated code): to JSON, from JSON.
#[doc(hidden)]
pub type __Codec<T> = (
    fn(&T) -> Result<serde_json::Value, String>,
    fn(serde_json::Value) -> Result<T, String>,
);

/// What `Flow::codec` returns (generated code).
#[doc(hidden)]
pub type __MaybeCodec<F> = Option<__Codec<<F as Flow>::State>>;

/// What `Flow::fresh` returns (generated code).
#[doc(hidden)]
pub type __Fresh<F> = Option<<F as Flow>::State>;

/// A flow's [`FlowInfo`], its fields in order (generated code, which names no field).
#[doc(hidden)]
pub const fn __info(
    name: &'static str,
    layout_hash: u64,
    persistent: bool,
    start: StartTrigger,
    on_version_mismatch: VersionPolicy,
    mermaid: &'static str,
    states: &'static [StateInfo],
) -> FlowInfo {
    FlowInfo {
        name,
        layout_hash,
        persistent,
        start,
        on_version_mismatch,
        mermaid,
        states,
    }
}

/// A state's [`StateInfo`] (generated code).
#[doc(hidden)]
pub const fn __state(name: &'static str, answer: u64) -> StateInfo {
    StateInfo { name, answer }
}

/// The start state's [`StateInfo`] (generated code).
#[doc(hidden)]
pub const __START: StateInfo = __state("Start", 0);

/// The default [`VersionPolicy`] (generated code).
#[doc(hidden)]
pub const __RESTART: VersionPolicy = VersionPolicy::Restart {
    notice: Some(DEFAULT_RESTART_NOTICE),
};

/// The answer side of an ask, rebuilt when the flow resumes (generated code).
#[doc(hidden)]
pub fn __resumed() -> crate::flow::Ask<Answer> {
    crate::flow::Ask::__resumed()
}

/// What a flow's step returns (generated code).
#[doc(hidden)]
pub type __StepResult<F> = Result<Step<<F as Flow>::State, <F as Flow>::Output>, HandlerError>;

/// The step suspends in `state` (generated code).
#[doc(hidden)]
pub fn __wait<S, O>(state: S) -> Result<Step<S, O>, HandlerError> {
    Ok(Step::Suspend(state))
}

/// The codec of a persistent flow's state (generated code): `#[flow]` derives serde on the
/// state enum, generic over the kept locals' types, and calls this in a function whose
/// bounds name each type where the flow writes it, so that a type that cannot be saved is
/// reported once, at that local.
#[doc(hidden)]
pub fn __codec<T: Checkpointable>() -> __Codec<T> {
    (
        |v| serde_json::to_value(v).map_err(|e| e.to_string()),
        |v| serde_json::from_value(v).map_err(|e| e.to_string()),
    )
}

/// The items a flow's `for` loop has not reached yet. `#[flow]` runs a `for` loop that holds
/// an ask over one of these, so that the items still to come are kept in the flow's state
/// (and its checkpoint, as a JSON array) across the ask.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(
    transparent,
    bound(
        serialize = "C::Item: serde::Serialize",
        deserialize = "C::Item: serde::de::DeserializeOwned"
    )
)]
pub struct Remaining<C: IntoIterator> {
    items: std::collections::VecDeque<C::Item>,
}

impl<C: IntoIterator> Remaining<C> {
    /// All the items of `items`, none reached yet.
    pub fn new(items: C) -> Self {
        Self {
            items: items.into_iter().collect(),
        }
    }

    /// The next item, taken out.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<C::Item> {
        self.items.pop_front()
    }

    /// How many items are left.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no item is left.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Marks a type that may be held across an ask in a `#[persistent]` flow.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be kept in a persistent flow's checkpoint",
    label = "this local lives across an ask, so the flow saves it in its checkpoint",
    note = "a #[persistent] flow saves every local that lives across an ask, so its type must be Serialize + DeserializeOwned: derive both for a type of your own; a handle (a file, a connection, a lock) cannot be saved: keep what reopens it (a path, an id) across the ask and open it again after, or end its use before the ask"
)]
pub trait Checkpointable: serde::Serialize + serde::de::DeserializeOwned {}
#[diagnostic::do_not_recommend]
impl<T: serde::Serialize + serde::de::DeserializeOwned> Checkpointable for T {}
