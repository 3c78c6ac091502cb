//! What the gateways' webhook parsers share: reading a body and a JSON field, and
//! [`Envelope`], the parts every inbound message has, from which its event is made.

use botmesh::message::{
    ChatId, Content, InboundMedia, Interaction, Location, MediaKind, MediaRef, Message, MessageId,
    UserId,
};
use botmesh::provider::ProviderEvent;
use serde_json::Value;

use crate::webhook::Refused;

/// A webhook body as JSON and its `field` that says what it is (`event`, `type`): refused by
/// `malformed` when it is not JSON or names nothing.
#[cfg_attr(
    not(any(
        feature = "evolution",
        feature = "wppconnect",
        feature = "gohighlevel",
        feature = "tiktok"
    )),
    allow(dead_code)
)]
pub(crate) fn typed_body(
    body: &[u8],
    field: &str,
    malformed: impl Fn(String) -> Refused,
) -> Result<(Value, String), Refused> {
    let v: Value = serde_json::from_slice(body).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let kind = text_at(&v, field)
        .ok_or_else(|| malformed(format!("no {field}")))?
        .to_owned();
    Ok((v, kind))
}

/// The webhook body of a signed REST channel (GoHighLevel, TikTok) when its `kind_field` is
/// `kind` and its `account_field` is the channel's `account`; `None`, which delivers nothing,
/// for another kind of event or another account's message.
#[cfg(any(feature = "gohighlevel", feature = "tiktok"))]
pub(crate) fn event_of_account(
    body: &[u8],
    (kind_field, kind): (&str, &str),
    (account_field, account): (&str, &str),
    malformed: impl Fn(String) -> Refused,
) -> Result<Option<Value>, Refused> {
    let (v, found) = typed_body(body, kind_field, malformed)?;
    if found != kind {
        return Ok(None);
    }
    if text_at(&v, account_field) != Some(account) {
        tracing::debug!(account_field, "a message of another account, not delivered");
        return Ok(None);
    }
    Ok(Some(v))
}

/// A non-empty string field of `v`.
pub(crate) fn text_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// A number a gateway gives as a JSON number or a string.
#[cfg_attr(not(gateway_channel), allow(dead_code))]
pub(crate) fn number_at(v: &Value, key: &str) -> Option<f64> {
    match v.get(key)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A location from the `lat` and `lng` fields of `v` (numbers or strings) and its name and
/// address; `None` without both coordinates.
#[cfg_attr(not(gateway_channel), allow(dead_code))]
pub(crate) fn location(
    v: &Value,
    (lat, lng): (&str, &str),
    name: Option<&str>,
    address: Option<&str>,
) -> Option<Content> {
    Some(Content::Location(Location {
        latitude: number_at(v, lat)?,
        longitude: number_at(v, lng)?,
        name: name.map(str::to_owned),
        address: address.map(str::to_owned),
    }))
}

/// The parts every inbound message has.
pub(crate) struct Envelope {
    /// The channel's message id (the dedupe key).
    pub(crate) id: String,
    pub(crate) chat: ChatId,
    pub(crate) sender: UserId,
    pub(crate) sender_name: Option<String>,
    pub(crate) is_group: bool,
    pub(crate) timestamp_ms: i64,
    /// The message it answers.
    pub(crate) reply_to: Option<MessageId>,
}

/// A media attachment's fields.
pub(crate) struct Attachment<'a> {
    pub(crate) kind: MediaKind,
    /// The media ref's provider and token.
    pub(crate) media_ref: (&'a str, &'a str),
    pub(crate) mime: Option<&'a str>,
    pub(crate) caption: Option<&'a str>,
    pub(crate) file_name: Option<&'a str>,
    pub(crate) size: Option<u64>,
}

impl From<Attachment<'_>> for Content {
    fn from(a: Attachment<'_>) -> Self {
        let owned = |s: Option<&str>| s.map(str::to_owned);
        Content::Media(InboundMedia {
            kind: a.kind,
            media_ref: MediaRef {
                provider: a.media_ref.0.to_owned(),
                token: a.media_ref.1.to_owned(),
            },
            mime: owned(a.mime),
            caption: owned(a.caption),
            file_name: owned(a.file_name),
            size: a.size,
        })
    }
}

impl Envelope {
    /// The message with `content`.
    pub(crate) fn message(self, content: Content) -> ProviderEvent {
        ProviderEvent::Message(Message {
            id: MessageId(self.id),
            chat: self.chat,
            sender: self.sender,
            sender_name: self.sender_name,
            is_group: self.is_group,
            mentions_bot: false,
            timestamp_ms: self.timestamp_ms,
            content,
            reply_to: self.reply_to,
            lang_hint: None,
        })
    }

    /// A press of the button (or list row) `data`, titled `title`.
    #[cfg_attr(not(gateway_channel), allow(dead_code))]
    pub(crate) fn interaction(self, data: &str, title: Option<&str>) -> ProviderEvent {
        ProviderEvent::Interaction(Interaction {
            id: self.id,
            chat: self.chat,
            sender: self.sender,
            sender_name: self.sender_name,
            data: data.to_owned(),
            title: title.map(str::to_owned),
            message_id: self.reply_to,
            is_group: self.is_group,
            timestamp_ms: self.timestamp_ms,
            respond_by_ms: None,
            from_text: false,
        })
    }
}
