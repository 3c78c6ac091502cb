//! [`OutgoingContent`] → Send API `message` objects, and the Send API's rows of the Graph
//! error table.
//!
//! | content | `message` | checked before the call |
//! | --- | --- | --- |
//! | text | `{"text"}` (longer than the channel's limit: several messages) | Messenger 2000 characters, Instagram 1000 bytes |
//! | text with 1–3 buttons | a button template, `postback` buttons (payload = the button's id) | text ≤ 640, title cut to 20, id ≤ 1000 |
//! | text with 4–13 buttons | quick replies (`content_type: text`) | title cut to 20, id ≤ 1000 |
//! | list | a generic template: a card per section (≤ 10), its rows as `postback` buttons (≤ 3); the text as each card's subtitle (≤ 80; longer: a text message first) | |
//! | image / video / audio, voice / document / sticker | an attachment `image` / `video` / `audio` / `file` / `image`, by `url` (URL), `attachment_id` (token), or an upload first (bytes, paths); a caption follows as a text | 25 MB |
//! | location, contacts, reaction, template | `UnsupportedContent` | |
//!
//! | Graph `code` (`error_subcode`) | class |
//! | --- | --- |
//! | 613, 4 | `RateLimited` |
//! | 10 (2018278), or 10 with "outside of allowed window" | `OutsideSessionWindow` |
//! | 551 (the person isn't available), 100 (2018001: no matching user) | `RecipientUnreachable` |
//! | 1, 2, any 5xx | retryable `Api` |
//! | 10, 100, 190, 200, 368, others | final `Api` |

use botmesh::message::{Button, ListSection, MediaKind, OutgoingContent};
use botmesh::provider::ProviderError;
use serde_json::{Value, json};

use crate::meta::Class;

/// The longest text of a button template.
pub(crate) const BUTTON_TEXT_LIMIT: usize = 640;
/// The most quick replies.
const QUICK_REPLIES: usize = 13;
/// The longest button payload.
const PAYLOAD_LIMIT: usize = 1000;

/// How long a text may be, on a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextLimit {
    /// Characters.
    Chars(usize),
    /// UTF-8 bytes.
    Bytes(usize),
}

impl TextLimit {
    /// The limit in characters, for the runtime's split (a byte limit is at least that many
    /// characters of ASCII).
    pub fn chars(self) -> usize {
        match self {
            TextLimit::Chars(n) | TextLimit::Bytes(n) => n,
        }
    }

    fn fits(self, text: &str) -> bool {
        match self {
            TextLimit::Chars(n) => text.chars().count() <= n,
            TextLimit::Bytes(n) => text.len() <= n,
        }
    }

    /// `text` in parts that fit, cut at line ends or spaces where possible.
    pub(crate) fn split(self, text: &str) -> Vec<String> {
        let mut chars = self.chars();
        loop {
            let parts = botmesh::bot::split_text(text, chars);
            if chars <= 1 || parts.iter().all(|p| self.fits(p)) {
                return parts;
            }
            chars = (chars * 3 / 4).max(1);
        }
    }
}

pub(crate) fn unsupported(provider: &str, what: impl Into<String>) -> ProviderError {
    ProviderError::UnsupportedContent {
        provider: provider.to_owned(),
        what: what.into(),
    }
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The attachment `type` of a media kind.
pub(crate) fn attachment_type(kind: MediaKind) -> &'static str {
    match kind {
        MediaKind::Image | MediaKind::Sticker => "image",
        MediaKind::Video => "video",
        MediaKind::Audio | MediaKind::Voice => "audio",
        MediaKind::Document => "file",
    }
}

fn postback(provider: &str, b: &Button) -> Result<Value, ProviderError> {
    check_payload(provider, b)?;
    Ok(json!({ "type": "postback", "title": cut(&b.title, 20), "payload": b.id }))
}

fn check_payload(provider: &str, b: &Button) -> Result<(), ProviderError> {
    if b.id.is_empty() || b.id.chars().count() > PAYLOAD_LIMIT {
        return Err(unsupported(
            provider,
            format!(
                "button {:?}: id must be 1-{PAYLOAD_LIMIT} characters",
                b.title
            ),
        ));
    }
    Ok(())
}

