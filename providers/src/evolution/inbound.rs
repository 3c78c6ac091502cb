//! Evolution API webhooks → [`ProviderEvent`]s.
//!
//! A webhook is `{"event", "instance", "data", …, "apikey"}`; `instance` must be the configured
//! instance (else 403). The body carries the instance's API key: it is never logged, and no
//! event carries it.
//!
//! | `event` / `data` | event |
//! | --- | --- |
//! | `messages.upsert`, `fromMe: false`, `message.conversation` (or `extendedTextMessage.text`) | `Message` with `Content::Text`, id `key.id` (the dedupe key, per chat) |
//! | `messages.upsert` with `imageMessage`, `videoMessage`, `audioMessage` (`ptt` → voice), `documentMessage`, `stickerMessage` | `Content::Media`, the message key id as the token (an embedded `base64` is dropped, never journaled) |
//! | `messages.upsert` with `locationMessage`, `contactMessage` | `Content::Location`, `Content::Contacts` |
//! | `messages.upsert` with `buttonsResponseMessage`, `listResponseMessage`, `templateButtonReplyMessage` | `Interaction` with the selected id |
//! | `messages.upsert` with `reactionMessage` | `Reaction` |
//! | `messages.upsert` of another kind | `Content::Other` (the `message` object without `base64`) |
//! | `messages.upsert` with `fromMe: true`, or `send.message` (the bot's own sends) | nothing |
//! | `messages.upsert` older than the history horizon (history Evolution forwards after a sync or a reconnect: Baileys' `append`) | nothing |
//! | `messages.update` of a message of ours (`fromMe: true`) | `Status` (`DELIVERY_ACK` → `delivered`, `READ` → `read`, …) |
//! | anything else (`connection.update`, `qrcode.updated`, …) | nothing |
//!
//! Chats: the JID as Evolution gives it (`5511999999999@s.whatsapp.net`, groups `…@g.us`);
//! when `key.remoteJid` is a LID (`…@lid`) and `key.remoteJidAlt` the phone-number JID, the
//! phone-number JID, so that one person is one chat whichever form WhatsApp used. In a group
//! the sender is `key.participant` (or its `participantAlt`).

use std::time::Duration;

use botmesh::message::{ChatId, Content, MediaKind, MessageId, Reaction, UserId};
use botmesh::provider::{DeliveryStatus, ProviderEvent};
use serde_json::Value;

use super::NAME;
use crate::gateway::inbound::{Attachment, Envelope, location, text_at};
use crate::gateway::web::WebWebhook;
use crate::webhook::Refused;

fn malformed(what: impl Into<String>) -> Refused {
    Refused::Malformed(format!("not an Evolution webhook: {}", what.into()))
}

/// One person, one id: the phone-number form of a LID when Evolution gives both.
fn person(jid: Option<&str>, alt: Option<&str>) -> Option<String> {
    match (jid, alt) {
        (Some(j), Some(a)) if j.ends_with("@lid") && a.ends_with("@s.whatsapp.net") => {
            Some(a.to_owned())
        }
        (Some(j), _) => Some(j.to_owned()),
        _ => None,
    }
}

/// How the webhooks are read: the instance in `instance`.
pub(crate) static WEBHOOK: WebWebhook = WebWebhook {
    scope_field: "instance",
    malformed: |what| malformed(what),
    parse,
};

/// The events of a webhook (its body `v`, its `event`); messages older than `horizon` are
/// history.
fn parse(v: &Value, event: &str, horizon: Duration) -> Result<Vec<ProviderEvent>, Refused> {
    let data = &v["data"];
    match event.to_ascii_lowercase().replace('_', ".").as_str() {
        "messages.upsert" => {
            // Older versions batch `{"messages": [...]}`; v2 sends one message.
            let items: Vec<&Value> = match data["messages"].as_array() {
                Some(list) => list.iter().collect(),
                None => vec![data],
            };
            let mut events = Vec::new();
            for m in items {
                if let Some(e) = message_event(m, horizon)? {
                    events.push(e);
                }
            }
            Ok(events)
        }
        "messages.update" => Ok(status_event(data).into_iter().collect()),
        _ => Ok(Vec::new()),
    }
}

