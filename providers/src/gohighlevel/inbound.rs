//! HighLevel webhooks → [`ProviderEvent`]s.
//!
//! A webhook is one JSON event `{"type", "locationId", …}` (HighLevel's `InboundMessage`,
//! `OutboundMessage`, and every other event an app subscribes to).
//!
//! | event | events delivered |
//! | --- | --- |
//! | `InboundMessage` of the configured location, `direction: "inbound"`, a messaging channel (`messageType` SMS, WhatsApp, FB, IG, GMB, Live Chat, Email, Custom) | a `Message` with `Content::Text` (`body`), id `messageId` (the dedupe key) |
//! | … with `attachments` (URLs) | one `Content::Media` per attachment (the URL as the token, `body` as the first caption); ids `messageId`, `messageId/1`, … |
//! | `InboundMessage` of a call or a voicemail (`messageType` Call, Voicemail) | nothing |
//! | `OutboundMessage` (the bot's own sends, echoed, and the agents' sends), `direction: "outbound"` | nothing |
//! | another location's event, any other event type | nothing |
//!
//! Chats: `<type>:<contactId>`, where `<type>` is the send type of the channel the message came
//! on (`SMS`, `WhatsApp`, `FB`, `IG`, `GMB`, `Live_Chat`, `Email`, `Custom`), so that the answer
//! goes back on it; the sender is the contact.

use botmesh::message::{ChatId, Content, MediaKind, UserId};
use botmesh::provider::ProviderEvent;
use serde_json::Value;

use super::NAME;
use crate::gateway::inbound::{Attachment, Envelope, event_of_account, text_at};
use crate::webhook::Refused;

fn malformed(what: impl Into<String>) -> Refused {
    Refused::Malformed(format!("not a HighLevel webhook: {}", what.into()))
}

/// The send type of an inbound `messageType` (`None`: not a conversation the bot answers).
pub(crate) fn send_type(message_type: &str) -> Option<&'static str> {
    Some(
        match message_type
            .to_ascii_lowercase()
            .replace([' ', '-'], "_")
            .as_str()
        {
            "sms" | "type_sms" => "SMS",
            "whatsapp" | "type_whatsapp" => "WhatsApp",
            "fb" | "facebook" | "type_facebook" => "FB",
            "ig" | "instagram" | "type_instagram" => "IG",
            "gmb" | "type_gmb" => "GMB",
            "live_chat" | "livechat" | "webchat" | "type_live_chat" | "type_webchat" => "Live_Chat",
            "email" | "type_email" => "Email",
            "custom" | "type_custom_sms" | "type_custom_provider_sms" => "Custom",
            _ => return None,
        },
    )
}

/// The kind of an attachment, from its URL's extension (HighLevel gives URLs only).
fn kind_of(url: &str) -> MediaKind {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let ext = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "jpg" | "jpeg" | "png" | "gif" | "webp" | "heic" | "bmp" => MediaKind::Image,
        "mp4" | "mov" | "3gp" | "webm" | "avi" => MediaKind::Video,
        "mp3" | "ogg" | "oga" | "m4a" | "wav" | "amr" | "aac" | "opus" => MediaKind::Audio,
        _ => MediaKind::Document,
    }
}

/// The events of a webhook body for `location`.
pub(crate) fn parse(body: &[u8], location: &str) -> Result<Vec<ProviderEvent>, Refused> {
    let message = ("type", "InboundMessage");
    let Some(v) = event_of_account(body, message, ("locationId", location), malformed)? else {
        return Ok(Vec::new());
    };
    if text_at(&v, "direction").is_some_and(|d| d != "inbound") {
        return Ok(Vec::new());
    }
    let Some(channel) = text_at(&v, "messageType").and_then(send_type) else {
        return Ok(Vec::new());
    };
    let contact = text_at(&v, "contactId").ok_or_else(|| malformed("no contactId"))?;
    // `messageId` is the dedupe key; a body without one (older payloads) is keyed by its
    // conversation and date, which a redelivery repeats.
    let id = match text_at(&v, "messageId") {
        Some(id) => id.to_owned(),
        None => match (text_at(&v, "conversationId"), text_at(&v, "dateAdded")) {
            (Some(c), Some(d)) => format!("{c}@{d}"),
            _ => return Err(malformed("a message without messageId")),
        },
    };
    let envelope = |id: String| Envelope {
        id,
        chat: ChatId(format!("{channel}:{contact}")),
        sender: UserId(contact.to_owned()),
        sender_name: None,
        is_group: false,
        timestamp_ms: botmesh::clock::now_ms(),
        reply_to: None,
    };
    let text = text_at(&v, "body");
    let urls: Vec<&str> = v["attachments"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if urls.is_empty() {
        let content = Content::Text(text.unwrap_or_default().to_owned());
        return Ok(vec![envelope(id).message(content)]);
    }
    Ok(urls
        .iter()
        .enumerate()
        .map(|(i, url)| {
            let id = if i == 0 {
                id.clone()
            } else {
                format!("{id}/{i}")
            };
            let content = Attachment {
                kind: kind_of(url),
                media_ref: (NAME, url),
                mime: None,
                caption: if i == 0 { text } else { None },
                file_name: url
                    .rsplit('/')
                    .next()
                    .map(|n| n.split('?').next().unwrap_or(n)),
                size: None,
            };
            envelope(id).message(content.into())
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    #[test]
    fn messages_echoes_and_other_locations() {
        let inbound = json!({"type": "InboundMessage", "locationId": "loc1", "attachments": [],
            "body": "hi", "contactId": "c1", "conversationId": "cv1", "dateAdded": "2021-04-21T11:31:45.750Z",
            "direction": "inbound", "messageType": "SMS", "messageId": "m1"});
        match parse(&body(inbound.clone()), "loc1").as_deref() {
            Ok([ProviderEvent::Message(m)]) => {
                assert_eq!((m.chat.as_str(), m.id.as_str()), ("SMS:c1", "m1"));
                assert_eq!(m.content.text(), "hi");
            }
            other => panic!("{other:?}"),
        }
        let mut outbound = inbound.clone();
        outbound["type"] = json!("OutboundMessage");
        outbound["direction"] = json!("outbound");
        let mut call = inbound.clone();
        call["messageType"] = json!("Call");
        for (v, loc) in [(outbound, "loc1"), (call, "loc1"), (inbound, "loc2")] {
            assert!(parse(&body(v), loc).is_ok_and(|e| e.is_empty()));
        }
        assert!(parse(b"[]", "loc1").is_err());
    }

    #[test]
    fn attachments_are_media_with_the_body_as_first_caption() {
        let v = json!({"type": "InboundMessage", "locationId": "loc1", "body": "look",
            "attachments": ["https://storage.googleapis.com/msgsndr/a/b.jpg", "https://x.leadconnectorhq.com/c.pdf?x=1"],
            "contactId": "c1", "direction": "inbound", "messageType": "Live Chat", "messageId": "m2"});
        let events = parse(&body(v), "loc1").expect("events");
        let ids: Vec<_> = events
            .iter()
            .map(|e| match e {
                ProviderEvent::Message(m) => (
                    m.id.to_string(),
                    m.chat.to_string(),
                    m.content.kind(),
                    m.content.text().to_owned(),
                ),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            ids,
            [
                ("m2".into(), "Live_Chat:c1".into(), "image", "look".into()),
                (
                    "m2/1".into(),
                    "Live_Chat:c1".into(),
                    "document",
                    String::new()
                )
            ]
        );
    }
}
