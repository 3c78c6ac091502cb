//! The flow executor: starts, steps, suspends and ends flows per chat.
//!
//! A chat has at most one active flow stack (a flow and the sub-flows it called, innermost
//! last). Every step runs inside the chat's queue slot, so steps of one chat never overlap;
//! starts from code, cancels and idle timeouts go through that queue too. One step:
//!
//! | the step | the executor |
//! | --- | --- |
//! | suspends at an ask | keeps the stack (memory), checkpoints it when every frame is persistent |
//! | fails validation | the re-ask went out; waits again at the same ask |
//! | calls a sub-flow | pushes it and runs its first step with the same input message |
//! | returns | a sub-flow's value resumes its caller; the root's end deletes the checkpoint |
//! | fails (or `?` on an interrupt) | like a return, with an error (`ended:error`, `ended:cancelled`, `ended:timeout`) |
//!
//! [`drive`] runs a step, turns its outcome into one [`FlowCommit`], hands it to
//! `commit::write` (the only writer) and then tells what happened (events, the stack kept in
//! memory). Persistent stacks are reconciled with the store before a step (another replica may
//! have moved the flow on or ended it). This module does not lower flows (the macro does) and
//! does not encode states (`checkpoint` does).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use botmesh_durability::store::FlowCheckpoint;

use crate::error::{BotError, HandlerError};
use crate::events::BotEvent;
use crate::flow::api::{AnyBox, Erased, FlowCx, FlowError, Input, Occurrences, Pending, Step};
use crate::flow::ask::{Answer, Interrupt};
use crate::flow::checkpoint::{self, Loaded, Note};
use crate::flow::commit::{self, CheckpointChange, FlowCommit, Written};
use crate::flow::sends::StepBuffer;
use crate::flow::stack::{Frame, Stack, Wait};
use crate::kernel::context::{Ctx, CtxSource};
use crate::kernel::{Kernel, RunState};
use crate::message::{ChatId, Outgoing, UserId};
use crate::metrics::Counters;
use crate::outbound::KeyRule;

fn emit(k: &Kernel, chat: &ChatId, flow: &str, what: impl Into<String>) {
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: what.into(),
    });
}

/// Remembers the kernel and starts the idle-timeout ticker (once per bot).
pub(crate) fn bind(k: &Arc<Kernel>) {
    k.flows().bind(k);
    start_ticker(k);
}

/// Starts the task that fires due idle timeouts every second, unless it runs already.
fn start_ticker(k: &Kernel) {
    let Some(weak) = k.flows().claim_ticker() else {
        return;
    };
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(k) = weak.upgrade() else { return };
            if k.run_state() == RunState::Running {
                fire_due(&k);
            }
        }
    });
}

/// Decodes a stored checkpoint (see `checkpoint`) and carries out what the version policy
/// asked for: its events, and the checkpoint's removal or resave.
pub(crate) async fn load(k: &Kernel, cp: FlowCheckpoint) -> Loaded {
    let chat = ChatId::from(cp.chat.as_str());
    let decoded = checkpoint::decode(cp, |name| k.flows().lookup(name), k.clock.now_ms());
    for note in decoded.notes {
        match note {
            Note::Event { flow, what } => emit(k, &chat, flow, what),
            Note::Error { context, error } => k.events.error(context, Some(&chat), error),
            Note::Drop => {
                commit::remove_checkpoint(k, chat.as_str()).await;
            }
            Note::Resave(cp) => {
                if let Err(e) = commit::save_checkpoint(k, cp).await {
                    k.events.error("flow:migrate", Some(&chat), e);
                }
            }
        }
    }
    decoded.loaded
}