/// The `message` objects of a non-media content (several for a long text or a list with a
/// long text).
pub(crate) fn messages(
    provider: &str,
    limit: TextLimit,
    content: &OutgoingContent,
) -> Result<Vec<Value>, ProviderError> {
    match content {
        OutgoingContent::Text { text, buttons } if buttons.is_empty() => {
            if text.trim().is_empty() {
                return Err(unsupported(provider, "an empty text"));
            }
            Ok(limit
                .split(text)
                .into_iter()
                .map(|part| json!({ "text": part }))
                .collect())
        }
        OutgoingContent::Text { text, buttons } if buttons.len() <= 3 => {
            let n = text.chars().count();
            if n == 0 || n > BUTTON_TEXT_LIMIT {
                return Err(unsupported(
                    provider,
                    format!("a text of {n} characters with buttons (1-{BUTTON_TEXT_LIMIT})"),
                ));
            }
            let buttons = buttons
                .iter()
                .map(|b| postback(provider, b))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(vec![
                json!({ "attachment": { "type": "template", "payload": {
                "template_type": "button", "text": text, "buttons": buttons } } }),
            ])
        }
        OutgoingContent::Text { text, buttons } if buttons.len() <= QUICK_REPLIES => {
            if text.trim().is_empty() || !limit.fits(text) {
                return Err(unsupported(
                    provider,
                    "the text of quick replies must be one message",
                ));
            }
            let replies = buttons
                .iter()
                .map(|b| {
                    check_payload(provider, b)?;
                    Ok(json!({ "content_type": "text", "title": cut(&b.title, 20), "payload": b.id }))
                })
                .collect::<Result<Vec<_>, ProviderError>>()?;
            Ok(vec![json!({ "text": text, "quick_replies": replies })])
        }
        OutgoingContent::Text { buttons, .. } => Err(unsupported(
            provider,
            format!("{} buttons (at most {QUICK_REPLIES})", buttons.len()),
        )),
        OutgoingContent::List { text, sections, .. } => generic(provider, limit, text, sections),
        OutgoingContent::Media { .. } => Err(unsupported(provider, "media goes through media")),
        OutgoingContent::Location(_) => Err(unsupported(provider, "a location")),
        OutgoingContent::Contacts(_) => Err(unsupported(provider, "contact cards")),
        OutgoingContent::Reaction(_) => Err(unsupported(provider, "a reaction")),
        OutgoingContent::Template { .. } => Err(unsupported(
            provider,
            "a WhatsApp template (outside the window, configure a message tag)",
        )),
    }
}

/// A list as a generic template: a card per section, its rows as buttons.
fn generic(
    provider: &str,
    limit: TextLimit,
    text: &str,
    sections: &[ListSection],
) -> Result<Vec<Value>, ProviderError> {
    if sections.is_empty()
        || sections.len() > 10
        || sections
            .iter()
            .any(|s| s.rows.is_empty() || s.rows.len() > 3)
    {
        return Err(unsupported(
            provider,
            format!(
                "a list of {} sections (1-10 sections of 1-3 rows)",
                sections.len()
            ),
        ));
    }
    let short = text.chars().count() <= 80;
    let elements = sections
        .iter()
        .map(|s| {
            let buttons = s
                .rows
                .iter()
                .map(|b| postback(provider, b))
                .collect::<Result<Vec<_>, _>>()?;
            let mut card = json!({ "title": cut(&s.title, 80), "buttons": buttons });
            if short && !text.is_empty() {
                card["subtitle"] = json!(text);
            }
            Ok(card)
        })
        .collect::<Result<Vec<_>, ProviderError>>()?;
    let mut out = Vec::new();
    if !short {
        out.extend(limit.split(text).into_iter().map(|p| json!({ "text": p })));
    }
    out.push(json!({ "attachment": { "type": "template", "payload": {
        "template_type": "generic", "elements": elements } } }));
    Ok(out)
}

/// The Send API's rows of the Graph error table (the shared rules of [`crate::meta`] follow).
pub(crate) fn table(code: i64, subcode: Option<i64>, message: &str) -> Option<Class> {
    Some(match (code, subcode) {
        (613, _) => Class::RateLimited,
        (10, Some(2018278)) => Class::OutsideWindow,
        (10, _) if message.contains("outside of allowed window") => Class::OutsideWindow,
        (551, _) | (100, Some(2018001)) => Class::Unreachable,
        (10 | 100 | 190 | 200 | 368, _) => Class::Final,
        _ => return None,
    })
}
