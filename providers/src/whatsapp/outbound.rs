//! [`OutgoingContent`] → Cloud API message bodies, and Graph errors → [`ProviderError`]s.
//!
//! | content | body `type` | limits checked before the call |
//! | --- | --- | --- |
//! | text | `text` | body ≤ 4096 (longer: several messages) |
//! | text with 1–3 buttons | `interactive` / `button` | body ≤ 1024 (a longer text is split by the runtime so that its last part fits: `Capabilities::buttons_text_limit`), id ≤ 256, title cut to 20 |
//! | text with 4–10 buttons | `interactive` / `list` (one section, "Options") | row title cut to 24 |
//! | list | `interactive` / `list` | ≤ 10 sections, ≤ 10 rows in all, label cut to 20 |
//! | image / document / audio / voice / video / sticker | the kind, by `link` (URL) or `id` (token, or an upload for bytes and paths) | caption ≤ 1024 |
//! | location / contacts / reaction | `location` / `contacts` / `reaction` | |
//! | template | `template` with body parameters | |
//!
//! | Graph `error.code` | class |
//! | --- | --- |
//! | 130429, 131056, 80007, 4 | `RateLimited` |
//! | 131047 | `OutsideSessionWindow` |
//! | 131026 | `RecipientUnreachable` |
//! | 131051 | `UnsupportedContent` |
//! | 131000, 131016, 1, 2, any 5xx (the Graph answered: not accepted) | retryable `Api` |
//! | HTTP 413 | `PayloadTooLarge` |
//! | no connection | `Network` (retryable) |
//! | a send's timeout or connection lost after the request was written | `Ambiguous`: it may have been accepted (`crate::http::call_error`) |
//! | 100, 131008, 131009, 132000, 132001, 131048, 0, 190, others | final `Api` |

use botmesh::message::{Button, ChatId, ListSection, MediaKind, MessageId, OutgoingContent};
use botmesh::provider::ProviderError;
use serde_json::{Value, json};

use crate::meta::Class;

use super::NAME;

/// The text limit.
pub(crate) const TEXT_LIMIT: usize = 4096;
/// The longest body of an interactive (buttons, list) message.
pub(super) const INTERACTIVE_BODY_LIMIT: usize = 1024;
const CAPTION_LIMIT: usize = 1024;

fn unsupported(what: impl Into<String>) -> ProviderError {
    crate::errors::unsupported_content(NAME, what)
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Where a media body takes its bytes from.
pub(crate) enum MediaField {
    Link(String),
    Id(String),
}

/// The `type` of a media kind.
pub(crate) fn media_type(kind: MediaKind) -> &'static str {
    match kind {
        MediaKind::Image => "image",
        MediaKind::Document => "document",
        MediaKind::Audio | MediaKind::Voice => "audio",
        MediaKind::Video => "video",
        MediaKind::Sticker => "sticker",
    }
}

fn envelope(to: &ChatId, reply_to: Option<&MessageId>, kind: &str, payload: Value) -> Value {
    let mut body = json!({
        "messaging_product": "whatsapp", "recipient_type": "individual",
        "to": to.as_str(), "type": kind,
    });
    body[kind] = payload;
    if let Some(id) = reply_to {
        body["context"] = json!({ "message_id": id.as_str() });
    }
    body
}

