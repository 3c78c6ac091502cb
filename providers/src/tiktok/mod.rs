//! [`TikTokProvider`]: direct messages to a TikTok Business Account, through TikTok's Business
//! Messaging API (`/open_api/v1.3/business/message/…`, header `Access-Token`) and its signed
//! webhooks. The platform facts this relies on, with their sources, are in this folder's
//! `FACTS.md`.
//!
//! | request on the webhook route | answer |
//! | --- | --- |
//! | no `TikTok-Signature` | 401, nothing delivered |
//! | a signature that does not match (HMAC-SHA256 with the app secret over `<t>.<body>`), or a `t` more than the tolerance (5 minutes) from now | 403, nothing delivered |
//! | a body that is not a TikTok event | 400, nothing delivered |
//! | an event the bot does not handle, another account's, an `im_send_msg` (the bot's own sends echoed) | 200 |
//! | accepted by the pipeline | 200 |
//! | otherwise (not started, rejected) | 503: TikTok redelivers (backing off, for up to 72 hours), and the runtime dedupes by `message_id` |
//!
//! | content | what TikTok gets (`recipient_type: "CONVERSATION"`, the chat as `recipient`) |
//! | --- | --- |
//! | text (up to 6000 characters) | `message_type: "TEXT"`, `text.body` |
//! | text with buttons, list | a text with numbered options (`1. Yes`); the answer comes back as a text |
//! | an image (bytes, a file, or a URL fetched through the SSRF-guarded client; JPG or PNG up to 3 MB) | uploaded (`message/media/upload/`), then `message_type: "IMAGE"`, `image.media_id`; a caption goes as a text after it |
//! | a quoted reply | `referenced_message_info.referenced_message_id` |
//! | other media, location, contacts | location and contacts as a readable text; other media `UnsupportedContent` |
//! | template, reaction | `UnsupportedContent` |
//!
//! | TikTok answer | class |
//! | --- | --- |
//! | `code: 0` | sent; the message id is `data.message.message_id` |
//! | `code` 40100 (rate limit), HTTP 429 | `RateLimited` (with `Retry-After` when given) |
//! | `code` 40104, 40105 (the access token missing, wrong, expired or revoked) | final `Api`, code `40105` named (a token to renew) |
//! | `code` 40064 (messaging restrictions: the 48-hour window or its 10-message quota) | `OutsideSessionWindow` (final) |
//! | `code` 5xxxx, HTTP 5xx, no connection, a lost answer | retryable `Api`, `Network`, `Ambiguous` |
//! | other codes (40001 permission, 40002 parameters, …), other HTTP 4xx | final `Api` |
//!
//! Media: the journaled reference is `{"media": "<conversation_id>|<message_id>|<media_id>"}`
//! (v1); a download asks TikTok for a download URL (`message/media/download/`) and fetches it
//! through the SSRF-guarded [`GuardedClient`], so it works as long as TikTok keeps the media.
//!
//! It does not renew access tokens, subscribe the webhook, or handle comments and lead ads.

mod config;
mod inbound;
mod signature;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{
    Button, ChatId, MediaKind, MediaRef, MediaSource, Outgoing, OutgoingContent, SentMessage,
};
use botmesh::provider::{Capabilities, ProviderError, ProviderEvent};
use serde_json::{Value, json};

pub use config::{DEFAULT_API_BASE, TikTokConfig, TikTokConfigError};
pub use signature::{SIGNATURE_HEADER, signature};

use crate::errors::unsupported_content;
use crate::gateway::outbound::{checked_text, numbered};
use crate::gateway::{RestConfig, message_of};
use crate::http::GuardedClient;
use crate::webhook::{Refused, SinkSlot, WebhookApi, WebhookProvider, WebhookRequest};

/// The provider's name, as media refs carry it.
pub const NAME: &str = "tiktok";

/// The longest text one message carries.
pub const TEXT_LIMIT: usize = 6000;

/// Room kept in a text for the numbered options of buttons or a list.
pub const OPTIONS_ROOM: usize = 400;

/// The largest image sent (TikTok takes JPG and PNG up to 3 MB).
pub const IMAGE_LIMIT: u64 = 3 * 1024 * 1024;

/// The largest media a download reads.
pub const MEDIA_LIMIT: u64 = 25 * 1024 * 1024;

