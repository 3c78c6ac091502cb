//! The contract between `#[flow]`-generated code and the executor: the [`Flow`] trait, what a
//! flow declares about itself ([`FlowInfo`], [`StartTrigger`], [`VersionPolicy`]), what a step
//! returns ([`Step`]) and the flow errors ([`FlowError`], [`FlowResult`]).
//!
//! Bot authors do not implement [`Flow`] by hand (they may: the executor only relies on this
//! trait); the macro emits one impl per `#[flow]` function. Nothing here runs a flow: the
//! executor does.

use std::future::Future;

use crate::error::HandlerError;
use crate::flow::FlowCx;
use crate::kernel::context::Ctx;

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
/// A flow with parameters that its checkpoint does not hold cannot start again: `Restart`
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
        VersionPolicy::Restart {
            notice: Some(DEFAULT_RESTART_NOTICE),
        }
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

    /// The start state (carries the flow's arguments).
    fn into_start(self) -> Self::State;

    /// Runs one step: from `state` to the next suspension or the end.
    fn step(
        cx: &mut FlowCx,
        state: Self::State,
    ) -> impl Future<Output = Result<Step<Self::State, Self::Output>, HandlerError>> + Send + '_;

    /// Serializes a state (persistent flows; others answer [`FlowError::NotPersistent`]).
    fn encode(state: &Self::State) -> Result<serde_json::Value, FlowError>;

    /// Deserializes a state written by the same layout.
    fn decode(value: serde_json::Value) -> Result<Self::State, FlowError>;

    /// The start state of a flow without arguments (for the `Restart` version policy).
    fn fresh() -> Option<Self::State> {
        None
    }

    /// The flow a start trigger starts for the message `ctx` (its arguments built from the
    /// message or the bot's state: `#[flow(start = …, args = build)]`); `None` when a trigger
    /// cannot start it.
    fn from_trigger(ctx: &Ctx) -> Option<Self> {
        let _ = ctx;
        None
    }

    /// The sub-flows this flow calls, registered with it (so a checkpoint that holds one can
    /// be restored).
    fn register_callees(_reg: &mut dyn FnMut(crate::flow::registry::Erased)) {}
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
pub fn __erase_fn<A, F: FlowFn<A>>(_flow: F) -> crate::flow::Erased {
    crate::flow::erase::<F::Flow>()
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
        interrupt: crate::flow::Interrupt,
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

/// Takes the answer a resumed step was fed (generated code). The lowering reads it exactly
/// once per step (in a loop resumed mid-iteration, in the rest of that iteration, which runs
/// once).
#[doc(hidden)]
pub fn __take<T>(slot: &mut Option<T>) -> T {
    match slot.take() {
        Some(v) => v,
        None => unreachable!("#[flow] lowering reads a resumed answer once"),
    }
}

/// A state's variant name and fields (generated `decode`).
#[doc(hidden)]
pub fn __split_state(
    value: serde_json::Value,
    flow: &'static str,
) -> Result<(String, serde_json::Map<String, serde_json::Value>), FlowError> {
    let bad = |reason: &str| FlowError::Decode {
        flow: flow.to_owned(),
        reason: reason.to_owned(),
    };
    let serde_json::Value::Object(m) = value else {
        return Err(bad("a state is a one-key object"));
    };
    let mut it = m.into_iter();
    match (it.next(), it.next()) {
        (Some((name, serde_json::Value::Object(fields))), None) => Ok((name, fields)),
        _ => Err(bad("a state is a one-key object of fields")),
    }
}

/// Takes one field of a state (generated `decode`).
#[doc(hidden)]
pub fn __field(
    fields: &mut serde_json::Map<String, serde_json::Value>,
    name: &str,
    flow: &'static str,
) -> Result<serde_json::Value, FlowError> {
    fields.remove(name).ok_or_else(|| FlowError::Decode {
        flow: flow.to_owned(),
        reason: format!("missing field `{name}`"),
    })
}

/// Encodes one field (generated code).
#[doc(hidden)]
pub fn __enc<T: Checkpointable>(v: &T) -> Result<serde_json::Value, String> {
    serde_json::to_value(v).map_err(|e| e.to_string())
}

/// Decodes one field (generated code).
#[doc(hidden)]
pub fn __dec<T: Checkpointable>(v: serde_json::Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// The codec of one state field (generated code).
#[doc(hidden)]
pub type __Codec<T> = (
    fn(&T) -> Result<serde_json::Value, String>,
    fn(serde_json::Value) -> Result<T, String>,
);

/// What a flow's step returns (generated code).
#[doc(hidden)]
pub type __StepResult<F> = Result<Step<<F as Flow>::State, <F as Flow>::Output>, HandlerError>;

/// The step's result once the flow body produced `r` (generated code).
#[doc(hidden)]
pub fn __finish<F: Flow>(r: FlowResult<F::Output>) -> __StepResult<F> {
    r.map(Step::Done)
}

/// The step suspends in `state` (generated code).
#[doc(hidden)]
pub fn __wait<S, O>(state: S) -> Result<Step<S, O>, HandlerError> {
    Ok(Step::Suspend(state))
}

/// The codec of a kept local, checked where its type is written (generated code).
#[doc(hidden)]
pub fn __codec<T: Checkpointable>() -> __Codec<T> {
    (__enc::<T>, __dec::<T>)
}

/// A state as a checkpoint holds it, `{"<state>": {"<local>": …}}` (generated `encode`).
#[doc(hidden)]
pub fn __encode<const N: usize>(
    flow: &'static str,
    state: &str,
    fields: [(&str, Result<serde_json::Value, String>); N],
) -> Result<serde_json::Value, FlowError> {
    let mut map = serde_json::Map::new();
    for (name, value) in fields {
        let value = value.map_err(|reason| FlowError::Encode { flow, reason })?;
        map.insert(name.to_owned(), value);
    }
    let mut out = serde_json::Map::new();
    out.insert(state.to_owned(), serde_json::Value::Object(map));
    Ok(serde_json::Value::Object(out))
}

/// Decodes one field of a state (generated `decode`).
#[doc(hidden)]
pub fn __decode<T>(
    fields: &mut serde_json::Map<String, serde_json::Value>,
    name: &str,
    flow: &'static str,
    decode: fn(serde_json::Value) -> Result<T, String>,
) -> Result<T, FlowError> {
    decode(__field(fields, name, flow)?).map_err(|reason| FlowError::Decode {
        flow: flow.to_owned(),
        reason,
    })
}

/// A checkpoint names a state this build does not have (generated `decode`).
#[doc(hidden)]
pub fn __unknown_state<S>(flow: &'static str, state: &str) -> Result<S, FlowError> {
    Err(FlowError::Decode {
        flow: flow.to_owned(),
        reason: format!("unknown state `{state}`"),
    })
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
