//! [`WppConnectProvider`]: WhatsApp through a WPPConnect Server (a self-hosted WhatsApp-Web
//! gateway): its REST routes (`/api/<session>/…`, `Authorization: Bearer <token>`) and its
//! webhooks (`inbound` has the table of events).
//!
//! **WPPConnect signs no webhook**, so the route takes a request only with the shared secret:
//! set the session's webhook URL to `https://<bot>/wppconnect/<secret>` (or have a proxy add
//! the header `X-Webhook-Secret: <secret>`).
//!
//! | request on the webhook route | answer |
//! | --- | --- |
//! | no secret in the path or the header | 401, nothing delivered |
//! | a wrong secret | 403, nothing delivered |
//! | a webhook of another session | 403, nothing delivered |
//! | a body that is not a webhook | 400, nothing delivered |
//! | an event the bot does not handle, the bot's own messages, history | 200 |
//! | accepted by the pipeline | 200 |
//! | otherwise (not started, rejected) | 503 |
//!
//! WPPConnect posts each webhook once and never retries: a message that reaches the bot while
//! it is down, or is answered 503, is lost (the runtime dedupes what it does get twice). The
//! bot's restarts should be short, behind a proxy that holds or retries requests.
//!
//! | content | route |
//! | --- | --- |
//! | text (up to 4096 characters) | `send-message` (`options.quotedMsg` for a quoted reply) |
//! | text with buttons, list | `send-list-message` (rows with the button ids as `rowId`; not shown by every phone: accept the answer typed as text too) |
//! | media by URL, bytes or a local file | `send-image`, `send-file`, `send-voice`, `send-sticker` (`path`: the URL, or `base64` as a data URL) |
//! | location | `send-location` |
//! | contacts | a readable text |
//! | reaction | `react-message` |
//! | template | `UnsupportedContent` |
//!
//! Edits of texts go to `edit-message`.
//!
//! | WPPConnect answer | class |
//! | --- | --- |
//! | 2xx | sent; the message id is the serialized `id` (`true_<chat>_<id>`) |
//! | 404 with `status: "Disconnected"` (the session is not connected) | `NotConnected` (retryable) |
//! | 429, 5xx, no connection, a lost answer | `RateLimited` (with `Retry-After`), retryable `Api`, `Network`, `Ambiguous` |
//! | other 4xx (401 token, 400 body) | final `Api` (dead-lettered) |
//!
//! Media: the journaled reference is `{"message_id": …}` (v1), the serialized message id; a
//! download asks the server (`GET /api/<session>/get-media-by-message/<id>`). An embedded
//! base64 `body` is never journaled.
//!
//! It does not start sessions, show QR codes, or generate tokens (WPPConnect's own routes).

mod config;
mod inbound;
mod outbound;

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{ChatId, MediaRef, MessageId, Outgoing, OutgoingContent, SentMessage};
use botmesh::provider::{Capabilities, ProviderError};
use serde_json::{Value, json};

pub use config::{WppConnectConfig, WppConnectConfigError};

use crate::gateway::Gateway;
use crate::gateway::web::WebConfig;
use crate::webhook::{SinkSlot, WebhookApi, WebhookProvider};

/// The provider's name, as media refs carry it.
pub const NAME: &str = "wppconnect";

/// The longest text one message carries.
pub const TEXT_LIMIT: usize = 4096;

/// The largest local file or in-memory media sent (base64 in a JSON body).
pub const MEDIA_LIMIT: u64 = 16 * 1024 * 1024;

/// A serialized wa-js message id: `true_` or `false_`, the chat, `_`, the WhatsApp id (letters,
/// digits, `@ . _ -`; 200 characters at most).
fn plausible_message_id(id: &str) -> bool {
    (id.starts_with("true_") || id.starts_with("false_"))
        && id.len() <= 200
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'@' | b'.' | b'_' | b'-'))
}

/// A WPPConnect Server session (one WhatsApp number). Cheap to clone.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::wppconnect::{WppConnectConfig, WppConnectProvider};
/// use botmesh_providers::webhook::WebhookServer;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let wpp = WppConnectProvider::new(WppConnectConfig::from_env()?)?;
/// let server = WebhookServer::new().mount(wpp.webhook_routes()).bind("0.0.0.0:8080").await?;
/// Bot::builder(wpp).build()?.run().await?;
/// server.shutdown().await;
/// # Ok(()) }
/// ```
pub type WppConnectProvider = WebhookProvider<WppConnect>;

/// The WPPConnect channel of a [`WppConnectProvider`]: its settings and HTTP clients.
#[derive(Debug)]
pub struct WppConnect {
    inner: Arc<Gateway<WebConfig>>,
}

impl WebhookProvider<WppConnect> {
    /// A provider with these settings.
    pub fn new(config: WppConnectConfig) -> Result<Self, ProviderError> {
        let inner = crate::gateway::web::gateway(NAME, config.0, &inbound::WEBHOOK)?;
        Ok(Self::with_api(WppConnect { inner }))
    }
}

impl WppConnect {
    /// Calls `/api/<session>/<route>` (a POST with `body`, or a GET).
    async fn call(
        &self,
        route: &str,
        body: Option<&Value>,
        what: &str,
        acts: bool,
    ) -> Result<Value, ProviderError> {
        let c = &self.inner.config.settings;
        let url = self.inner.url(&format!("/api/{}/{route}", c.scope));
        let request = match body {
            Some(b) => self.inner.http.post(url).json(b),
            None => self.inner.http.get(url),
        }
        .bearer_auth(&*c.gateway.api_key);
        crate::gateway::call(NAME, what, acts, request, outbound::specific).await
    }
}

/// The sent message's serialized id: `response[0].id`, or `response.id`.
fn sent_id(answer: &Value) -> Option<MessageId> {
    let r = &answer["response"];
    let first = r.as_array().and_then(|a| a.first()).unwrap_or(r);
    first["id"]
        .as_str()
        .or_else(|| first["id"]["_serialized"].as_str())
        .map(|id| MessageId(id.to_owned()))
}

#[async_trait]
impl WebhookApi for WppConnect {
    const NAME: &'static str = NAME;
    const MEDIA_FIELD: &'static str = "message_id";

    fn capabilities(&self) -> Capabilities {
        Gateway::<WebConfig>::capabilities(TEXT_LIMIT, None, true)
    }

    fn routes(&self, slot: &SinkSlot) -> Router {
        self.inner.routes(slot)
    }

    fn media_token_ok(&self, token: &str) -> bool {
        plausible_message_id(token)
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let (route, body) = outbound::request(chat.as_str(), outgoing).await?;
        let answer = self.call(route, Some(&body), "send", true).await?;
        Ok(SentMessage {
            message_id: sent_id(&answer),
        })
    }

    async fn edit(
        &self,
        _chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        let text = crate::gateway::edit_text(NAME, content)?;
        let body = json!({"id": message_id.as_str(), "newText": text});
        self.call("edit-message", Some(&body), "edit", false)
            .await
            .map(drop)
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        if !plausible_message_id(&media.token) {
            return Err(crate::errors::unsupported_content(
                NAME,
                "a media ref that is not a message id",
            ));
        }
        let route = format!("get-media-by-message/{}", media.token);
        let answer = self.call(&route, None, "media download", false).await?;
        crate::gateway::web::media_bytes(NAME, &answer)
    }
}
