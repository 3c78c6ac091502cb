//! [`WhatsAppProvider`]: the WhatsApp Business Cloud API (Meta Graph) over the shared webhook
//! server.
//!
//! | request on the webhook route | answer |
//! | --- | --- |
//! | `GET ?hub.mode=subscribe&hub.verify_token=<ours>&hub.challenge=N` | 200, body `N` (plain text) |
//! | `GET` with another mode or token | 403 |
//! | `POST` without `X-Hub-Signature-256` | 401, nothing delivered |
//! | `POST` whose HMAC-SHA256 of the raw body (key: the app secret) differs | 403, nothing delivered |
//! | `POST` that is not a webhook envelope | 400, nothing delivered |
//! | `POST` whose every message and status the pipeline accepted | 200 |
//! | otherwise (not started, rejected) | 503: Meta retries (for days), the runtime dedupes by `wamid` |
//!
//! Sends go to `POST /<version>/<phone number id>/messages` (`outbound` has the tables of
//! bodies and error codes). The 24-hour customer-service window: the provider remembers when
//! each chat last wrote (in memory, at most [`WINDOW_CHATS`] chats: chats silent for more than
//! 24 h are pruned first); a free-form send to a chat known to be silent for more than 24 h
//! fails with `OutsideSessionWindow` without a call, as does Meta's error 131047; with a
//! [`WindowTemplate`] configured, such a send goes out as that template instead (the message's
//! text as its parameter). Templates are always allowed.
//!
//! The handshake, the signature check, the Graph client and its error classes, and the window
//! are the Meta core's ([`crate::meta`]), shared with Messenger and Instagram.
//!
//! Media: the journaled reference is `{"media_id": …}` (v1, digits only). A download asks the
//! Graph for the media's short-lived URL, fetches it through the SSRF-guarded
//! [`GuardedClient`](crate::http::GuardedClient) with the bearer token (Meta's CDN needs it),
//! and checks its `sha256`.
//! The token only ever goes to the Graph API's origin and to Meta's media hosts over `https`
//! (`*.fbsbx.com`, `*.fbcdn.net`, `*.whatsapp.net`, `*.facebook.com`): a media URL anywhere
//! else is refused without a request ([`media_url_allowed`]).
//! Inbound media ids expire after about 7 days (30 for uploads).
//!
//! It does not edit messages (the Cloud API cannot), show typing, manage templates, or route
//! several phone numbers (run one provider per number, on distinct paths).

