//! The `Provider` SPI: what a channel implements so a bot can run on it.
//!
//! A provider turns a channel's wire protocol into [`ProviderEvent`]s, handed to the bot
//! through the [`EventSink`] it receives in [`Provider::start`], and carries the bot's sends,
//! edits, typing indicators, read marks and interaction acks back to the channel. It reports
//! failures as [`ProviderError`]s whose class (rate limit, retryable, ambiguous, final) drives
//! the runtime's retries: a send that failed before its request left (connection refused) is
//! retryable, one whose request may have reached the channel (a timeout, a connection lost
//! while waiting for the answer) is ambiguous. It does not route, retry, journal or pace: the runtime does.
//!
//! Acknowledgement: [`EventSink::deliver`] returns once the pipeline *accepted* the event
//! (journaled, when durability is on). A webhook answers 200 only then; a poller confirms its
//! offset only then. An `Err` means "not accepted: let the channel redeliver".
//!
//! Events that arrive together (a `getUpdates` batch, a webhook body with several entries)
//! go through [`EventSink::deliver_batch`]: the chats' events are accepted concurrently, so
//! their journal writes share commits (the backends' group commit), each chat's in order.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::message::{
    ChatId, Interaction, MediaRef, Message, MessageId, Outgoing, OutgoingContent, Reaction,
    SentMessage, UserId,
};

tokio::task_local! {
    static SEND_KEY: Option<String>;
}

/// The idempotency key of the send being made, for display only: the black-box `jsonl`
/// provider prints it with each `send` line. The key is never part of what a provider sends
/// to its channel (`Outgoing::idempotency_key` is always `None` in [`Provider::send`]); a
/// channel provider must not forward this either.
pub fn current_send_key() -> Option<String> {
    SEND_KEY.try_with(Clone::clone).ok().flatten()
}

/// A nonce for the send being made: 25 hex characters of a digest of its outbox key, the same
/// on every attempt of that send (after a retry, a timeout, a restart) and different for
/// every other send (each part of a split text has its own). For a channel that drops a
/// second message carrying a nonce it already saw (Discord's `nonce` + `enforce_nonce`);
/// such a provider says so with [`Capabilities::resends_deduplicated`]. The digest does not
/// reveal the key. `None` outside a send, or for a send without a key (no durability).
pub fn current_send_nonce() -> Option<String> {
    current_send_key().map(|key| {
        let digest = botmesh_durability::keys::Fingerprint::of_content("send-nonce", &key);
        digest.as_str().chars().take(25).collect()
    })
}

/// Runs a provider call with [`current_send_key`] set.
pub(crate) async fn with_send_key<F: std::future::Future>(key: Option<String>, f: F) -> F::Output {
    SEND_KEY.scope(key, f).await
}

/// What a provider can do; the runtime adapts to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// The longest text one message may carry, in characters; longer texts are split into parts.
    pub text_limit: usize,
    /// The longest text a message with buttons, or a list, may carry, when the channel allows
    /// less there than [`text_limit`](Self::text_limit) (WhatsApp: 1024 for an interactive
    /// body; Twilio: 1200, leaving room for the numbered options): a longer text with buttons
    /// or list is split so that its last part, the one with the buttons or the list, fits.
    /// `None`: `text_limit`.
    pub buttons_text_limit: Option<usize>,
    /// Interactions (button presses) must be acknowledged (Telegram callback queries, Discord).
    pub interactions_require_ack: bool,
    /// Sent messages can be edited (live previews of `ctx.stream()` use edits).
    pub edits: bool,
    /// Typing indicators are supported.
    pub typing: bool,
    /// Read marks are supported.
    pub mark_read: bool,
    /// The channel drops a resend of a message it already created: the provider sends
    /// [`current_send_nonce`] and the channel answers a second send carrying it with the
    /// first message (Discord's `enforce_nonce`, within its window of a few minutes). A send
    /// whose outcome is unknown (a timeout, a crash mid-send) is then sent again (journaled
    /// with `on_ambiguous` resend) unless the send names its own policy: never lost, and not
    /// twice while the retry comes inside the channel's window.
    pub resends_deduplicated: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            text_limit: 4096,
            buttons_text_limit: None,
            interactions_require_ack: false,
            edits: true,
            typing: true,
            mark_read: true,
            resends_deduplicated: false,
        }
    }
}

/// The connection state of a transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportStatus {
    /// Not started, or starting.
    Starting,
    /// Connected: presence (typing, read marks) goes out.
    Ready,
    /// Temporarily disconnected: presence is skipped and counted.
    Disconnected,
    /// Stopped.
    Stopped,
}

