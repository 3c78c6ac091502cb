//! TikTok webhooks → [`ProviderEvent`]s.
//!
//! A webhook is `{"client_key", "event", "create_time", "user_openid", "content"}`, where
//! `user_openid` is the business account and `content` a JSON string:
//! `{"conversation_id", "message_id", "timestamp" (ms), "type", "text": {"body"}, "image":
//! {"media_id"}, "from", "from_user": {"id"}, "to", "to_user": {"id"},
//! "referenced_message_info": {"referenced_message_id"}}`.
//!
//! | `event` / content | event |
//! | --- | --- |
//! | `im_receive_msg` to the configured business, `type: "text"` | `Message` with `Content::Text`, id `message_id` (the dedupe key) |
//! | `im_receive_msg`, `type: "image"` | `Content::Media` (image), the token `<conversation_id>\|<message_id>\|<media_id>` |
//! | `im_receive_msg` of another type (`share_post`, `sticker`, …) | `Content::Other` (the content object) |
//! | `im_send_msg` (the business's own sends, the bot's echoed), a message from the business itself | nothing |
//! | `im_mark_read_msg`, another business's event, any other event | nothing |
//!
//! Chats: the `conversation_id` (what a send is addressed to); the sender is `from_user.id`,
//! named `from`.

use botmesh::message::{ChatId, Content, MediaKind, MessageId, UserId};
use botmesh::provider::ProviderEvent;
use serde_json::Value;

use super::NAME;
use crate::gateway::inbound::{Attachment, Envelope, event_of_account, text_at};
use crate::webhook::Refused;

fn malformed(what: impl Into<String>) -> Refused {
    Refused::Malformed(format!("not a TikTok webhook: {}", what.into()))
}

/// The media token of an image: its conversation, message and media ids.
pub(crate) fn media_token(conversation: &str, message: &str, media: &str) -> String {
    format!("{conversation}|{message}|{media}")
}

/// The three ids of a media token, when it is one.
pub(crate) fn media_parts(token: &str) -> Option<(&str, &str, &str)> {
    let mut parts = token.split('|');
    let ids = (parts.next()?, parts.next()?, parts.next()?);
    let plausible = |s: &str| {
        (1..=256).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_=+.:/".contains(&b))
            && !s.contains("..")
    };
    (parts.next().is_none() && plausible(ids.0) && plausible(ids.1) && plausible(ids.2))
        .then_some(ids)
}

/// The events of a webhook body for `business`.
pub(crate) fn parse(body: &[u8], business: &str) -> Result<Vec<ProviderEvent>, Refused> {
    let message = ("event", "im_receive_msg");
    let Some(v) = event_of_account(body, message, ("user_openid", business), malformed)? else {
        return Ok(Vec::new());
    };
    // `content` is a JSON string (an object is taken too).
    let content: Value = match &v["content"] {
        Value::String(s) => {
            serde_json::from_str(s).map_err(|e| malformed(format!("content: {e}")))?
        }
        other => other.clone(),
    };
    let from = text_at(&content["from_user"], "id").ok_or_else(|| malformed("no from_user.id"))?;
    if from == business {
        return Ok(Vec::new());
    }
    let id = text_at(&content, "message_id").ok_or_else(|| malformed("no message_id"))?;
    let conversation =
        text_at(&content, "conversation_id").ok_or_else(|| malformed("no conversation_id"))?;
    let envelope = Envelope {
        id: id.to_owned(),
        chat: ChatId(conversation.to_owned()),
        sender: UserId(from.to_owned()),
        sender_name: text_at(&content, "from").map(str::to_owned),
        is_group: false,
        timestamp_ms: content["timestamp"]
            .as_i64()
            .unwrap_or_else(botmesh::clock::now_ms),
        reply_to: text_at(&content["referenced_message_info"], "referenced_message_id")
            .map(|r| MessageId(r.to_owned())),
    };
    let message = match text_at(&content, "type").unwrap_or_default() {
        "text" => Content::Text(
            text_at(&content["text"], "body")
                .unwrap_or_default()
                .to_owned(),
        ),
        "image" => {
            let media = text_at(&content["image"], "media_id")
                .ok_or_else(|| malformed("an image without media_id"))?;
            let token = media_token(conversation, id, media);
            Attachment {
                kind: MediaKind::Image,
                media_ref: (NAME, &token),
                mime: None,
                caption: None,
                file_name: None,
                size: None,
            }
            .into()
        }
        _ => Content::Other(content.clone()),
    };
    Ok(vec![envelope.message(message)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook(event: &str, business: &str, content: Value) -> Vec<u8> {
        json!({"client_key": "ck", "event": event, "create_time": 1, "user_openid": business,
            "content": content.to_string()})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn messages_images_and_echoes() {
        let text = json!({"conversation_id": "cv1", "message_id": "m1", "timestamp": 1_700_000_000_000_i64,
            "type": "text", "text": {"body": "hi"}, "from": "ana", "from_user": {"id": "u1"},
            "to": "shop", "to_user": {"id": "biz"}});
        match parse(&hook("im_receive_msg", "biz", text.clone()), "biz").as_deref() {
            Ok([ProviderEvent::Message(m)]) => {
                assert_eq!(
                    (m.chat.as_str(), m.id.as_str(), m.content.text()),
                    ("cv1", "m1", "hi")
                );
                assert_eq!(m.sender_name.as_deref(), Some("ana"));
            }
            other => panic!("{other:?}"),
        }
        let mut image = text.clone();
        image["type"] = json!("image");
        image["image"] = json!({"media_id": "v0c1"});
        match parse(&hook("im_receive_msg", "biz", image), "biz").as_deref() {
            Ok([ProviderEvent::Message(m)]) => match &m.content {
                Content::Media(media) => assert_eq!(media.media_ref.token, "cv1|m1|v0c1"),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        let mut own = text.clone();
        own["from_user"] = json!({"id": "biz"});
        for (event, business, content) in [
            ("im_send_msg", "biz", text.clone()),
            ("im_receive_msg", "biz", own),
            ("im_receive_msg", "other", text.clone()),
            ("im_mark_read_msg", "biz", text),
        ] {
            assert!(parse(&hook(event, business, content), "biz").is_ok_and(|e| e.is_empty()));
        }
        assert_eq!(media_parts("a|b|c"), Some(("a", "b", "c")));
        assert!(media_parts("a|b").is_none() && media_parts("a|b|c|d").is_none());
        assert!(media_parts("a|../x|c").is_none());
    }
}
