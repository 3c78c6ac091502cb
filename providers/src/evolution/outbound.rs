//! Outgoing content → Evolution's send routes and bodies (the table is in the parent module).

use botmesh::message::{Button, MediaKind, Outgoing, OutgoingContent};
use botmesh::provider::ProviderError;
use serde_json::{Value, json};

use super::{BUTTONS, MEDIA_LIMIT, NAME, TEXT_LIMIT};
use crate::files::OutgoingMedia;
use crate::gateway::outbound::checked_text;
use crate::gateway::web::OutgoingFile;

fn refuse(what: impl Into<String>) -> ProviderError {
    crate::errors::unsupported_content(NAME, what)
}

/// The `number` of a chat: the JID as it is (Evolution takes digits or a full JID).
fn number(chat: &str) -> Value {
    json!(chat)
}

fn media_type(kind: MediaKind) -> &'static str {
    match kind {
        MediaKind::Image | MediaKind::Sticker => "image",
        MediaKind::Video => "video",
        MediaKind::Audio | MediaKind::Voice => "audio",
        MediaKind::Document => "document",
    }
}

fn rows(buttons: &[Button]) -> Vec<Value> {
    buttons
        .iter()
        .map(|b| json!({"title": b.title, "description": "", "rowId": b.id}))
        .collect()
}

/// The route (`sendMedia`, `sendSticker`, `sendWhatsAppAudio`) and the body of `media` to
/// `chat`; a local file or in-memory media is read here.
async fn media_request(
    chat: &str,
    media: OutgoingMedia<'_>,
) -> Result<(&'static str, Value), ProviderError> {
    let file = OutgoingFile::of(NAME, media.source, MEDIA_LIMIT).await?;
    let (payload, file_name) = (file.payload.into_base64(), file.file_name);
    Ok(match media.kind {
        MediaKind::Sticker => (
            "sendSticker",
            json!({"number": number(chat), "sticker": payload}),
        ),
        MediaKind::Voice => (
            "sendWhatsAppAudio",
            json!({"number": number(chat), "audio": payload}),
        ),
        kind => {
            let mut body = json!({"number": number(chat), "mediatype": media_type(kind),
                "caption": media.caption.unwrap_or_default(), "fileName": file_name, "media": payload});
            if let Some(m) = media.mime {
                body["mimetype"] = json!(m);
            }
            ("sendMedia", body)
        }
    })
}

/// The route (`sendText`, …) and the body of `outgoing` to `chat`; a local file or in-memory
/// media is read here.
pub(super) async fn request(
    chat: &str,
    outgoing: &Outgoing,
) -> Result<(&'static str, Value), ProviderError> {
    let (route, mut body) = match OutgoingMedia::of(&outgoing.content) {
        Some(media) => media_request(chat, media).await?,
        None => message_request(chat, &outgoing.content)?,
    };
    if let Some(quoted) = &outgoing.reply_to
        && route != "sendReaction"
    {
        body["quoted"] = json!({"key": {"id": quoted.as_str()}});
    }
    Ok((route, body))
}

/// The route and the body of `content` to `chat`, but for media ([`media_request`]).
fn message_request(
    chat: &str,
    content: &OutgoingContent,
) -> Result<(&'static str, Value), ProviderError> {
    Ok(match content {
        OutgoingContent::Text { text, buttons } if buttons.is_empty() => (
            "sendText",
            json!({"number": number(chat), "text": checked_text(NAME, "a text", text, TEXT_LIMIT)?}),
        ),
        OutgoingContent::Text { text, buttons } if buttons.len() <= BUTTONS => (
            "sendButtons",
            json!({"number": number(chat), "title": "", "description": text, "footer": "",
                "buttons": buttons.iter().map(|b| json!({"type": "reply", "displayText": b.title, "id": b.id})).collect::<Vec<_>>()}),
        ),
        OutgoingContent::Text { text, buttons } => (
            "sendList",
            json!({"number": number(chat), "title": "", "description": text, "buttonText": "Options",
                "footerText": "", "sections": [{"title": "", "rows": rows(buttons)}]}),
        ),
        OutgoingContent::List {
            text,
            button,
            sections,
        } => (
            "sendList",
            json!({"number": number(chat), "title": "", "description": text, "buttonText": button,
                "footerText": "", "sections": sections.iter().map(|s| json!({"title": s.title, "rows": rows(&s.rows)})).collect::<Vec<_>>()}),
        ),
        // Taken by `media_request`: never reached.
        OutgoingContent::Media { .. } => return Err(refuse("media outside the media path")),
        OutgoingContent::Location(l) => (
            "sendLocation",
            json!({"number": number(chat), "latitude": l.latitude, "longitude": l.longitude,
                "name": l.name.clone().unwrap_or_default(), "address": l.address.clone().unwrap_or_default()}),
        ),
        OutgoingContent::Contacts(cards) => {
            if cards.is_empty() {
                return Err(refuse("an empty list of contacts"));
            }
            let contact: Vec<Value> = cards
                .iter()
                .map(|c| {
                    let phone = c.phones.first().cloned().unwrap_or_default();
                    let wuid: String = phone.chars().filter(char::is_ascii_digit).collect();
                    json!({"fullName": c.name, "wuid": wuid, "phoneNumber": phone})
                })
                .collect();
            (
                "sendContact",
                json!({"number": number(chat), "contact": contact}),
            )
        }
        OutgoingContent::Reaction(r) => (
            "sendReaction",
            json!({"key": {"remoteJid": chat, "fromMe": false, "id": r.message_id.as_str()}, "reaction": r.emoji}),
        ),
        OutgoingContent::Template { .. } => {
            return Err(refuse("templates (a WhatsApp Web session has none)"));
        }
    })
}

/// Evolution's own failures: a number that is not on WhatsApp (`exists: false`) is
/// `RecipientUnreachable`.
pub(super) fn specific(status: u16, body: &Value, chat: &str) -> Option<ProviderError> {
    let listed = body["response"]["message"].as_array()?;
    let missing = status == 400 && listed.iter().any(|m| m["exists"].as_bool() == Some(false));
    missing.then(|| ProviderError::RecipientUnreachable {
        provider: NAME.to_owned(),
        chat: chat.to_owned(),
        reason: "the number is not on WhatsApp".to_owned(),
    })
}