mod config;
pub(crate) mod inbound;
mod outbound;

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{
    ChatId, MediaRef, MediaSource, MessageId, Outgoing, OutgoingContent, SentMessage,
};
use botmesh::provider::{Capabilities, ProviderError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use crate::meta::{DEFAULT_API_BASE, DEFAULT_API_VERSION, SESSION_WINDOW_MS, WINDOW_CHATS};
pub use config::{WhatsAppConfig, WhatsAppConfigError, WindowTemplate};

use crate::files::OutgoingMedia;
use crate::meta::MetaCore;
use crate::webhook::{SinkSlot, WebhookApi, WebhookProvider};
use outbound::MediaField;

/// The provider's name, as media refs carry it.
pub const NAME: &str = "whatsapp-cloud";

/// The largest media the provider downloads or uploads (documents; 100 MB).
pub const MEDIA_LIMIT: u64 = 100 * 1024 * 1024;

/// Meta's media hosts (and their subdomains), the only hosts besides the Graph API's origin
/// that receive the access token.
const META_MEDIA_HOSTS: [&str; 4] = ["fbsbx.com", "fbcdn.net", "whatsapp.net", "facebook.com"];

/// Whether the access token may be sent to `url`: the Graph API's origin (`api_base`), or an
/// `https` URL on one of Meta's media hosts.
pub fn media_url_allowed(api_base: &str, url: &str) -> bool {
    crate::meta::url_allowed(api_base, url, &META_MEDIA_HOSTS)
}

/// A WhatsApp Cloud API phone number ([`WhatsApp`] on the shared webhook provider). Cheap to
/// clone.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::webhook::WebhookServer;
/// use botmesh_providers::whatsapp::{WhatsAppConfig, WhatsAppProvider};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let whatsapp = WhatsAppProvider::new(WhatsAppConfig::from_env()?)?;
/// let server = WebhookServer::new().mount(whatsapp.webhook_routes()).bind("0.0.0.0:8080").await?;
/// let bot = Bot::builder(whatsapp).build()?;
/// bot.run().await?;
/// server.shutdown().await;
/// # Ok(()) }
/// ```
pub type WhatsAppProvider = WebhookProvider<WhatsApp>;

/// The WhatsApp Cloud API channel: its config, Graph client and session window.
pub struct WhatsApp {
    inner: MetaCore<WhatsAppConfig>,
}

impl std::fmt::Debug for WhatsApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl WebhookProvider<WhatsApp> {
    /// A provider with these settings.
    pub fn new(config: WhatsAppConfig) -> Result<Self, ProviderError> {
        let inner = MetaCore::new(NAME, config, outbound::table, MEDIA_LIMIT)?;
        Ok(Self::with_api(WhatsApp { inner }))
    }

    /// Records that `chat` wrote at `at_ms` (the webhook does it; tests and restores may too).
    pub fn note_inbound(&self, chat: &ChatId, at_ms: i64) {
        self.api().inner.window.note(chat, at_ms);
    }
}

impl WhatsApp {
    /// POSTs `body` to `/messages`; `acts`: it sends a message (not a read mark).
    async fn post_message(
        &self,
        chat: &ChatId,
        body: &Value,
        acts: bool,
    ) -> Result<Option<MessageId>, ProviderError> {
        let tail = format!("{}/messages", self.inner.config.phone_number_id);
        let answer = self
            .inner
            .graph
            .post_json(&tail, body, "send", acts, Some(chat))
            .await?;
        Ok(answer["messages"][0]["id"]
            .as_str()
            .map(|id| MessageId(id.to_owned())))
    }

    async fn upload(
        &self,
        bytes: Vec<u8>,
        file_name: String,
        mime: &str,
    ) -> Result<String, ProviderError> {
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(file_name)
            .mime_str(mime)
            .map_err(|_| ProviderError::UnsupportedContent {
                provider: NAME.to_owned(),
                what: format!("MIME type {mime:?}"),
            })?;
        let form = reqwest::multipart::Form::new()
            .text("messaging_product", "whatsapp")
            .text("type", mime.to_owned())
            .part("file", part);
        let tail = format!("{}/media", self.inner.config.phone_number_id);
        let answer = self
            .inner
            .graph
            .post_multipart(&tail, form, "media upload")
            .await?;
        match answer["id"].as_str() {
            Some(id) => Ok(id.to_owned()),
            None => Err(self
                .inner
                .graph
                .error("the upload returned no media id", false)),
        }
    }

    fn check_window(&self, chat: &ChatId, content: &OutgoingContent) -> Result<(), ProviderError> {
        if matches!(content, OutgoingContent::Template { .. }) || !self.inner.window.closed(chat) {
            return Ok(());
        }
        Err(ProviderError::OutsideSessionWindow {
            provider: NAME.to_owned(),
            chat: chat.to_string(),
        })
    }
}

fn default_mime(kind: botmesh::message::MediaKind) -> &'static str {
    use botmesh::message::MediaKind::*;
    match kind {
        Image => "image/jpeg",
        Document => "application/pdf",
        Audio | Voice => "audio/ogg",
        Video => "video/mp4",
        Sticker => "image/webp",
    }
}

fn upload_limit(kind: botmesh::message::MediaKind) -> u64 {
    use botmesh::message::MediaKind::*;
    match kind {
        Image => 5 * 1024 * 1024,
        Audio | Voice | Video => 16 * 1024 * 1024,
        Sticker => 500 * 1024,
        Document => MEDIA_LIMIT,
    }
}

fn plausible_media_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_digit())
}

#[async_trait]
impl WebhookApi for WhatsApp {
    const NAME: &'static str = NAME;
    const MEDIA_FIELD: &'static str = "media_id";

    fn capabilities(&self) -> Capabilities {
        let limits = (outbound::TEXT_LIMIT, Some(outbound::INTERACTIVE_BODY_LIMIT));
        Capabilities {
            mark_read: true,
            ..crate::capabilities::rest(limits.0, limits.1, false)
        }
    }

    fn routes(&self, slot: &SinkSlot) -> Router {
        self.inner.route(slot, inbound::Inbound)
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        match self.check_window(chat, &outgoing.content) {
            Err(e @ ProviderError::OutsideSessionWindow { .. }) => {
                return self.send_window_template(chat, outgoing, e).await;
            }
            other => other?,
        }
        match self.send_free_form(chat, outgoing).await {
            Err(e @ ProviderError::OutsideSessionWindow { .. }) => {
                self.send_window_template(chat, outgoing, e).await
            }
            other => other,
        }
    }

    async fn mark_read(&self, chat: &ChatId, message_id: &MessageId) -> Result<(), ProviderError> {
        let body = json!({ "messaging_product": "whatsapp", "status": "read", "message_id": message_id.as_str() });
        self.post_message(chat, &body, false).await.map(|_| ())
    }