/// Restores persistent conversations on `start()`.
pub(crate) async fn restore(k: &Kernel) -> Result<(), BotError> {
    start_ticker(k);
    for cp in k.store.checkpoints().await? {
        let chat = ChatId::from(cp.chat.as_str());
        if ended_leftover(k, &chat).await {
            continue;
        }
        match load(k, cp).await {
            Loaded::Ready(stack) => k.flows().put(&chat, stack),
            Loaded::Gone => {}
            // Restarted by the chat's next message (with the notice), which then starts the
            // flow instead of answering its first question.
            Loaded::Restart { .. } => {}
        }
    }
    Ok(())
}

/// Ends every flow of a chat (the user blocked the bot, or `cancel_flow`).
pub(crate) async fn end_chat(k: &Kernel, chat: &ChatId, reason: &str) {
    k.flows().bump(chat);
    match k.flows().take(chat) {
        Some(stack) => end_stack(k, chat, stack, reason).await,
        None => {
            if let Ok(Some(cp)) = k.store.checkpoint(chat.as_str()).await {
                commit::remove_checkpoint(k, chat.as_str()).await;
                emit(k, chat, &cp.flow, format!("ended:{reason}"));
            }
        }
    }
}

/// Starts a flow in the context's chat (the caller holds the chat's queue slot).
pub(crate) async fn start_in(ctx: &Ctx, flow: Erased, state: AnyBox) -> Result<(), FlowError> {
    start_in_with(ctx, flow, state, false).await
}

/// [`start_in`] from a route that does nothing else with the message (a flow's own start
/// trigger, a restart by the version policy): its first step may complete the message.
pub(crate) async fn start_in_with(
    ctx: &Ctx,
    flow: Erased,
    state: AnyBox,
    owns_message: bool,
) -> Result<(), FlowError> {
    let k = ctx.0.bot.kernel.clone();
    let chat = ctx.chat().clone();
    if let Some(old) = k.flows().take(&chat) {
        end_stack(&k, &chat, old, "replaced").await;
    } else if k
        .store
        .checkpoint_head(chat.as_str())
        .await
        .ok()
        .flatten()
        .is_some()
    {
        commit::remove_checkpoint(&k, chat.as_str()).await;
    }
    // A run started by a message is named after it: a replay of that message (after a crash
    // in the first step) is the same run, and finds the first step's effects recorded. A run
    // started from code gets the time, and a count when several start in one millisecond.
    let run = match ctx.inbound_id() {
        Some(inbound) => format!("in:{inbound}"),
        None => k.flows().run_from_code(k.clock.now_ms()),
    };
    emit(&k, &chat, flow.0.info().name, "started");
    let stack = Stack {
        run,
        step: 0,
        fed_by: None,
        frames: vec![Frame {
            flow,
            state,
            wait: None,
        }],
        checkpointed: false,
    };
    drive(ctx, stack, Input::Start, owns_message).await;
    Ok(())
}

fn answer_of(ctx: &Ctx) -> Answer {
    match (ctx.message(), ctx.interaction()) {
        (_, Some(i)) => Answer::new(i.data.clone(), Some(i.data.clone()), None),
        (Some(m), None) => Answer::new(m.text_content(), None, Some(m.id.to_string())),
        (None, None) => Answer::new(ctx.text(), None, None),
    }
}

/// Takes the chat's stack, reconciled with the store for persistent flows.
async fn current(k: &Arc<Kernel>, chat: &ChatId) -> Option<Stack> {
    let stack = k.flows().take(chat)?;
    if !stack.checkpointed {
        return Some(stack);
    }
    // Only the step first: the whole checkpoint (its state decoded) only when another process
    // moved the flow on.
    let gone = || {
        tracing::debug!(chat = %chat, "flow ended elsewhere: dropping the in-memory copy");
        None
    };
    // The step and the inbound that fed it: another run of the flow (started on another
    // replica) may have reached the same step.
    match k.store.checkpoint_head(chat.as_str()).await {
        Ok(None) => gone(),
        Ok(Some(head)) if head.step != stack.step || head.inbound_id != stack.fed_by => {
            match k.store.checkpoint(chat.as_str()).await {
                Ok(None) => gone(),
                Ok(Some(cp)) => match load(k, cp).await {
                    Loaded::Ready(s) => Some(s),
                    // A restart waits for the dormant stage, with the message that starts it.
                    Loaded::Gone | Loaded::Restart { .. } => None,
                },
                Err(e) => {
                    k.events.error("flow:checkpoint", Some(chat), e);
                    Some(stack)
                }
            }
        }
        Ok(Some(_)) => Some(stack),
        Err(e) => {
            k.events.error("flow:checkpoint", Some(chat), e);
            Some(stack)
        }
    }
}