/// A call offered to the bot (voice or video).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallEvent {
    /// The call's id.
    pub id: String,
    /// The chat.
    pub chat: ChatId,
    /// The caller.
    pub sender: UserId,
    /// Whether it is a video call.
    pub video: bool,
}

/// A delivery or read receipt of a message the bot sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryStatus {
    /// The chat.
    pub chat: ChatId,
    /// The bot's message.
    pub message_id: MessageId,
    /// `sent`, `delivered`, `read`, `failed`, as the channel says.
    pub status: String,
    /// The channel's error, for `failed`.
    pub error: Option<String>,
}

/// Something a provider reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProviderEvent {
    /// A message from a user.
    Message(Message),
    /// A button press or list selection.
    Interaction(Interaction),
    /// An incoming call.
    Call(CallEvent),
    /// A reaction added or removed.
    Reaction {
        /// The chat.
        chat: ChatId,
        /// Who reacted.
        sender: UserId,
        /// The reaction.
        reaction: Reaction,
    },
    /// A poll was created or answered.
    Poll {
        /// The chat.
        chat: ChatId,
        /// The channel's payload.
        data: serde_json::Value,
    },
    /// A group changed (members joined or left, title changed, …).
    Group {
        /// The group.
        chat: ChatId,
        /// `join`, `leave`, `title`, … as the channel says.
        action: String,
        /// The users concerned.
        users: Vec<UserId>,
    },
    /// A user's presence (online, typing, …).
    Presence {
        /// The chat.
        chat: ChatId,
        /// The user.
        user: UserId,
        /// The state as the channel says.
        state: String,
    },
    /// A delivery or read receipt.
    Status(DeliveryStatus),
    /// The user blocked the bot (or left the chat for good): flows of that chat end.
    Blocked {
        /// The chat.
        chat: ChatId,
    },
}

impl ProviderEvent {
    /// The event's kind name (`"message"`, `"call"`, `"reaction"`, …).
    pub fn kind(&self) -> EventKind {
        match self {
            ProviderEvent::Message(_) => EventKind::Message,
            ProviderEvent::Interaction(_) => EventKind::Interaction,
            ProviderEvent::Call(_) => EventKind::Call,
            ProviderEvent::Reaction { .. } => EventKind::Reaction,
            ProviderEvent::Poll { .. } => EventKind::Poll,
            ProviderEvent::Group { .. } => EventKind::Group,
            ProviderEvent::Presence { .. } => EventKind::Presence,
            ProviderEvent::Status(_) => EventKind::Status,
            ProviderEvent::Blocked { .. } => EventKind::Blocked,
        }
    }

    /// The chat the event concerns.
    pub fn chat(&self) -> &ChatId {
        match self {
            ProviderEvent::Message(m) => &m.chat,
            ProviderEvent::Interaction(i) => &i.chat,
            ProviderEvent::Call(c) => &c.chat,
            ProviderEvent::Reaction { chat, .. }
            | ProviderEvent::Poll { chat, .. }
            | ProviderEvent::Group { chat, .. }
            | ProviderEvent::Presence { chat, .. }
            | ProviderEvent::Blocked { chat } => chat,
            ProviderEvent::Status(s) => &s.chat,
        }
    }
}

/// The kinds of provider events, for hooks that subscribe to one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// [`ProviderEvent::Message`].
    Message,
    /// [`ProviderEvent::Interaction`].
    Interaction,
    /// [`ProviderEvent::Call`].
    Call,
    /// [`ProviderEvent::Reaction`].
    Reaction,
    /// [`ProviderEvent::Poll`].
    Poll,
    /// [`ProviderEvent::Group`].
    Group,
    /// [`ProviderEvent::Presence`].
    Presence,
    /// [`ProviderEvent::Status`].
    Status,
    /// [`ProviderEvent::Blocked`].
    Blocked,
}

/// How the pipeline took an event the provider delivered. Every variant means "do not
/// redeliver": acknowledge it to the channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// Admitted and queued for its chat (journaled first, when durability is on).
    Queued,
    /// Already seen (same chat and message id): dropped.
    Duplicate,
    /// Dropped by a gate (access list, group mode, handoff) or handled without a queue
    /// (a reaction, a status): nothing to redeliver.
    Handled,
}

/// Why the pipeline did not accept an event: the channel should redeliver it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The bot is not running (not started, or stopping).
    #[error("the bot is not accepting events (not started or stopping)")]
    NotRunning,
    /// The durable journal could not record the event (fail-closed).
    #[error("the inbound journal could not record event {id}: {reason}")]
    JournalUnavailable {
        /// The event's id.
        id: String,
        /// Why.
        reason: String,
    },
}

