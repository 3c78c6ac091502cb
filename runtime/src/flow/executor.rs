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
//! Persistent stacks are reconciled with the store before a step (another replica may have
//! moved the flow on or ended it). This module does not lower flows (the macro does) and does
//! not encode states (the checkpoint module does).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::HandlerError;
use crate::events::BotEvent;
use crate::flow::api::{FlowError, Step};
use crate::flow::ask::{Answer, Interrupt};
use crate::kernel::Kernel;
use crate::kernel::context::{Ctx, CtxSource};
use botmesh_durability::store::CheckpointWrite;

use crate::flow::checkpoint::{self, Loaded};
use crate::flow::commit::{self, StepBuffer};
use crate::flow::cx::{FlowCx, Input, Pending};
use crate::flow::effect;
use crate::flow::registry::{AnyBox, Erased};
use crate::message::{ChatId, Outgoing, UserId};
use crate::metrics::Counters;
use crate::outbound::KeyRule;

/// What a frame waits for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Wait {
    pub(crate) site: String,
    pub(crate) idle_ms: Option<u64>,
    pub(crate) deadline_ms: Option<i64>,
}

/// One flow of a chat's stack.
pub(crate) struct Frame {
    pub(crate) flow: Erased,
    pub(crate) state: AnyBox,
    /// `None` while the frame waits for a sub-flow.
    pub(crate) wait: Option<Wait>,
}

/// A chat's active flows.
pub(crate) struct Stack {
    pub(crate) run: String,
    pub(crate) step: u64,
    /// The inbound record that fed the step which wrote the current state (a redelivery or
    /// replay of that record must not be taken as the next answer).
    pub(crate) fed_by: Option<String>,
    pub(crate) frames: Vec<Frame>,
    pub(crate) checkpointed: bool,
}

impl Stack {
    pub(crate) fn top_name(&self) -> Option<&'static str> {
        self.frames.last().map(|f| f.flow.0.info().name)
    }

    pub(crate) fn deadline(&self) -> Option<i64> {
        self.frames
            .last()
            .and_then(|f| f.wait.as_ref())
            .and_then(|w| w.deadline_ms)
    }
}

fn emit(k: &Kernel, chat: &ChatId, flow: &str, what: impl Into<String>) {
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: what.into(),
    });
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
        checkpoint::drop_checkpoint(&k, chat.as_str()).await;
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
                Ok(Some(cp)) => match checkpoint::load(k, cp).await {
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
    if checkpoint::drop_checkpoint(k, chat.as_str()).await {
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
    match checkpoint::load(&k, cp).await {
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
        checkpoint::drop_checkpoint(&k, ctx.chat().as_str()).await;
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
            Some(cp) => match checkpoint::load(&k, cp).await {
                Loaded::Ready(s) => s,
                _ => return false,
            },
            None => return false,
        },
    };
    drive(ctx, stack, input, false).await;
    true
}