fn status_event(d: &Value) -> Option<ProviderEvent> {
    if d["fromMe"].as_bool() != Some(true) {
        return None;
    }
    let status = match text_at(d, "status")? {
        "SERVER_ACK" => "sent",
        "DELIVERY_ACK" => "delivered",
        "READ" | "PLAYED" => "read",
        "ERROR" => "failed",
        "DELETED" => "deleted",
        _ => return None,
    };
    Some(ProviderEvent::Status(DeliveryStatus {
        chat: ChatId(person(text_at(d, "remoteJid"), text_at(d, "remoteJidAlt"))?),
        message_id: MessageId(text_at(d, "keyId")?.to_owned()),
        status: status.to_owned(),
        error: None,
    }))
}

fn media_kind(kind: &str, m: &Value) -> Option<MediaKind> {
    Some(match kind {
        "imageMessage" => MediaKind::Image,
        "videoMessage" | "ptvMessage" => MediaKind::Video,
        "audioMessage" if m["ptt"].as_bool() == Some(true) => MediaKind::Voice,
        "audioMessage" => MediaKind::Audio,
        "documentMessage" | "documentWithCaptionMessage" => MediaKind::Document,
        "stickerMessage" => MediaKind::Sticker,
        _ => return None,
    })
}

fn message_event(d: &Value, horizon: Duration) -> Result<Option<ProviderEvent>, Refused> {
    let key = &d["key"];
    if key["fromMe"].as_bool() == Some(true) {
        return Ok(None);
    }
    let id = text_at(key, "id").ok_or_else(|| malformed("a message without key.id"))?;
    let chat = person(text_at(key, "remoteJid"), text_at(key, "remoteJidAlt"))
        .ok_or_else(|| malformed("a message without key.remoteJid"))?;
    if chat == "status@broadcast" {
        return Ok(None);
    }
    let sent_secs = d["messageTimestamp"]
        .as_i64()
        .or_else(|| d["messageTimestamp"].as_str().and_then(|s| s.parse().ok()));
    if crate::gateway::web::is_history(sent_secs, horizon) {
        tracing::debug!(message = id, "evolution: a history message, not answered");
        return Ok(None);
    }
    let is_group = chat.ends_with("@g.us");
    let sender = if is_group {
        person(text_at(key, "participant"), text_at(key, "participantAlt"))
            .unwrap_or_else(|| chat.clone())
    } else {
        chat.clone()
    };
    let message = &d["message"];
    let envelope = Envelope {
        id: id.to_owned(),
        chat: ChatId(chat),
        sender: UserId(sender),
        sender_name: text_at(d, "pushName").map(str::to_owned),
        is_group,
        timestamp_ms: sent_secs.map_or_else(botmesh::clock::now_ms, |s| s * 1000),
        reply_to: text_at(&d["contextInfo"], "stanzaId").map(|s| MessageId(s.to_owned())),
    };
    let (kind, inner) = message
        .as_object()
        .and_then(|o| {
            o.iter().find(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "base64" | "messageContextInfo" | "mediaUrl" | "speechToText"
                )
            })
        })
        .map(|(k, v)| (k.as_str(), v))
        .ok_or_else(|| malformed("a message without content"))?;
    let content = match kind {
        "conversation" => Content::Text(inner.as_str().unwrap_or_default().to_owned()),
        "extendedTextMessage" => {
            Content::Text(text_at(inner, "text").unwrap_or_default().to_owned())
        }
        "buttonsResponseMessage" => {
            let data = text_at(inner, "selectedButtonId")
                .ok_or_else(|| malformed("a button reply without selectedButtonId"))?;
            return Ok(Some(
                envelope.interaction(data, text_at(inner, "selectedDisplayText")),
            ));
        }
        "templateButtonReplyMessage" => {
            let data = text_at(inner, "selectedId")
                .ok_or_else(|| malformed("a button reply without selectedId"))?;
            return Ok(Some(
                envelope.interaction(data, text_at(inner, "selectedDisplayText")),
            ));
        }
        "listResponseMessage" => {
            let data = text_at(&inner["singleSelectReply"], "selectedRowId")
                .ok_or_else(|| malformed("a list reply without selectedRowId"))?;
            return Ok(Some(envelope.interaction(data, text_at(inner, "title"))));
        }
        "reactionMessage" => {
            let target = text_at(&inner["key"], "id")
                .ok_or_else(|| malformed("a reaction without key.id"))?;
            return Ok(Some(ProviderEvent::Reaction {
                chat: envelope.chat,
                sender: envelope.sender,
                reaction: Reaction {
                    message_id: MessageId(target.to_owned()),
                    emoji: text_at(inner, "text").unwrap_or_default().to_owned(),
                },
            }));
        }
        "locationMessage" | "liveLocationMessage" => location(
            inner,
            ("degreesLatitude", "degreesLongitude"),
            text_at(inner, "name"),
            text_at(inner, "address"),
        )
        .ok_or_else(|| malformed("a location without coordinates"))?,
        "contactMessage" => crate::gateway::web::vcard_contact(
            text_at(inner, "displayName"),
            text_at(inner, "vcard"),
        ),
        k => match media_kind(k, inner) {
            Some(media_kind) => {
                // `documentWithCaptionMessage` wraps the document.
                let m = inner["message"]["documentMessage"]
                    .as_object()
                    .map_or(inner, |_| &inner["message"]["documentMessage"]);
                Attachment {
                    kind: media_kind,
                    media_ref: (NAME, id),
                    mime: text_at(m, "mimetype"),
                    caption: text_at(m, "caption"),
                    file_name: text_at(m, "fileName"),
                    size: m["fileLength"]
                        .as_u64()
                        .or_else(|| m["fileLength"].as_str().and_then(|s| s.parse().ok())),
                }
                .into()
            }
            None => crate::gateway::web::other_content(message, "base64"),
        },
    };
    Ok(Some(envelope.message(content)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const H: Duration = Duration::from_secs(1800);

    fn upsert(data: Value) -> Vec<u8> {
        json!({"event": "messages.upsert", "instance": "shop1", "data": data, "apikey": "secret-key"})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn lids_own_sends_and_history() {
        let now = botmesh::clock::now_ms() / 1000;
        let lid = upsert(
            json!({"key": {"remoteJid": "123@lid", "remoteJidAlt": "5511@s.whatsapp.net", "fromMe": false, "id": "3EB0AAAA1111"},
            "message": {"conversation": "hi"}, "messageTimestamp": now}),
        );
        match WEBHOOK.read(&lid, "shop1", H).as_deref() {
            Ok([ProviderEvent::Message(m)]) => assert_eq!(m.chat.as_str(), "5511@s.whatsapp.net"),
            other => panic!("{other:?}"),
        }
        let own = upsert(
            json!({"key": {"remoteJid": "5511@s.whatsapp.net", "fromMe": true, "id": "BAE5AAAA"},
            "message": {"conversation": "hi"}, "messageTimestamp": now}),
        );
        let old = upsert(
            json!({"key": {"remoteJid": "5511@s.whatsapp.net", "fromMe": false, "id": "3EB0BBBB2222"},
            "message": {"conversation": "old"}, "messageTimestamp": now - 7200}),
        );
        for body in [own, old] {
            assert!(WEBHOOK.read(&body, "shop1", H).is_ok_and(|e| e.is_empty()));
        }
        assert_eq!(
            WEBHOOK.read(&lid, "other", H).err(),
            Some(Refused::BadSignature("instance"))
        );
    }
}
