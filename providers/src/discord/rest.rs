//! The REST client (`/api/v10`): bot authorization, Discord's `User-Agent`, the rate limits
//! kept before each request ([`Limiter`]) and the mapping of Discord's answers onto
//! [`ProviderError`] classes.
//!
//! | answer | class |
//! | --- | --- |
//! | 429 (`retry_after` in seconds with decimals; `global`) | `RateLimited { retry_after }`, recorded for the bucket or for every route |
//! | a spent bucket whose reset is further than [`MAX_WAIT`](super::ratelimit::MAX_WAIT) | `RateLimited { retry_after }` without a request |
//! | 5xx, code 130000 (overloaded), 20016 / 20028 (slowmode, channel write limit) | retryable `Api` |
//! | a message creation whose request may have reached Discord (a timeout, a connection lost after it was written) | `Ambiguous`; a resend carries the same `nonce`, which Discord answers with the first message |
//! | a connection that could not be opened | `Network` (retryable) |
//! | 50007 (cannot message the user), 10003 (unknown channel), 10013 (unknown user), 403 50001 (missing access) | `RecipientUnreachable` |
//! | 413, 40005 | `PayloadTooLarge` |
//! | 50006 (empty message), 50035 (invalid form body) | `UnsupportedContent` |
//! | 401 (bad token), 403, 10062 / 40060 (interaction expired / already acknowledged), any other 4xx | final `Api` |
//!
//! The token never appears in a log or an error; interaction tokens sit in paths, so errors
//! name the route with its ids replaced.

use std::time::Duration;

use botmesh::provider::ProviderError;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::NAME;
use super::ratelimit::{Limiter, RouteKey, seconds};
use crate::settings::Redacted;

/// Discord's required `User-Agent` form: `DiscordBot (<url>, <version>)`.
const USER_AGENT: &str = concat!(
    "DiscordBot (https://example.invalid/botmesh, ",
    env!("CARGO_PKG_VERSION"),
    ")"
);

/// One REST request.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub(crate) method: Method,
    /// The path under the API base (`/channels/1/messages`).
    pub(crate) path: String,
    /// Its rate-limit bucket.
    pub(crate) key: RouteKey,
    pub(crate) body: Option<&'a Value>,
    /// Sent with the bot token (interaction callbacks and webhook calls carry their own).
    pub(crate) auth: bool,
    /// The request makes Discord create something a second request would create again: its
    /// loss after it was written is ambiguous.
    pub(crate) acts: bool,
}

impl<'a> Call<'a> {
    /// A `GET` of `path`, counted against a route of its own (no major resource).
    pub(crate) fn get(path: &str) -> Self {
        Self::new(Method::GET, path.to_owned(), &format!("GET {path}"), "")
    }

    /// A call of `method` on `path`, counted against `route` for the resource `major`.
    pub(crate) fn new(method: Method, path: String, route: &str, major: &str) -> Self {
        Self {
            method,
            path,
            key: RouteKey {
                route: route.to_owned(),
                major: major.to_owned(),
                global: true,
            },
            body: None,
            auth: true,
            acts: false,
        }
    }

    pub(crate) fn json(mut self, body: &'a Value) -> Self {
        self.body = Some(body);
        self
    }

    /// An interaction call: the interaction token authorizes it, outside the global limit.
    pub(crate) fn interaction(mut self) -> Self {
        self.auth = false;
        self.key.global = false;
        self
    }

    pub(crate) fn acts(mut self) -> Self {
        self.acts = true;
        self
    }
}

/// The REST API at a base URL with a bot token.
#[derive(Debug)]
pub(crate) struct Rest {
    http: reqwest::Client,
    base: String,
    token: Redacted,
    limiter: Limiter,
}

impl Rest {
    pub(crate) fn new(base: &str, token: &str, timeout: Duration) -> Result<Self, ProviderError> {
        let http = crate::http::base_builder()
            .user_agent(USER_AGENT)
            .timeout(timeout)
            .build()
            .map_err(|e| super::config_error(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned().into(),
            limiter: Limiter::default(),
        })
    }

