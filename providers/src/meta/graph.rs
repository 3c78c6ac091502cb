//! [`GraphClient`]: calls to the Meta Graph API with the bearer token, and its answers as
//! typed errors. The classes are decided on the error body's `code` and `error_subcode`, as
//! Meta asks (not on the HTTP status): the channel's table first, then the shared rules of
//! the parent module.

use std::time::Duration;

use botmesh::message::ChatId;
use botmesh::provider::ProviderError;
use serde_json::Value;

use super::GraphSettings;
use crate::http::{Auth, GuardedClient};

/// What a channel's table says a Graph error code means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Slow down and retry.
    RateLimited,
    /// The chat's customer-service window closed: a free-form message cannot go out.
    OutsideWindow,
    /// The recipient cannot be reached (blocked, gone, not a user of the channel).
    Unreachable,
    /// The content cannot be carried.
    #[cfg_attr(
        not(feature = "whatsapp-cloud"),
        allow(dead_code, reason = "WhatsApp's table has the only such code")
    )]
    Unsupported,
    /// Retry with backoff.
    Retryable,
    /// Do not retry.
    Final,
}

/// A channel's table: the class of `(code, error_subcode, message)`, or `None` for the
/// shared rules.
pub(crate) type Table = fn(i64, Option<i64>, &str) -> Option<Class>;

/// The Graph API client of one channel. Cheap to clone.
#[derive(Clone)]
pub(crate) struct GraphClient {
    provider: &'static str,
    http: reqwest::Client,
    media: GuardedClient,
    api_base: String,
    api_version: String,
    token: String,
    table: Table,
    payload_limit: u64,
}

impl GraphClient {
    /// The client of `provider`, with its error `table`; `payload_limit` is what a 413 names.
    /// Refuses settings that would leave the webhook unauthenticated.
    pub(crate) fn new(
        provider: &'static str,
        settings: &GraphSettings,
        table: Table,
        payload_limit: u64,
    ) -> Result<Self, ProviderError> {
        settings.check_secrets(provider)?;
        let (http, media) =
            crate::http::channel_clients(settings.request_timeout, settings.media_client.as_ref())
                .map_err(|e| api_error(provider, None, e, false))?;
        Ok(Self {
            provider,
            http,
            media,
            api_base: settings.api_base.clone(),
            api_version: settings.api_version.clone(),
            token: settings.token.to_string(),
            table,
            payload_limit,
        })
    }

    /// The Graph's base URL.
    pub(crate) fn api_base(&self) -> &str {
        &self.api_base
    }

    /// A final or retryable `Api` error of this channel, without a status.
    pub(crate) fn error(&self, message: impl Into<String>, retryable: bool) -> ProviderError {
        api_error(self.provider, None, message.into(), retryable)
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/{}/{}", self.api_base, self.api_version, tail)
    }

    /// POSTs `body` to `/<version>/<tail>`; `acts`: the call sends a message (a request lost
    /// after it was written is then ambiguous). `chat` and the body's size go into the error.
    pub(crate) async fn post_json(
        &self,
        tail: &str,
        body: &Value,
        what: &str,
        acts: bool,
        chat: Option<&ChatId>,
    ) -> Result<Value, ProviderError> {
        let request = self.http.post(self.url(tail)).json(body);
        let size = body.to_string().len() as u64;
        self.call(request, what, acts, chat, size).await
    }

    /// POSTs a multipart form (an upload: not a send, safe to retry).
    pub(crate) async fn post_multipart(
        &self,
        tail: &str,
        form: reqwest::multipart::Form,
        what: &str,
    ) -> Result<Value, ProviderError> {
        let request = self.http.post(self.url(tail)).multipart(form);
        self.call(request, what, false, None, 0).await
    }

    /// GETs `/<version>/<tail>`.
    #[cfg_attr(
        not(feature = "whatsapp-cloud"),
        allow(dead_code, reason = "WhatsApp's media lookup is the only GET")
    )]
    pub(crate) async fn get_json(&self, tail: &str, what: &str) -> Result<Value, ProviderError> {
        self.call(self.http.get(self.url(tail)), what, false, None, 0)
            .await
    }

    async fn call(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
        acts: bool,
        chat: Option<&ChatId>,
        size: u64,
    ) -> Result<Value, ProviderError> {
        let resp = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| crate::http::call_error(self.provider, what, e, acts))?;
        let status = resp.status().as_u16();
        let retry_after = crate::http::retry_after(&resp);
        let answer: Value = resp.json().await.unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return Ok(answer);
        }
        Err(self.classify(status, &answer, chat, size, retry_after))
    }

    /// Downloads `url` through the SSRF-guarded client, at most `limit` bytes; with the bearer
    /// token when `bearer` (WhatsApp's CDN wants it; Messenger's signed URLs do not). The
    /// caller checked the URL with [`super::url_allowed`].
    pub(crate) async fn download(
        &self,
        url: &str,
        bearer: bool,
        limit: u64,
    ) -> Result<Vec<u8>, ProviderError> {
        let auth = bearer.then(|| Auth::Bearer(self.token.clone()));
        crate::media::fetch(&self.media, url, auth.as_ref(), limit, self.provider).await
    }

    /// A Graph error answer as this channel's [`ProviderError`].
    pub(crate) fn classify(
        &self,
        status: u16,
        body: &Value,
        chat: Option<&ChatId>,
        size: u64,
        retry_after: Option<Duration>,
    ) -> ProviderError {
        let err = &body["error"];
        let code = err["code"].as_i64();
        let subcode = err["error_subcode"].as_i64();
        let message = err["message"]
            .as_str()
            .unwrap_or("unknown error")
            .to_owned();
        let details = err["error_data"]["details"].as_str().unwrap_or_default();
        let provider = self.provider.to_owned();
        let chat = chat.map(ToString::to_string).unwrap_or_default();
        let class = code.and_then(|c| (self.table)(c, subcode, &message).or(shared(c)));
        match class {
            Some(Class::RateLimited) => ProviderError::RateLimited {
                provider,
                retry_after,
            },
            Some(Class::OutsideWindow) => ProviderError::OutsideSessionWindow { provider, chat },
            Some(Class::Unreachable) => ProviderError::RecipientUnreachable {
                provider,
                chat,
                reason: if details.is_empty() {
                    message
                } else {
                    details.to_owned()
                },
            },
            Some(Class::Unsupported) => ProviderError::UnsupportedContent {
                provider,
                what: message,
            },
            None if status == 413 => ProviderError::PayloadTooLarge {
                provider,
                size,
                limit: self.payload_limit,
            },
            None if status == 429 => ProviderError::RateLimited {
                provider,
                retry_after,
            },
            class => ProviderError::Api {
                provider,
                status: Some(status),
                code: code.map(|c| match subcode {
                    Some(s) => format!("{c}/{s}"),
                    None => c.to_string(),
                }),
                message,
                retryable: class == Some(Class::Retryable) || (class.is_none() && status >= 500),
            },
        }
    }
}

/// The rules every Meta channel shares.
fn shared(code: i64) -> Option<Class> {
    match code {
        1 | 2 => Some(Class::Retryable),
        4 => Some(Class::RateLimited),
        _ => None,
    }
}

fn api_error(
    provider: &str,
    status: Option<u16>,
    message: String,
    retryable: bool,
) -> ProviderError {
    ProviderError::Api {
        provider: provider.to_owned(),
        status,
        code: None,
        message,
        retryable,
    }
}
