//! Outgoing content → the `message` (or `template`) JSON of Gupshup's send API (the table is
//! in the parent module).

use botmesh::message::{Button, MediaKind, MediaSource, OutgoingContent};
use botmesh::provider::ProviderError;
use serde_json::{Value, json};

use super::{BUTTON_TITLE_LIMIT, LIST_ROW_LIMIT, NAME, QUICK_REPLY_BUTTONS, TEXT_LIMIT};
use crate::files::OutgoingMedia;
use crate::gateway::outbound::{checked_text, contacts_text};

/// What one send posts.
pub(super) enum Request {
    /// A session message: the `message` parameter of `/wa/api/v1/msg`.
    Message(Value),
    /// A template: the `template` parameter of `/wa/api/v1/template/msg`.
    Template(Value),
}

fn refuse(what: impl Into<String>) -> ProviderError {
    crate::errors::unsupported_content(NAME, what)
}

/// Refuses `text` over `limit` characters (an empty one is allowed: a title, a caption).
fn check_len(what: &str, text: &str, limit: usize) -> Result<(), ProviderError> {
    if text.is_empty() {
        return Ok(());
    }
    checked_text(NAME, what, text, limit).map(drop)
}

fn options(rows: &[Button], limit: usize) -> Result<Vec<Value>, ProviderError> {
    rows.iter()
        .map(|b| {
            check_len("an option title", &b.title, limit)?;
            Ok(json!({"type": "text", "title": b.title, "postbackText": b.id}))
        })
        .collect()
}

/// A list message: one global button opening `sections` of rows (a section: its title and
/// rows).
fn list(text: &str, button: &str, sections: &[(&str, &[Button])]) -> Result<Value, ProviderError> {
    let rows: usize = sections.iter().map(|(_, r)| r.len()).sum();
    if rows == 0 || rows > 10 {
        return Err(refuse(format!("{rows} list rows (WhatsApp takes 1 to 10)")));
    }
    check_len("a list text", text, super::BUTTONS_TEXT_LIMIT)?;
    let items = sections
        .iter()
        .map(|(title, rows)| Ok(json!({"title": title, "options": options(rows, LIST_ROW_LIMIT)?})))
        .collect::<Result<Vec<_>, ProviderError>>()?;
    Ok(json!({"type": "list", "body": text, "msgid": "botmesh",
        "globalButtons": [{"type": "text", "title": button}], "items": items}))
}

/// The `message` of `media`: a public URL Gupshup fetches (anything else is refused).
fn media_message(media: OutgoingMedia<'_>) -> Result<Value, ProviderError> {
    let MediaSource::Url { url } = media.source else {
        return Err(refuse("media other than a public URL (Gupshup fetches it)"));
    };
    let caption = media.caption.unwrap_or_default();
    check_len("a caption", caption, super::BUTTONS_TEXT_LIMIT)?;
    Ok(match media.kind {
        MediaKind::Image => {
            json!({"type": "image", "originalUrl": url, "previewUrl": url, "caption": caption})
        }
        MediaKind::Video => json!({"type": "video", "url": url, "caption": caption}),
        MediaKind::Audio | MediaKind::Voice => json!({"type": "audio", "url": url}),
        MediaKind::Sticker => json!({"type": "sticker", "url": url}),
        MediaKind::Document => {
            let name = url
                .rsplit('/')
                .next()
                .filter(|n| !n.is_empty())
                .unwrap_or("file");
            let mut m = json!({"type": "file", "url": url, "filename": name, "caption": caption});
            if let Some(mime) = media.mime {
                m["contentType"] = json!(mime);
            }
            m
        }
    })
}

/// The request of `content`.
pub(super) fn request(content: &OutgoingContent) -> Result<Request, ProviderError> {
    if let Some(media) = OutgoingMedia::of(content) {
        return media_message(media).map(Request::Message);
    }
    let message = match content {
        OutgoingContent::Text { text, buttons } if buttons.is_empty() => {
            json!({"type": "text", "text": checked_text(NAME, "a text", text, TEXT_LIMIT)?})
        }
        OutgoingContent::Text { text, buttons } => {
            let fit = buttons.len() <= QUICK_REPLY_BUTTONS
                && buttons
                    .iter()
                    .all(|b| b.title.chars().count() <= BUTTON_TITLE_LIMIT);
            if !fit {
                return list(text, "Options", &[("", buttons)]).map(Request::Message);
            }
            check_len("a text with buttons", text, super::BUTTONS_TEXT_LIMIT)?;
            json!({"type": "quick_reply", "msgid": "botmesh",
                "content": {"type": "text", "text": text},
                "options": options(buttons, BUTTON_TITLE_LIMIT)?})
        }
        OutgoingContent::List {
            text,
            button,
            sections,
        } => {
            let sections: Vec<_> = sections
                .iter()
                .map(|s| (s.title.as_str(), s.rows.as_slice()))
                .collect();
            list(text, button, &sections)?
        }
        // Taken by `media_message` above: never reached.
        OutgoingContent::Media { .. } => return Err(refuse("media outside the media path")),
        OutgoingContent::Location(l) => json!({"type": "location", "latitude": l.latitude,
            "longitude": l.longitude, "name": l.name, "address": l.address}),
        OutgoingContent::Contacts(cards) => {
            json!({"type": "text", "text": contacts_text(NAME, cards)?})
        }
        OutgoingContent::Reaction(r) => {
            json!({"type": "reaction", "msgId": r.message_id.as_str(), "emoji": r.emoji})
        }
        OutgoingContent::Template { name, params, .. } => {
            return Ok(Request::Template(json!({"id": name, "params": params})));
        }
    };
    Ok(Request::Message(message))
}

/// Gupshup's own failures: an unknown destination is `RecipientUnreachable`; a 2xx never
/// reaches here (a 2xx body with `status: "error"` is read by the caller).
pub(super) fn specific(status: u16, body: &Value, chat: &str) -> Option<ProviderError> {
    let message = crate::gateway::message_of(body);
    let unreachable = (400..500).contains(&status)
        && [
            "invalid destination",
            "not a valid whatsapp user",
            "opted out",
        ]
        .iter()
        .any(|m| message.to_ascii_lowercase().contains(m));
    unreachable.then(|| ProviderError::RecipientUnreachable {
        provider: NAME.to_owned(),
        chat: chat.to_owned(),
        reason: message,
    })
}