/// Runs steps until the stack waits or ends, then saves or deletes its checkpoint.
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
async fn drive_steps(ctx: &Ctx, mut stack: Stack, mut input: Input, owns_message: bool) {
    let k = ctx.0.bot.kernel.clone();
    let chat = ctx.chat().clone();
    let generation = k.flows().generation(&chat);
    stack.step += 1;
    // A persistent stack on a store that shares its transactions with the journals commits
    // each step in one transaction (see `commit`): its sends are collected until then.
    let buffer = (checkpoint::is_persistent(&stack) && commit::atomic(&k))
        .then(|| Arc::new(StepBuffer::default()));
    let mut effect_keys = Vec::new();
    let occurrences = crate::flow::cx::Occurrences::default();
    let ended: Option<(&'static str, String, Option<HandlerError>)> = loop {
        let Some(Frame { flow, state, wait }) = stack.frames.pop() else {
            break Some(("", "done".to_owned(), None));
        };
        let info = flow.0.info();
        let mut cx = FlowCx::new(ctx.clone(), info.name, stack.run.clone(), stack.step, input);
        cx.buffer = buffer.clone();
        cx.occurrences = occurrences.clone();
        let result = flow.0.step(&mut cx, state).await;
        Counters::inc(&k.counters.flow_steps);
        effect_keys.append(&mut cx.effect_keys.lock().unwrap_or_else(|e| e.into_inner()));
        let pending = cx.take_pending();
        drop(cx);
        match result {
            Ok(Step::Suspend(state)) => match pending {
                Some(Pending::Ask { idle, site }) => {
                    let idle_ms = idle.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                    let deadline_ms = idle_ms.map(|ms| {
                        k.clock
                            .now_ms()
                            .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
                    });
                    stack.frames.push(Frame {
                        flow,
                        state,
                        wait: Some(Wait {
                            site,
                            idle_ms,
                            deadline_ms,
                        }),
                    });
                    break None;
                }
                Some(Pending::Reask) => {
                    let wait = wait.map(|mut w| {
                        w.deadline_ms = w.idle_ms.map(|ms| {
                            k.clock
                                .now_ms()
                                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
                        });
                        w
                    });
                    stack.frames.push(Frame { flow, state, wait });
                    break None;
                }
                Some(Pending::Call { flow: sub, start }) => {
                    emit(
                        &k,
                        &chat,
                        info.name,
                        format!("called:{}", sub.0.info().name),
                    );
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
                    input = Input::Start;
                }
                None => {
                    let err: HandlerError =
                        format!("flow `{}` suspended without an ask", info.name).into();
                    stack.frames.clear();
                    break Some((info.name, "error".to_owned(), Some(err)));
                }
            },
            Ok(Step::Done(out)) => {
                if stack.frames.is_empty() {
                    break Some((info.name, "done".to_owned(), None));
                }
                emit(&k, &chat, info.name, "returned");
                input = Input::Returned(Ok(out));
            }
            Err(e) => {
                // A flow that passed on (`?`) its sub-flow's interrupt ends as interrupted too.
                let interrupt = e.downcast_ref::<Interrupt>().copied().or_else(|| match e
                    .downcast_ref::<FlowError>()
                {
                    Some(FlowError::SubflowInterrupted { interrupt, .. }) => Some(*interrupt),
                    _ => None,
                });
                if stack.frames.is_empty() {
                    break Some(match interrupt {
                        Some(Interrupt::Cancelled) => (info.name, "cancelled".to_owned(), None),
                        Some(Interrupt::Timeout) => (info.name, "timeout".to_owned(), None),
                        None => (info.name, "error".to_owned(), Some(e)),
                    });
                }
                input = Input::Returned(Err(match interrupt {
                    Some(i) => FlowError::SubflowInterrupted {
                        flow: info.name.to_owned(),
                        interrupt: i,
                    },
                    None => FlowError::Subflow {
                        flow: info.name.to_owned(),
                        chat: chat.to_string(),
                        reason: e.to_string(),
                    },
                }));
            }
        }
    };
    if k.flows().generation(&chat) != generation {
        tracing::debug!(chat = %chat, "the chat's flows ended during the step: dropping its outcome");
        return;
    }
    if ctx.journal_failed() && ended.as_ref().is_some_and(|(_, r, _)| r == "error") {
        // The step was cut because the durable journal was unavailable, not by the flow: keep
        // the last checkpoint, so the replay of this message re-runs the step from it (its
        // sends already made are answered from the outbox).
        tracing::warn!(chat = %chat, "flow step cut by the journal: kept for the replay");
        emit(
            &k,
            &chat,
            stack.top_name().unwrap_or(""),
            "interrupted:journal",
        );
        return;
    }
    if let Some(buffer) = buffer {
        let step = AtomicStep {
            buffer: &buffer,
            effect_keys: &effect_keys,
            owns_message,
        };
        // Boxed: the commit and its sends are most of this future's size.
        Box::pin(finish_atomic(ctx, &k, &chat, stack, ended, step)).await;
        return;
    }
    // A checkpoint write that failed leaves the store at the previous step. With durable
    // journals the message is then charged as failed and replayed, and the replay re-runs
    // the step from the stored checkpoint (its sends answered from the outbox, its effects
    // from their records, which are kept for it); the step's outcome is dropped.
    let replays = k.durable.is_some() && ctx.inbound_id().is_some();
    let mut cut = false;
    match ended {
        None => {
            stack.fed_by = ctx.inbound_id().map(str::to_owned);
            if checkpoint::is_persistent(&stack) {
                let encoded = checkpoint::encode(
                    &k,
                    chat.as_str(),
                    &stack,
                    ctx.inbound_id().map(str::to_owned),
                );
                let written = match encoded {
                    Ok((cp, top)) => checkpoint::write(&k, cp).await.map(|()| top),
                    Err(e) => Err(e),
                };
                match written {
                    Ok(top) => {
                        stack.checkpointed = true;
                        emit(
                            &k,
                            &chat,
                            stack.top_name().unwrap_or(""),
                            format!("checkpoint:{top}:{}", stack.step),
                        );
                    }
                    Err(e) => {
                        k.events.error("flow:checkpoint", Some(&chat), e);
                        cut = replays;
                        // Nothing replays a step no message fed: the flow goes on from
                        // memory, which is ahead of the store (not reconciled with it until
                        // a checkpoint is written again).
                        if !replays {
                            stack.checkpointed = false;
                        }
                    }
                }
            } else if stack.checkpointed {
                if checkpoint::drop_checkpoint(&k, chat.as_str()).await {
                    stack.checkpointed = false;
                } else {
                    cut = replays;
                }
            }
            if cut {
                emit(
                    &k,
                    &chat,
                    stack.top_name().unwrap_or(""),
                    "interrupted:checkpoint",
                );
            } else {
                emit(&k, &chat, stack.top_name().unwrap_or(""), "suspended");
                k.flows().put(&chat, stack);
            }
        }
        Some((name, reason, err)) => {
            if (stack.checkpointed || checkpoint_exists(&k, &chat).await)
                && !checkpoint::drop_checkpoint(&k, chat.as_str()).await
            {
                // Replayed, the step ends the flow again from the stored checkpoint; else
                // the leftover checkpoint must not bring the ended flow back.
                cut = replays;
                if !replays {
                    k.flows().mark_ended(&chat);
                }
            }
            if cut {
                emit(&k, &chat, name, "interrupted:checkpoint");
            } else {
                if let Some(e) = err {
                    Counters::inc(&k.counters.handler_errors);
                    k.events.error(format!("flow:{name}"), Some(&chat), e);
                }
                emit(&k, &chat, name, format!("ended:{reason}"));
            }
        }
    }
    if cut {
        tracing::warn!(chat = %chat, "flow checkpoint not written: the message is replayed from the stored one");
        ctx.0
            .journal_failed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        return;
    }
    let scope = effect::scope(chat.as_str());
    for key in effect_keys {
        if let Err(e) = k.store.delete_value(&scope, &key).await {
            tracing::warn!(error = %e, %key, "cannot delete an effect record");
        }
    }
}

