//! The flow executor: runs one step of a chat's flow stack, hands its outcome to the writer
//! as one commit, and tells what happened.
//!
//! A chat has at most one active flow stack (a flow and the sub-flows it called, innermost
//! last). Every step runs inside the chat's queue slot, so steps of one chat never overlap
//! (`conversation` decides when a stack steps). One step:
//!
//! | the step | the executor |
//! | --- | --- |
//! | suspends at an ask | keeps the stack (memory), checkpoints it when every frame is persistent |
//! | fails validation | the re-ask went out; waits again at the same ask |
//! | calls a sub-flow | pushes it and runs its first step with the same input message |
//! | returns | a sub-flow's value resumes its caller; the root's end deletes the checkpoint |
//! | fails (or `?` on an interrupt) | like a return, with an error (`ended:error`, `ended:cancelled`, `ended:timeout`) |
//!
//! [`drive`] runs the step, turns its outcome into one [`FlowCommit`], hands it to
//! `commit::write` (the only writer) and then settles: events, the stack kept in memory, the
//! sends of an atomic step delivered. This module does not lower flows (the macro does) and
//! does not encode states (`checkpoint` does).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::error::HandlerError;
use crate::events::BotEvent;
use crate::flow::api::{AnyBox, Erased, FlowCx, FlowError, Input, Occurrences, Pending, Step};
use crate::flow::ask::Interrupt;
use crate::flow::checkpoint::{self, Loaded};
use crate::flow::commit::{self, CheckpointChange, FlowCommit, LostNote, Written};
use crate::flow::resume;
use crate::flow::sends::StepBuffer;
use crate::flow::stack::{Cut, Frame, Stack, Wait};
use crate::flow::timeout::Timer;
use crate::kernel::Kernel;
use crate::kernel::context::Ctx;
use crate::kernel::journals::RecordWrite;
use crate::message::ChatId;
use crate::metrics::Counters;
use crate::telemetry;
use tracing::Instrument;

fn emit(k: &Kernel, chat: &ChatId, flow: &str, what: impl Into<String>) {
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: what.into(),
    });
}

/// Runs one step (frames until the stack waits or ends), then writes its commit.
/// `owns_message`: the step was routed as the chat's conversation (the message goes nowhere
/// else), so an atomic step may complete the inbound record in its transaction.
///
/// The future is boxed: it holds a whole step (the flow's, its commit, its sends), several
/// KiB, and every stage that may drive a flow (the dispatcher's, `active`, `dormant`, …) would
/// otherwise hold it too and copy it whenever it is created, at every message.
///
/// The step runs in its `bot.turn` span; the first turn of a stack loaded from a checkpoint
/// links to the turn that wrote it.
pub(crate) fn drive(
    ctx: &Ctx,
    stack: Stack,
    input: Input,
    owns_message: bool,
) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    drive_fed(ctx, stack, input, owns_message, None)
}

/// [`drive`], with the step fed by the inbound record `handed` instead of the context's
/// message: the answer of a step cut short, finished on another message's behalf (hand-over).
/// The step's sends and checkpoint then carry that record, as they did when it was cut.
pub(crate) fn drive_fed(
    ctx: &Ctx,
    mut stack: Stack,
    input: Input,
    owns_message: bool,
    handed: Option<String>,
) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    let span = telemetry::turn_span(ctx.chat().as_str(), top_name(&stack), stack.step + 1);
    if let Some(written_by) = stack.trace.take() {
        telemetry::link(&span, &written_by);
    }
    Box::pin(drive_steps(ctx, stack, input, owns_message, handed).instrument(span))
}

/// The body of [`drive`].
async fn drive_steps(
    ctx: &Ctx,
    mut stack: Stack,
    input: Input,
    owns_message: bool,
    handed: Option<String>,
) {
    let k = &ctx.0.bot.kernel;
    let generation = k.flows().generation(ctx.chat());
    let finishing = handed.is_some();
    let fed = handed.or_else(|| ctx.inbound_id().map(str::to_owned));
    let cut = match (&input, &fed) {
        (Input::Answer(answer), Some(inbound)) if !finishing && hands_over(k, &stack) => {
            Some(Cut {
                inbound: inbound.clone(),
                answer: answer.clone(),
            })
        }
        _ => None,
    };
    if let Some(cut) = cut {
        if !record_cut(ctx, &mut stack, cut).await {
            return;
        }
    }
    // Whether a timeout job may be stored for the ask this step resumes from (`timeout`).
    let timed = stack.deadline().is_some();
    stack.step += 1;
    // A persistent stack on a store that shares its transactions with the journals commits
    // each step in one transaction (see `commit`): its sends are collected until then.
    let sends = (stack.is_persistent() && commit::atomic(k)).then(Arc::default);
    let Ran { end, effects } = run(ctx, &mut stack, input, sends.clone(), fed.as_deref()).await;
    if k.flows().generation(ctx.chat()) != generation {
        tracing::debug!(chat = %ctx.chat(), "the chat's flows ended during the step: dropping its outcome");
        return;
    }
    if let Some(cut) = end
        .as_ref()
        .filter(|e| ctx.journal_failed() && e.reason == "error")
    {
        // The step was cut because the durable journal was unavailable, not by the flow: keep
        // the last checkpoint, so the replay of this message re-runs the step from it (its
        // sends already made are answered from the outbox). The step emptied the stack: the
        // flow is the one its end names.
        tracing::warn!(chat = %ctx.chat(), "flow step cut by the journal: kept for the replay");
        emit(k, ctx.chat(), cut.flow, "interrupted:journal");
        return;
    }
    let commit = commit_of(
        ctx,
        &mut stack,
        end.is_some(),
        effects,
        sends,
        owns_message,
        fed,
    );
    let change = Checkpointed::of(&commit.checkpoint);
    let written = commit::write(ctx, commit).await;
    settle(ctx, stack, end, change, written, timed).await;
}

