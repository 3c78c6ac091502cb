//! WPPConnect Server webhooks → [`ProviderEvent`]s.
//!
//! A webhook is the wa-js object plus `event` and `session`; `session` must be the configured
//! session (else 403). WPPConnect does not retry a webhook at all: a 503 while the bot
//! restarts loses the message (the server's `unreadmessages` catch-up on start is not
//! answered: it is history).
//!
//! | `event` / `type` | event |
//! | --- | --- |
//! | `onmessage` / `chat` | `Message` with `Content::Text` (`body`), id the serialized `id` (`false_<chat>_<id>`: the dedupe key) |
//! | `onmessage` / `image`, `video`, `audio`, `ptt` (voice), `document`, `sticker` | `Content::Media`, the serialized id as the token (an embedded base64 `body` is dropped, never journaled), `caption`, `mimetype`, `filename` |
//! | `onmessage` / `location`, `vcard` | `Content::Location` (`lat`, `lng`, `loc`), `Content::Contacts` |
//! | `onmessage` / `list_response`, `buttons_response`, `template_button_reply` | `Interaction` with the selected row or button id |
//! | `onmessage` of another type | `Content::Other` (without `body`) |
//! | `onmessage` with `fromMe`, `onselfmessage` | nothing |
//! | `onmessage` older than the history horizon | nothing |
//! | `onack` of a message of ours | `Status` (`ack` 1 `sent`, 2 `delivered`, 3 `read`, 4 `played`, -1 `failed`) |
//! | anything else (`qrcode`, `status-find`, `unreadmessages`, `onpresencechanged`, …) | nothing |
//!
//! Chats are the WhatsApp ids as given (`5521999999999@c.us`, groups `…@g.us`, LIDs `…@lid`);
//! in a group the sender is the `author`.

use std::time::Duration;

use botmesh::message::{ChatId, Content, MediaKind, MessageId, UserId};
use botmesh::provider::{DeliveryStatus, ProviderEvent};
use serde_json::Value;

use super::NAME;
use crate::gateway::inbound::{Attachment, Envelope, location, text_at};
use crate::gateway::web::WebWebhook;
use crate::webhook::Refused;

fn malformed(what: impl Into<String>) -> Refused {
    Refused::Malformed(format!("not a WPPConnect webhook: {}", what.into()))
}

/// An id wa-js gives as a string or as `{"_serialized": …}`.
fn serialized<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    text_at(v, key).or_else(|| v.get(key).and_then(|o| text_at(o, "_serialized")))
}

/// How the webhooks are read: the session in `session`.
pub(crate) static WEBHOOK: WebWebhook = WebWebhook {
    scope_field: "session",
    malformed: |what| malformed(what),
    parse,
};

/// The events of a webhook (its body `v`, its `event`); messages older than `horizon` are
/// history.
fn parse(v: &Value, event: &str, horizon: Duration) -> Result<Vec<ProviderEvent>, Refused> {
    match event {
        "onmessage" => Ok(message_event(v, horizon)?.into_iter().collect()),
        "onack" => Ok(ack_event(v).into_iter().collect()),
        _ => Ok(Vec::new()),
    }
}

fn ack_event(v: &Value) -> Option<ProviderEvent> {
    let id = &v["id"];
    let from_me = id["fromMe"].as_bool().or_else(|| v["fromMe"].as_bool());
    if from_me != Some(true) {
        return None;
    }
    let status = match v["ack"].as_i64()? {
        -1 => "failed",
        1 => "sent",
        2 => "delivered",
        3 => "read",
        4 => "played",
        _ => return None,
    };
    let chat = text_at(id, "remote")
        .or_else(|| serialized(v, "to"))
        .or_else(|| serialized(v, "chatId"))?;
    Some(ProviderEvent::Status(DeliveryStatus {
        chat: ChatId(chat.to_owned()),
        message_id: MessageId(serialized(v, "id")?.to_owned()),
        status: status.to_owned(),
        error: None,
    }))
}

fn media_kind(kind: &str) -> Option<MediaKind> {
    Some(match kind {
        "image" => MediaKind::Image,
        "video" => MediaKind::Video,
        "audio" => MediaKind::Audio,
        "ptt" => MediaKind::Voice,
        "document" => MediaKind::Document,
        "sticker" => MediaKind::Sticker,
        _ => return None,
    })
}

fn message_event(v: &Value, horizon: Duration) -> Result<Option<ProviderEvent>, Refused> {
    if v["fromMe"].as_bool() == Some(true) {
        return Ok(None);
    }
    let id = serialized(v, "id").ok_or_else(|| malformed("a message without an id"))?;
    let chat = serialized(v, "chatId")
        .or_else(|| serialized(v, "from"))
        .ok_or_else(|| malformed("a message without a chat"))?
        .to_owned();
    if chat == "status@broadcast" {
        return Ok(None);
    }
    let sent_secs = v["t"].as_i64().or_else(|| v["timestamp"].as_i64());
    if crate::gateway::web::is_history(sent_secs, horizon) {
        tracing::debug!(message = id, "wppconnect: a history message, not answered");
        return Ok(None);
    }
    let is_group = v["isGroupMsg"].as_bool() == Some(true) || chat.ends_with("@g.us");
    let sender = if is_group {
        serialized(v, "author").unwrap_or(&chat).to_owned()
    } else {
        chat.clone()
    };
    let envelope = Envelope {
        id: id.to_owned(),
        chat: ChatId(chat),
        sender: UserId(sender),
        sender_name: text_at(v, "notifyName")
            .or_else(|| text_at(&v["sender"], "pushname"))
            .map(str::to_owned),
        is_group,
        timestamp_ms: sent_secs.map_or_else(botmesh::clock::now_ms, |s| s * 1000),
        reply_to: serialized(v, "quotedMsgId")
            .or_else(|| text_at(v, "quotedStanzaID"))
            .map(|s| MessageId(s.to_owned())),
    };
    let kind = text_at(v, "type").unwrap_or("chat");
    let selected = match kind {
        "list_response" => text_at(&v["listResponse"]["singleSelectReply"], "selectedRowId"),
        "buttons_response" => text_at(v, "selectedButtonId"),
        "template_button_reply" => text_at(v, "selectedId"),
        _ => None,
    };
    if let Some(data) = selected {
        return Ok(Some(envelope.interaction(data, text_at(v, "body"))));
    }
    let content = match kind {
        "chat" => Content::Text(v["body"].as_str().unwrap_or_default().to_owned()),
        "location" => location(v, ("lat", "lng"), text_at(v, "loc"), None)
            .ok_or_else(|| malformed("a location without coordinates"))?,
        "vcard" => {
            crate::gateway::web::vcard_contact(text_at(v, "vcardFormattedName"), text_at(v, "body"))
        }
        k => match media_kind(k) {
            Some(media_kind) => Attachment {
                kind: media_kind,
                media_ref: (NAME, id),
                mime: text_at(v, "mimetype"),
                caption: text_at(v, "caption"),
                file_name: text_at(v, "filename"),
                size: v["size"].as_u64(),
            }
            .into(),
            None => crate::gateway::web::other_content(v, "body"),
        },
    };
    Ok(Some(envelope.message(content)))
}
