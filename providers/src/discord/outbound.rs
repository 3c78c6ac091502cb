//! What the bot sends, as Discord message bodies (`POST /channels/{id}/messages`, and the
//! same fields for an interaction's `@original` edit).
//!
//! | content | body |
//! | --- | --- |
//! | text (≤ 2000 characters; the runtime splits longer ones) | `content` |
//! | text with buttons | `content` + action rows of up to 5 primary buttons (`custom_id` = the button's id, ≤ 100 characters; label ≤ 80), up to 25 |
//! | list | `content` + a string select (`placeholder` = the list's button, one option per row, up to 25) |
//! | media from a URL | `content` = the caption and the URL (Discord shows it) |
//! | location | `content` = the name, the address and a map link |
//! | reaction | `PUT /channels/{c}/messages/{m}/reactions/{emoji}/@me` (not a message) |
//! | uploads (a path, bytes), contacts, templates | `UnsupportedContent` |
//!
//! Every message carries `allowed_mentions: {"parse": []}` (a bot's text pings no one) and,
//! when the runtime gives one, `nonce` + `enforce_nonce: true` (a resend of the same send
//! within Discord's window returns the first message instead of posting a second);
//! `reply_to` becomes a `message_reference` that does not fail when the message is gone.

use botmesh::message::{Button, ListSection, MediaSource, Outgoing, OutgoingContent};
use botmesh::provider::ProviderError;
use serde_json::{Value, json};

use super::NAME;

/// The longest `content`, in characters.
pub(crate) const TEXT_LIMIT: usize = 2000;
/// Buttons per action row, and rows per message.
const PER_ROW: usize = 5;
const ROWS: usize = 5;

fn unsupported(what: impl Into<String>) -> ProviderError {
    crate::errors::unsupported_content(NAME, what)
}

fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

fn buttons_rows(buttons: &[Button]) -> Result<Value, ProviderError> {
    if buttons.len() > PER_ROW * ROWS {
        return Err(unsupported(format!(
            "{} buttons (Discord shows at most {})",
            buttons.len(),
            PER_ROW * ROWS
        )));
    }
    let rows: Vec<Value> = buttons
        .chunks(PER_ROW)
        .map(|row| {
            let row: Vec<Value> = row
                .iter()
                .map(|b| json!({"type": 2, "style": 1, "label": cut(&b.title, 80), "custom_id": cut(&b.id, 100)}))
                .collect();
            json!({"type": 1, "components": row})
        })
        .collect();
    Ok(Value::Array(rows))
}

fn select_row(button: &str, sections: &[ListSection]) -> Result<Value, ProviderError> {
    let options: Vec<Value> = sections
        .iter()
        .flat_map(|s| s.rows.iter())
        .map(|r| json!({"label": cut(&r.title, 100), "value": cut(&r.id, 100)}))
        .collect();
    if options.is_empty() || options.len() > 25 {
        return Err(unsupported(format!(
            "a list of {} rows (Discord's select takes 1 to 25)",
            options.len()
        )));
    }
    Ok(json!([{"type": 1, "components": [
        {"type": 3, "custom_id": "list", "placeholder": cut(button, 150), "options": options}
    ]}]))
}

/// The message fields of `content` (`content`, `components`) for a create or an edit.
pub(crate) fn fields(content: &OutgoingContent) -> Result<Value, ProviderError> {
    let text_body = |text: &str| -> Result<Value, ProviderError> {
        if text.chars().count() > TEXT_LIMIT {
            return Err(ProviderError::PayloadTooLarge {
                provider: NAME.to_owned(),
                size: text.chars().count() as u64,
                limit: TEXT_LIMIT as u64,
            });
        }
        Ok(json!({ "content": text }))
    };
    let mut body = match content {
        OutgoingContent::Text { text, buttons } => {
            let mut body = text_body(text)?;
            if !buttons.is_empty() {
                body["components"] = buttons_rows(buttons)?;
            }
            body
        }
        OutgoingContent::List {
            text,
            button,
            sections,
        } => {
            let mut body = text_body(text)?;
            body["components"] = select_row(button, sections)?;
            body
        }
        OutgoingContent::Media {
            source: MediaSource::Url { url },
            caption,
            ..
        } => {
            let text = match caption.as_deref().filter(|c| !c.is_empty()) {
                Some(c) => format!("{c}\n{url}"),
                None => url.clone(),
            };
            text_body(&text)?
        }
        OutgoingContent::Media { .. } => {
            return Err(unsupported("media uploads (send media by URL)"));
        }
        OutgoingContent::Location(l) => {
            let mut lines: Vec<String> = [l.name.clone(), l.address.clone()]
                .into_iter()
                .flatten()
                .collect();
            lines.push(format!(
                "https://www.openstreetmap.org/?mlat={}&mlon={}",
                l.latitude, l.longitude
            ));
            text_body(&lines.join("\n"))?
        }
        OutgoingContent::Contacts(_) => return Err(unsupported("contact cards")),
        OutgoingContent::Template { .. } => return Err(unsupported("templates")),
        OutgoingContent::Reaction(_) => return Err(unsupported("a reaction as a message")),
    };
    if body.get("content").and_then(Value::as_str) == Some("") && body.get("components").is_none() {
        return Err(unsupported("an empty message"));
    }
    body["allowed_mentions"] = json!({ "parse": [] });
    Ok(body)
}

/// The body of `POST /channels/{id}/messages` for `outgoing`, carrying `nonce` when given.
pub(crate) fn create(outgoing: &Outgoing, nonce: Option<&str>) -> Result<Value, ProviderError> {
    let mut body = fields(&outgoing.content)?;
    if let Some(nonce) = nonce {
        body["nonce"] = json!(nonce);
        body["enforce_nonce"] = json!(true);
    }
    if let Some(reply_to) = &outgoing.reply_to {
        body["message_reference"] =
            json!({ "message_id": reply_to.as_str(), "fail_if_not_exists": false });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use botmesh::message::MessageId;

    use super::*;

    #[test]
    fn a_text_with_buttons_carries_rows_a_nonce_and_no_mentions() {
        let out = Outgoing::buttons("Pick one", [("vote:yes", "Yes"), ("vote:no", "No")])
            .reply_to(MessageId("42".into()));
        let body = create(&out, Some("n0nce")).expect("a body");
        assert_eq!(body["content"], "Pick one");
        assert_eq!(body["nonce"], "n0nce");
        assert_eq!(body["enforce_nonce"], true);
        assert_eq!(body["allowed_mentions"], json!({"parse": []}));
        assert_eq!(body["message_reference"]["message_id"], "42");
        assert_eq!(body["components"][0]["type"], 1);
        assert_eq!(
            body["components"][0]["components"][1]["custom_id"],
            "vote:no"
        );
        assert_eq!(body["components"][0]["components"][1]["label"], "No");
        let body = create(&Outgoing::from("hi"), None).expect("a body");
        assert!(body.get("nonce").is_none() && body.get("components").is_none());
    }

    #[test]
    fn too_long_too_many_or_unsupported_content_is_refused() {
        let long = Outgoing::from("x".repeat(2001));
        assert!(matches!(
            create(&long, None),
            Err(ProviderError::PayloadTooLarge { .. })
        ));
        let many: Vec<botmesh::message::Button> = (0..26)
            .map(|i| botmesh::message::Button::new(i.to_string()))
            .collect();
        assert!(matches!(
            create(&Outgoing::buttons("x", many), None),
            Err(ProviderError::UnsupportedContent { .. })
        ));
        assert!(matches!(
            create(&Outgoing::from(""), None),
            Err(ProviderError::UnsupportedContent { .. })
        ));
    }
}
