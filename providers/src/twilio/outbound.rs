//! Twilio's answers to a create → [`ProviderError`] classes (the table is in the parent
//! module), and buttons rendered as numbered options.

use std::time::Duration;

use botmesh::message::{Button, ChatId};
use botmesh::provider::ProviderError;
use serde_json::Value;

use super::{NAME, TEXT_LIMIT, api_error};

pub(super) fn classify(
    status: u16,
    body: &Value,
    chat: &ChatId,
    retry_after: Option<Duration>,
    size: u64,
) -> ProviderError {
    let code = body["code"].as_i64();
    let message = body["message"]
        .as_str()
        .unwrap_or("unknown error")
        .to_owned();
    let provider = NAME.to_owned();
    match code {
        _ if status == 429 || code == Some(20429) => ProviderError::RateLimited {
            provider,
            retry_after,
        },
        _ if status >= 500 => api_error(Some(status), code, message, true),
        Some(21211 | 21214 | 21408 | 21610 | 21612 | 21614) => {
            ProviderError::RecipientUnreachable {
                provider,
                chat: chat.to_string(),
                reason: message,
            }
        }
        Some(63016) => ProviderError::OutsideSessionWindow {
            provider,
            chat: chat.to_string(),
        },
        Some(21617 | 21620) => ProviderError::PayloadTooLarge {
            provider,
            size,
            limit: if code == Some(21617) {
                TEXT_LIMIT as u64
            } else {
                5 * 1024 * 1024
            },
        },
        Some(21619 | 21623) => ProviderError::UnsupportedContent {
            provider,
            what: message,
        },
        _ => api_error(Some(status), code, message, false),
    }
}

/// The body text of buttons rendered as numbered options.
pub(super) fn with_options(text: &str, options: &[Button]) -> String {
    let mut out = text.to_owned();
    for (i, b) in options.iter().enumerate() {
        out.push_str(&format!("\n{}. {}", i + 1, b.title));
    }
    out
}