/// Whether `stack`'s answered steps are recorded before they run (hand-over): coordination
/// with `handover()`, and a persistent stack.
fn hands_over(k: &Kernel, stack: &Stack) -> bool {
    k.coordination
        .as_deref()
        .is_some_and(|c| c.options.is_handover())
        && stack.is_persistent()
}

/// Hand-over (`Coordination::handover`): before a persistent stack takes a message as its
/// answer, its checkpoint records that answer, `cut` (the stack as it waits, plus the answer,
/// under the message's inbound record). If the step is then cut short (this replica loses the
/// chat's turn, stops, or dies), whichever replica gets the chat next finishes it with that
/// answer (`handover`) instead of taking its own message as the answer to the question the
/// cut step was answering. Returns `false` when the record could not be written (the turn is
/// lost, the store failed): the step does not run and the message is replayed.
async fn record_cut(ctx: &Ctx, stack: &mut Stack, cut: Cut) -> bool {
    let k = &ctx.0.bot.kernel;
    let inbound = cut.inbound.clone();
    stack.set_cut(Some(cut));
    let written_by = (Some(inbound.clone()), telemetry::current_context());
    let chat = ctx.chat().as_str();
    let written = match checkpoint::encode(stack, chat, written_by, k.clock.now_ms()) {
        Ok(encoded) => commit::save_checkpoint(k, encoded.checkpoint).await,
        Err(e) => Err(e),
    };
    match written {
        Ok(()) => {
            stack.checkpointed = true;
            stack.fed_by = Some(inbound);
            true
        }
        Err(e) => {
            stack.set_cut(None);
            tracing::warn!(chat = %ctx.chat(), error = %e, "the answer could not be recorded: the message is replayed");
            emit(k, ctx.chat(), top_name(stack), "interrupted:handover");
            ctx.0
                .journal_failed
                .store(true, std::sync::atomic::Ordering::SeqCst);
            false
        }
    }
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
    fed: Option<&str>,
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
        if let Some(fed) = fed {
            fed.clone_into(&mut cx.inbound);
        }
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
/// sends, its effect records, whether it owns its message, and the note that a non-persistent
/// root flow waits in memory (written at its first suspension, removed when it ends).
fn commit_of(
    ctx: &Ctx,
    stack: &mut Stack,
    ended: bool,
    effects: Vec<(String, String)>,
    sends: Option<Arc<StepBuffer>>,
    owns_message: bool,
    fed: Option<String>,
) -> FlowCommit {
    let k = &ctx.0.bot.kernel;
    // The step is done: its answer is no longer to be handed over.
    stack.set_cut(None);
    let checkpoint = if ended {
        CheckpointChange::End
    } else {
        stack.fed_by = fed;
        if stack.is_persistent() {
            let chat = ctx.chat().as_str();
            let written_by = (stack.fed_by.clone(), crate::telemetry::current_context());
            match checkpoint::encode(stack, chat, written_by, k.clock.now_ms()) {
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
    let root = stack.frames.first().map(|f| f.flow.0.info());
    let lost = match root {
        _ if ended && stack.noted => LostNote::Remove,
        Some(root) if !ended && !root.persistent && !stack.noted => {
            stack.noted = true;
            LostNote::Write(root.name)
        }
        _ => LostNote::Keep,
    };
    FlowCommit {
        chat: ctx.chat().clone(),
        checkpoint,
        stored: stack.checkpointed,
        sends,
        effects,
        ack: owns_message,
        lost,
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

/// After the commit: the stack kept in memory (or not), the events, the sends delivered, then
/// the ask's timeout armed (or disarmed: `timed` tells that the stack waited with one).
async fn settle(
    ctx: &Ctx,
    mut stack: Stack,
    end: Option<End>,
    change: Checkpointed,
    written: Written,
    timed: bool,
) {
    let k = &ctx.0.bot.kernel;
    let chat = ctx.chat();
    let top = stack.top_name().unwrap_or("");
    let committed = match written {
        Written::Aborted => {
            // A redelivery of a message handled before: the step never happened (the stored
            // checkpoint is where the flow stands).
            if ctx.0.lease.as_ref().and_then(|s| s.write_outcome()) == Some(RecordWrite::Duplicate)
            {
                return;
            }
            emit(k, chat, top, "interrupted:journal");
            // Nothing was written or sent. A message's step is replayed with it; a step no
            // message fed (a timeout, a start or cancel from code) is not: take the stored
            // checkpoint back, so that its timeout fires again and the step runs again.
            if ctx.inbound_id().is_none() {
                if let Ok(Some(cp)) = k.store.checkpoint(chat.as_str()).await {
                    if let Loaded::Ready(stored) = resume::load(k, cp).await {
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
    let timer = Timer::after_step(chat, end.is_none().then_some(&stack), timed);
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
    // After the sends: a crash before it is armed is made good by the restore at start.
    timer.apply(k, chat).await;
}

pub(crate) fn top_name(stack: &Stack) -> &'static str {
    stack.top_name().unwrap_or("")
}
