//! The message model: what arrives from a channel and what the bot sends back.
//!
//! Ids are opaque strings the core never parses ([`ChatId`], [`UserId`], [`MessageId`]); a
//! provider resolves aliases before it emits an event. Inbound [`Message`]s carry [`Content`];
//! outbound messages are [`Outgoing`] (content plus send options). Media is referenced by URL,
//! path, bytes or a provider token ([`MediaSource`]); the bytes of inbound media are loaded
//! lazily through the provider. This module holds data only: no I/O.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl From<&String> for $name {
            fn from(s: &String) -> Self {
                Self(s.clone())
            }
        }
    };
}

id_type!(
    /// A chat: a one-to-one conversation or a group, as the channel names it.
    ChatId
);
id_type!(
    /// A user (sender), as the channel names them.
    UserId
);
id_type!(
    /// A message, as the channel names it.
    MessageId
);

/// A message received from a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The channel's id of this message (unique within the chat).
    pub id: MessageId,
    /// The chat it was written in.
    pub chat: ChatId,
    /// Who wrote it.
    pub sender: UserId,
    /// The sender's display name, when the channel gives one.
    #[serde(default)]
    pub sender_name: Option<String>,
    /// Whether the chat is a group.
    #[serde(default)]
    pub is_group: bool,
    /// Whether the bot was mentioned (in groups).
    #[serde(default)]
    pub mentions_bot: bool,
    /// When the channel says it was sent (Unix ms).
    pub timestamp_ms: i64,
    /// What it carries.
    pub content: Content,
    /// The message it answers, if any.
    #[serde(default)]
    pub reply_to: Option<MessageId>,
    /// The sender's language as the channel reports it (`"en"`, `"pt-BR"`), if any.
    #[serde(default)]
    pub lang_hint: Option<String>,
}

impl Message {
    /// A text message, handy in tests: `Message::text("m1", "alice", "hello")`.
    pub fn text(
        id: impl Into<MessageId>,
        chat: impl Into<ChatId>,
        text: impl Into<String>,
    ) -> Self {
        let chat = chat.into();
        Self {
            id: id.into(),
            sender: UserId(chat.0.clone()),
            chat,
            sender_name: None,
            is_group: false,
            mentions_bot: false,
            timestamp_ms: crate::clock::now_ms(),
            content: Content::Text(text.into()),
            reply_to: None,
            lang_hint: None,
        }
    }

    /// The text of the message: its text, a media caption, or `""`.
    pub fn text_content(&self) -> &str {
        self.content.text()
    }
}

/// What an inbound message carries. Serialized adjacently tagged:
/// `{"kind": "text", "data": "hello"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum Content {
    /// Plain text.
    Text(String),
    /// A photo, video, audio, voice note, document or sticker.
    Media(InboundMedia),
    /// A location pin.
    Location(Location),
    /// Shared contact cards.
    Contacts(Vec<ContactCard>),
    /// A reaction to an earlier message (also delivered as a provider event).
    Reaction(Reaction),
    /// Something the core does not model; the provider's raw JSON.
    Other(serde_json::Value),
}

impl Content {
    /// The text of the content: the text, a media caption, or `""`.
    pub fn text(&self) -> &str {
        match self {
            Content::Text(t) => t,
            Content::Media(m) => m.caption.as_deref().unwrap_or(""),
            _ => "",
        }
    }

    /// The kind name, as used by type matchers and logs (`"text"`, `"image"`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Content::Text(_) => "text",
            Content::Media(m) => m.kind.as_str(),
            Content::Location(_) => "location",
            Content::Contacts(_) => "contacts",
            Content::Reaction(_) => "reaction",
            Content::Other(_) => "other",
        }
    }
}

/// The kind of a media item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    /// A photo.
    Image,
    /// A video.
    Video,
    /// An audio file.
    Audio,
    /// A voice note.
    Voice,
    /// A document or any file.
    Document,
    /// A sticker.
    Sticker,
}

impl MediaKind {
    /// The lowercase name (`"image"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Video => "video",
            MediaKind::Audio => "audio",
            MediaKind::Voice => "voice",
            MediaKind::Document => "document",
            MediaKind::Sticker => "sticker",
        }
    }
}

/// A reference to inbound media that the provider can download. `token` is what the channel
/// gave (a file id, a media id, a URL); it may be a live handle the provider re-serializes for
/// the journal (see `Provider::serialize_media_ref`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MediaRef {
    /// The provider that can resolve it.
    pub provider: String,
    /// The provider's token.
    pub token: String,
}

