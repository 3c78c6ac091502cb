//! WhatsApp Cloud webhook bodies → [`ProviderEvent`]s.
//!
//! One POST may batch several `entry` × `changes` × `messages` / `statuses`; all are parsed
//! before any is delivered, so a malformed body (400) delivers nothing.
//!
//! | `value.messages[i].type` | event |
//! | --- | --- |
//! | `text` | `Message` with `Content::Text` |
//! | `image` / `document` / `audio` (`voice: true` → voice) / `video` / `sticker` | `Content::Media`, the media id as the token, caption as text |
//! | `location` / `contacts` | `Content::Location` / `Content::Contacts` |
//! | `interactive` (`button_reply`, `list_reply`) | `Interaction` with the reply's `id` as data |
//! | `interactive` of a kind without an `id` (`nfm_reply`, a Flow's answer) | `Message` with `Content::Other` (the raw message) |
//! | `button` (a template quick reply) | `Interaction` with the `payload` as data |
//! | `reaction` | `Reaction` (an empty emoji removes it) |
//! | anything else (`unsupported`, `order`, `system`, …) | `Message` with `Content::Other` (the raw message) |
//! | `value.statuses[i]` | `Status` (`sent`, `delivered`, `read`, `failed` with the first error) |
//!
//! Chats and senders are the `wa_id` (digits, no `+`); the profile name comes from
//! `value.contacts`. A `value` of another `field` (`account_update`, …) is skipped.
//!
//! Gupshup's Meta-format callbacks are this shape too ([`parse_cloud`]): their media carry a
//! hosted `url` (the token there instead of the `id`), and their statuses a `gs_id` (Gupshup's
//! id of the sent message, the status's message id when present).

use botmesh::message::{
    ChatId, ContactCard, Content, InboundMedia, Interaction, Location, MediaKind, MediaRef,
    Message, MessageId, Reaction, UserId,
};
use botmesh::provider::{DeliveryStatus, ProviderEvent};
use serde::Deserialize;
use serde_json::Value;

use super::NAME;

#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(default)]
    object: String,
    entry: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(default)]
    changes: Vec<Change>,
}

#[derive(Debug, Deserialize)]
struct Change {
    #[serde(default)]
    field: String,
    value: ChangeValue,
}

#[derive(Debug, Deserialize)]
struct ChangeValue {
    #[serde(default)]
    contacts: Vec<Contact>,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    statuses: Vec<Status>,
}

#[derive(Debug, Deserialize)]
struct Contact {
    wa_id: String,
    #[serde(default)]
    profile: Option<Profile>,
}