/// Whether this context's inbound record already fed the step that wrote `fed_by`'s state: a
/// replay after a crash between the checkpoint and the inbound's completion, or a redelivery.
/// Its replies went out with that step (a replay answers them from the outbox); it must not
/// be taken as the answer to the next question.
fn already_fed(ctx: &Ctx, fed_by: Option<&str>) -> bool {
    matches!((ctx.inbound_id(), fed_by), (Some(a), Some(b)) if a == b)
}

/// The "active conversation" stage.
pub(crate) async fn active(ctx: &Ctx) -> bool {
    let k = ctx.0.bot.kernel.clone();
    let Some(stack) = current(&k, ctx.chat()).await else {
        return false;
    };
    if already_fed(ctx, stack.fed_by.as_deref()) {
        tracing::debug!(chat = %ctx.chat(), inbound = ?ctx.inbound_id(), "message already fed this flow's step");
        k.flows().put(ctx.chat(), stack);
        return true;
    }
    drive(ctx, stack, Input::Answer(answer_of(ctx)), true).await;
    true
}

/// Whether the chat's stored checkpoint is the leftover of a flow that ended (its delete
/// failed): the delete is tried again, and either way the flow is not resumed.
pub(crate) async fn ended_leftover(k: &Kernel, chat: &ChatId) -> bool {
    if !k.flows().is_ended(chat) {
        return false;
    }
    if commit::remove_checkpoint(k, chat.as_str()).await {
        tracing::debug!(chat = %chat, "the leftover checkpoint of an ended flow is deleted");
    }
    true
}

/// The "dormant resume" stage: a checkpoint in the store, nothing in memory.
pub(crate) async fn dormant(ctx: &Ctx) -> bool {
    let k = ctx.0.bot.kernel.clone();
    if ended_leftover(&k, ctx.chat()).await {
        return false;
    }
    let cp = match k.store.checkpoint(ctx.chat().as_str()).await {
        Ok(Some(cp)) => cp,
        Ok(None) => return false,
        Err(e) => {
            k.events.error("flow:checkpoint", Some(ctx.chat()), e);
            return false;
        }
    };
    if already_fed(ctx, cp.inbound_id.as_deref()) {
        tracing::debug!(chat = %ctx.chat(), inbound = ?ctx.inbound_id(), "message already fed this flow's step");
        return true;
    }
    match load(&k, cp).await {
        Loaded::Ready(stack) => {
            emit(&k, ctx.chat(), stack.top_name().unwrap_or(""), "resumed");
            drive(ctx, stack, Input::Answer(answer_of(ctx)), true).await;
            true
        }
        Loaded::Restart { flow, notice } => restart(ctx, flow, notice).await,
        Loaded::Gone => false,
    }
}

/// The version policy's restart, on the chat's next message: the notice, then the flow from
/// the top. The message started the restart: it is not taken as the answer to the first
/// question. A flow whose arguments the checkpoint does not hold cannot start again: it is
/// abandoned, and the message goes on as a fresh one.
async fn restart(ctx: &Ctx, flow: Erased, notice: Option<&'static str>) -> bool {
    let k = ctx.0.bot.kernel.clone();
    let name = flow.0.info().name;
    let Some(state) = flow.0.fresh() else {
        commit::remove_checkpoint(&k, ctx.chat().as_str()).await;
        emit(&k, ctx.chat(), name, "version_mismatch:abandoned");
        return false;
    };
    emit(&k, ctx.chat(), name, "version_mismatch:restarted");
    if let Some(text) = notice {
        let key = KeyRule::Site {
            inbound: ctx.inbound_id().map(str::to_owned),
            site: format!("{name}/version-notice#1"),
        };
        if let Err(e) = ctx.send_keyed(Outgoing::from(text), key).await {
            k.events.error("flow:restart", Some(ctx.chat()), e);
        }
    }
    if let Err(e) = start_in_with(ctx, flow, state, true).await {
        k.events.error("flow:restart", Some(ctx.chat()), e);
    }
    true
}

