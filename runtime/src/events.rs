//! The bot's event outlet: errors and observability events, fanned out to listeners.
//!
//! [`BotEvent`]s go to a `tokio::sync::broadcast` channel ([`crate::Bot::subscribe`]) and to
//! synchronous listeners registered with [`crate::Bot::on_event`]. Emitting never blocks and
//! never fails: an event nobody listens to is dropped. Counters live in [`crate::metrics`].

use std::sync::{Arc, RwLock};

use serde::Serialize;
use tokio::sync::broadcast;

use crate::message::{ChatId, MessageId};
use crate::provider::{CallEvent, DeliveryStatus, EventKind, ProviderEvent};

/// Why an inbound event was dropped before dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The access lists refused the sender or chat.
    Blocked,
    /// Seen before (same chat and message id).
    Duplicate,
    /// Group mode ignores it.
    Group,
    /// The chat is handed off to a human.
    Handoff,
    /// A `before` message hook stopped it.
    Hook,
    /// It arrived long after it was sent (`inbox.max_age`).
    Stale,
}

/// Something that happened in the bot.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BotEvent {
    /// The bot started.
    Started,
    /// The bot is stopping (plugins cancel long work here).
    Stopping,
    /// The bot stopped.
    Stopped,
    /// An error that no caller receives (a handler's, a hook's, a background task's).
    Error {
        /// Where it happened (`handler`, `hook:before_message`, `persistence`, …).
        context: String,
        /// The chat, if any.
        chat: Option<ChatId>,
        /// The error, rendered.
        error: String,
    },
    /// A message was handled (after the `after` message hooks).
    Message {
        /// The chat.
        chat: ChatId,
        /// The message.
        message_id: MessageId,
        /// The routing stage that took it (`command`, `flow`, `matcher`, `catch_all`, `none`).
        route: &'static str,
    },
    /// An inbound event was dropped.
    Dropped {
        /// The chat.
        chat: ChatId,
        /// Why.
        reason: DropReason,
    },
    /// A provider event other than a message (call, reaction, poll, group, presence, status).
    Provider {
        /// The kind.
        kind: EventKind,
        /// The event.
        event: Box<ProviderEvent>,
    },
    /// A call arrived.
    Call(CallEvent),
    /// A delivery or read receipt arrived.
    Status(DeliveryStatus),
    /// A send was made (after the `after` send hooks).
    Sent {
        /// The chat.
        chat: ChatId,
        /// The send's key.
        key: Option<String>,
        /// The provider's message id.
        message_id: Option<MessageId>,
    },
    /// A flow event (started, suspended, ended, cancelled, version mismatch, …).
    Flow {
        /// The chat.
        chat: ChatId,
        /// The flow's name.
        flow: String,
        /// What happened.
        what: String,
    },
    /// A scheduled job's occurrence: `what` is `ran`, `failed` (with the task's `error`) or
    /// `missed` (`missed` occurrences passed over by the job's missed-run policy, the first
    /// of them at `occurrence_ms`).
    Job {
        /// The job's id.
        id: String,
        /// The job's chat, for a per-chat job.
        chat: Option<ChatId>,
        /// The occurrence (Unix ms).
        occurrence_ms: i64,
        /// `ran`, `failed` or `missed`.
        what: String,
        /// How many occurrences were missed (`missed`), 0 otherwise.
        missed: u64,
        /// The task's error (`failed`).
        error: Option<String>,
    },
    /// A durability event (`durability:dead`, `durability:ambiguous`): match on the
    /// [`DurabilityEvent`](botmesh_durability::DurabilityEvent) it carries, or log it whole
    /// (it displays as `durability:<name> …`). Serialized as
    /// `{"type":"durability","name":"ambiguous","key":…,"chat":…}`.
    Durability(botmesh_durability::DurabilityEvent),
}

type Listener = Arc<dyn Fn(&BotEvent) + Send + Sync>;

/// The outlet: a broadcast channel and synchronous listeners.
pub(crate) struct EventOutlet {
    tx: broadcast::Sender<BotEvent>,
    listeners: RwLock<Vec<(Option<u64>, Listener)>>,
}

impl EventOutlet {
    pub(crate) fn new() -> Self {
        let (tx, _) = broadcast::channel(1024);
        Self {
            tx,
            listeners: RwLock::new(Vec::new()),
        }
    }

    pub(crate) fn emit(&self, event: BotEvent) {
        let listeners: Vec<Listener> = self
            .listeners
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, l)| l.clone())
            .collect();
        for l in listeners {
            l(&event);
        }
        let _ = self.tx.send(event);
    }

    pub(crate) fn error(
        &self,
        context: impl Into<String>,
        chat: Option<&ChatId>,
        error: impl ToString,
    ) {
        let context = context.into();
        let error = error.to_string();
        tracing::error!(%context, chat = ?chat.map(|c| c.as_str()), %error, "bot error");
        self.emit(BotEvent::Error {
            context,
            chat: chat.cloned(),
            error,
        });
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<BotEvent> {
        self.tx.subscribe()
    }

    pub(crate) fn add_listener(&self, owner: Option<u64>, listener: Listener) {
        self.listeners
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push((owner, listener));
    }

    pub(crate) fn remove_owner(&self, owner: u64) {
        self.listeners
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(o, _)| *o != Some(owner));
    }
}
