//! Mailgun Routes' `forward()` posts on the shared webhook server.
//!
//! | request | answer |
//! | --- | --- |
//! | no `signature`, `timestamp` or `token` field | 401, nothing delivered |
//! | `signature` ≠ hex HMAC-SHA256 (key: the HTTP webhook signing key) of `timestamp` ‖ `token` | 403 |
//! | `timestamp` further than the tolerance (5 minutes) from now | 403 |
//! | a `token` already seen (a replayed request) | 403 |
//! | a mail the rules drop (auto-submitted, list, bounce) | 200, nothing delivered |
//! | accepted by the pipeline | 200 |
//! | not started, the store or the pipeline unavailable | 503: Mailgun retries (for 8 hours) |
//!
//! Mailgun posts a form (multipart when the mail has attachments): the parsed fields
//! (`message-headers`, `body-plain`, `stripped-text`, `attachment-N`), or with a route URL
//! ending in `mime` the whole mail in `body-mime`; both are read. The answer text is Mailgun's
//! `stripped-text` when given. Tokens are remembered in memory for the tolerance: a replay
//! after a restart within those minutes is let through the signature check, and then dropped as
//! a duplicate by the inbox (deduped by Message-ID, not by token: whether Mailgun's retries
//! reuse a token is not documented).

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::ParseApi;
use super::config::EmailConfig;
use super::form::{self, Form};
use super::inbound::{self, Mail};
use crate::webhook::{Refused, WebhookRequest, constant_time_eq};

/// The hex HMAC-SHA256 Mailgun signs a post with: `key` over `timestamp` followed by `token`.
///
/// ```
/// let sig = botmesh_providers::email::mailgun_signature("key-1", "1700000000", "tok");
/// assert_eq!(sig.len(), 64);
/// ```
pub fn mailgun_signature(signing_key: &str, timestamp: &str, token: &str) -> String {
    // HMAC takes keys of any length: this cannot fail; an empty signature never matches.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(signing_key.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(token.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Mailgun's part of its route: the signature check, with the tokens seen (and their
/// timestamps, in seconds), forgotten after the tolerance.
#[derive(Default)]
pub(super) struct Mailgun {
    seen: Mutex<HashMap<String, i64>>,
}

/// The mail of a Mailgun post.
fn mail_of(form: &Form) -> Result<Mail, String> {
    if let Some(raw) = form.value("body-mime") {
        return inbound::from_mime(raw.as_bytes()).map_err(|e| e.to_string());
    }
    let headers: Vec<(String, String)> = match form.value("message-headers") {
        Some(json) => serde_json::from_str(json)
            .map_err(|e| format!("message-headers is not a list of pairs: {e}"))?,
        None => Vec::new(),
    };
    let mut block = String::new();
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    for (n, v) in &headers {
        block.push_str(&format!("{n}: {}\r\n", v.replace(['\r', '\n'], " ")));
    }
    // The parsed fields, where the header list lacks them.
    for (field, header) in [
        ("Message-Id", "Message-Id"),
        ("In-Reply-To", "In-Reply-To"),
        ("References", "References"),
        ("from", "From"),
        ("subject", "Subject"),
    ] {
        if !has(header) {
            if let Some(v) = form.value(field) {
                block.push_str(&format!("{header}: {}\r\n", v.replace(['\r', '\n'], " ")));
            }
        }
    }
    let text = form.get("body-plain").unwrap_or_default().to_owned();
    let mut mail = inbound::from_parts(&block, text, form.files_named("attachment-"))
        .map_err(|e| e.to_string())?;
    mail.stripped = form.get("stripped-text").map(str::to_owned);
    Ok(mail)
}

impl ParseApi for Mailgun {
    fn verify(&self, config: &EmailConfig, request: &WebhookRequest) -> Result<(), Refused> {
        let form = form::of_request(request)?;
        let (Some(timestamp), Some(token), Some(signature)) = (
            form.value("timestamp"),
            form.value("token"),
            form.value("signature"),
        ) else {
            return Err(Refused::MissingSignature("signature"));
        };
        let Some(key) = config.mailgun_key.as_deref() else {
            return Err(Refused::BadSignature("signature"));
        };
        let expected = mailgun_signature(key, timestamp, token);
        if !constant_time_eq(expected.as_bytes(), signature.trim().as_bytes()) {
            return Err(Refused::BadSignature("signature"));
        }
        let tolerance = i64::try_from(config.mailgun_tolerance.as_secs()).unwrap_or(i64::MAX);
        let now = botmesh::clock::now_ms() / 1000;
        let Ok(ts) = timestamp.trim().parse::<i64>() else {
            return Err(Refused::BadSignature("timestamp"));
        };
        if now.abs_diff(ts) > tolerance.unsigned_abs() {
            return Err(Refused::BadSignature("timestamp (stale)"));
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|_, at| now.abs_diff(*at) <= tolerance.unsigned_abs());
        if seen.insert(token.to_owned(), ts).is_some() {
            return Err(Refused::BadSignature("token (replayed)"));
        }
        Ok(())
    }

    fn mail_of(form: &Form) -> Result<Mail, String> {
        mail_of(form)
    }
}