/// Resumes the chat's flow with a timeout or a cancel; `false` when none waits.
pub(crate) async fn interrupt(ctx: &Ctx, input: Input) -> bool {
    let k = ctx.0.bot.kernel.clone();
    let stack = match current(&k, ctx.chat()).await {
        Some(s) => s,
        None if ended_leftover(&k, ctx.chat()).await => return false,
        None => match k.store.checkpoint(ctx.chat().as_str()).await.ok().flatten() {
            Some(cp) => match load(&k, cp).await {
                Loaded::Ready(s) => s,
                _ => return false,
            },
            None => return false,
        },
    };
    drive(ctx, stack, input, false).await;
    true
}

/// Runs steps until the stack waits or ends, then writes the step's commit.
/// `owns_message`: the step was routed as the chat's conversation (the message goes nowhere
/// else), so an atomic step may complete the inbound record in its transaction.
///
/// The future is boxed: it holds a whole step (the flow's, its commit, its sends), several
/// KiB, and every stage that may drive a flow (the dispatcher's, `active`, `dormant`, …) would
/// otherwise hold it too and copy it whenever it is created, at every message.
pub(crate) fn drive(
    ctx: &Ctx,
    stack: Stack,
    input: Input,
    owns_message: bool,
) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    Box::pin(drive_steps(ctx, stack, input, owns_message))
}

/// The body of [`drive`].
async fn drive_steps(ctx: &Ctx, mut stack: Stack, input: Input, owns_message: bool) {
    let k = &ctx.0.bot.kernel;
    let generation = k.flows().generation(ctx.chat());
    stack.step += 1;
    // A persistent stack on a store that shares its transactions with the journals commits
    // each step in one transaction (see `commit`): its sends are collected until then.
    let sends = (stack.is_persistent() && commit::atomic(k)).then(Arc::default);
    let Ran { end, effects } = run(ctx, &mut stack, input, sends.clone()).await;
    if k.flows().generation(ctx.chat()) != generation {
        tracing::debug!(chat = %ctx.chat(), "the chat's flows ended during the step: dropping its outcome");
        return;
    }
    if ctx.journal_failed() && end.as_ref().is_some_and(|e| e.reason == "error") {
        // The step was cut because the durable journal was unavailable, not by the flow: keep
        // the last checkpoint, so the replay of this message re-runs the step from it (its
        // sends already made are answered from the outbox).
        tracing::warn!(chat = %ctx.chat(), "flow step cut by the journal: kept for the replay");
        emit(k, ctx.chat(), top_name(&stack), "interrupted:journal");
        return;
    }
    let commit = commit_of(ctx, &mut stack, end.is_some(), effects, sends, owns_message);
    let change = Checkpointed::of(&commit.checkpoint);
    let written = commit::write(ctx, commit).await;
    settle(ctx, stack, end, change, written).await;
}

/// How a step ended its stack's root flow.
struct End {
    flow: &'static str,
    /// `done`, `error`, `cancelled` or `timeout`.
    reason: &'static str,
    error: Option<HandlerError>,
}

/// What running a step left: the root's end (`None` when the stack waits), and the effect
/// records it read or wrote.
struct Ran {
    end: Option<End>,
    effects: Vec<(String, String)>,
}

