//! Gupshup callbacks → [`ProviderEvent`]s, in either format an app can subscribe in.
//!
//! **Gupshup v2** (`{"app", "timestamp" (ms), "version": 2, "type", "payload"}`; `app` must be
//! the configured app, else 403):
//!
//! | `type` / `payload.type` | event |
//! | --- | --- |
//! | `message` / `text` | `Message` with `Content::Text`, id `payload.id` (the WhatsApp id: the dedupe key) |
//! | `message` / `image`, `video`, `audio`, `file`, `sticker` | `Content::Media`, the hosted `url` as the token, `caption`, `contentType`, `name` |
//! | `message` / `location`, `contact` | `Content::Location`, `Content::Contacts` |
//! | `message` / `button_reply`, `list_reply`, `quick_reply` | `Interaction` with `postbackText` (else `id`, else the text) as data |
//! | `message` / anything else | `Content::Other` (the inner payload) |
//! | `message-event` | `Status` of `destination`, its message id the Gupshup id (`gsId`, or `id` for `enqueued` / `failed`): the id a send returned |
//! | `user-event`, `template-event`, `account-event`, `billing-event` | nothing (200) |
//!
//! **Meta format** (`object: "whatsapp_business_account"`): the WhatsApp Cloud parser, with
//! the media's hosted `url` as the token and statuses under their `gs_id`; with an app id
//! configured, another `gs_app_id` is refused (403).
//!
//! A reply's `context` names the message it answers by its Gupshup id (`gsId`) when given.

use botmesh::message::{ChatId, Content, MediaKind, MessageId, UserId};
use botmesh::provider::{DeliveryStatus, ProviderEvent};
use serde_json::Value;

use super::NAME;
use crate::gateway::inbound::{Attachment, Envelope, location, text_at};
use crate::webhook::Refused;

/// What a callback must match: the app's name, and its id when configured.
pub(crate) struct App<'a> {
    pub(crate) name: &'a str,
    pub(crate) id: Option<&'a str>,
}

fn malformed(what: impl Into<String>) -> Refused {
    Refused::Malformed(format!("not a Gupshup callback: {}", what.into()))
}

/// The events of a callback body.
pub(crate) fn parse(body: &[u8], app: &App<'_>) -> Result<Vec<ProviderEvent>, Refused> {
    let v: Value = serde_json::from_slice(body).map_err(|e| malformed(format!("not JSON: {e}")))?;
    if v.get("object").is_some() {
        if let Some(id) = app.id
            && v["gs_app_id"].as_str() != Some(id)
        {
            return Err(Refused::BadSignature("gs_app_id"));
        }
        return crate::whatsapp::inbound::parse_cloud(body, NAME, "url")
            .map_err(Refused::Malformed);
    }
    if v["app"].as_str() != Some(app.name) {
        return Err(Refused::BadSignature("app"));
    }
    let payload = &v["payload"];
    match v["type"].as_str() {
        Some("message") => message_event(payload, v["timestamp"].as_i64()).map(|e| vec![e]),
        Some("message-event") => status_event(payload).map(|e| vec![e]),
        Some(_) => Ok(Vec::new()),
        None => Err(malformed("no type")),
    }
}

fn message_event(p: &Value, timestamp_ms: Option<i64>) -> Result<ProviderEvent, Refused> {
    let id = text_at(p, "id").ok_or_else(|| malformed("a message without payload.id"))?;
    let from = text_at(&p["sender"], "phone")
        .or_else(|| text_at(p, "source"))
        .ok_or_else(|| malformed("a message without a sender"))?;
    let kind = text_at(p, "type").ok_or_else(|| malformed("a message without a type"))?;
    let inner = &p["payload"];
    let envelope = Envelope {
        id: id.to_owned(),
        chat: ChatId(from.to_owned()),
        sender: UserId(from.to_owned()),
        sender_name: text_at(&p["sender"], "name").map(str::to_owned),
        is_group: false,
        timestamp_ms: timestamp_ms.unwrap_or_else(botmesh::clock::now_ms),
        reply_to: text_at(&p["context"], "gsId")
            .or_else(|| text_at(&p["context"], "id"))
            .map(|s| MessageId(s.to_owned())),
    };
    let need = |key: &str| {
        text_at(inner, key)
            .map(str::to_owned)
            .ok_or_else(|| malformed(format!("a {kind} message without payload.payload.{key}")))
    };
    let content = match kind {
        "text" => Content::Text(need("text")?),
        "image" | "video" | "audio" | "file" | "sticker" => {
            let mime = text_at(inner, "contentType");
            let kind = match kind {
                "image" => MediaKind::Image,
                "video" => MediaKind::Video,
                "sticker" => MediaKind::Sticker,
                "audio" if mime.is_some_and(|m| m.starts_with("audio/ogg")) => MediaKind::Voice,
                "audio" => MediaKind::Audio,
                _ => MediaKind::Document,
            };
            Attachment {
                kind,
                media_ref: (NAME, &need("url")?),
                mime,
                caption: text_at(inner, "caption"),
                file_name: text_at(inner, "name"),
                size: None,
            }
            .into()
        }
        "location" => location(
            inner,
            ("latitude", "longitude"),
            text_at(inner, "name"),
            text_at(inner, "address"),
        )
        .ok_or_else(|| malformed("a location without coordinates"))?,
        "contact" => Content::Contacts(crate::whatsapp::inbound::contact_cards(&inner["contacts"])),
        "button_reply" | "list_reply" | "quick_reply" => {
            let data = ["postbackText", "id", "payload", "text", "title"]
                .into_iter()
                .find_map(|k| text_at(inner, k))
                .ok_or_else(|| malformed(format!("a {kind} without a payload")))?;
            let title = text_at(inner, "title").or_else(|| text_at(inner, "text"));
            return Ok(envelope.interaction(data, title));
        }
        _ => Content::Other(inner.clone()),
    };
    Ok(envelope.message(content))
}