/// A TikTok Business Account's direct messages. Cheap to clone.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::tiktok::{TikTokConfig, TikTokProvider};
/// use botmesh_providers::webhook::WebhookServer;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let tiktok = TikTokProvider::new(TikTokConfig::from_env()?)?;
/// let server = WebhookServer::new().mount(tiktok.webhook_routes()).bind("0.0.0.0:8080").await?;
/// Bot::builder(tiktok).build()?.run().await?;
/// server.shutdown().await;
/// # Ok(()) }
/// ```
pub type TikTokProvider = WebhookProvider<TikTok>;

/// The TikTok channel of a [`TikTokProvider`]: its settings and HTTP clients.
#[derive(Debug)]
pub struct TikTok {
    inner: Arc<Inner>,
}

type Inner = crate::gateway::Rest<TikTokConfig>;

impl WebhookProvider<TikTok> {
    /// A provider with these settings.
    pub fn new(config: TikTokConfig) -> Result<Self, ProviderError> {
        let inner = Inner::new(NAME, config)?;
        Ok(Self::with_api(TikTok { inner }))
    }
}

impl RestConfig for TikTokConfig {
    fn clients(&self) -> (Duration, Option<&GuardedClient>) {
        (self.request_timeout, self.media_client.as_ref())
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        let tolerance = i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX);
        let now = botmesh::clock::now_ms() / 1000;
        signature::check(&self.app_secret, tolerance, now, request)
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        inbound::parse(&request.body, &self.business_id)
    }
}

/// TikTok's answer `code` as a provider error (`Ok` for 0).
fn answer_code(body: &Value, what: &str, chat: &str) -> Result<(), ProviderError> {
    let Some(code) = body["code"].as_i64().filter(|c| *c != 0) else {
        return Ok(());
    };
    let api = |message: String, retryable| ProviderError::Api {
        provider: NAME.to_owned(),
        status: Some(200),
        code: Some(code.to_string()),
        message,
        retryable,
    };
    let words = message_of(body);
    Err(match code {
        40100 => ProviderError::RateLimited {
            provider: NAME.to_owned(),
            retry_after: None,
        },
        40104 | 40105 => api(
            format!("{what}: the access token was refused (missing, expired or revoked): {words}"),
            false,
        ),
        40064 => ProviderError::OutsideSessionWindow {
            provider: NAME.to_owned(),
            chat: chat.to_owned(),
        },
        c if c >= 50000 => api(format!("{what}: {words}"), true),
        _ => api(format!("{what}: {words}"), false),
    })
}

impl TikTok {
    /// POSTs `request` (built on `/open_api/v1.3/business/<path>/`) and checks the answer's
    /// `code`; the answer's `data`.
    async fn call(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
        acts: bool,
        chat: &str,
    ) -> Result<Value, ProviderError> {
        let request = request.header("Access-Token", &*self.inner.config.token);
        let answer = crate::gateway::call(NAME, what, acts, request, |_, _| None).await?;
        answer_code(&answer, what, chat)?;
        Ok(answer["data"].clone())
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}/open_api/v1.3/business/{path}/",
            self.inner.config.api_base
        )
    }

    /// Sends one message of `message_type` with its `payload` field.
    async fn send_one(
        &self,
        chat: &ChatId,
        outgoing: &Outgoing,
        payload: (&str, Value),
    ) -> Result<SentMessage, ProviderError> {
        let (kind, value) = payload;
        let field = kind.to_ascii_lowercase();
        let mut body = json!({"business_id": self.inner.config.business_id,
            "recipient_type": "CONVERSATION", "recipient": chat.as_str(), "message_type": kind});
        body[field] = value;
        if let Some(quoted) = &outgoing.reply_to {
            body["referenced_message_info"] = json!({"referenced_message_id": quoted.as_str()});
        }
        let request = self.inner.http.post(self.url("message/send")).json(&body);
        let data = self.call(request, "send", true, chat.as_str()).await?;
        Ok(SentMessage {
            message_id: data["message"]["message_id"]
                .as_str()
                .map(|id| botmesh::message::MessageId(id.to_owned())),
        })
    }

    /// Uploads an image; its `media_id`.
    async fn upload(&self, source: &MediaSource, chat: &str) -> Result<String, ProviderError> {
        let bytes = match source {
            MediaSource::Bytes { data, .. } => data.clone(),
            MediaSource::Path { path } => tokio::fs::read(path).await.map_err(|e| {
                unsupported_content(NAME, format!("the file {}: {e}", path.display()))
            })?,
            MediaSource::Url { url } => {
                crate::media::fetch(&self.inner.media, url, None, IMAGE_LIMIT, NAME).await?
            }
            _ => {
                return Err(unsupported_content(
                    NAME,
                    "a media token (send bytes, a path or a URL)",
                ));
            }
        };
        if bytes.len() as u64 > IMAGE_LIMIT {
            return Err(ProviderError::PayloadTooLarge {
                provider: NAME.to_owned(),
                size: bytes.len() as u64,
                limit: IMAGE_LIMIT,
            });
        }
        let form = reqwest::multipart::Form::new()
            .text("business_id", self.inner.config.business_id.clone())
            .text("media_type", "IMAGE")
            .part(
                "file",
                reqwest::multipart::Part::bytes(bytes).file_name("image"),
            );
        let request = self
            .inner
            .http
            .post(self.url("message/media/upload"))
            .multipart(form);
        let data = self.call(request, "media upload", false, chat).await?;
        data["media_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| crate::errors::local(NAME, "the upload answer has no media_id".into()))
    }
}