/// The pipeline's entry, implemented by the bot.
#[async_trait]
pub trait InboundPipeline: Send + Sync + 'static {
    /// Offers an event to the pipeline; returns once it was accepted or rejected.
    async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected>;
    /// The provider's transport state changed.
    fn transport_status(&self, status: TransportStatus);
    /// The provider's input ended for good (end of stdin for the jsonl provider).
    fn end_of_input(&self);
}

/// The handle a provider receives in [`Provider::start`] to hand events to the bot.
#[derive(Clone)]
pub struct EventSink(Arc<dyn InboundPipeline>);

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventSink")
    }
}

impl EventSink {
    /// Wraps a pipeline (the bot makes one; tests may make their own).
    pub fn new(pipeline: Arc<dyn InboundPipeline>) -> Self {
        Self(pipeline)
    }

    /// Offers an event; acknowledge it to the channel only on `Ok`.
    pub async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
        self.0.deliver(event).await
    }

    /// Offers events that arrived together; returns each one's outcome, in `events`' order,
    /// once all of them were accepted or rejected.
    ///
    /// The events of one chat are offered one after the other, in order; different chats'
    /// concurrently, so that durable journaling writes them in shared commits instead of one
    /// after the other. After an event of a chat is rejected, that chat's later events in the
    /// batch are not offered (accepting them would answer them before the rejected one) and
    /// come back with the same rejection: let the channel redeliver them all.
    pub async fn deliver_batch(
        &self,
        events: Vec<ProviderEvent>,
    ) -> Vec<Result<Accepted, Rejected>> {
        let count = events.len();
        if count <= 1 {
            let mut out = Vec::with_capacity(count);
            for event in events {
                out.push(self.deliver(event).await);
            }
            return out;
        }
        // Each chat's events with their positions in the batch, chats in order of first sight.
        let mut index: std::collections::HashMap<ChatId, usize> = std::collections::HashMap::new();
        let mut chats: Vec<Vec<(usize, ProviderEvent)>> = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            let at = *index.entry(event.chat().clone()).or_insert_with(|| {
                chats.push(Vec::new());
                chats.len() - 1
            });
            chats[at].push((i, event));
        }
        let mut tasks = tokio::task::JoinSet::new();
        for list in chats {
            let sink = self.clone();
            tasks.spawn(async move {
                let mut out = Vec::with_capacity(list.len());
                let mut rejected: Option<Rejected> = None;
                for (i, event) in list {
                    let result = match &rejected {
                        Some(r) => Err(r.clone()),
                        None => sink.deliver(event).await,
                    };
                    if let Err(r) = &result {
                        rejected.get_or_insert_with(|| r.clone());
                    }
                    out.push((i, result));
                }
                out
            });
        }
        let mut results: Vec<Option<Result<Accepted, Rejected>>> = vec![None; count];
        while let Some(joined) = tasks.join_next().await {
            // A task that panicked leaves its events without an outcome: rejected below.
            if let Ok(outcomes) = joined {
                for (i, result) in outcomes {
                    results[i] = Some(result);
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(Rejected::NotRunning)))
            .collect()
    }

    /// Reports the transport's connection state (presence is skipped while not ready).
    pub fn transport_status(&self, status: TransportStatus) {
        self.0.transport_status(status);
    }

    /// Reports that no more events will come (the bot's `run()` then stops with a drain).
    pub fn end_of_input(&self) {
        self.0.end_of_input();
    }
}

/// A provider's serializable, versioned media reference (journaled by the durable inbox):
/// `{ provider, v, data }`, never carrying credentials.
pub use botmesh_durability::media_refs::StoredMediaRef;

/// Why replayed media cannot be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
#[serde(rename_all = "kebab-case")]
pub enum MediaUnavailableReason {
    /// The provider did not serialize the reference (view-once, for example).
    NotDurable,
    /// Another provider wrote the record.
    ProviderMismatch,
    /// The stored value is invalid, of an unknown version, or tampered with.
    RehydrateFailed,
    /// The channel refused the download on a replay (a hosted media URL that expired since
    /// the message arrived); the provider's own error is in the message.
    Expired,
}

/// The class of a provider error, which decides what the runtime does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Wait (at least `retry_after`) and try again.
    RateLimited(Option<Duration>),
    /// Try again with backoff.
    Retryable,
    /// The request may have reached the channel (a timeout or a connection lost after it was
    /// written): trying again may send the message twice. The outbox settles it by the
    /// ambiguity policy (`on_ambiguous`) and reports it (`durability:ambiguous`).
    Ambiguous,
    /// Do not try again (dead-letter it).
    Final,
}