/// Inbound media.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMedia {
    /// What kind of media.
    pub kind: MediaKind,
    /// How to download it.
    pub media_ref: MediaRef,
    /// The MIME type, when known.
    #[serde(default)]
    pub mime: Option<String>,
    /// A caption.
    #[serde(default)]
    pub caption: Option<String>,
    /// A file name, for documents.
    #[serde(default)]
    pub file_name: Option<String>,
    /// The size in bytes, when known.
    #[serde(default)]
    pub size: Option<u64>,
}

/// A location.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Location {
    /// Latitude in degrees.
    pub latitude: f64,
    /// Longitude in degrees.
    pub longitude: f64,
    /// A place name.
    #[serde(default)]
    pub name: Option<String>,
    /// An address.
    #[serde(default)]
    pub address: Option<String>,
}

/// A contact card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContactCard {
    /// The display name.
    pub name: String,
    /// Phone numbers.
    #[serde(default)]
    pub phones: Vec<String>,
}

/// A reaction (an emoji on a message); an empty emoji removes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reaction {
    /// The message reacted to.
    pub message_id: MessageId,
    /// The emoji.
    pub emoji: String,
}

/// A button press or list selection on a message the bot sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    /// The channel's id of the interaction (a callback query id, …).
    pub id: String,
    /// The chat.
    pub chat: ChatId,
    /// Who pressed.
    pub sender: UserId,
    /// The sender's display name, when known.
    #[serde(default)]
    pub sender_name: Option<String>,
    /// The button's data (its id).
    pub data: String,
    /// The button's visible title, when known.
    #[serde(default)]
    pub title: Option<String>,
    /// The message that carried the button.
    #[serde(default)]
    pub message_id: Option<MessageId>,
    /// Whether the chat is a group.
    #[serde(default)]
    pub is_group: bool,
    /// When it happened (Unix ms).
    pub timestamp_ms: i64,
    /// On transports that require an ack: the deadline (Unix ms) for it.
    #[serde(default)]
    pub respond_by_ms: Option<i64>,
    /// A text message the provider read as a press (an SMS answer `2` to numbered options):
    /// `id` is that message's id, and the runtime journals and dedupes the press as that
    /// message. A redelivery the provider reads as a plain text (it forgot the options in a
    /// restart, or sent a message without options since) is then still a duplicate.
    #[serde(default)]
    pub from_text: bool,
}

impl Interaction {
    /// The id the runtime dedupes and journals it under in its chat: its message's id for a
    /// press read from a text ([`from_text`](Self::from_text)), `interaction:<id>` otherwise.
    pub fn dedupe_id(&self) -> String {
        if self.from_text {
            self.id.clone()
        } else {
            format!("interaction:{}", self.id)
        }
    }
}

/// A button on an outgoing message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Button {
    /// The data sent back when pressed (also the answer text a flow sees).
    pub id: String,
    /// The visible title.
    pub title: String,
}

impl Button {
    /// A button whose id and title are the same text.
    pub fn new(title: impl Into<String>) -> Self {
        let title = title.into();
        Self {
            id: title.clone(),
            title,
        }
    }

    /// A button with a distinct id.
    pub fn with_id(id: impl Into<String>, title: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            title: title.into(),
        }
    }
}

/// A section of a list message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListSection {
    /// The section title.
    pub title: String,
    /// Its rows.
    pub rows: Vec<Button>,
}

/// Where outgoing media comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum MediaSource {
    /// A URL the channel fetches.
    Url {
        /// The URL.
        url: String,
    },
    /// A local file the provider uploads.
    Path {
        /// The path.
        path: PathBuf,
    },
    /// Bytes in memory (journaled base64-encoded).
    Bytes {
        /// The bytes.
        #[serde(with = "crate::codec::base64_bytes")]
        data: Vec<u8>,
        /// A file name for the upload.
        file_name: Option<String>,
    },
    /// A channel token for media already on the channel (a Telegram `file_id`, …).
    Token {
        /// The token.
        token: String,
    },
}

