//! [`OutgoingContent`] → Bot API requests.
//!
//! | content | method | notes |
//! | --- | --- | --- |
//! | text (with buttons) | `sendMessage` | over 4096 characters: several messages, buttons on the last; buttons become an inline keyboard, one per row, `callback_data` ≤ 64 bytes |
//! | list | `sendMessage` | each row becomes a button under the text (Telegram has no list picker) |
//! | image / document / voice / audio / video / sticker | `sendPhoto` / `sendDocument` / `sendVoice` / `sendAudio` / `sendVideo` / `sendSticker` | a URL or `file_id` as JSON; bytes and paths are uploaded as multipart (photos ≤ 10 MB, others ≤ 50 MB); caption ≤ 1024 |
//! | location | `sendLocation` | |
//! | contacts | `sendContact`, one per card | a card needs a phone |
//! | reaction | `setMessageReaction` | |
//! | template | — | `UnsupportedContent` (a WhatsApp concept) |
//!
//! Checks that Telegram would refuse anyway are made before the call, as final errors.

use botmesh::message::{
    Button, ChatId, MediaKind, MediaSource, MessageId, Outgoing, OutgoingContent,
};
use botmesh::provider::ProviderError;
use serde_json::{Value, json};

use super::NAME;
use super::api::Size;

/// Telegram's text limit, in characters.
pub(crate) const TEXT_LIMIT: usize = 4096;
/// The caption limit.
pub(crate) const CAPTION_LIMIT: usize = 1024;
/// The `callback_data` limit, in bytes.
pub(crate) const CALLBACK_DATA_LIMIT: usize = 64;
/// Upload limits.
pub(crate) const PHOTO_UPLOAD_LIMIT: u64 = 10 * 1024 * 1024;
/// Upload limit of every other kind.
pub(crate) const FILE_UPLOAD_LIMIT: u64 = 50 * 1024 * 1024;

/// One request to make.
#[derive(Debug)]
pub(crate) enum Request {
    /// A JSON call.
    Json {
        method: &'static str,
        body: Value,
        size: Size,
    },
    /// An upload: the JSON fields plus one file field.
    Upload {
        method: &'static str,
        fields: Value,
        file_field: &'static str,
        bytes: Vec<u8>,
        file_name: String,
        mime: Option<String>,
        size: Size,
    },
}

fn unsupported(what: impl Into<String>) -> ProviderError {
    crate::errors::unsupported_content(NAME, what)
}

/// The chat id as Telegram takes it: an integer, or a `@channelusername` string.
pub(crate) fn chat_value(chat: &ChatId) -> Value {
    match chat.as_str().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(chat.as_str()),
    }
}

/// An inline keyboard, one button per row.
pub(crate) fn keyboard(buttons: &[Button]) -> Result<Option<Value>, ProviderError> {
    if buttons.is_empty() {
        return Ok(None);
    }
    let mut rows = Vec::with_capacity(buttons.len());
    for b in buttons {
        if b.id.is_empty() || b.id.len() > CALLBACK_DATA_LIMIT {
            return Err(unsupported(format!(
                "button {:?}: callback_data must be 1-{CALLBACK_DATA_LIMIT} bytes, got {}",
                b.title,
                b.id.len()
            )));
        }
        rows.push(json!([{ "text": b.title, "callback_data": b.id }]));
    }
    Ok(Some(json!({ "inline_keyboard": rows })))
}

fn text_body(
    chat: &ChatId,
    text: &str,
    markup: Option<Value>,
    reply_to: Option<&MessageId>,
) -> Value {
    let mut body = json!({ "chat_id": chat_value(chat), "text": text });
    if let Some(m) = markup {
        body["reply_markup"] = m;
    }
    add_reply(&mut body, reply_to);
    body
}

fn add_reply(body: &mut Value, reply_to: Option<&MessageId>) {
    if let Some(id) = reply_to.and_then(|id| id.as_str().parse::<i64>().ok()) {
        body["reply_parameters"] = json!({ "message_id": id, "allow_sending_without_reply": true });
    }
}