/// An error from a channel.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// The channel asks to slow down.
    #[error("{provider}: rate limited{}", retry_after.map(|d| format!(", retry after {d:?}")).unwrap_or_default())]
    RateLimited {
        /// The provider.
        provider: String,
        /// How long the channel asks to wait, if it says.
        retry_after: Option<Duration>,
    },
    /// The channel cannot carry this content (final).
    #[error("{provider}: unsupported content: {what}")]
    UnsupportedContent {
        /// The provider.
        provider: String,
        /// What was refused.
        what: String,
    },
    /// The payload is over the channel's size limit (final).
    #[error("{provider}: payload of {size} bytes is over the limit of {limit}")]
    PayloadTooLarge {
        /// The provider.
        provider: String,
        /// The payload size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Free-form messages are not allowed outside the session window (final).
    #[error("{provider}: chat {chat} is outside the session window")]
    OutsideSessionWindow {
        /// The provider.
        provider: String,
        /// The chat.
        chat: String,
    },
    /// The recipient cannot be reached (blocked the bot, does not exist) (final).
    #[error("{provider}: recipient {chat} unreachable: {reason}")]
    RecipientUnreachable {
        /// The provider.
        provider: String,
        /// The chat.
        chat: String,
        /// The channel's words.
        reason: String,
    },
    /// A network failure (retryable).
    #[error("{provider}: network error: {message}")]
    Network {
        /// The provider.
        provider: String,
        /// What failed.
        message: String,
    },
    /// The request may have reached the channel, and no answer came back (a timeout after it
    /// was written, a connection reset while waiting for the answer): the message may or may
    /// not have gone out. Not retried as a safe failure: the outbox applies its ambiguity
    /// policy (a flow's question is sent again, another send is skipped, unless the send
    /// says otherwise) and emits `durability:ambiguous`. A failure before the request left
    /// (connection refused, DNS) is [`ProviderError::Network`] instead.
    #[error("{provider}: outcome unknown, the request may have reached the channel: {message}")]
    Ambiguous {
        /// The provider.
        provider: String,
        /// What failed.
        message: String,
    },
    /// The transport is not connected (retryable).
    #[error("{provider}: not connected")]
    NotConnected {
        /// The provider.
        provider: String,
    },
    /// The operation is not supported by this channel (final).
    #[error("{provider}: {operation} is not supported")]
    Unsupported {
        /// The provider.
        provider: String,
        /// The operation (`edit`, `download_media`, …).
        operation: &'static str,
    },
    /// Media of a replayed message cannot be rebuilt.
    #[error("media unavailable ({reason:?}): {message}")]
    MediaUnavailable {
        /// Why.
        reason: MediaUnavailableReason,
        /// Details.
        message: String,
    },
    /// Any other API error, with its retryability.
    #[error("{provider}: API error{}{}: {message}", status.map(|s| format!(" {s}")).unwrap_or_default(), code.as_ref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Api {
        /// The provider.
        provider: String,
        /// The HTTP status, if any.
        status: Option<u16>,
        /// The channel's error code, if any.
        code: Option<String>,
        /// The channel's message.
        message: String,
        /// Whether trying again may succeed.
        retryable: bool,
    },
}

impl ProviderError {
    /// The class that decides retries.
    pub fn class(&self) -> ErrorClass {
        match self {
            ProviderError::RateLimited { retry_after, .. } => ErrorClass::RateLimited(*retry_after),
            ProviderError::Network { .. } | ProviderError::NotConnected { .. } => {
                ErrorClass::Retryable
            }
            ProviderError::Ambiguous { .. } => ErrorClass::Ambiguous,
            ProviderError::Api {
                retryable: true, ..
            } => ErrorClass::Retryable,
            _ => ErrorClass::Final,
        }
    }

    /// Whether trying again may succeed (for an [`ErrorClass::Ambiguous`] error: and may
    /// send the message twice).
    pub fn is_retryable(&self) -> bool {
        !matches!(self.class(), ErrorClass::Final)
    }
}