/// The bodies of a non-media message (several for a long text).
pub(crate) fn bodies(
    to: &ChatId,
    reply_to: Option<&MessageId>,
    content: &OutgoingContent,
) -> Result<Vec<Value>, ProviderError> {
    let one = |kind: &str, payload| Ok(vec![envelope(to, reply_to, kind, payload)]);
    match content {
        OutgoingContent::Text { text, buttons } if buttons.is_empty() => {
            if text.trim().is_empty() {
                return Err(unsupported("an empty text"));
            }
            Ok(botmesh::bot::split_text(text, TEXT_LIMIT)
                .into_iter()
                .enumerate()
                .map(|(i, part)| {
                    let reply = if i == 0 { reply_to } else { None };
                    envelope(
                        to,
                        reply,
                        "text",
                        json!({ "preview_url": false, "body": part }),
                    )
                })
                .collect())
        }
        OutgoingContent::Text { text, buttons } if buttons.len() <= 3 => {
            check_body(text)?;
            let buttons: Vec<Value> = buttons
                .iter()
                .map(|b| {
                    check_id(b, 256)?;
                    Ok(json!({ "type": "reply", "reply": { "id": b.id, "title": cut(&b.title, 20) } }))
                })
                .collect::<Result<_, ProviderError>>()?;
            one(
                "interactive",
                json!({ "type": "button", "body": { "text": text }, "action": { "buttons": buttons } }),
            )
        }
        OutgoingContent::Text { text, buttons } => {
            let section = ListSection {
                title: "Options".to_owned(),
                rows: buttons.clone(),
            };
            one(
                "interactive",
                list(text, "Options", std::slice::from_ref(&section))?,
            )
        }
        OutgoingContent::List {
            text,
            button,
            sections,
        } => one("interactive", list(text, button, sections)?),
        OutgoingContent::Location(l) => one(
            "location",
            json!({ "latitude": l.latitude, "longitude": l.longitude, "name": l.name, "address": l.address }),
        ),
        OutgoingContent::Contacts(cards) => {
            let contacts: Vec<Value> = cards
                .iter()
                .map(|c| {
                    json!({
                        "name": { "formatted_name": c.name, "first_name": c.name },
                        "phones": c.phones.iter().map(|p| json!({ "phone": p })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            one("contacts", Value::Array(contacts))
        }
        OutgoingContent::Reaction(r) => one(
            "reaction",
            json!({ "message_id": r.message_id.as_str(), "emoji": r.emoji }),
        ),
        OutgoingContent::Template {
            name,
            language,
            params,
        } => {
            let mut template = json!({ "name": name, "language": { "code": language } });
            if !params.is_empty() {
                let parameters: Vec<Value> = params
                    .iter()
                    .map(|p| json!({ "type": "text", "text": p }))
                    .collect();
                template["components"] = json!([{ "type": "body", "parameters": parameters }]);
            }
            one("template", template)
        }
        OutgoingContent::Media { .. } => Err(unsupported("media goes through media_body")),
    }
}

/// The body of a media message.
pub(crate) fn media_body(
    to: &ChatId,
    reply_to: Option<&MessageId>,
    kind: MediaKind,
    field: MediaField,
    caption: Option<&str>,
    file_name: Option<&str>,
) -> Result<Value, ProviderError> {
    let t = media_type(kind);
    let mut payload = match field {
        MediaField::Link(l) => json!({ "link": l }),
        MediaField::Id(id) => json!({ "id": id }),
    };
    if let Some(c) = caption.filter(|c| !c.is_empty()) {
        if c.chars().count() > CAPTION_LIMIT {
            return Err(unsupported(format!(
                "a caption over {CAPTION_LIMIT} characters"
            )));
        }
        if matches!(
            kind,
            MediaKind::Image | MediaKind::Document | MediaKind::Video
        ) {
            payload["caption"] = json!(c);
        }
    }
    if kind == MediaKind::Document
        && let Some(name) = file_name
    {
        payload["filename"] = json!(name);
    }
    Ok(envelope(to, reply_to, t, payload))
}

fn check_body(text: &str) -> Result<(), ProviderError> {
    let n = text.chars().count();
    if n == 0 {
        return Err(unsupported("an interactive message without text"));
    }
    if n > INTERACTIVE_BODY_LIMIT {
        return Err(unsupported(format!(
            "an interactive body of {n} characters (the limit is {INTERACTIVE_BODY_LIMIT})"
        )));
    }
    Ok(())
}

fn check_id(b: &Button, limit: usize) -> Result<(), ProviderError> {
    if b.id.is_empty() || b.id.chars().count() > limit {
        return Err(unsupported(format!(
            "button {:?}: id must be 1-{limit} characters",
            b.title
        )));
    }
    Ok(())
}

fn list(text: &str, button: &str, sections: &[ListSection]) -> Result<Value, ProviderError> {
    check_body(text)?;
    let rows: usize = sections.iter().map(|s| s.rows.len()).sum();
    if sections.is_empty() || sections.len() > 10 || rows == 0 || rows > 10 {
        return Err(unsupported(format!(
            "a list of {} sections and {rows} rows (1-10 sections, 1-10 rows in all)",
            sections.len()
        )));
    }
    let sections: Vec<Value> = sections
        .iter()
        .map(|s| {
            let rows: Vec<Value> = s
                .rows
                .iter()
                .map(|r| {
                    check_id(r, 200)?;
                    Ok(json!({ "id": r.id, "title": cut(&r.title, 24) }))
                })
                .collect::<Result<_, ProviderError>>()?;
            Ok(json!({ "title": cut(&s.title, 24), "rows": rows }))
        })
        .collect::<Result<_, ProviderError>>()?;
    Ok(json!({
        "type": "list", "body": { "text": text },
        "action": { "button": cut(button, 20), "sections": sections },
    }))
}

/// WhatsApp's rows of the Graph error table (the shared rules of [`crate::meta`] follow).
pub(crate) fn table(code: i64, _subcode: Option<i64>, _message: &str) -> Option<Class> {
    Some(match code {
        130429 | 131056 | 80007 => Class::RateLimited,
        131047 => Class::OutsideWindow,
        131026 => Class::Unreachable,
        131051 => Class::Unsupported,
        131000 | 131016 => Class::Retryable,
        // Spam limit (a human reviews), token expired: final whatever the HTTP status.
        131048 | 0 | 190 => Class::Final,
        _ => return None,
    })
}
