//! The Bot API client: one call per method, the `{"ok":…}` envelope, and the mapping of
//! Telegram's errors onto [`ProviderError`] classes.
//!
//! | answer | class |
//! | --- | --- |
//! | 429, or any error with `parameters.retry_after` | `RateLimited { retry_after }` |
//! | 5xx, a connection that could not be opened | retryable (`Api { retryable: true }` / `Network`) |
//! | a send (`send*` but `sendChatAction`, `forwardMessage`, `copyMessage`) whose request may have reached Telegram: a timeout or a connection lost after it was written | `Ambiguous` (`crate::http::call_error`); another method: `Network` |
//! | 403 (blocked, deactivated, kicked), 400 "chat not found" / "user not found" | `RecipientUnreachable` |
//! | 413, 400 "… too long" / "too big" | `PayloadTooLarge` |
//! | 400 "wrong file identifier", "can't parse entities", "wrong type …", "failed to get HTTP URL content" | `UnsupportedContent` |
//! | any other 4xx (401 bad token, 409 webhook conflict, …) | final `Api` |
//!
//! `migrate_to_chat_id` is surfaced to the caller ([`CallError::Migrated`]), which retries
//! once with the new chat id. The request URL carries the token: it is never logged, and
//! errors keep only the method name.

use std::time::Duration;

use botmesh::provider::ProviderError;
use serde::Deserialize;
use serde_json::Value;

use super::NAME;

/// The Bot API envelope.
#[derive(Debug, Deserialize)]
struct Envelope {
    ok: bool,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error_code: Option<u16>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<ResponseParameters>,
}

#[derive(Debug, Deserialize)]
struct ResponseParameters {
    #[serde(default)]
    retry_after: Option<u64>,
    #[serde(default)]
    migrate_to_chat_id: Option<i64>,
}

/// A failed call.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The group became a supergroup with this id.
    Migrated(i64),
    /// Anything else, classified.
    Provider(ProviderError),
}

impl From<CallError> for ProviderError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Migrated(id) => ProviderError::Api {
                provider: NAME.to_owned(),
                status: Some(400),
                code: Some("migrate_to_chat_id".to_owned()),
                message: format!("the group moved to chat {id}"),
                retryable: false,
            },
            CallError::Provider(p) => p,
        }
    }
}

/// What a call's payload weighed, for `PayloadTooLarge`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Size {
    pub(crate) size: u64,
    pub(crate) limit: u64,
}

/// The Bot API at a base URL with a token.
#[derive(Clone)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
    timeout: Duration,
}

impl Api {
    pub(crate) fn new(base: &str, token: &str, timeout: Duration) -> Result<Self, ProviderError> {
        let http = crate::http::base_builder()
            .build()
            .map_err(|e| ProviderError::Api {
                provider: NAME.to_owned(),
                status: None,
                code: None,
                message: format!("cannot build the HTTP client: {}", e.without_url()),
                retryable: false,
            })?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            timeout,
        })
    }

    fn method_url(&self, method: &str) -> String {
        format!("{}/bot{}/{}", self.base, self.token, method)
    }

    /// The download URL of a `file_path` from `getFile` (carries the token: never log it).
    pub(crate) fn file_url(&self, file_path: &str) -> String {
        format!("{}/file/bot{}/{}", self.base, self.token, file_path)
    }

    /// Calls `method` with a JSON body.
    pub(crate) async fn call(&self, method: &str, body: &Value) -> Result<Value, CallError> {
        self.call_timeout(method, body, self.timeout, Size::default())
            .await
    }

    /// Calls `method` with a JSON body, a timeout and the payload size for error reports.
    pub(crate) async fn call_timeout(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
        size: Size,
    ) -> Result<Value, CallError> {
        let req = self
            .http
            .post(self.method_url(method))
            .timeout(timeout)
            .json(body);
        self.finish(method, req, size).await
    }

    /// Calls `method` with a multipart body (uploads).
    pub(crate) async fn call_multipart(
        &self,
        method: &str,
        form: reqwest::multipart::Form,
        size: Size,
    ) -> Result<Value, CallError> {
        let req = self
            .http
            .post(self.method_url(method))
            .timeout(self.timeout.max(Duration::from_secs(120)))
            .multipart(form);
        self.finish(method, req, size).await
    }

    async fn finish(
        &self,
        method: &str,
        req: reqwest::RequestBuilder,
        size: Size,
    ) -> Result<Value, CallError> {
        let resp = req.send().await.map_err(|e| network(method, e))?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| network(method, e))?;
        let envelope: Option<Envelope> = serde_json::from_slice(&bytes).ok();
        match envelope {
            Some(Envelope {
                ok: true,
                result: Some(result),
                ..
            }) => Ok(result),
            Some(env) => Err(classify(method, status, env, size)),
            None => Err(CallError::Provider(ProviderError::Api {
                provider: NAME.to_owned(),
                status: Some(status),
                code: None,
                message: format!("{method}: the answer is not a Bot API envelope"),
                retryable: status >= 500 || status == 429,
            })),
        }
    }
}