/// What runs after a frame's step.
enum Next {
    /// Another frame, with this input (a sub-flow's start, or its caller with its value).
    Run(Input),
    /// The stack waits (`None`) or its root ended.
    Stop(Option<End>),
}

/// Runs frames from the top of the stack until one waits or the root ends.
async fn run(
    ctx: &Ctx,
    stack: &mut Stack,
    mut input: Input,
    sends: Option<Arc<StepBuffer>>,
) -> Ran {
    let k = &ctx.0.bot.kernel;
    let occurrences = Occurrences::default();
    let mut effects = Vec::new();
    loop {
        let Some(Frame { flow, state, wait }) = stack.frames.pop() else {
            let end = End {
                flow: "",
                reason: "done",
                error: None,
            };
            return Ran {
                end: Some(end),
                effects,
            };
        };
        let mut cx = FlowCx::new(
            ctx.clone(),
            flow.0.info().name,
            stack.run.clone(),
            stack.step,
            input,
        );
        cx.buffer = sends.clone();
        cx.occurrences = occurrences.clone();
        let result = flow.0.step(&mut cx, state).await;
        Counters::inc(&k.counters.flow_steps);
        effects.append(&mut cx.effects.lock().unwrap_or_else(|e| e.into_inner()));
        let pending = cx.take_pending();
        drop(cx);
        match next(ctx, stack, flow, wait, result, pending) {
            Next::Run(next) => input = next,
            Next::Stop(end) => return Ran { end, effects },
        }
    }
}

/// The stack after a frame's step: the frame back on it (waiting, or under the sub-flow it
/// called), or its value or error handed to its caller, or the root's end.
fn next(
    ctx: &Ctx,
    stack: &mut Stack,
    flow: Erased,
    wait: Option<Wait>,
    result: Result<Step<AnyBox, AnyBox>, HandlerError>,
    pending: Option<Pending>,
) -> Next {
    let k = &ctx.0.bot.kernel;
    let name = flow.0.info().name;
    let deadline = |idle_ms: Option<u64>| {
        idle_ms.map(|ms| {
            k.clock
                .now_ms()
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
        })
    };
    let state = match result {
        Ok(Step::Suspend(state)) => state,
        Ok(Step::Done(out)) => {
            if stack.frames.is_empty() {
                return Next::Stop(Some(End {
                    flow: name,
                    reason: "done",
                    error: None,
                }));
            }
            emit(k, ctx.chat(), name, "returned");
            return Next::Run(Input::Returned(Ok(out)));
        }
        Err(e) => return failed(ctx, stack, name, e),
    };
    match pending {
        Some(Pending::Ask { idle, site }) => {
            let idle_ms = idle.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let wait = Wait {
                site,
                idle_ms,
                deadline_ms: deadline(idle_ms),
            };
            stack.frames.push(Frame {
                flow,
                state,
                wait: Some(wait),
            });
            Next::Stop(None)
        }
        Some(Pending::Reask) => {
            let wait = wait.map(|w| Wait {
                deadline_ms: deadline(w.idle_ms),
                ..w
            });
            stack.frames.push(Frame { flow, state, wait });
            Next::Stop(None)
        }
        Some(Pending::Call { flow: sub, start }) => {
            emit(k, ctx.chat(), name, format!("called:{}", sub.0.info().name));
            stack.frames.push(Frame {
                flow,
                state,
                wait: None,
            });
            stack.frames.push(Frame {
                flow: sub,
                state: start,
                wait: None,
            });
            Next::Run(Input::Start)
        }
        None => {
            stack.frames.clear();
            Next::Stop(Some(End {
                flow: name,
                reason: "error",
                error: Some(format!("flow `{name}` suspended without an ask").into()),
            }))
        }
    }
}

