//! Operations on a running bot that are not routing: `trigger`, `send`, `broadcast`, handoffs
//! and the access lists at run time.
//!
//! `trigger` goes through the access lists, takes the chat's queue slot, the handoff gate and
//! language resolution, then runs its handler directly: no dedupe, persistence, message hooks
//! or matchers. `broadcast` sends one content to many chats with a concurrency limit and is
//! cancelled by `stop()`.

use std::sync::Arc;

use botmesh_durability::store::HandoffRecord;
use tokio::sync::{Semaphore, oneshot};

use crate::bot::dispatcher;
use crate::error::BotError;
use crate::kernel::Bot;
use crate::kernel::context::CtxSource;
use crate::kernel::context::make_ctx;
use crate::kernel::routes::Handler;
use crate::message::{ChatId, Outgoing, UserId};
use crate::outbound::persistence;
use crate::outbound::{self, KeyRule, SendOutcome, SendRequest};

/// Options of [`Bot::broadcast`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BroadcastOptions {
    /// How many sends run at once (the bot's `broadcast_concurrency` when `None`).
    pub concurrency: Option<usize>,
    /// A key prefix: each chat's send is keyed `<prefix>:<chat>` (needed with durability,
    /// since concurrent sends have no deterministic order).
    pub key_prefix: Option<String>,
}

/// What a broadcast did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BroadcastReport {
    /// Chats the message went to.
    pub sent: Vec<ChatId>,
    /// Chats where a `before` send hook aborted it.
    pub skipped: Vec<ChatId>,
    /// Chats where the send failed, with the error.
    pub failed: Vec<(ChatId, String)>,
    /// Chats not attempted because the bot stopped.
    pub cancelled: Vec<ChatId>,
}

pub(crate) async fn trigger(
    bot: &Bot,
    chat: ChatId,
    handler: Arc<dyn Handler>,
) -> Result<(), BotError> {
    let k = bot.kernel.clone();
    if !k.is_accepting() {
        return Err(BotError::NotRunning);
    }
    let user = UserId(chat.0.clone());
    if !k.gates.admits(&chat, &user) {
        return Err(BotError::config(
            "trigger",
            format!("chat {chat} is refused by the access lists"),
        ));
    }
    let (tx, rx) = oneshot::channel();
    let kernel = k.clone();
    let c = chat.clone();
    k.queues.push(
        &chat,
        Box::pin(async move {
            if kernel.gates.is_handed_off(&c) {
                let _ = tx.send(Err(BotError::HandedOff { chat: c.0.clone() }));
                return;
            }
            let ctx = make_ctx(
                &kernel,
                CtxSource::Trigger {
                    chat: c,
                    sender: user,
                },
                None,
            );
            dispatcher::run_handler(&ctx, handler, "handler:trigger").await;
            let _ = tx.send(Ok(()));
        }),
    );
    rx.await
        .map_err(|_| BotError::Stopped("the trigger waited for its queue slot"))?
}

pub(crate) async fn send(
    bot: &Bot,
    chat: ChatId,
    outgoing: Outgoing,
) -> Result<SendOutcome, BotError> {
    let key = match &outgoing.idempotency_key {
        Some(k) => KeyRule::Explicit(k.clone()),
        None => KeyRule::Random,
    };
    outbound::send(
        &bot.kernel,
        SendRequest {
            chat,
            outgoing,
            key,
            paced: false,
            inline_rate_limit_retry: false,
        },
    )
    .await
}

pub(crate) async fn broadcast(
    bot: &Bot,
    chats: Vec<ChatId>,
    outgoing: Outgoing,
    opts: BroadcastOptions,
) -> BroadcastReport {
    let k = bot.kernel.clone();
    let limit = opts
        .concurrency
        .unwrap_or(k.config.broadcast_concurrency)
        .max(1);
    let semaphore = Arc::new(Semaphore::new(limit));
    let mut cancel = k.cancel_background.subscribe();
    let mut tasks = tokio::task::JoinSet::new();
    let mut report = BroadcastReport::default();
    for chat in chats {
        if *cancel.borrow_and_update() {
            report.cancelled.push(chat);
            continue;
        }
        let permit = tokio::select! {
            p = semaphore.clone().acquire_owned() => p,
            _ = cancel.changed() => { report.cancelled.push(chat); continue; }
        };
        let Ok(permit) = permit else {
            report.cancelled.push(chat);
            continue;
        };
        let mut o = outgoing.clone();
        if let Some(prefix) = &opts.key_prefix {
            o.idempotency_key = Some(format!("{prefix}:{chat}"));
        }
        let b = bot.clone();
        tasks.spawn(async move {
            let r = send(&b, chat.clone(), o).await;
            drop(permit);
            (chat, r)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((chat, Ok(o))) if o.skipped => report.skipped.push(chat),
            Ok((chat, Ok(_))) => report.sent.push(chat),
            Ok((chat, Err(e))) => report.failed.push((chat, e.to_string())),
            Err(e) => k.events.error("broadcast", None, e),
        }
    }
    report
}

pub(crate) async fn handoff(
    bot: &Bot,
    chat: ChatId,
    agent: Option<String>,
    reason: Option<String>,
) -> Result<(), BotError> {
    let k = &bot.kernel;
    let record = HandoffRecord {
        chat: chat.0.clone(),
        agent,
        reason,
        since_ms: k.clock.now_ms(),
    };
    persistence::save_handoff(k, &record).await?;
    k.gates.set_handoff(record);
    Ok(())
}

pub(crate) async fn release(bot: &Bot, chat: &ChatId) -> Result<bool, BotError> {
    let k = &bot.kernel;
    persistence::clear_handoff(k, chat).await?;
    let released = k.gates.clear_handoff(chat);
    // An ask's timeout that passed during the handoff fires now.
    crate::flow::timeout::after_handoff(k, chat).await;
    Ok(released)
}