#[derive(Debug, Deserialize)]
struct Profile {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Status {
    id: String,
    /// Gupshup's id of the sent message (Gupshup's Meta format only).
    #[serde(default)]
    gs_id: Option<String>,
    status: String,
    recipient_id: String,
    #[serde(default)]
    errors: Vec<StatusError>,
}

#[derive(Debug, Deserialize)]
struct StatusError {
    code: i64,
    #[serde(default)]
    title: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WaMessage {
    from: String,
    id: String,
    timestamp: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    context: Option<Context>,
}

#[derive(Debug, Deserialize)]
struct Context {
    #[serde(default)]
    id: Option<String>,
}

/// A body that is not a WhatsApp Cloud webhook.
#[derive(Debug, thiserror::Error)]
#[error("not a WhatsApp Cloud webhook: {0}")]
pub(crate) struct Malformed(String);

/// The WhatsApp Cloud body parser of the Meta webhook route.
pub(crate) struct Inbound;

impl crate::meta::MetaInbound for Inbound {
    fn parse(&self, body: &[u8]) -> Result<Vec<ProviderEvent>, String> {
        parse_cloud(body, NAME, "id")
    }
}

/// The events of a Cloud-API webhook body, their media refs `provider`'s with the media
/// object's `media_field` as the token (`id`; Gupshup's hosted `url`); `Err` says why the body
/// is not one.
pub(crate) fn parse_cloud(
    body: &[u8],
    provider: &str,
    media_field: &str,
) -> Result<Vec<ProviderEvent>, String> {
    parse(body, provider, media_field).map_err(|e| e.to_string())
}

/// The events of a webhook body.
fn parse(body: &[u8], provider: &str, media_field: &str) -> Result<Vec<ProviderEvent>, Malformed> {
    let envelope: Envelope = serde_json::from_slice(body).map_err(|e| Malformed(e.to_string()))?;
    if envelope.object != "whatsapp_business_account" {
        return Err(Malformed(format!(
            "unexpected object {:?}",
            envelope.object
        )));
    }
    let mut events = Vec::new();
    for change in envelope.entry.into_iter().flat_map(|e| e.changes) {
        if change.field != "messages" {
            continue;
        }
        let value = change.value;
        for raw in value.messages {
            events.push(message_event(raw, &value.contacts, provider, media_field)?);
        }
        for s in value.statuses {
            let error = s.errors.first().map(|e| match &e.title {
                Some(t) => format!("{}: {t}", e.code),
                None => e.code.to_string(),
            });
            events.push(ProviderEvent::Status(DeliveryStatus {
                chat: ChatId(s.recipient_id),
                message_id: MessageId(s.gs_id.unwrap_or(s.id)),
                status: s.status,
                error,
            }));
        }
    }
    Ok(events)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// The cards of a Cloud-API `contacts` array (Gupshup's `contact` payload has the same shape).
pub(crate) fn contact_cards(contacts: &Value) -> Vec<ContactCard> {
    contacts
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ContactCard {
            name: str_at(c, &["name", "formatted_name"])
                .unwrap_or_default()
                .to_owned(),
            phones: c["phones"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["phone"].as_str().map(str::to_owned))
                .collect(),
        })
        .collect()
}

fn message_event(
    raw: Value,
    contacts: &[Contact],
    provider: &str,
    media_field: &str,
) -> Result<ProviderEvent, Malformed> {
    let m: WaMessage = serde_json::from_value(raw.clone()).map_err(|e| Malformed(e.to_string()))?;
    let timestamp_ms = m
        .timestamp
        .parse::<i64>()
        .map_err(|_| Malformed(format!("timestamp {:?} is not unix seconds", m.timestamp)))?
        * 1000;
    let chat = ChatId(m.from.clone());
    let sender = UserId(m.from.clone());
    let sender_name = contacts
        .iter()
        .find(|c| c.wa_id == m.from)
        .and_then(|c| c.profile.as_ref())
        .and_then(|p| p.name.clone());
    let reply_to = m.context.as_ref().and_then(|c| c.id.clone()).map(MessageId);
    let need = |path: &[&str]| {
        str_at(&raw, path)
            .map(str::to_owned)
            .ok_or_else(|| Malformed(format!("{} message without {}", m.kind, path.join("."))))
    };
    let interaction = |data: String, title: Option<String>| {
        ProviderEvent::Interaction(Interaction {
            id: m.id.clone(),
            chat: chat.clone(),
            sender: sender.clone(),
            sender_name: sender_name.clone(),
            data,
            title,
            message_id: reply_to.clone(),
            is_group: false,
            timestamp_ms,
            respond_by_ms: None,
            from_text: false,
        })
    };
    let content = match m.kind.as_str() {
        "text" => Content::Text(need(&["text", "body"])?),
        "interactive" => {
            let kind = need(&["interactive", "type"])?;
            match str_at(&raw, &["interactive", &kind, "id"]) {
                Some(data) => {
                    let title = str_at(&raw, &["interactive", &kind, "title"]).map(str::to_owned);
                    return Ok(interaction(data.to_owned(), title));
                }
                // A reply with no id (`nfm_reply` of a WhatsApp Flow, and kinds to come): a
                // message like any kind this provider does not know, not a refused batch.
                None => Content::Other(raw.clone()),
            }
        }
        "button" => {
            let data = need(&["button", "payload"])?;
            let title = str_at(&raw, &["button", "text"]).map(str::to_owned);
            return Ok(interaction(data, title));
        }
        "reaction" => {
            return Ok(ProviderEvent::Reaction {
                chat,
                sender,
                reaction: Reaction {
                    message_id: MessageId(need(&["reaction", "message_id"])?),
                    emoji: str_at(&raw, &["reaction", "emoji"])
                        .unwrap_or_default()
                        .to_owned(),
                },
            });
        }
        kind @ ("image" | "document" | "audio" | "video" | "sticker") => {
            let media_kind = match kind {
                "image" => MediaKind::Image,
                "document" => MediaKind::Document,
                "video" => MediaKind::Video,
                "sticker" => MediaKind::Sticker,
                _ if raw[kind]["voice"].as_bool() == Some(true) => MediaKind::Voice,
                _ => MediaKind::Audio,
            };
            Content::Media(InboundMedia {
                kind: media_kind,
                media_ref: MediaRef {
                    provider: provider.to_owned(),
                    token: need(&[kind, media_field])?,
                },
                mime: str_at(&raw, &[kind, "mime_type"]).map(str::to_owned),
                caption: str_at(&raw, &[kind, "caption"]).map(str::to_owned),
                file_name: str_at(&raw, &[kind, "filename"]).map(str::to_owned),
                size: None,
            })
        }
        "location" => {
            let lat = raw["location"]["latitude"].as_f64();
            let lon = raw["location"]["longitude"].as_f64();
            let (Some(latitude), Some(longitude)) = (lat, lon) else {
                return Err(Malformed("location message without coordinates".to_owned()));
            };
            Content::Location(Location {
                latitude,
                longitude,
                name: str_at(&raw, &["location", "name"]).map(str::to_owned),
                address: str_at(&raw, &["location", "address"]).map(str::to_owned),
            })
        }
        "contacts" => Content::Contacts(contact_cards(&raw["contacts"])),
        _ => Content::Other(raw.clone()),
    };
    Ok(ProviderEvent::Message(Message {
        id: MessageId(m.id),
        chat,
        sender,
        sender_name,
        is_group: false,
        mentions_bot: false,
        timestamp_ms,
        content,
        reply_to,
        lang_hint: None,
    }))
}