/// A frame's step failed: the root ends (cancelled, timed out or failed), a sub-flow's caller
/// gets the error.
fn failed(ctx: &Ctx, stack: &Stack, name: &'static str, e: HandlerError) -> Next {
    // A flow that passed on (`?`) its sub-flow's interrupt ends as interrupted too.
    let interrupt =
        e.downcast_ref::<Interrupt>()
            .copied()
            .or_else(|| match e.downcast_ref::<FlowError>() {
                Some(FlowError::SubflowInterrupted { interrupt, .. }) => Some(*interrupt),
                _ => None,
            });
    if stack.frames.is_empty() {
        let (reason, error) = match interrupt {
            Some(Interrupt::Cancelled) => ("cancelled", None),
            Some(Interrupt::Timeout) => ("timeout", None),
            None => ("error", Some(e)),
        };
        return Next::Stop(Some(End {
            flow: name,
            reason,
            error,
        }));
    }
    Next::Run(Input::Returned(Err(match interrupt {
        Some(i) => FlowError::SubflowInterrupted {
            flow: name.to_owned(),
            interrupt: i,
        },
        None => FlowError::Subflow {
            flow: name.to_owned(),
            chat: ctx.chat().to_string(),
            reason: e.to_string(),
        },
    })))
}

/// The step's commit: the waiting stack's checkpoint (or its removal, or the end's), its
/// sends, its effect records, whether it owns its message.
fn commit_of(
    ctx: &Ctx,
    stack: &mut Stack,
    ended: bool,
    effects: Vec<(String, String)>,
    sends: Option<Arc<StepBuffer>>,
    owns_message: bool,
) -> FlowCommit {
    let k = &ctx.0.bot.kernel;
    let checkpoint = if ended {
        CheckpointChange::End
    } else {
        stack.fed_by = ctx.inbound_id().map(str::to_owned);
        if stack.is_persistent() {
            let chat = ctx.chat().as_str();
            match checkpoint::encode(stack, chat, stack.fed_by.clone(), k.clock.now_ms()) {
                Ok(encoded) => CheckpointChange::Save(encoded),
                Err(e) => {
                    k.events.error("flow:checkpoint", Some(ctx.chat()), e);
                    CheckpointChange::Unencodable
                }
            }
        } else {
            CheckpointChange::Remove
        }
    };
    FlowCommit {
        chat: ctx.chat().clone(),
        checkpoint,
        stored: stack.checkpointed,
        sends,
        effects,
        ack: owns_message,
    }
}

/// What a step's commit does to the stack's checkpoint, as the events after it tell.
enum Checkpointed {
    /// Saves it; the top frame's `flow@State`.
    Saved(String),
    /// It was to be saved and could not be encoded.
    Unencodable,
    /// Removes it (or there is none).
    Removed,
}

impl Checkpointed {
    fn of(change: &CheckpointChange) -> Self {
        match change {
            CheckpointChange::Save(encoded) => Self::Saved(encoded.top.clone()),
            CheckpointChange::Unencodable => Self::Unencodable,
            CheckpointChange::Remove | CheckpointChange::End => Self::Removed,
        }
    }
}