/// The text of `content`, when it is sent as one.
fn text_of(content: &OutgoingContent) -> Result<Option<String>, ProviderError> {
    Ok(Some(match content {
        OutgoingContent::Text { text, buttons } => {
            numbered(NAME, text, buttons, TEXT_LIMIT, OPTIONS_ROOM)?
        }
        OutgoingContent::List { text, sections, .. } => {
            let rows: Vec<Button> = sections.iter().flat_map(|s| s.rows.clone()).collect();
            numbered(NAME, text, &rows, TEXT_LIMIT, OPTIONS_ROOM)?
        }
        OutgoingContent::Location(l) => crate::gateway::outbound::location_text(l),
        OutgoingContent::Contacts(cards) => crate::gateway::outbound::contacts_text(NAME, cards)?,
        OutgoingContent::Media { .. } => return Ok(None),
        OutgoingContent::Template { .. } => return Err(unsupported_content(NAME, "templates")),
        OutgoingContent::Reaction(_) => return Err(unsupported_content(NAME, "reactions")),
    }))
}

#[async_trait]
impl WebhookApi for TikTok {
    const NAME: &'static str = NAME;
    const MEDIA_FIELD: &'static str = "media";

    fn capabilities(&self) -> Capabilities {
        crate::capabilities::rest(TEXT_LIMIT, Some(TEXT_LIMIT - OPTIONS_ROOM), false)
    }

    fn routes(&self, slot: &SinkSlot) -> Router {
        self.inner.routes(slot, &self.inner.config.path)
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        if let Some(text) = text_of(&outgoing.content)? {
            let text = checked_text(NAME, "a text", &text, TEXT_LIMIT)?;
            return self
                .send_one(chat, outgoing, ("TEXT", json!({ "body": text })))
                .await;
        }
        let OutgoingContent::Media {
            media_kind: MediaKind::Image,
            source,
            caption,
            ..
        } = &outgoing.content
        else {
            return Err(unsupported_content(NAME, "media other than an image"));
        };
        let caption = match caption.as_deref().filter(|c| !c.trim().is_empty()) {
            Some(c) => Some(checked_text(NAME, "a caption", c, TEXT_LIMIT)?),
            None => None,
        };
        let media_id = self.upload(source, chat.as_str()).await?;
        let sent = self
            .send_one(chat, outgoing, ("IMAGE", json!({ "media_id": media_id })))
            .await?;
        // TikTok's images carry no caption: it follows as a text. A failure there leaves the
        // image sent; retrying the whole send would send the image again, so it is logged.
        if let Some(caption) = caption {
            let text = ("TEXT", json!({ "body": caption }));
            if let Err(e) = self.send_one(chat, &Outgoing::from(""), text).await {
                tracing::warn!(error = %e, %chat, "tiktok: the caption after an image was not sent");
            }
        }
        Ok(sent)
    }

    fn media_token_ok(&self, token: &str) -> bool {
        inbound::media_parts(token).is_some()
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        let (conversation, message, media_id) = inbound::media_parts(&media.token)
            .ok_or_else(|| crate::errors::local(NAME, "not a TikTok media token".into()))?;
        let body = json!({"business_id": self.inner.config.business_id,
            "conversation_id": conversation, "message_id": message, "media_id": media_id,
            "media_type": "IMAGE"});
        let request = self
            .inner
            .http
            .post(self.url("message/media/download"))
            .json(&body);
        let data = self.call(request, "media download", false, "").await?;
        let url = data["download_url"].as_str().ok_or_else(|| {
            crate::errors::local(NAME, "the media answer has no download_url".into())
        })?;
        crate::media::fetch(&self.inner.media, url, None, MEDIA_LIMIT, NAME).await
    }
}
