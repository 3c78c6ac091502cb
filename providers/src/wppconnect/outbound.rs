//! Outgoing content → WPPConnect's send routes and bodies (the table is in the parent module).

use botmesh::message::{Button, MediaKind, MessageId, Outgoing, OutgoingContent};
use botmesh::provider::ProviderError;
use serde_json::{Value, json};

use super::{MEDIA_LIMIT, NAME, TEXT_LIMIT};
use crate::files::OutgoingMedia;
use crate::gateway::outbound::{checked_text, contacts_text};
use crate::gateway::web::{OutgoingFile, Payload};

fn refuse(what: impl Into<String>) -> ProviderError {
    crate::errors::unsupported_content(NAME, what)
}

/// The `phone`, `isGroup` and `isLid` of a chat id (`5521…@c.us`, `…@g.us`, `…@lid`).
pub(super) fn recipient(chat: &str) -> Value {
    let (phone, domain) = chat.split_once('@').unwrap_or((chat, "c.us"));
    json!({"phone": phone, "isGroup": domain == "g.us", "isLid": domain == "lid"})
}

fn rows(buttons: &[Button]) -> Vec<Value> {
    buttons
        .iter()
        .map(|b| json!({"rowId": b.id, "title": b.title, "description": ""}))
        .collect()
}

/// Merges `extra` into the recipient's fields.
fn with(chat: &str, extra: Value) -> Value {
    let mut body = recipient(chat);
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    body
}

/// The route (`send-image`, `send-file`, `send-voice`, `send-sticker`) and the body of `media`
/// to `chat`; a local file or in-memory media is read here.
async fn media_request(
    chat: &str,
    media: OutgoingMedia<'_>,
) -> Result<(&'static str, Value), ProviderError> {
    let OutgoingFile { payload, file_name } =
        OutgoingFile::of(NAME, media.source, MEDIA_LIMIT).await?;
    let (field, value) = match payload {
        Payload::Url(url) => ("path", url),
        Payload::Bytes(b) => (
            "base64",
            format!(
                "data:{};base64,{}",
                media.mime.unwrap_or("application/octet-stream"),
                botmesh::codec::encode_base64(&b)
            ),
        ),
    };
    let route = match media.kind {
        MediaKind::Image => "send-image",
        MediaKind::Sticker => "send-sticker",
        MediaKind::Voice => "send-voice",
        _ => "send-file",
    };
    let mut extra = json!({"filename": file_name, "caption": media.caption.unwrap_or_default()});
    extra[field] = json!(value);
    Ok((route, with(chat, extra)))
}

/// The route (`send-message`, …) and the body of `outgoing` to `chat`; a local file or in-memory
/// media is read here.
pub(super) async fn request(
    chat: &str,
    outgoing: &Outgoing,
) -> Result<(&'static str, Value), ProviderError> {
    let quoted = outgoing.reply_to.as_ref();
    match OutgoingMedia::of(&outgoing.content) {
        Some(media) => media_request(chat, media).await,
        None => message_request(chat, &outgoing.content, quoted),
    }
}

/// The route and the body of `content` to `chat`, but for media ([`media_request`]); a
/// `send-message` quotes `quoted`.
fn message_request(
    chat: &str,
    content: &OutgoingContent,
    quoted: Option<&MessageId>,
) -> Result<(&'static str, Value), ProviderError> {
    let list = |text: &str, button: &str, sections: Vec<Value>| {
        (
            "send-list-message",
            with(
                chat,
                json!({"description": text, "buttonText": button, "sections": sections}),
            ),
        )
    };
    let (route, mut body) = match content {
        OutgoingContent::Text { text, buttons } if buttons.is_empty() => (
            "send-message",
            with(
                chat,
                json!({"message": checked_text(NAME, "a text", text, TEXT_LIMIT)?}),
            ),
        ),
        OutgoingContent::Text { text, buttons } => list(
            text,
            "Options",
            vec![json!({"title": "", "rows": rows(buttons)})],
        ),
        OutgoingContent::List {
            text,
            button,
            sections,
        } => list(
            text,
            button,
            sections
                .iter()
                .map(|s| json!({"title": s.title, "rows": rows(&s.rows)}))
                .collect(),
        ),
        // Taken by `media_request`: never reached.
        OutgoingContent::Media { .. } => return Err(refuse("media outside the media path")),
        OutgoingContent::Location(l) => (
            "send-location",
            with(
                chat,
                json!({"lat": l.latitude.to_string(), "lng": l.longitude.to_string(),
                "title": l.name.clone().unwrap_or_default(), "address": l.address.clone().unwrap_or_default()}),
            ),
        ),
        OutgoingContent::Contacts(cards) => (
            "send-message",
            with(chat, json!({"message": contacts_text(NAME, cards)?})),
        ),
        OutgoingContent::Reaction(r) => (
            "react-message",
            json!({"msgId": r.message_id.as_str(), "reaction": r.emoji}),
        ),
        OutgoingContent::Template { .. } => {
            return Err(refuse("templates (a WhatsApp Web session has none)"));
        }
    };
    if let Some(quoted) = quoted
        && route == "send-message"
    {
        body["options"] = json!({"quotedMsg": quoted.as_str()});
    }
    Ok((route, body))
}

/// WPPConnect's own failures: a session that is not connected (`status: "Disconnected"`,
/// 404) is `NotConnected` (retryable: nothing was sent, the session comes back).
pub(super) fn specific(status: u16, body: &Value) -> Option<ProviderError> {
    let disconnected = matches!(
        body["status"].as_str(),
        Some("Disconnected" | "CLOSED" | "disconnected")
    );
    (status == 404 && disconnected).then(|| ProviderError::NotConnected {
        provider: NAME.to_owned(),
    })
}