fn status_event(p: &Value) -> Result<ProviderEvent, Refused> {
    let status = text_at(p, "type").ok_or_else(|| malformed("a message-event without a type"))?;
    // `enqueued` and `failed` carry the Gupshup id as `id`; the others the WhatsApp id, and
    // the Gupshup id as `gsId` (absent a week after the send).
    let id = text_at(p, "gsId")
        .or_else(|| text_at(p, "id"))
        .ok_or_else(|| malformed("a message-event without an id"))?;
    let destination = text_at(p, "destination")
        .ok_or_else(|| malformed("a message-event without a destination"))?;
    let inner = &p["payload"];
    let error = (status == "failed").then(|| {
        let reason = text_at(inner, "reason").unwrap_or("failed");
        match inner.get("code") {
            Some(code) if !code.is_null() => format!("{code}: {reason}"),
            _ => reason.to_owned(),
        }
    });
    Ok(ProviderEvent::Status(DeliveryStatus {
        chat: ChatId(destination.to_owned()),
        message_id: MessageId(id.to_owned()),
        status: status.to_owned(),
        error,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const APP: App<'static> = App {
        name: "DemoApp",
        id: Some("app-1"),
    };

    fn events(v: Value) -> Result<Vec<ProviderEvent>, Refused> {
        parse(v.to_string().as_bytes(), &APP)
    }

    #[test]
    fn a_status_is_keyed_by_the_gupshup_id() {
        let delivered = json!({"app": "DemoApp", "timestamp": 1, "version": 2, "type": "message-event",
            "payload": {"id": "gBEG1", "gsId": "ee4a68a0", "type": "delivered", "destination": "9198", "payload": {"ts": 1}}});
        let failed = json!({"app": "DemoApp", "timestamp": 1, "version": 2, "type": "message-event",
            "payload": {"id": "ee4a68a0", "type": "failed", "destination": "9198", "payload": {"code": 1002, "reason": "Number Does Not Exists On WhatsApp"}}});
        for (body, status, error) in [
            (delivered, "delivered", None),
            (
                failed,
                "failed",
                Some("1002: Number Does Not Exists On WhatsApp"),
            ),
        ] {
            match events(body).as_deref() {
                Ok([ProviderEvent::Status(s)]) => {
                    assert_eq!(s.message_id.as_str(), "ee4a68a0");
                    assert_eq!((s.status.as_str(), s.error.as_deref()), (status, error));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn other_apps_and_other_event_types() {
        let other =
            json!({"app": "Other", "timestamp": 1, "version": 2, "type": "message", "payload": {}});
        assert_eq!(events(other).err(), Some(Refused::BadSignature("app")));
        let meta =
            json!({"object": "whatsapp_business_account", "gs_app_id": "app-2", "entry": []});
        assert_eq!(events(meta).err(), Some(Refused::BadSignature("gs_app_id")));
        let user = json!({"app": "DemoApp", "timestamp": 1, "version": 2, "type": "user-event",
            "payload": {"phone": "9198", "type": "opted-in"}});
        assert!(events(user).is_ok_and(|e| e.is_empty()));
        assert!(matches!(
            events(json!({"app": "DemoApp"})),
            Err(Refused::Malformed(_))
        ));
    }
}