/// What an atomic step carries to its end.
struct AtomicStep<'a> {
    buffer: &'a StepBuffer,
    effect_keys: &'a [String],
    owns_message: bool,
}

/// The end of an atomic step: one transaction for the checkpoint change, the step's sends, the
/// inbound's completion and the effect records; then the sends go out. A commit that fails
/// writes nothing: the step's outcome is dropped (the store keeps the last committed state)
/// and the inbound record is retried, so the step runs again.
async fn finish_atomic(
    ctx: &Ctx,
    k: &Arc<Kernel>,
    chat: &ChatId,
    mut stack: Stack,
    ended: Option<(&'static str, String, Option<HandlerError>)>,
    step: AtomicStep<'_>,
) {
    let mut saved = None;
    let write = match &ended {
        None => {
            stack.fed_by = ctx.inbound_id().map(str::to_owned);
            if checkpoint::is_persistent(&stack) {
                match checkpoint::encode(k, chat.as_str(), &stack, stack.fed_by.clone()) {
                    Ok((cp, top)) => {
                        saved = Some(top);
                        CheckpointWrite::Save(cp)
                    }
                    Err(e) => {
                        // The flow goes on in memory only; no stale checkpoint may stay behind.
                        k.events.error("flow:checkpoint", Some(chat), e);
                        CheckpointWrite::Delete {
                            chat: chat.to_string(),
                        }
                    }
                }
            } else {
                CheckpointWrite::Delete {
                    chat: chat.to_string(),
                }
            }
        }
        Some(_) => CheckpointWrite::Delete {
            chat: chat.to_string(),
        },
    };
    let committed =
        match commit::commit(ctx, step.buffer, write, step.effect_keys, step.owns_message).await {
            Ok(c) => {
                // The stored checkpoint is this step's (saved or deleted with it).
                k.flows().clear_ended(chat);
                c
            }
            Err(e) => {
                ctx.0
                    .journal_failed
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                k.events.error("flow:commit", Some(chat), e);
                emit(
                    k,
                    chat,
                    stack.top_name().unwrap_or(""),
                    "interrupted:journal",
                );
                // Nothing was written or sent. A message's step is replayed with it; a step
                // no message fed (a timeout, a start or cancel from code) is not: take the
                // stored checkpoint back, so that its timeout fires again and the step runs
                // again.
                if ctx.inbound_id().is_none() {
                    if let Ok(Some(cp)) = k.store.checkpoint(chat.as_str()).await {
                        if let Loaded::Ready(stored) = checkpoint::load(k, cp).await {
                            k.flows().put(chat, stored);
                        }
                    }
                }
                return;
            }
        };
    match ended {
        None => {
            stack.checkpointed = saved.is_some();
            if let Some(top) = saved {
                Counters::inc(&k.counters.checkpoints_written);
                emit(
                    k,
                    chat,
                    stack.top_name().unwrap_or(""),
                    format!("checkpoint:{top}:{}", stack.step),
                );
            }
            emit(k, chat, stack.top_name().unwrap_or(""), "suspended");
            k.flows().put(chat, stack);
        }
        Some((name, reason, err)) => {
            if let Some(e) = err {
                Counters::inc(&k.counters.handler_errors);
                k.events.error(format!("flow:{name}"), Some(chat), e);
            }
            emit(k, chat, name, format!("ended:{reason}"));
        }
    }
    // Boxed: the sends' future is most of this one's size (see `drive`).
    Box::pin(commit::deliver(k, committed)).await;
}

async fn checkpoint_exists(k: &Kernel, chat: &ChatId) -> bool {
    // The head only: its state is not needed (nor decoded).
    matches!(k.store.checkpoint_head(chat.as_str()).await, Ok(Some(_)))
}

/// Ends a stack that is not stepping (replaced, blocked).
pub(crate) async fn end_stack(k: &Kernel, chat: &ChatId, stack: Stack, reason: &str) {
    if !checkpoint::drop_checkpoint(k, chat.as_str()).await {
        k.flows().mark_ended(chat);
    }
    emit(
        k,
        chat,
        stack.top_name().unwrap_or(""),
        format!("ended:{reason}"),
    );
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