/// A chat channel.
///
/// Only [`name`](Provider::name), [`start`](Provider::start), [`stop`](Provider::stop) and
/// [`send`](Provider::send) are required; the rest have defaults that say "not supported" or
/// do nothing. The trait is object-safe (`Arc<dyn Provider>`), hence `async_trait`: native
/// `async fn` in traits is not yet usable through `dyn`.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// A short stable name (`"telegram"`, `"console"`); media refs carry it.
    fn name(&self) -> &str;

    /// What the channel can do.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Connects and starts delivering events to `sink`. Returns once started; events keep
    /// flowing from the provider's own tasks until [`stop`](Provider::stop).
    async fn start(&self, sink: EventSink) -> Result<(), ProviderError>;

    /// Stops delivering events and disconnects.
    async fn stop(&self) -> Result<(), ProviderError>;

    /// Sends a message; `outgoing.idempotency_key` is always `None` here (the runtime strips it).
    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError>;

    /// Edits a message the bot sent.
    async fn edit(
        &self,
        _chat: &ChatId,
        _message_id: &MessageId,
        _content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported {
            provider: self.name().to_owned(),
            operation: "edit",
        })
    }

    /// Shows a typing indicator.
    async fn typing(&self, _chat: &ChatId) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Marks a message read.
    async fn mark_read(
        &self,
        _chat: &ChatId,
        _message_id: &MessageId,
    ) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Acknowledges an interaction (answers a callback query), optionally with a short notice.
    async fn ack_interaction(
        &self,
        _interaction: &Interaction,
        _notice: Option<&str>,
    ) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Downloads inbound media.
    async fn download_media(&self, _media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        Err(ProviderError::Unsupported {
            provider: self.name().to_owned(),
            operation: "download_media",
        })
    }

    /// A serializable, versioned form of a media reference for the journal, or `None` when the
    /// reference cannot outlive the process. The default journals the token as it is.
    fn serialize_media_ref(&self, media: &MediaRef) -> Option<StoredMediaRef> {
        Some(StoredMediaRef {
            provider: self.name().to_owned(),
            v: 1,
            data: serde_json::Value::String(media.token.clone()),
        })
    }

    /// Rebuilds a media reference from its journaled form; validates it. Does not need the
    /// transport to be connected.
    fn rehydrate_media_ref(&self, stored: &StoredMediaRef) -> Result<MediaRef, ProviderError> {
        if stored.provider != self.name() {
            return Err(ProviderError::MediaUnavailable {
                reason: MediaUnavailableReason::ProviderMismatch,
                message: format!("written by {}, read by {}", stored.provider, self.name()),
            });
        }
        match (&stored.data, stored.v) {
            (serde_json::Value::String(token), 1) => Ok(MediaRef {
                provider: self.name().to_owned(),
                token: token.clone(),
            }),
            _ => Err(ProviderError::MediaUnavailable {
                reason: MediaUnavailableReason::RehydrateFailed,
                message: format!("unknown media ref v{} for {}", stored.v, self.name()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records what it was offered; rejects the message with id `reject`.
    struct Picky {
        offered: Mutex<Vec<String>>,
        reject: &'static str,
    }

    #[async_trait]
    impl InboundPipeline for Picky {
        async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
            let ProviderEvent::Message(m) = event else {
                return Ok(Accepted::Handled);
            };
            // Another chat's event gets a chance to run in between.
            tokio::task::yield_now().await;
            self.offered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(m.id.0.clone());
            if m.id.0 == self.reject {
                return Err(Rejected::NotRunning);
            }
            Ok(Accepted::Queued)
        }

        fn transport_status(&self, _status: TransportStatus) {}

        fn end_of_input(&self) {}
    }

    #[tokio::test]
    async fn a_batch_is_offered_in_order_per_chat_and_stops_a_chat_at_its_first_rejection() {
        let picky = Arc::new(Picky {
            offered: Mutex::default(),
            reject: "a2",
        });
        let sink = EventSink::new(picky.clone());
        let events = ["a1", "b1", "a2", "b2", "a3", "b3"]
            .map(|id| ProviderEvent::Message(Message::text(id, &id[..1], "hi")))
            .to_vec();
        let outcomes = sink.deliver_batch(events).await;
        assert_eq!(
            outcomes,
            vec![
                Ok(Accepted::Queued),
                Ok(Accepted::Queued),
                Err(Rejected::NotRunning),
                Ok(Accepted::Queued),
                Err(Rejected::NotRunning),
                Ok(Accepted::Queued),
            ]
        );
        let offered = picky
            .offered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let of = |chat: char| -> Vec<&str> {
            offered
                .iter()
                .filter(|id| id.starts_with(chat))
                .map(String::as_str)
                .collect()
        };
        assert_eq!(
            of('a'),
            ["a1", "a2"],
            "a3 is not offered after a2 was rejected"
        );
        assert_eq!(of('b'), ["b1", "b2", "b3"]);
    }
}