/// The content of an outgoing message. Serialized adjacently tagged:
/// `{"kind": "text", "data": {"text": "hello"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum OutgoingContent {
    /// Text, optionally with buttons under it.
    Text {
        /// The text.
        text: String,
        /// Buttons (quick replies / inline keyboard), possibly empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        buttons: Vec<Button>,
    },
    /// A list picker.
    List {
        /// The text above the list.
        text: String,
        /// The label of the button that opens the list.
        button: String,
        /// The sections.
        sections: Vec<ListSection>,
    },
    /// Media with an optional caption.
    Media {
        /// The kind.
        media_kind: MediaKind,
        /// Where the bytes come from.
        source: MediaSource,
        /// A caption.
        caption: Option<String>,
        /// The MIME type, when known.
        mime: Option<String>,
    },
    /// A location pin.
    Location(Location),
    /// Contact cards.
    Contacts(Vec<ContactCard>),
    /// A reaction to a message.
    Reaction(Reaction),
    /// A pre-approved template (WhatsApp Cloud API), by name, language and parameters.
    Template {
        /// The template's name.
        name: String,
        /// Its language code.
        language: String,
        /// Body parameters, in order.
        #[serde(default)]
        params: Vec<String>,
    },
}

impl OutgoingContent {
    /// The text of the content (text, list text or caption), or `""`.
    pub fn text(&self) -> &str {
        match self {
            OutgoingContent::Text { text, .. } | OutgoingContent::List { text, .. } => text,
            OutgoingContent::Media { caption, .. } => caption.as_deref().unwrap_or(""),
            _ => "",
        }
    }

    /// Whether this is a text message (paced, split into parts when over the limit).
    pub fn is_text(&self) -> bool {
        matches!(self, OutgoingContent::Text { .. })
    }
}

impl From<&str> for OutgoingContent {
    fn from(text: &str) -> Self {
        OutgoingContent::Text {
            text: text.to_owned(),
            buttons: Vec::new(),
        }
    }
}

impl From<String> for OutgoingContent {
    fn from(text: String) -> Self {
        OutgoingContent::Text {
            text,
            buttons: Vec::new(),
        }
    }
}

impl From<&String> for OutgoingContent {
    fn from(text: &String) -> Self {
        OutgoingContent::Text {
            text: text.clone(),
            buttons: Vec::new(),
        }
    }
}

/// An outgoing message: content plus options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outgoing {
    /// What to send.
    pub content: OutgoingContent,
    /// Quote this message.
    #[serde(default)]
    pub reply_to: Option<MessageId>,
    /// An explicit idempotency key (rule 1 of the key rules). Never reaches the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// What a restart does when this send's outcome is unknown (the process died while the
    /// provider was being called): `None` keeps the bot's `outbox.on_ambiguous`; an ask's
    /// prompt is `Resend` unless set (a question is safe to repeat and unsafe to lose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_ambiguous: Option<botmesh_durability::OnAmbiguous>,
}

impl Outgoing {
    /// Text with buttons.
    pub fn buttons<I, B>(text: impl Into<String>, buttons: I) -> Self
    where
        I: IntoIterator<Item = B>,
        B: Into<Button>,
    {
        OutgoingContent::Text {
            text: text.into(),
            buttons: buttons.into_iter().map(Into::into).collect(),
        }
        .into()
    }

    /// Sets an explicit idempotency key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// What a restart does if this send's outcome is unknown: `Resend` (never lost, maybe
    /// twice) or `Skip` (never twice, maybe lost). See [`Outgoing::on_ambiguous`](Self#structfield.on_ambiguous).
    pub fn on_ambiguous(mut self, policy: botmesh_durability::OnAmbiguous) -> Self {
        self.on_ambiguous = Some(policy);
        self
    }

    /// Quotes a message.
    pub fn reply_to(mut self, id: impl Into<MessageId>) -> Self {
        self.reply_to = Some(id.into());
        self
    }
}

impl From<&str> for Button {
    fn from(s: &str) -> Self {
        Button::new(s)
    }
}

impl From<String> for Button {
    fn from(s: String) -> Self {
        Button::new(s)
    }
}

impl From<(&str, &str)> for Button {
    fn from((id, title): (&str, &str)) -> Self {
        Button::with_id(id, title)
    }
}

impl From<OutgoingContent> for Outgoing {
    fn from(content: OutgoingContent) -> Self {
        Self {
            content,
            reply_to: None,
            idempotency_key: None,
            on_ambiguous: None,
        }
    }
}

impl From<&str> for Outgoing {
    fn from(text: &str) -> Self {
        OutgoingContent::from(text).into()
    }
}

