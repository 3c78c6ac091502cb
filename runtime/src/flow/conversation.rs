//! When a chat's flow steps, and when it ends: a start (from a trigger, from code, or the
//! version policy's restart), the chat's next message (the flow in memory, or a dormant one
//! resumed from its checkpoint), an idle timeout or a cancel (through the chat's queue); a
//! flow replaced, or all of a chat's flows ended; the conversations restored on `start()`.
//! Each step is run by the executor; the idle timeouts are the scheduler's jobs (`timeout`).

use std::sync::Arc;

use crate::durable;
use crate::error::BotError;
use crate::events::BotEvent;
use crate::flow::api::{AnyBox, Erased, FlowError, Input};
use crate::flow::ask::Answer;
use crate::flow::checkpoint::{self, Loaded};
use crate::flow::commit;
use crate::flow::executor::{drive, top_name};
use crate::flow::forward;
use crate::flow::handover::{self, Finished};
use crate::flow::lost;
use crate::flow::resume::{self, ended_leftover, load};
use crate::flow::stack::{Frame, Stack};
use crate::flow::timeout;
use crate::kernel::Kernel;
use crate::kernel::context::{Ctx, CtxSource};
use crate::message::{ChatId, Outgoing, UserId};
use crate::outbound::KeyRule;

fn emit(k: &Kernel, chat: &ChatId, flow: &str, what: impl Into<String>) {
    k.events.emit(BotEvent::Flow {
        chat: chat.clone(),
        flow: flow.to_owned(),
        what: what.into(),
    });
}