/// After the commit: the stack kept in memory (or not), the events, the sends delivered.
async fn settle(
    ctx: &Ctx,
    mut stack: Stack,
    end: Option<End>,
    change: Checkpointed,
    written: Written,
) {
    let k = &ctx.0.bot.kernel;
    let chat = ctx.chat();
    let top = stack.top_name().unwrap_or("");
    let committed = match written {
        Written::Aborted => {
            emit(k, chat, top, "interrupted:journal");
            // Nothing was written or sent. A message's step is replayed with it; a step no
            // message fed (a timeout, a start or cancel from code) is not: take the stored
            // checkpoint back, so that its timeout fires again and the step runs again.
            if ctx.inbound_id().is_none() {
                if let Ok(Some(cp)) = k.store.checkpoint(chat.as_str()).await {
                    if let Loaded::Ready(stored) = load(k, cp).await {
                        k.flows().put(chat, stored);
                    }
                }
            }
            return;
        }
        Written::Replayed => {
            let flow = end.as_ref().map_or(top, |e| e.flow);
            emit(k, chat, flow, "interrupted:checkpoint");
            return;
        }
        Written::Unstored => {
            match (&end, change) {
                // Nothing replays the step: the leftover checkpoint must not bring the ended
                // flow back.
                (Some(_), _) => k.flows().mark_ended(chat),
                // A checkpoint that failed to be removed is still the stack's.
                (None, Checkpointed::Removed) => {}
                // The flow goes on from memory, ahead of the store (not reconciled with it
                // until a checkpoint is written again).
                (None, _) => stack.checkpointed = false,
            }
            None
        }
        Written::Stored(committed) => {
            stack.checkpointed = matches!(change, Checkpointed::Saved(_));
            if let (None, Checkpointed::Saved(saved)) = (&end, change) {
                emit(k, chat, top, format!("checkpoint:{saved}:{}", stack.step));
            }
            Some(committed)
        }
    };
    match end {
        None => {
            emit(k, chat, top, "suspended");
            k.flows().put(chat, stack);
        }
        Some(End {
            flow,
            reason,
            error,
        }) => {
            if let Some(e) = error {
                Counters::inc(&k.counters.handler_errors);
                k.events.error(format!("flow:{flow}"), Some(chat), e);
            }
            emit(k, chat, flow, format!("ended:{reason}"));
        }
    }
    if let Some(committed) = committed {
        // Boxed: the sends' future is most of this one's size (see `drive`).
        Box::pin(commit::deliver(k, committed)).await;
    }
}

fn top_name(stack: &Stack) -> &'static str {
    stack.top_name().unwrap_or("")
}

/// Ends a stack that is not stepping (replaced, blocked).
pub(crate) async fn end_stack(k: &Kernel, chat: &ChatId, stack: Stack, reason: &str) {
    if !commit::remove_checkpoint(k, chat.as_str()).await {
        k.flows().mark_ended(chat);
    }
    emit(k, chat, top_name(&stack), format!("ended:{reason}"));
}

/// Runs `job` with a trigger context of `chat`, in the chat's queue.
pub(crate) fn queue<Fut>(
    k: &Arc<Kernel>,
    chat: ChatId,
    job: impl FnOnce(Ctx) -> Fut + Send + 'static,
) -> Result<(), crate::error::BotError>
where
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if !k.is_accepting() {
        return Err(crate::error::BotError::NotRunning);
    }
    let kernel = k.clone();
    k.queues.push(
        &chat.clone(),
        Box::pin(async move {
            let user = UserId(chat.0.clone());
            let ctx = crate::kernel::context::make_ctx(
                &kernel,
                CtxSource::Trigger { chat, sender: user },
                None,
            )
            .await;
            job(ctx).await;
        }),
    );
    Ok(())
}

/// Queues a timeout for every stack whose idle deadline passed; returns how many. A chat
/// handed off to a human is left alone: its timeout fires once the handoff ends.
pub(crate) fn fire_due(k: &Arc<Kernel>) -> usize {
    let now = k.clock.now_ms();
    let due = k.flows().due(now, |chat| k.gates.is_handed_off(chat));
    for (chat, step) in &due {
        let kernel = k.clone();
        let chat = chat.clone();
        let step = *step;
        k.queues.push(
            &chat.clone(),
            Box::pin(async move {
                let user = UserId(chat.0.clone());
                let ctx = crate::kernel::context::make_ctx(
                    &kernel,
                    CtxSource::Trigger {
                        chat: chat.clone(),
                        sender: user,
                    },
                    None,
                )
                .await;
                let still = kernel.flows().step_of(&chat) == Some(step)
                    && !kernel.gates.is_handed_off(&chat)
                    && kernel
                        .flows()
                        .deadline_of(&chat)
                        .is_some_and(|d| d <= kernel.clock.now_ms());
                if still {
                    interrupt(&ctx, Input::Timeout).await;
                } else {
                    kernel.flows().clear_firing(&chat);
                }
            }),
        );
    }
    due.len()
}