impl From<String> for Outgoing {
    fn from(text: String) -> Self {
        OutgoingContent::from(text).into()
    }
}

impl From<&String> for Outgoing {
    fn from(text: &String) -> Self {
        OutgoingContent::from(text).into()
    }
}

/// What the provider returns for an accepted send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentMessage {
    /// The channel's id of the sent message (for edits), when it gives one.
    pub message_id: Option<MessageId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_content_kind_round_trips_through_json() {
        let contents = vec![
            Content::Text("hi".into()),
            Content::Contacts(vec![ContactCard {
                name: "Ann".into(),
                phones: vec!["1".into()],
            }]),
            Content::Location(Location {
                latitude: 1.5,
                longitude: 2.0,
                name: None,
                address: None,
            }),
            Content::Other(serde_json::json!({"x": 1})),
        ];
        for c in contents {
            let v = serde_json::to_value(&c).expect("encodes");
            assert_eq!(serde_json::from_value::<Content>(v).expect("decodes"), c);
        }
        let out = vec![
            OutgoingContent::from("hi"),
            OutgoingContent::Contacts(vec![ContactCard {
                name: "Ann".into(),
                phones: vec![],
            }]),
            OutgoingContent::Media {
                media_kind: MediaKind::Image,
                source: MediaSource::Bytes {
                    data: vec![1, 2, 3],
                    file_name: None,
                },
                caption: None,
                mime: None,
            },
        ];
        for c in out {
            let v = serde_json::to_value(&c).expect("encodes");
            assert_eq!(
                serde_json::from_value::<OutgoingContent>(v).expect("decodes"),
                c
            );
        }
    }

    /// A send's fingerprint is written straight from its content (no JSON tree): it must be
    /// the fingerprint of the content's JSON tree, which journals hold.
    #[test]
    fn every_content_kind_fingerprints_as_its_json_tree() {
        use botmesh_durability::keys::Fingerprint;

        let button = |t: &str| Button::new(t);
        let contents = vec![
            OutgoingContent::from("hi \"there\" é"),
            OutgoingContent::Text {
                text: "pick".into(),
                buttons: vec![button("Yes"), button("No")],
            },
            OutgoingContent::List {
                text: "menu".into(),
                button: "Open".into(),
                sections: vec![ListSection {
                    title: "Drinks".into(),
                    rows: vec![button("Tea"), button("Coffee")],
                }],
            },
            OutgoingContent::Media {
                media_kind: MediaKind::Image,
                source: MediaSource::Bytes {
                    data: vec![0, 255, 7],
                    file_name: Some("a.png".into()),
                },
                caption: Some("look".into()),
                mime: None,
            },
            OutgoingContent::Media {
                media_kind: MediaKind::Document,
                source: MediaSource::Path {
                    path: "/tmp/x.pdf".into(),
                },
                caption: None,
                mime: Some("application/pdf".into()),
            },
            OutgoingContent::Location(Location {
                latitude: 48.858_37,
                longitude: -0.1,
                name: Some("Here".into()),
                address: None,
            }),
            OutgoingContent::Contacts(vec![ContactCard {
                name: "Ann".into(),
                phones: vec!["+1".into(), "+2".into()],
            }]),
            OutgoingContent::Reaction(Reaction {
                message_id: MessageId("m1".into()),
                emoji: "👍".into(),
            }),
            OutgoingContent::Template {
                name: "order_ready".into(),
                language: "en".into(),
                params: vec!["7".into()],
            },
        ];
        let mut from_payload = 0;
        for c in contents {
            let tree = serde_json::to_value(&c).expect("encodes");
            assert_eq!(
                Fingerprint::of_content("alice", &c),
                Fingerprint::of("alice", &tree),
                "{c:?}"
            );
            // A send no hook changed gets its fingerprint from its journaled JSON, when first
            // read: the same one.
            let outgoing = Outgoing::from(c.clone());
            if crate::outbound::outbox::payload_fingerprints(&outgoing) {
                let payload =
                    botmesh_durability::outbox::Payload::encode(&outgoing).expect("encodes");
                let chat = ChatId("alice".into());
                assert_eq!(
                    crate::outbound::outbox::deferred_fingerprint(&chat, &payload),
                    crate::outbound::outbox::fingerprint(&chat, &outgoing),
                    "{c:?}"
                );
                from_payload += 1;
            }
        }
        assert_eq!(from_payload, 8, "every content kind but a location");
    }
}