fn network(method: &str, e: reqwest::Error) -> CallError {
    CallError::Provider(crate::http::call_error(NAME, method, e, acts(method)))
}

/// Whether a call of `method` makes Telegram do something a second call would do again (a
/// message sent twice): its request lost after it was written is ambiguous. Reads, settings,
/// edits, typing and callback answers are harmless twice.
fn acts(method: &str) -> bool {
    (method.starts_with("send") && method != "sendChatAction")
        || matches!(method, "forwardMessage" | "copyMessage")
}

fn classify(method: &str, http_status: u16, env: Envelope, size: Size) -> CallError {
    let code = env.error_code.unwrap_or(http_status);
    let description = env.description.unwrap_or_default();
    let lower = description.to_ascii_lowercase();
    let params = env.parameters;
    if let Some(id) = params.as_ref().and_then(|p| p.migrate_to_chat_id) {
        return CallError::Migrated(id);
    }
    let retry_after = params.as_ref().and_then(|p| p.retry_after);
    let provider = NAME.to_owned();
    let err = if code == 429 || retry_after.is_some() {
        ProviderError::RateLimited {
            provider,
            retry_after: retry_after.map(Duration::from_secs),
        }
    } else if code == 403
        || (code == 400
            && (lower.contains("chat not found")
                || lower.contains("user not found")
                || lower.contains("peer_id_invalid")))
    {
        ProviderError::RecipientUnreachable {
            provider,
            chat: String::new(),
            reason: description,
        }
    } else if code == 413
        || (code == 400 && (lower.contains("too long") || lower.contains("too big")))
    {
        ProviderError::PayloadTooLarge {
            provider,
            size: size.size,
            limit: size.limit,
        }
    } else if code == 400
        && (lower.contains("wrong file identifier")
            || lower.contains("can't parse entities")
            || lower.contains("wrong type")
            || lower.contains("failed to get http url content")
            || lower.contains("wrong remote file"))
    {
        ProviderError::UnsupportedContent {
            provider,
            what: format!("{method}: {description}"),
        }
    } else {
        ProviderError::Api {
            provider,
            status: Some(http_status),
            code: Some(code.to_string()),
            message: format!("{method}: {description}"),
            retryable: code >= 500,
        }
    };
    CallError::Provider(err)
}

/// Whether an error is Telegram's "message is not modified" (an edit that changes nothing).
pub(crate) fn is_not_modified(err: &CallError) -> bool {
    matches!(err, CallError::Provider(ProviderError::Api { message, .. })
        if message.to_ascii_lowercase().contains("message is not modified"))
}

/// Whether an error says a callback query can no longer be answered (too old, or replayed).
pub(crate) fn is_stale_query(err: &CallError) -> bool {
    matches!(err, CallError::Provider(ProviderError::Api { message, .. })
        if { let m = message.to_ascii_lowercase(); m.contains("query is too old") || m.contains("query id is invalid") })
}
