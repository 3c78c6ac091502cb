//! [`GoHighLevelProvider`]: the conversations of a HighLevel (LeadConnector) location, through
//! its Conversations API (`POST /conversations/messages`) and the webhooks of a HighLevel
//! Marketplace app (`InboundMessage`). One provider is one location; the chat says the channel
//! (`SMS:<contactId>`, `WhatsApp:<contactId>`, …, see `inbound`). The platform facts this
//! relies on, with their sources, are in this folder's `FACTS.md`.
//!
//! | request on the webhook route | answer |
//! | --- | --- |
//! | no `X-GHL-Signature` (nor, with the legacy RSA key, `X-WH-Signature`) | 401, nothing delivered |
//! | a signature that does not verify with HighLevel's public key | 403, nothing delivered |
//! | a body that is not a HighLevel event | 400, nothing delivered |
//! | an event the bot does not handle, another location's, an `OutboundMessage` (the bot's own sends echoed) | 200 |
//! | accepted by the pipeline | 200 |
//! | otherwise (not started, rejected) | **429**: HighLevel redelivers a webhook only when answered 429 (six times, ten minutes apart); the runtime dedupes by `messageId` |
//!
//! | content | what HighLevel gets (`type` and `contactId` from the chat) |
//! | --- | --- |
//! | text (up to 1600 characters: an SMS's) | `message` |
//! | text with buttons, list | `message` with numbered options (`1. Yes`); the answer comes back as a text (HighLevel's channels have no buttons) |
//! | media by URL | `attachments: [url]`, the caption as `message` (bytes, paths and tokens: `UnsupportedContent`: HighLevel fetches attachments itself) |
//! | location, contacts | a readable `message` |
//! | a quoted reply | `replyMessageId` |
//! | template, reaction | `UnsupportedContent` |
//!
//! | HighLevel answer | class |
//! | --- | --- |
//! | 2xx | sent; the message id is `messageId` (GMB: the first of `messageIds`) |
//! | 401 (the token refused: expired, revoked, or not this location's) | final `Api`, code `unauthorized` (dead-lettered; a token to renew) |
//! | 403 (the token lacks `conversations/message.write`) | final `Api`, code `forbidden` |
//! | 429 (100 requests per 10 s per location, 200,000 a day) | `RateLimited` (with `Retry-After` when given) |
//! | 5xx, no connection, a lost answer | retryable `Api`, `Network`, `Ambiguous` |
//! | other 4xx (400 body, 404, 422) | final `Api` |
//!
//! Media: the journaled reference is `{"url": …}` (v1), taken back only for an `https` URL on
//! HighLevel's storage hosts (`storage.googleapis.com`, `firebasestorage.googleapis.com`,
//! `*.leadconnectorhq.com`, `*.msgsndr.com`, `*.gohighlevel.com`), the hosts of
//! `GHL_MEDIA_HOSTS`, or the API's origin; it is downloaded without credentials through the
//! SSRF-guarded [`GuardedClient`].
//!
//! It does not renew OAuth tokens (use a Private Integration token, or renew it outside),
//! install the app, subscribe the webhook events, or act as a custom conversation provider.

mod config;
mod inbound;
mod signature;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::http::StatusCode;
use botmesh::message::{
    Button, ChatId, MediaRef, MediaSource, MessageId, Outgoing, OutgoingContent, SentMessage,
};
use botmesh::provider::{Capabilities, ProviderError, ProviderEvent};
use serde_json::{Value, json};

pub use config::{
    DEFAULT_API_BASE, DEFAULT_API_VERSION, GoHighLevelConfig, GoHighLevelConfigError,
};
pub use signature::{ED25519_HEADER, RSA_HEADER, WebhookKey};

use crate::errors::unsupported_content;
use crate::gateway::outbound::{checked_text, location_text, numbered};
use crate::gateway::{RestConfig, message_of};
use crate::http::GuardedClient;
use crate::webhook::{Refused, SinkSlot, WebhookApi, WebhookProvider, WebhookRequest};

/// The provider's name, as media refs carry it.
pub const NAME: &str = "gohighlevel";

/// The longest `message` one send carries (an SMS's 1600 characters; the runtime splits a
/// longer text).
pub const TEXT_LIMIT: usize = 1600;

/// Room kept in a message for the numbered options of a text with buttons or a list.
pub const OPTIONS_ROOM: usize = 400;

/// The largest attachment a download reads.
pub const MEDIA_LIMIT: u64 = 25 * 1024 * 1024;

/// HighLevel's storage hosts (a leading `.`: the domain and its subdomains).
const MEDIA_HOSTS: [&str; 5] = [
    "storage.googleapis.com",
    "firebasestorage.googleapis.com",
    ".leadconnectorhq.com",
    ".msgsndr.com",
    ".gohighlevel.com",
];

/// A HighLevel location's conversations. Cheap to clone.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::gohighlevel::{GoHighLevelConfig, GoHighLevelProvider};
/// use botmesh_providers::webhook::WebhookServer;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let ghl = GoHighLevelProvider::new(GoHighLevelConfig::from_env()?)?;
/// let server = WebhookServer::new().mount(ghl.webhook_routes()).bind("0.0.0.0:8080").await?;
/// Bot::builder(ghl).build()?.run().await?;
/// server.shutdown().await;
/// # Ok(()) }
/// ```
pub type GoHighLevelProvider = WebhookProvider<GoHighLevel>;

/// The HighLevel channel of a [`GoHighLevelProvider`]: its settings and HTTP clients.
#[derive(Debug)]
pub struct GoHighLevel {
    inner: Arc<Inner>,
}

type Inner = crate::gateway::Rest<GoHighLevelConfig>;

