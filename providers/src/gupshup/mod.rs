//! [`GupshupProvider`]: WhatsApp through Gupshup (a Meta Business Solution Provider), its send
//! API and its callbacks in either format (`inbound` has the tables).
//!
//! Gupshup signs no callback, so the route takes a request only with the shared secret
//! ([`GupshupConfig::new`]): configure the callback URL as `https://<bot>/gupshup/<secret>`,
//! or send the header `X-Webhook-Secret: <secret>`; the `app` of a v2 callback must be the
//! configured app.
//!
//! | request on the callback route | answer |
//! | --- | --- |
//! | no secret in the path or the header | 401, nothing delivered |
//! | a wrong secret | 403, nothing delivered |
//! | a callback of another app (`app`, or `gs_app_id` when an app id is configured) | 403, nothing delivered |
//! | a body that is not a callback | 400, nothing delivered |
//! | an event the bot does not handle (`user-event`, …) | 200 |
//! | accepted by the pipeline | 200 |
//! | otherwise (not started, rejected) | 503: the runtime dedupes a redelivery by the WhatsApp message id |
//!
//! Sends go to `POST /wa/api/v1/msg` (form: `channel=whatsapp`, `source`, `src.name`,
//! `destination`, `message` as JSON; header `apikey`); the 2xx answer's `messageId` (the
//! Gupshup id) is the sent message's id, and the `message-event` statuses come back under it
//! (correlated by `gsId`).
//!
//! | content | `message` |
//! | --- | --- |
//! | text (up to 4096 characters) | `{"type": "text"}` |
//! | text with 1 to 3 buttons of titles up to 20 characters | `quick_reply` (text up to 1024), each button's id as its `postbackText` |
//! | text with more buttons, list | `list` (1 to 10 rows of titles up to 24 characters behind one global button) |
//! | media by URL | `image` (`originalUrl`, `previewUrl`), `video`, `audio`, `file`, `sticker`; bytes, paths and tokens are `UnsupportedContent` (Gupshup fetches media itself) |
//! | location | `location` |
//! | contacts | a readable text |
//! | reaction | `reaction` (`msgId`) |
//! | template | `POST /wa/api/v1/template/msg`, `template={"id": <name>, "params": […]}` |
//!
//! | Gupshup answer | class |
//! | --- | --- |
//! | 2xx with `status: "submitted"` | sent |
//! | 2xx with `status: "error"` | final `Api` |
//! | 4xx naming an invalid destination or an opted-out user | `RecipientUnreachable` |
//! | 429, 5xx, no connection, a lost answer | `RateLimited` (with `Retry-After`), retryable `Api`, `Network`, `Ambiguous` |
//! | other 4xx (401 key, 400 parameters) | final `Api` (dead-lettered) |
//!
//! Media: the journaled reference is `{"url": …}` (v1), a hosted `http(s)` URL; the download
//! sends no credential and goes through the SSRF-guarded [`GuardedClient`](crate::http::GuardedClient). Gupshup's media
//! URLs expire, so a late replay fails to download.
//!
//! It does not edit messages (WhatsApp through Gupshup cannot), show typing, manage templates
//! or apps, or keep the 24-hour window (Gupshup refuses a late session message with a
//! `failed` event).

mod config;
mod inbound;
mod outbound;

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{ChatId, MediaRef, MessageId, Outgoing, SentMessage};
use botmesh::provider::{Capabilities, ProviderError};
use serde_json::Value;

pub use config::{DEFAULT_API_BASE, GupshupConfig, GupshupConfigError};

use crate::gateway::{Gateway, GatewayConfig, GatewaySettings};
use crate::webhook::{Refused, SinkSlot, WebhookApi, WebhookProvider};

/// The provider's name, as media refs carry it.
pub const NAME: &str = "gupshup";

/// The longest text message.
pub const TEXT_LIMIT: usize = 4096;

/// The longest text of a message with buttons or a list, and of a caption.
pub const BUTTONS_TEXT_LIMIT: usize = 1024;

/// The most buttons a quick reply carries (more become a list).
pub const QUICK_REPLY_BUTTONS: usize = 3;

/// The longest quick-reply button title (a longer one makes the buttons a list).
pub const BUTTON_TITLE_LIMIT: usize = 20;