/// The requests for one outgoing message, in order (several for a long text or several cards).
pub(crate) async fn requests(chat: &ChatId, out: &Outgoing) -> Result<Vec<Request>, ProviderError> {
    let reply_to = out.reply_to.as_ref();
    match &out.content {
        OutgoingContent::Text { text, buttons } => text_requests(chat, text, buttons, reply_to),
        OutgoingContent::List { text, sections, .. } => {
            let rows: Vec<Button> = sections.iter().flat_map(|s| s.rows.clone()).collect();
            text_requests(chat, text, &rows, reply_to)
        }
        OutgoingContent::Media {
            media_kind,
            source,
            caption,
            mime,
        } => media_request(
            chat,
            *media_kind,
            source,
            caption.as_deref(),
            mime,
            reply_to,
        )
        .await
        .map(|r| vec![r]),
        OutgoingContent::Location(l) => {
            let mut body = json!({
                "chat_id": chat_value(chat), "latitude": l.latitude, "longitude": l.longitude,
            });
            add_reply(&mut body, reply_to);
            Ok(vec![Request::Json {
                method: "sendLocation",
                body,
                size: Size::default(),
            }])
        }
        OutgoingContent::Contacts(cards) => {
            if cards.is_empty() {
                return Err(unsupported("an empty list of contacts"));
            }
            cards
                .iter()
                .map(|c| {
                    let phone = c
                        .phones
                        .first()
                        .ok_or_else(|| unsupported(format!("contact {:?} has no phone", c.name)))?;
                    let mut body = json!({
                        "chat_id": chat_value(chat), "phone_number": phone, "first_name": c.name,
                    });
                    add_reply(&mut body, reply_to);
                    Ok(Request::Json {
                        method: "sendContact",
                        body,
                        size: Size::default(),
                    })
                })
                .collect()
        }
        OutgoingContent::Reaction(r) => {
            let id = r.message_id.as_str().parse::<i64>().map_err(|_| {
                unsupported(format!(
                    "reaction to a non-Telegram id {:?}",
                    r.message_id.as_str()
                ))
            })?;
            let reaction = if r.emoji.is_empty() {
                json!([])
            } else {
                json!([{ "type": "emoji", "emoji": r.emoji }])
            };
            Ok(vec![Request::Json {
                method: "setMessageReaction",
                body: json!({ "chat_id": chat_value(chat), "message_id": id, "reaction": reaction }),
                size: Size::default(),
            }])
        }
        OutgoingContent::Template { name, .. } => Err(unsupported(format!(
            "template {name:?} (templates are a WhatsApp feature)"
        ))),
    }
}

fn text_requests(
    chat: &ChatId,
    text: &str,
    buttons: &[Button],
    reply_to: Option<&MessageId>,
) -> Result<Vec<Request>, ProviderError> {
    if text.trim().is_empty() {
        return Err(unsupported("an empty text"));
    }
    let markup = keyboard(buttons)?;
    let parts = botmesh::bot::split_text(text, TEXT_LIMIT);
    let last = parts.len().saturating_sub(1);
    Ok(parts
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let size = Size {
                size: part.chars().count() as u64,
                limit: TEXT_LIMIT as u64,
            };
            let markup = if i == last { markup.clone() } else { None };
            let reply = if i == 0 { reply_to } else { None };
            Request::Json {
                method: "sendMessage",
                body: text_body(chat, &part, markup, reply),
                size,
            }
        })
        .collect())
}

fn media_method(kind: MediaKind) -> (&'static str, &'static str) {
    match kind {
        MediaKind::Image => ("sendPhoto", "photo"),
        MediaKind::Document => ("sendDocument", "document"),
        MediaKind::Voice => ("sendVoice", "voice"),
        MediaKind::Audio => ("sendAudio", "audio"),
        MediaKind::Video => ("sendVideo", "video"),
        MediaKind::Sticker => ("sendSticker", "sticker"),
    }
}

async fn media_request(
    chat: &ChatId,
    kind: MediaKind,
    source: &MediaSource,
    caption: Option<&str>,
    mime: &Option<String>,
    reply_to: Option<&MessageId>,
) -> Result<Request, ProviderError> {
    let (method, field) = media_method(kind);
    if let Some(c) = caption
        && c.chars().count() > CAPTION_LIMIT
    {
        return Err(unsupported(format!(
            "a caption of {} characters (the limit is {CAPTION_LIMIT})",
            c.chars().count()
        )));
    }
    let mut fields = json!({ "chat_id": chat_value(chat) });
    if let Some(c) = caption.filter(|c| !c.is_empty() && kind != MediaKind::Sticker) {
        fields["caption"] = json!(c);
    }
    add_reply(&mut fields, reply_to);
    let limit = if kind == MediaKind::Image {
        PHOTO_UPLOAD_LIMIT
    } else {
        FILE_UPLOAD_LIMIT
    };
    let (bytes, file_name) = match source {
        // A URL Telegram fetches, or a `file_id` it already has: sent by reference.
        MediaSource::Url { url: reference } | MediaSource::Token { token: reference } => {
            fields[field] = json!(reference);
            return Ok(Request::Json {
                method,
                body: fields,
                size: Size::default(),
            });
        }
        MediaSource::Bytes { data, file_name } => (
            data.clone(),
            file_name.clone().unwrap_or_else(|| field.to_owned()),
        ),
        MediaSource::Path { path } => {
            let meta = tokio::fs::metadata(path)
                .await
                .map_err(|e| unsupported(format!("cannot read {}: {e}", path.display())))?;
            if meta.len() > limit {
                return Err(too_large(meta.len(), limit));
            }
            let data = tokio::fs::read(path)
                .await
                .map_err(|e| unsupported(format!("cannot read {}: {e}", path.display())))?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| field.to_owned());
            (data, name)
        }
    };
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64, limit));
    }
    Ok(Request::Upload {
        method,
        size: Size {
            size: bytes.len() as u64,
            limit,
        },
        fields,
        file_field: field,
        bytes,
        file_name,
        mime: mime.clone(),
    })
}

fn too_large(size: u64, limit: u64) -> ProviderError {
    ProviderError::PayloadTooLarge {
        provider: NAME.to_owned(),
        size,
        limit,
    }
}
