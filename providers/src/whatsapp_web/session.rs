//! The seam between the provider and a WhatsApp Web client: the [`WaSession`] trait, the
//! events a session reports ([`WaEvent`]) through [`WaEvents`], and the sends it carries
//! ([`WaSend`]).
//!
//! Incoming messages are handed over with [`WaEvents::deliver`], which returns once the bot
//! accepted the message (journaled it in its durable inbox, or found it a duplicate or never
//! answered): a session acknowledges a message to the server only then (ack-after-accept).
//! A message the bot did not accept is not acknowledged: the server delivers it again after a
//! reconnect, which the session then makes.
//!
//! The provider only talks to this trait. A client over the `whatsapp-rust` crate (Noise
//! socket, Signal sessions, media crypto) implements it; [`FakeSession`](super::FakeSession)
//! replays recorded event shapes for tests. The types
//! here mirror the crate's (`Event`, `MessageInfo.source`, the media fields of an
//! `ImageMessage`), in plain serde types, so that recorded events are JSON files. This
//! module defines shapes only: no identity resolution, dedupe or retries (the provider's).

use std::time::Duration;

use async_trait::async_trait;
use botmesh::message::MediaKind;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::store::SessionStore;

/// Who sent a message and where, as the client reports it (`MessageInfo.source`). JIDs are
/// `user@server` strings (`15551234567@s.whatsapp.net`, `100000012345678@lid`,
/// `120363…@g.us`), device suffixes included as the client gives them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaSource {
    /// The chat: the other user in a direct chat, the group in a group.
    pub chat: String,
    /// The author (in a direct chat, the same user as `chat`).
    pub sender: String,
    /// The author's other identity when the server names it: the phone number for a LID
    /// sender, the LID for a phone-number sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_alt: Option<String>,
    /// The message is the bot's own (another linked device of the account, or an echo).
    #[serde(default)]
    pub is_from_me: bool,
    /// The chat is a group.
    #[serde(default)]
    pub is_group: bool,
}

/// An incoming message's envelope (`MessageInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaMessageInfo {
    /// The message id (`3EB0…`), unique per sender.
    pub id: String,
    /// Chat and sender.
    pub source: WaSource,
    /// The sender's display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_name: Option<String>,
    /// When it was sent (Unix seconds).
    pub timestamp: i64,
    /// Delivered during the offline sync after a (re)connect: a message sent while the
    /// session was away (it is answered, once).
    #[serde(default)]
    pub is_offline: bool,
}

/// The fields that download and decrypt a media item, and ask the sender's phone to upload it
/// again once the CDN copy expired. No URL: the host comes from the session's media
/// connection, the path from here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaMedia {
    /// Image, video, audio, voice note, document or sticker.
    pub kind: MediaKind,
    /// The CDN path (`/v/t62.7118-24/…`).
    pub direct_path: String,
    /// The 32-byte media key (base64 in JSON).
    #[serde(with = "b64")]
    pub media_key: Vec<u8>,
    /// SHA-256 of the plaintext (base64 in JSON).
    #[serde(with = "b64")]
    pub file_sha256: Vec<u8>,
    /// SHA-256 of the encrypted file (base64 in JSON).
    #[serde(with = "b64")]
    pub file_enc_sha256: Vec<u8>,
    /// The plaintext's length in bytes.
    pub file_length: u64,
    /// The MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mimetype: Option<String>,
    /// A caption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    /// A document's file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
}

/// What an incoming message carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WaContent {
    /// `conversation` or `extendedTextMessage.text`.
    Text {
        /// The text.
        text: String,
    },
    /// An image, video, audio, document or sticker message.
    Media(WaMedia),
    /// A reaction to a message.
    Reaction {
        /// The id of the message reacted to.
        target_id: String,
        /// The emoji (empty: the reaction was removed).
        emoji: String,
    },
    /// A protocol message (revoke, edit, key distribution) or a kind the provider does not
    /// model: never answered.
    Other {
        /// The message's kind as the client names it.
        kind: String,
    },
}

/// An incoming message: its envelope and content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaMessage {
    /// The envelope.
    pub info: WaMessageInfo,
    /// The content.
    pub content: WaContent,
}