    fn media_token_ok(&self, token: &str) -> bool {
        plausible_media_id(token)
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        if !plausible_media_id(&media.token) {
            return Err(self.inner.graph.error("not a WhatsApp media id", false));
        }
        let graph = &self.inner.graph;
        let info = graph.get_json(&media.token, "media lookup").await?;
        let url = info["url"]
            .as_str()
            .ok_or_else(|| graph.error("the media lookup returned no url", false))?;
        let size = info["file_size"]
            .as_u64()
            .or_else(|| info["file_size"].as_str().and_then(|s| s.parse().ok()));
        if !media_url_allowed(graph.api_base(), url) {
            let host = url::Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default();
            return Err(graph.error(
                format!(
                    "the media URL's host `{host}` is neither the Graph API nor a Meta media host: the access token is not sent there"
                ),
                false,
            ));
        }
        if let Some(size) = size.filter(|s| *s > MEDIA_LIMIT) {
            return Err(ProviderError::PayloadTooLarge {
                provider: NAME.to_owned(),
                size,
                limit: MEDIA_LIMIT,
            });
        }
        let bytes = graph.download(url, true, MEDIA_LIMIT).await?;
        if let Some(expected) = info["sha256"].as_str() {
            let actual = hex::encode(Sha256::digest(&bytes));
            if !actual.eq_ignore_ascii_case(expected) {
                return Err(graph.error("the media's sha256 does not match the Graph's", true));
            }
        }
        Ok(bytes)
    }
}

impl WhatsApp {
    /// Sends `outgoing` as it is (inside the window, as far as the provider knows).
    async fn send_free_form(
        &self,
        chat: &ChatId,
        outgoing: &Outgoing,
    ) -> Result<SentMessage, ProviderError> {
        let reply_to = outgoing.reply_to.as_ref();
        let bodies = match OutgoingMedia::of(&outgoing.content) {
            Some(media) => {
                let mut file_name = None;
                let field = match media.source {
                    MediaSource::Url { url } => MediaField::Link(url.clone()),
                    MediaSource::Token { token } => MediaField::Id(token.clone()),
                    local => {
                        let (data, name) = crate::files::read(local, NAME).await?;
                        file_name = name.clone();
                        self.upload_checked(media.kind, data, name, media.mime)
                            .await?
                    }
                };
                vec![outbound::media_body(
                    chat,
                    reply_to,
                    media.kind,
                    field,
                    media.caption,
                    file_name.as_deref(),
                )?]
            }
            None => outbound::bodies(chat, reply_to, &outgoing.content)?,
        };
        let mut last = None;
        for body in &bodies {
            last = self.post_message(chat, body, true).await?.or(last);
        }
        Ok(SentMessage { message_id: last })
    }

    /// A send outside the 24-hour window: the configured [`WindowTemplate`] with the message's
    /// text as its parameter, or `outside` (the typed error naming the window) without one.
    async fn send_window_template(
        &self,
        chat: &ChatId,
        outgoing: &Outgoing,
        outside: ProviderError,
    ) -> Result<SentMessage, ProviderError> {
        let Some(template) = &self.inner.config.window_template else {
            return Err(outside);
        };
        let text = outgoing.content.text();
        let content = OutgoingContent::Template {
            name: template.name.clone(),
            language: template.language.clone(),
            params: if text.is_empty() {
                Vec::new()
            } else {
                vec![text.to_owned()]
            },
        };
        tracing::debug!(chat = %chat, template = %template.name, "outside the 24-hour window: sent as the template");
        let mut last = None;
        for body in &outbound::bodies(chat, None, &content)? {
            last = self.post_message(chat, body, true).await?.or(last);
        }
        Ok(SentMessage { message_id: last })
    }

    async fn upload_checked(
        &self,
        kind: botmesh::message::MediaKind,
        data: Vec<u8>,
        name: Option<String>,
        mime: Option<&str>,
    ) -> Result<MediaField, ProviderError> {
        let limit = upload_limit(kind);
        if data.len() as u64 > limit {
            return Err(ProviderError::PayloadTooLarge {
                provider: NAME.to_owned(),
                size: data.len() as u64,
                limit,
            });
        }
        let mime = mime.unwrap_or(default_mime(kind));
        let name = name.unwrap_or_else(|| outbound::media_type(kind).to_owned());
        Ok(MediaField::Id(self.upload(data, name, mime).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_to_the_graph_and_meta_media_hosts_only() {
        let api = "https://graph.facebook.com";
        assert!(media_url_allowed(
            api,
            "https://mmg.whatsapp.net/d/f/abc.enc"
        ));
        assert!(!media_url_allowed(api, "https://cdninstagram.com/x"));
        // A local Graph (tests, a proxy): its own origin.
        assert!(media_url_allowed(
            "http://127.0.0.1:9000",
            "http://127.0.0.1:9000/media/1"
        ));
    }
}