impl WebhookProvider<GoHighLevel> {
    /// A provider with these settings.
    pub fn new(config: GoHighLevelConfig) -> Result<Self, ProviderError> {
        let inner = Inner::new(NAME, config)?;
        Ok(Self::with_api(GoHighLevel { inner }))
    }
}

impl RestConfig for GoHighLevelConfig {
    fn clients(&self) -> (Duration, Option<&GuardedClient>) {
        (self.request_timeout, self.media_client.as_ref())
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        signature::check(&self.keys, request)
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        inbound::parse(&request.body, &self.location_id)
    }

    /// HighLevel redelivers on a 429 only.
    fn retry_status(&self) -> StatusCode {
        StatusCode::TOO_MANY_REQUESTS
    }
}

impl Inner {
    /// Whether attachments at `url` may be journaled and downloaded.
    fn media_url_allowed(&self, url: &str) -> bool {
        let Ok(u) = url::Url::parse(url) else {
            return false;
        };
        let api = url::Url::parse(&self.config.api_base).map(|a| a.origin());
        if api.is_ok_and(|o| o == u.origin()) {
            return true;
        }
        let Some(host) = u.host_str().map(str::to_ascii_lowercase) else {
            return false;
        };
        let listed = |h: &str| match h.strip_prefix('.') {
            Some(domain) => host == domain || host.ends_with(h),
            None => host == h,
        };
        u.scheme() == "https"
            && (MEDIA_HOSTS.iter().any(|h| listed(h))
                || self.config.media_hosts.iter().any(|h| listed(h)))
    }
}

/// The `message` (and `attachments`) of `content`.
fn body_of(content: &OutgoingContent) -> Result<Value, ProviderError> {
    Ok(match content {
        OutgoingContent::Text { text, buttons } => {
            json!({"message": numbered(NAME, text, buttons, TEXT_LIMIT, OPTIONS_ROOM)?})
        }
        OutgoingContent::List { text, sections, .. } => {
            let rows: Vec<Button> = sections.iter().flat_map(|s| s.rows.clone()).collect();
            json!({"message": numbered(NAME, text, &rows, TEXT_LIMIT, OPTIONS_ROOM)?})
        }
        OutgoingContent::Media {
            source, caption, ..
        } => {
            let MediaSource::Url { url } = source else {
                return Err(unsupported_content(
                    NAME,
                    "media other than a public URL (HighLevel fetches attachments itself)",
                ));
            };
            let mut body = json!({"attachments": [url]});
            if let Some(c) = caption.as_deref().filter(|c| !c.is_empty()) {
                body["message"] = json!(checked_text(NAME, "a caption", c, TEXT_LIMIT)?);
            }
            body
        }
        OutgoingContent::Location(l) => json!({ "message": location_text(l) }),
        OutgoingContent::Contacts(cards) => {
            json!({"message": crate::gateway::outbound::contacts_text(NAME, cards)?})
        }
        OutgoingContent::Template { .. } => return Err(unsupported_content(NAME, "templates")),
        OutgoingContent::Reaction(_) => return Err(unsupported_content(NAME, "reactions")),
    })
}

/// HighLevel's own failures: a refused token is named.
fn specific(status: u16, body: &Value) -> Option<ProviderError> {
    let (code, what) = match status {
        401 => (
            "unauthorized",
            "the access token was refused (expired, revoked, or not this location's)",
        ),
        403 => (
            "forbidden",
            "the token may not send (scope conversations/message.write, or another location)",
        ),
        _ => return None,
    };
    Some(ProviderError::Api {
        provider: NAME.to_owned(),
        status: Some(status),
        code: Some(code.to_owned()),
        message: format!("send: {what}: {}", message_of(body)),
        retryable: false,
    })
}

#[async_trait]
impl WebhookApi for GoHighLevel {
    const NAME: &'static str = NAME;
    const MEDIA_FIELD: &'static str = "url";

    fn capabilities(&self) -> Capabilities {
        crate::capabilities::rest(TEXT_LIMIT, Some(TEXT_LIMIT - OPTIONS_ROOM), false)
    }

    fn routes(&self, slot: &SinkSlot) -> Router {
        self.inner.routes(slot, &self.inner.config.path)
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let (channel, contact) = chat
            .as_str()
            .split_once(':')
            .filter(|(t, c)| !c.is_empty() && inbound::send_type(t).is_some())
            .ok_or_else(|| {
                unsupported_content(NAME, format!("the chat {chat} (not <type>:<contactId>)"))
            })?;
        let mut body = body_of(&outgoing.content)?;
        body["type"] = json!(channel);
        body["contactId"] = json!(contact);
        if let Some(quoted) = &outgoing.reply_to {
            body["replyMessageId"] = json!(quoted.as_str());
        }
        let c = &self.inner.config;
        let request = self
            .inner
            .http
            .post(format!("{}/conversations/messages", c.api_base))
            .bearer_auth(&*c.token)
            .header("Version", &c.api_version)
            .header("Accept", "application/json")
            .json(&body);
        let answer = crate::gateway::call(NAME, "send", true, request, specific).await?;
        let id = answer["messageId"]
            .as_str()
            .or_else(|| answer["messageIds"][0].as_str());
        Ok(SentMessage {
            message_id: id.map(|id| MessageId(id.to_owned())),
        })
    }

    fn media_token_ok(&self, token: &str) -> bool {
        self.inner.media_url_allowed(token)
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        if !self.inner.media_url_allowed(&media.token) {
            return Err(crate::errors::local(
                NAME,
                "refusing to download an attachment off HighLevel's storage hosts".to_owned(),
            ));
        }
        crate::media::fetch(&self.inner.media, &media.token, None, MEDIA_LIMIT, NAME).await
    }
}