/// Something the session reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WaEvent {
    /// A QR code to show; it rotates: each is valid for `timeout_secs`.
    PairingQrCode {
        /// The text to render as a QR code.
        code: String,
        /// How long it is valid.
        timeout_secs: u64,
    },
    /// An 8-character code to enter on the phone ("Link with phone number instead").
    PairingCode {
        /// The code.
        code: String,
        /// How long it is valid.
        timeout_secs: u64,
    },
    /// The phone accepted the link; the credentials are in the session store now.
    PairSuccess {
        /// The account's own JID.
        id: String,
    },
    /// Connected and authenticated.
    Connected,
    /// The socket dropped; the session reconnects on its own (backoff).
    Disconnected,
    /// A message.
    Message(Box<WaMessage>),
    /// Receipts for messages the bot sent: delivered to, read or played on the recipient's
    /// devices, or refused by the server.
    Receipt {
        /// The chat (the user in a direct chat, the group in a group).
        chat: String,
        /// Who sent the receipt (the user; in a group, the member).
        sender: String,
        /// The chat is a group.
        #[serde(default)]
        is_group: bool,
        /// The bot's message ids the receipt is for.
        ids: Vec<String>,
        /// `delivered`, `read` or `failed`.
        status: String,
    },
    /// Old messages of a history sync (already seen on the phone): never answered.
    HistorySync {
        /// How many messages it carried.
        messages: usize,
    },
    /// A message that could not be decrypted ("waiting for this message"): logged.
    Undecryptable {
        /// The message id.
        id: String,
        /// The chat.
        chat: String,
    },
    /// The phone removed this device, or the credentials are no longer valid (401 / 516):
    /// the session must pair again.
    LoggedOut {
        /// The server's reason.
        reason: String,
    },
    /// Another client connected with the same credentials (conflict "replaced" / 409).
    StreamReplaced,
    /// The account is banned for a while.
    TemporaryBan {
        /// The server's ban code.
        code: i32,
        /// How long, when the server says.
        expires_secs: Option<u64>,
    },
}

/// How a new session pairs: a QR code always, a pair code as well when a phone number is
/// given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pairing {
    /// The account's phone number (digits, with country code) for a pair code.
    pub phone_number: Option<String>,
}

/// What a send carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WaOutgoing {
    /// A text, quoting a message when `quoted` is set.
    Text {
        /// The text.
        text: String,
        /// The id of the message quoted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quoted: Option<String>,
    },
    /// New media: the session uploads (encrypts) the bytes, then sends the message.
    Upload {
        /// The kind.
        kind: MediaKind,
        /// The plaintext.
        #[serde(with = "b64")]
        data: Vec<u8>,
        /// The MIME type.
        mimetype: String,
        /// A caption.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        caption: Option<String>,
        /// A document's file name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_name: Option<String>,
    },
    /// Media already on WhatsApp's CDN (a media ref received earlier), forwarded as it is.
    Forward(WaMedia),
    /// A reaction to a message.
    Reaction {
        /// The message reacted to.
        target_id: String,
        /// The emoji (empty removes it).
        emoji: String,
    },
}

/// One send: to whom, under which message id, what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaSend {
    /// The recipient's JID.
    pub to: String,
    /// The message id, chosen by the provider (from the outbox key): a resend under the
    /// same id is the same message for the recipient's devices.
    pub id: String,
    /// The content.
    pub content: WaOutgoing,
}

/// Which message a media re-upload request is about (`MediaReuploadRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaMediaOrigin {
    /// The message's id.
    pub message_id: String,
    /// Its chat's JID.
    pub chat: String,
    /// Its author in a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participant: Option<String>,
    /// Whether the bot sent it.
    #[serde(default)]
    pub is_from_me: bool,
}

/// Why a session call failed, as far as the provider needs to know to classify it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaError {
    /// Not connected (connecting, reconnecting, logged out).
    #[error("not connected")]
    NotConnected,
    /// The request left and no answer came: a resend under the same id is safe.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server asks to slow down (stream error 429, ack 429).
    #[error("rate limited")]
    RateLimited {
        /// How long to wait, when known.
        retry_after: Option<Duration>,
    },
    /// The server failed (5xx-like ack, internal error): try again.
    #[error("server error {code}: {message}")]
    Server {
        /// The server's code.
        code: u16,
        /// Its words.
        message: String,
    },
    /// The recipient cannot receive it (no such account, ack 463 for a LID-migrated
    /// contact addressed by phone number, blocked).
    #[error("recipient {to} unreachable: {reason}")]
    Unreachable {
        /// The recipient.
        to: String,
        /// Why.
        reason: String,
    },
    /// The request itself is wrong (a too large file, an unsupported content): final.
    #[error("refused ({code}): {message}")]
    Refused {
        /// The server's code.
        code: u16,
        /// Its words.
        message: String,
    },
    /// The CDN no longer has the file (404 / 410): ask the phone to upload it again.
    #[error("media expired on the CDN (HTTP {status})")]
    MediaExpired {
        /// The CDN's status.
        status: u16,
    },
    /// The phone no longer has the media (re-upload answered `NotFound`, or it failed).
    #[error("the phone cannot upload the media again: {0}")]
    MediaGone(String),
    /// The downloaded file does not match its hashes or MAC.
    #[error("media integrity check failed: {0}")]
    MediaCorrupt(String),
    /// The session store failed.
    #[error("session store: {0}")]
    Store(String),
    /// The client failed otherwise.
    #[error("{0}")]
    Client(String),
    /// The bot did not accept an incoming message (its journal could not record it, or it is
    /// stopping): the session must not acknowledge it, so that the server delivers it again.
    #[error("the bot did not accept message {id}: {reason}")]
    NotAccepted {
        /// The message id.
        id: String,
        /// Why.
        reason: String,
    },
}