/// The longest list row title.
pub const LIST_ROW_LIMIT: usize = 24;

/// The largest media a download reads.
pub const MEDIA_LIMIT: u64 = 100 * 1024 * 1024;

/// A Gupshup app (one WhatsApp business number). Cheap to clone.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::gupshup::{GupshupConfig, GupshupProvider};
/// use botmesh_providers::webhook::WebhookServer;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let gupshup = GupshupProvider::new(GupshupConfig::from_env()?)?;
/// let server = WebhookServer::new().mount(gupshup.webhook_routes()).bind("0.0.0.0:8080").await?;
/// Bot::builder(gupshup).build()?.run().await?;
/// server.shutdown().await;
/// # Ok(()) }
/// ```
pub type GupshupProvider = WebhookProvider<Gupshup>;

/// The Gupshup channel of a [`GupshupProvider`]: its settings and HTTP clients.
#[derive(Debug)]
pub struct Gupshup {
    inner: Arc<Gateway<GupshupConfig>>,
}

impl GatewayConfig for GupshupConfig {
    fn settings(&self) -> &GatewaySettings {
        &self.gateway
    }

    fn parse(&self, body: &[u8]) -> Result<Vec<botmesh::provider::ProviderEvent>, Refused> {
        let app = inbound::App {
            name: &self.app_name,
            id: self.app_id.as_deref(),
        };
        inbound::parse(body, &app)
    }
}

/// Whether a media URL may be journaled and downloaded: an `http(s)` URL with a host.
fn plausible_url(url: &str) -> bool {
    url::Url::parse(url)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
}

impl WebhookProvider<Gupshup> {
    /// A provider with these settings.
    pub fn new(config: GupshupConfig) -> Result<Self, ProviderError> {
        Ok(Self::with_api(Gupshup {
            inner: Gateway::new(NAME, config)?,
        }))
    }
}

impl Gupshup {
    /// POSTs a send form to `tail`; the Gupshup id of the message.
    async fn post(
        &self,
        chat: &ChatId,
        tail: &str,
        (field, value): (&str, Value),
    ) -> Result<SentMessage, ProviderError> {
        let c = &self.inner.config;
        let form = [
            ("channel", "whatsapp".to_owned()),
            ("source", c.source.clone()),
            ("src.name", c.app_name.clone()),
            ("destination", chat.to_string()),
            (field, value.to_string()),
        ];
        let request = self
            .inner
            .http
            .post(self.inner.url(tail))
            .header("apikey", &*c.gateway.api_key)
            .form(&form);
        let body = crate::gateway::call(NAME, "send", true, request, |status, body| {
            outbound::specific(status, body, chat.as_str())
        })
        .await?;
        if body["status"].as_str() == Some("error") {
            return Err(ProviderError::Api {
                provider: NAME.to_owned(),
                status: None,
                code: None,
                message: format!("send: {}", crate::gateway::message_of(&body)),
                retryable: false,
            });
        }
        Ok(SentMessage {
            message_id: body["messageId"]
                .as_str()
                .map(|id| MessageId(id.to_owned())),
        })
    }
}

#[async_trait]
impl WebhookApi for Gupshup {
    const NAME: &'static str = NAME;
    const MEDIA_FIELD: &'static str = "url";

    fn capabilities(&self) -> Capabilities {
        Gateway::<GupshupConfig>::capabilities(TEXT_LIMIT, Some(BUTTONS_TEXT_LIMIT), false)
    }

    fn routes(&self, slot: &SinkSlot) -> Router {
        self.inner.routes(slot)
    }

    fn media_token_ok(&self, token: &str) -> bool {
        plausible_url(token)
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        match outbound::request(&outgoing.content)? {
            outbound::Request::Message(m) => {
                self.post(chat, "/wa/api/v1/msg", ("message", m)).await
            }
            outbound::Request::Template(t) => {
                self.post(chat, "/wa/api/v1/template/msg", ("template", t))
                    .await
            }
        }
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        if !plausible_url(&media.token) {
            return Err(crate::errors::unsupported_content(
                NAME,
                "a media ref that is not an http(s) URL",
            ));
        }
        crate::media::fetch(&self.inner.media, &media.token, None, MEDIA_LIMIT, NAME).await
    }
}
