//! Telegram `Update` objects → [`ProviderEvent`]s.
//!
//! | update field | event |
//! | --- | --- |
//! | `message` with `text` | `Message` with `Content::Text` |
//! | `message` with `photo` (the largest size) / `document` / `voice` / `audio` / `video` / `sticker` | `Content::Media`, the `file_id` as the media token, the caption as text |
//! | `message` with `location` / `contact` | `Content::Location` / `Content::Contacts` |
//! | `message` of another kind | `Content::Other` (the raw message) |
//! | `edited_message` | `Message` with id `<message_id>:edit:<edit_date>` (so the dedupe keeps it apart from the original) |
//! | `callback_query` with `data` | `Interaction` (answered later with `answerCallbackQuery`) |
//! | `my_chat_member` with the bot now `kicked` | `Blocked` |
//! | anything else (`channel_post`, `inline_query`, `poll`, …) | nothing (acknowledged and skipped) |
//!
//! Parsing is all or nothing: [`parse_update`] fails on a body that is not an `Update` (no
//! `update_id`, a `message` without `chat`), so nothing is half-delivered.

use botmesh::message::{
    ChatId, ContactCard, Content, InboundMedia, Interaction, Location, MediaKind, MediaRef,
    Message, MessageId, UserId,
};
use botmesh::provider::ProviderEvent;
use serde::Deserialize;
use serde_json::Value;

use super::NAME;

/// How long after a button press the runtime should have answered the callback query (the
/// client's spinner gives up after about 15 s).
const RESPOND_WITHIN_MS: i64 = 10_000;

#[derive(Debug, Deserialize)]
pub(crate) struct Update {
    pub(crate) update_id: i64,
    #[serde(default)]
    message: Option<TgMessage>,
    #[serde(default)]
    edited_message: Option<TgMessage>,
    #[serde(default)]
    callback_query: Option<CallbackQuery>,
    #[serde(default)]
    my_chat_member: Option<ChatMemberUpdated>,
}

#[derive(Debug, Deserialize)]
struct User {
    id: i64,
    #[serde(default)]
    first_name: Option<String>,
    #[serde(default)]
    last_name: Option<String>,
    #[serde(default)]
    language_code: Option<String>,
}