/// What a session reports to the provider: an event, and for a message handed over with
/// [`WaEvents::deliver`], where the provider answers whether the bot accepted it.
pub(crate) struct Report {
    pub(crate) event: WaEvent,
    pub(crate) accepted: Option<oneshot::Sender<Result<(), WaError>>>,
}

/// Where a session reports to the provider, in order (given to [`WaSession::connect`]).
/// Cheap to clone.
///
/// Bounded: both calls wait while the provider is behind, so a session that awaits them
/// holds at most the channel's capacity of events in memory and slows its socket down
/// instead of dropping anything.
#[derive(Clone, Debug)]
pub struct WaEvents {
    tx: mpsc::Sender<Report>,
}

impl WaEvents {
    /// A channel of `capacity` reports and its receiving end (the provider's).
    pub(crate) fn channel(capacity: usize) -> (Self, mpsc::Receiver<Report>) {
        let (tx, rx) = mpsc::channel(capacity);
        (Self { tx }, rx)
    }

    /// Hands an incoming message to the bot and waits until the bot accepted it: journaled
    /// in its durable inbox (when durability is on), or dropped as a duplicate or as never
    /// answered (the bot's own messages, history, protocol messages). Acknowledge the
    /// message to the server only on `Ok`; on [`WaError::NotAccepted`] leave it
    /// unacknowledged, so that the server delivers it again (after a reconnect).
    pub async fn deliver(&self, message: WaMessage) -> Result<(), WaError> {
        let id = message.info.id.clone();
        let stopped = |id: String| WaError::NotAccepted {
            id,
            reason: "the provider stopped".to_owned(),
        };
        let (done, accepted) = oneshot::channel();
        let report = Report {
            event: WaEvent::Message(Box::new(message)),
            accepted: Some(done),
        };
        if self.tx.send(report).await.is_err() {
            return Err(stopped(id));
        }
        accepted.await.unwrap_or_else(|_| Err(stopped(id)))
    }

    /// Reports an event that needs no acknowledgement from the bot (pairing, connection,
    /// receipts, and messages the client acknowledged on its own). Fails only once the
    /// provider stopped.
    pub async fn report(&self, event: WaEvent) -> Result<(), WaError> {
        let report = Report {
            event,
            accepted: None,
        };
        self.tx
            .send(report)
            .await
            .map_err(|_| WaError::NotConnected)
    }

    /// Whether the provider stopped listening.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// A WhatsApp Web client as the provider uses it (the fake: [`FakeSession`](super::FakeSession)).
///
/// `connect` returns once the client runs (not once it is connected: pairing may take
/// minutes); from then on it reports [`WaEvent`]s to `events` and reconnects on its own
/// until [`disconnect`](WaSession::disconnect), a logout or a replaced stream. It hands each
/// incoming message over with [`WaEvents::deliver`] and acknowledges it to the server only
/// once that returned `Ok`; after a message was not accepted it reconnects (after a pause),
/// so that the server delivers it again.
#[async_trait]
pub trait WaSession: Send + Sync + 'static {
    /// Starts the client on the credentials in `store` (pairing when it has none).
    async fn connect(
        &self,
        store: SessionStore,
        pairing: Pairing,
        events: WaEvents,
    ) -> Result<(), WaError>;

    /// Stops the client and closes the socket; the credentials stay in the store.
    async fn disconnect(&self);

    /// Sends a message under `send.id`; returns the id the server acknowledged.
    async fn send(&self, send: &WaSend) -> Result<String, WaError>;

    /// Edits a text message the bot sent.
    async fn edit(&self, to: &str, id: &str, text: &str) -> Result<(), WaError>;

    /// Shows "typing…" in a chat.
    async fn typing(&self, to: &str) -> Result<(), WaError>;

    /// Marks messages of a chat read (blue ticks).
    async fn mark_read(&self, chat: &str, sender: &str, ids: &[String]) -> Result<(), WaError>;

    /// Downloads and decrypts media; [`WaError::MediaExpired`] once the CDN lost it.
    async fn download(&self, media: &WaMedia) -> Result<Vec<u8>, WaError>;

    /// Asks the sender's phone to upload expired media again; returns the new direct path.
    async fn request_reupload(
        &self,
        media: &WaMedia,
        origin: &WaMediaOrigin,
    ) -> Result<String, WaError>;
}

/// Base64 for byte fields in JSON (botmesh's codec).
pub(crate) mod b64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&botmesh::codec::encode_base64(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        botmesh::codec::decode_base64(&text)
            .ok_or_else(|| serde::de::Error::custom("invalid base64"))
    }
}