    /// Makes `call`; its JSON answer (`Null` for a 204).
    pub(crate) async fn call(&self, call: Call<'_>) -> Result<Value, ProviderError> {
        let what = call.key.route.clone();
        if let Err(wait) = self.limiter.acquire(&call.key).await {
            return Err(ProviderError::RateLimited {
                provider: NAME.to_owned(),
                retry_after: Some(wait),
            });
        }
        let mut req = self
            .http
            .request(call.method.clone(), format!("{}{}", self.base, call.path));
        if call.auth {
            req = req.header("authorization", format!("Bot {}", &*self.token));
        }
        if let Some(body) = call.body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| crate::http::call_error(NAME, &what, e, call.acts))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| crate::http::call_error(NAME, &what, e, call.acts))?;
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            self.limiter.update(&call.key, &headers);
            return Ok(body);
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            let retry_after = body
                .get("retry_after")
                .and_then(Value::as_f64)
                .and_then(|s| seconds(&s.to_string()))
                .or_else(|| {
                    headers
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(seconds)
                })
                .unwrap_or(Duration::from_secs(1));
            let global = body.get("global").and_then(Value::as_bool) == Some(true)
                || headers.contains_key("x-ratelimit-global");
            self.limiter.limited(&call.key, retry_after, global);
            tracing::warn!(route = %what, ?retry_after, global, "discord: rate limited");
            return Err(ProviderError::RateLimited {
                provider: NAME.to_owned(),
                retry_after: Some(retry_after),
            });
        }
        self.limiter.update(&call.key, &headers);
        Err(classify(&what, status.as_u16(), &body))
    }
}

/// A failed answer as the runtime's error (see the module table).
pub(crate) fn classify(what: &str, status: u16, body: &Value) -> ProviderError {
    let code = body.get("code").and_then(Value::as_u64).unwrap_or(0);
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let provider = NAME.to_owned();
    match (status, code) {
        (_, 50007 | 10003 | 10013) | (403, 50001) => ProviderError::RecipientUnreachable {
            provider,
            chat: String::new(),
            reason: format!("{code}: {message}"),
        },
        (413, _) | (_, 40005) => ProviderError::PayloadTooLarge {
            provider,
            size: 0,
            limit: 25 * 1024 * 1024,
        },
        (_, 50006 | 50035) => ProviderError::UnsupportedContent {
            provider,
            what: format!(
                "{what}: {code}: {message} {}",
                body.get("errors").unwrap_or(&Value::Null)
            ),
        },
        _ => ProviderError::Api {
            provider,
            status: Some(status),
            code: (code != 0).then(|| code.to_string()),
            message: format!("{what}: {message}"),
            retryable: status >= 500 || matches!(code, 130_000 | 20016 | 20028),
        },
    }
}

/// Whether an error says an interaction can no longer be answered (expired: 10062; already
/// answered: 40060).
pub(crate) fn is_spent_interaction(e: &ProviderError) -> bool {
    matches!(e, ProviderError::Api { code: Some(c), .. } if c == "10062" || c == "40060")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn discord_errors_get_their_classes() {
        use botmesh::provider::ErrorClass;
        let class =
            |status, body: Value| classify("POST /channels/{}/messages", status, &body).class();
        assert_eq!(class(502, json!({})), ErrorClass::Retryable);
        assert_eq!(
            class(
                500,
                json!({"code": 130000, "message": "API resource is currently overloaded."})
            ),
            ErrorClass::Retryable
        );
        assert_eq!(
            class(401, json!({"code": 0, "message": "401: Unauthorized"})),
            ErrorClass::Final
        );
        assert_eq!(
            class(
                403,
                json!({"code": 50013, "message": "Missing Permissions"})
            ),
            ErrorClass::Final
        );
        assert!(matches!(
            classify(
                "x",
                403,
                &json!({"code": 50007, "message": "Cannot send messages to this user"})
            ),
            ProviderError::RecipientUnreachable { .. }
        ));
        assert!(matches!(
            classify(
                "x",
                400,
                &json!({"code": 50035, "message": "Invalid Form Body", "errors": {}})
            ),
            ProviderError::UnsupportedContent { .. }
        ));
        assert!(is_spent_interaction(&classify(
            "x",
            404,
            &json!({"code": 10062, "message": "Unknown interaction"})
        )));
    }
}