impl User {
    fn display_name(&self) -> Option<String> {
        match (&self.first_name, &self.last_name) {
            (Some(f), Some(l)) => Some(format!("{f} {l}")),
            (Some(f), None) => Some(f.clone()),
            (None, Some(l)) => Some(l.clone()),
            (None, None) => None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct Chat {
    id: i64,
    #[serde(rename = "type", default)]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct FileRef {
    file_id: String,
    #[serde(default)]
    file_size: Option<u64>,
    #[serde(default)]
    mime_type: Option<String>,
    #[serde(default)]
    file_name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TgLocation {
    latitude: f64,
    longitude: f64,
}

#[derive(Debug, Deserialize)]
struct TgContact {
    phone_number: String,
    first_name: String,
    #[serde(default)]
    last_name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Entity {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct ReplyTo {
    message_id: i64,
}

#[derive(Debug, Deserialize)]
struct TgMessage {
    message_id: i64,
    #[serde(default)]
    date: i64,
    #[serde(default)]
    edit_date: Option<i64>,
    chat: Chat,
    #[serde(default)]
    from: Option<User>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    caption: Option<String>,
    #[serde(default)]
    entities: Vec<Entity>,
    #[serde(default)]
    photo: Vec<FileRef>,
    #[serde(default)]
    document: Option<FileRef>,
    #[serde(default)]
    voice: Option<FileRef>,
    #[serde(default)]
    audio: Option<FileRef>,
    #[serde(default)]
    video: Option<FileRef>,
    #[serde(default)]
    sticker: Option<FileRef>,
    #[serde(default)]
    location: Option<TgLocation>,
    #[serde(default)]
    contact: Option<TgContact>,
    #[serde(default)]
    reply_to_message: Option<ReplyTo>,
}

#[derive(Debug, Deserialize)]
struct CallbackMessage {
    message_id: i64,
    chat: Chat,
}

#[derive(Debug, Deserialize)]
struct CallbackQuery {
    id: String,
    from: User,
    #[serde(default)]
    message: Option<CallbackMessage>,
    #[serde(default)]
    data: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChatMemberUpdated {
    chat: Chat,
    new_chat_member: ChatMember,
}

#[derive(Debug, Deserialize)]
struct ChatMember {
    status: String,
}

/// A body that is not a Telegram `Update`.
#[derive(Debug, thiserror::Error)]
#[error("not a Telegram Update: {0}")]
pub(crate) struct Malformed(String);

/// Parses one update (the webhook body, or one element of `getUpdates`).
pub(crate) fn parse_update(value: Value) -> Result<(i64, Option<ProviderEvent>), Malformed> {
    let raw_message = value.get("message").cloned();
    let update: Update = serde_json::from_value(value).map_err(|e| Malformed(e.to_string()))?;
    let id = update.update_id;
    Ok((id, to_event(update, raw_message)))
}

fn to_event(update: Update, raw_message: Option<Value>) -> Option<ProviderEvent> {
    if let Some(m) = update.message {
        return Some(ProviderEvent::Message(to_message(m, false, raw_message)));
    }
    if let Some(m) = update.edited_message {
        return Some(ProviderEvent::Message(to_message(m, true, None)));
    }
    if let Some(q) = update.callback_query {
        let data = q.data?;
        let (chat, message_id) = match &q.message {
            Some(m) => (m.chat.id, Some(MessageId(m.message_id.to_string()))),
            None => (q.from.id, None),
        };
        let is_group = q.message.as_ref().is_some_and(|m| m.chat.kind != "private");
        let now = botmesh::clock::now_ms();
        return Some(ProviderEvent::Interaction(Interaction {
            id: q.id,
            chat: ChatId(chat.to_string()),
            sender: UserId(q.from.id.to_string()),
            sender_name: q.from.display_name(),
            data,
            title: None,
            message_id,
            is_group,
            timestamp_ms: now,
            respond_by_ms: Some(now + RESPOND_WITHIN_MS),
            from_text: false,
        }));
    }
    if let Some(m) = update.my_chat_member
        && m.new_chat_member.status == "kicked"
    {
        return Some(ProviderEvent::Blocked {
            chat: ChatId(m.chat.id.to_string()),
        });
    }
    None
}

fn media(kind: MediaKind, f: FileRef, caption: Option<String>) -> Content {
    Content::Media(InboundMedia {
        kind,
        media_ref: MediaRef {
            provider: NAME.to_owned(),
            token: f.file_id,
        },
        mime: f.mime_type,
        caption,
        file_name: f.file_name,
        size: f.file_size,
    })
}

fn to_message(m: TgMessage, edited: bool, raw: Option<Value>) -> Message {
    let caption = m.caption;
    let mentions_bot = m.entities.iter().any(|e| e.kind == "bot_command");
    // The first file the message carries, in this order (a photo: its largest size).
    let file = [
        (MediaKind::Image, m.photo.into_iter().last()),
        (MediaKind::Document, m.document),
        (MediaKind::Voice, m.voice),
        (MediaKind::Audio, m.audio),
        (MediaKind::Video, m.video),
        (MediaKind::Sticker, m.sticker),
    ]
    .into_iter()
    .find_map(|(kind, f)| Some((kind, f?)));
    let content = if let Some(text) = m.text {
        Content::Text(text)
    } else if let Some((kind, f)) = file {
        media(kind, f, caption)
    } else if let Some(l) = m.location {
        Content::Location(Location {
            latitude: l.latitude,
            longitude: l.longitude,
            name: None,
            address: None,
        })
    } else if let Some(c) = m.contact {
        Content::Contacts(vec![ContactCard {
            name: match c.last_name {
                Some(l) => format!("{} {l}", c.first_name),
                None => c.first_name,
            },
            phones: vec![c.phone_number],
        }])
    } else {
        Content::Other(raw.unwrap_or(Value::Null))
    };
    let id = match (edited, m.edit_date) {
        (true, Some(d)) => format!("{}:edit:{d}", m.message_id),
        (true, None) => format!("{}:edit", m.message_id),
        (false, _) => m.message_id.to_string(),
    };
    let sender = m.from.as_ref().map_or(m.chat.id, |u| u.id);
    Message {
        id: MessageId(id),
        chat: ChatId(m.chat.id.to_string()),
        sender: UserId(sender.to_string()),
        sender_name: m.from.as_ref().and_then(User::display_name),
        is_group: m.chat.kind != "private",
        mentions_bot: m.chat.kind != "private" && mentions_bot,
        timestamp_ms: m.edit_date.filter(|_| edited).unwrap_or(m.date) * 1000,
        content,
        reply_to: m
            .reply_to_message
            .map(|r| MessageId(r.message_id.to_string())),
        lang_hint: m.from.and_then(|u| u.language_code),
    }
}