/// Restores persistent conversations on `start()` (their asks' timeouts armed again: the
/// same ask keeps its job), and reports the non-persistent ones a restart lost
/// (`lost:restart`, see `lost`).
pub(crate) async fn restore(k: &Kernel) -> Result<(), BotError> {
    lost::report(k).await;
    for cp in k.store.checkpoints().await? {
        let chat = ChatId::from(cp.chat.as_str());
        if ended_leftover(k, &chat).await {
            continue;
        }
        match load(k, cp).await {
            Loaded::Ready(stack) => {
                let timer = timeout::Timer::after_step(&chat, Some(&stack), false);
                k.flows().put(&chat, stack);
                timer.apply(k, &chat).await;
            }
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
                timeout::disarm(k, chat).await;
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
    // The dormant stage of this dispatch read the checkpoint and found none: nothing to
    // remove, no second read.
    let absent = ctx
        .0
        .checkpoint_absent
        .swap(false, std::sync::atomic::Ordering::SeqCst);
    // Ending the flow the message replaces is for its first delivery only: its record is
    // written first (a redelivery stops here, the flow untouched).
    if k.flows().active_name(&chat).is_some() && !durable::inbound::acting(ctx).await {
        return Ok(());
    }
    if let Some(old) = k.flows().take(&chat) {
        end_stack(&k, &chat, old, "replaced").await;
    } else if !absent
        && k.store
            .checkpoint_head(chat.as_str())
            .await
            .ok()
            .flatten()
            .is_some()
    {
        if !durable::inbound::acting(ctx).await {
            return Ok(());
        }
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
    // A flow with parameters keeps them, for the version policy's restart.
    let start = match flow.0.fresh() {
        Some(_) => None,
        None => flow.0.encode(&state).ok(),
    };
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
        start,
        noted: false,
        trace: None,
        handover: None,
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

/// The "active conversation" stage.
pub(crate) async fn active(ctx: &Ctx) -> bool {
    let k = ctx.0.bot.kernel.clone();
    let Some(stack) = resume::current(&k, ctx.chat()).await else {
        return false;
    };
    answer(ctx, stack).await
}

/// Takes the context's message as the answer `stack` waits for; `false` when the message
/// goes on as a fresh one (the flow ended with a cut step finished first).
///
/// A message that already fed the step that wrote the stack's state (a replay after a crash
/// between the checkpoint and the inbound's completion, or a redelivery) is not taken as the
/// answer to the next question: its replies went out with that step. A step cut short with
/// another message's answer (hand-over) is finished first (see `handover`).
async fn answer(ctx: &Ctx, mut stack: Stack) -> bool {
    let k = ctx.0.bot.kernel.clone();
    if stack.fed(ctx.inbound_id()) {
        tracing::debug!(chat = %ctx.chat(), inbound = ?ctx.inbound_id(), "message already fed this flow's step");
        k.flows().put(ctx.chat(), stack);
        return true;
    }
    if let Some(cut) = stack.take_cut() {
        if Some(cut.inbound.as_str()) != ctx.inbound_id() {
            match handover::finish(ctx, stack, cut).await {
                Finished::Failed => return true,
                Finished::Ended => return false,
                Finished::Waits(next) if next.fed(ctx.inbound_id()) => {
                    k.flows().put(ctx.chat(), next);
                    return true;
                }
                Finished::Waits(next) => stack = next,
            }
        }
    }
    drive(ctx, stack, Input::Answer(answer_of(ctx)), true).await;
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
        Ok(None) => {
            ctx.0
                .checkpoint_absent
                .store(true, std::sync::atomic::Ordering::SeqCst);
            // A non-persistent flow of another replica (`forward`).
            return forward::held_elsewhere(ctx).await;
        }
        Err(e) => {
            k.events.error("flow:checkpoint", Some(ctx.chat()), e);
            return false;
        }
    };
    if checkpoint::fed(&cp, ctx.inbound_id()) {
        tracing::debug!(chat = %ctx.chat(), inbound = ?ctx.inbound_id(), "message already fed this flow's step");
        return true;
    }
    match load(&k, cp).await {
        Loaded::Ready(stack) => {
            emit(&k, ctx.chat(), stack.top_name().unwrap_or(""), "resumed");
            answer(ctx, stack).await
        }
        Loaded::Restart {
            flow,
            notice,
            start,
        } => restart(ctx, flow, notice, start).await,
        Loaded::Gone => false,
    }
}

/// The version policy's restart, on the chat's next message: the notice, then the flow from
/// the top. The message started the restart: it is not taken as the answer to the first
/// question. A flow with parameters starts again with those it was first started with (the
/// checkpoint keeps them); when they no longer decode (a parameter's type changed), or the
/// checkpoint of an older build does not hold them, it is abandoned, and the message goes on
/// as a fresh one.
async fn restart(
    ctx: &Ctx,
    flow: Erased,
    notice: Option<&'static str>,
    start: Option<serde_json::Value>,
) -> bool {
    let k = ctx.0.bot.kernel.clone();
    // The restart ends the stored flow and may send its notice: for the message's first
    // delivery only.
    if !durable::inbound::acting(ctx).await {
        return true;
    }
    let name = flow.0.info().name;
    let state = flow
        .0
        .fresh()
        .or_else(|| start.and_then(|v| flow.0.decode(v).ok()));
    let Some(state) = state else {
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

/// The chat's waiting stack, not fed by a message: the one in memory (reconciled with the
/// store), or one loaded from its checkpoint.
async fn waiting(k: &Arc<Kernel>, chat: &ChatId) -> Option<Stack> {
    match resume::current(k, chat).await {
        Some(s) => Some(s),
        None if ended_leftover(k, chat).await => None,
        None => match k.store.checkpoint(chat.as_str()).await.ok().flatten() {
            Some(cp) => match load(k, cp).await {
                Loaded::Ready(s) => Some(s),
                _ => None,
            },
            None => None,
        },
    }
}

/// The chat's waiting stack, not fed by a message (see `waiting`), unless a step of it was cut
/// short (`handover`): that step is finished first, the flow has moved on, and the interrupt
/// or timeout no longer applies.
async fn waiting_uncut(ctx: &Ctx, k: &Arc<Kernel>) -> Result<Stack, Finishing> {
    let Some(mut stack) = waiting(k, ctx.chat()).await else {
        return Err(Finishing::Nothing);
    };
    if let Some(cut) = stack.take_cut() {
        if let Finished::Waits(next) = handover::finish(ctx, stack, cut).await {
            k.flows().put(ctx.chat(), next);
        }
        return Err(Finishing::Finished);
    }
    Ok(stack)
}

/// Why [`waiting_uncut`] gives no stack.
enum Finishing {
    /// None waits.
    Nothing,
    /// A step cut short was finished instead.
    Finished,
}

/// Resumes the chat's flow with a timeout or a cancel; `false` when none waits.
pub(crate) async fn interrupt(ctx: &Ctx, input: Input) -> bool {
    let k = ctx.0.bot.kernel.clone();
    let stack = match waiting_uncut(ctx, &k).await {
        Ok(stack) => stack,
        Err(Finishing::Nothing) => return false,
        Err(Finishing::Finished) => return true,
    };
    drive(ctx, stack, input, false).await;
    true
}

/// Resumes the chat's flow with its ask's timeout, when it still waits at step `step` of run
/// `run` and the ask's deadline passed by the bot's clock; `false` (the stack left as it is)
/// otherwise: the ask was answered, or the flow moved on, ended or was replaced.
pub(crate) async fn time_out(ctx: &Ctx, run: &str, step: u64, now_ms: i64) -> bool {
    let k = ctx.0.bot.kernel.clone();
    let Ok(stack) = waiting_uncut(ctx, &k).await else {
        return false;
    };
    let due =
        stack.run == run && stack.step == step && stack.deadline().is_some_and(|d| d <= now_ms);
    if !due {
        k.flows().put(ctx.chat(), stack);
        return false;
    }
    drive(ctx, stack, Input::Timeout, false).await;
    true
}

/// Ends a stack that is not stepping (replaced, blocked).
pub(crate) async fn end_stack(k: &Kernel, chat: &ChatId, stack: Stack, reason: &str) {
    if stack.noted {
        commit::remove_lost_note(k, chat).await;
    }
    if !commit::remove_checkpoint(k, chat.as_str()).await {
        k.flows().mark_ended(chat);
    }
    if stack.deadline().is_some() {
        timeout::disarm(k, chat).await;
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
            );
            job(ctx).await;
        }),
    );
    Ok(())
}

/// The task of an ask timeout's occurrence (the scheduler runs it in the chat's queue):
/// resumes the chat's flow with the timeout, if it still waits at the ask the job was armed
/// for (see `timeout`). A chat handed off to a human is left alone: its timeout is armed
/// again at the release. A timeout of a non-persistent flow another live replica holds is
/// forwarded to it (see `forward`). `now_ms`: the time the replica that claimed the
/// occurrence judged it due by (its clock, carried along when forwarded).
pub(crate) async fn fire_timeout(
    k: &Arc<Kernel>,
    chat: Option<ChatId>,
    data: &serde_json::Value,
    now_ms: i64,
) -> crate::error::HandlerResult {
    let chat = chat.ok_or(timeout::FireError::NoChat)?;
    let (run, step) = timeout::armed_ask(&chat, data)?;
    if k.gates.is_handed_off(&chat) {
        tracing::debug!(chat = %chat, "ask timeout during a handoff: fired at its release");
        return Ok(());
    }
    // Claimed here for a flow this replica does not hold in memory: a non-persistent flow
    // another live replica holds gets it on its forward queue.
    if k.flows().with_stack(&chat, |_| ()).is_none()
        && forward::timeout_held_elsewhere(k, &chat, data, now_ms).await?
    {
        tracing::debug!(chat = %chat, "ask timeout forwarded to the replica holding the flow");
        return Ok(());
    }
    let ctx = crate::kernel::context::make_ctx(
        k,
        CtxSource::Trigger {
            chat: chat.clone(),
            sender: UserId(chat.0.clone()),
        },
        None,
    );
    if time_out(&ctx, &run, step, now_ms).await {
        timeout::retry_unwritten(k, &chat, &run, step).await;
    } else {
        tracing::debug!(chat = %chat, %run, step, "ask timeout of an ask no longer waiting");
    }
    Ok(())
}
