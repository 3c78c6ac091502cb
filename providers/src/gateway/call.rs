//! One REST call to a gateway and the class of its failure (the table is in the parent
//! module).

use std::time::Duration;

use botmesh::provider::ProviderError;
use serde_json::Value;

/// Sends `request` (`what` names it in errors; `acts`: it sends a message) and returns the
/// body of a 2xx, as JSON (or as a JSON string when it is not JSON). A failure is classed by
/// `specific` first (the channel's own codes), then by the shared rules.
pub(crate) async fn call(
    provider: &str,
    what: &str,
    acts: bool,
    request: reqwest::RequestBuilder,
    specific: impl Fn(u16, &Value) -> Option<ProviderError>,
) -> Result<Value, ProviderError> {
    let resp = request
        .send()
        .await
        .map_err(|e| crate::http::call_error(provider, what, e, acts))?;
    let status = resp.status().as_u16();
    let retry_after = crate::http::retry_after(&resp);
    let text = resp
        .text()
        .await
        .map_err(|e| crate::http::call_error(provider, what, e, acts))?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if (200..300).contains(&status) {
        return Ok(body);
    }
    Err(specific(status, &body)
        .unwrap_or_else(|| classify(provider, what, status, &body, retry_after)))
}

/// The gateway's words in an error body: `message`, `error`, or Evolution's
/// `response.message` (a string or nested lists of strings).
pub(crate) fn message_of(body: &Value) -> String {
    fn flat(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|i| flat(i, out)),
            _ => {}
        }
    }
    let mut words = Vec::new();
    for at in [
        &body["response"]["message"],
        &body["message"],
        &body["error"],
        body,
    ] {
        flat(at, &mut words);
        if !words.is_empty() {
            break;
        }
    }
    let mut text = words.join("; ");
    if text.len() > 300 {
        let mut cut = 300;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    if text.is_empty() {
        "no details".to_owned()
    } else {
        text
    }
}

/// The shared rules: 429 rate limited, 5xx retryable, anything else final.
pub(crate) fn classify(
    provider: &str,
    what: &str,
    status: u16,
    body: &Value,
    retry_after: Option<Duration>,
) -> ProviderError {
    if status == 429 {
        return ProviderError::RateLimited {
            provider: provider.to_owned(),
            retry_after,
        };
    }
    ProviderError::Api {
        provider: provider.to_owned(),
        status: Some(status),
        code: None,
        message: format!("{what}: {}", message_of(body)),
        retryable: status >= 500,
    }
}
