//! [`EvolutionProvider`]: WhatsApp through an Evolution API v2 server (a self-hosted
//! WhatsApp-Web gateway): its REST routes (`/<group>/<action>/<instance>`, header `apikey`)
//! and its webhooks (`inbound` has the table of events).
//!
//! **Evolution signs no webhook** (its optional JWT is not used here), so the route takes a
//! request only with the shared secret: put `"headers": {"x-webhook-secret": "<secret>"}` in
//! the instance's `webhook` settings, or set its URL to `https://<bot>/evolution/<secret>`
//! (with `byEvents`, Evolution appends the event's name after it, which is accepted). The
//! webhook body carries the instance's API key: it is never logged and never journaled.
//!
//! | request on the webhook route | answer |
//! | --- | --- |
//! | no secret in the header or the path | 401, nothing delivered |
//! | a wrong secret | 403, nothing delivered |
//! | a webhook of another instance | 403, nothing delivered |
//! | a body that is not a webhook | 400, nothing delivered |
//! | an event the bot does not handle, the bot's own messages, history | 200 |
//! | accepted by the pipeline | 200 |
//! | otherwise (not started, rejected) | 503: Evolution retries (10 times, up to 5 minutes apart, in memory), and the runtime dedupes by the message key |
//!
//! Evolution itself drops repeats of a message key only for 5 minutes; the runtime's journal
//! dedupes for as long as it keeps the chat's inbox.
//!
//! | content | route |
//! | --- | --- |
//! | text (up to 4096 characters) | `sendText` |
//! | text with 1 to 3 buttons | `sendButtons` (`reply` buttons, the button id as `id`) |
//! | text with more buttons, list | `sendList` |
//! | media by URL, bytes or a local file | `sendMedia` (`media`: the URL, or the bytes as base64), voice `sendWhatsAppAudio`, sticker `sendSticker` |
//! | location, contacts, reaction | `sendLocation`, `sendContact`, `sendReaction` |
//! | template | `UnsupportedContent` |
//! | a quoted reply | `quoted.key.id` |
//!
//! Buttons and lists over the Baileys engine are not shown by every phone (WhatsApp restricts
//! them): a bot that must work everywhere also accepts the answer typed as text (the shop
//! does). Edits of texts go to `/chat/updateMessage`.
//!
//! | Evolution answer | class |
//! | --- | --- |
//! | 2xx | sent; the message id is `key.id` |
//! | 400 naming a number with `exists: false` | `RecipientUnreachable` |
//! | 429, 5xx, no connection, a lost answer | `RateLimited` (with `Retry-After`), retryable `Api`, `Network`, `Ambiguous` |
//! | other 4xx (401 key, 404 instance, 400 body) | final `Api` (dead-lettered) |
//!
//! Media: the journaled reference is `{"key_id": …}` (v1), the message key's id; a download
//! asks the server for the media (`POST /chat/getBase64FromMediaMessage/<instance>`), so it
//! works as long as the server keeps the message. An embedded `base64` is never journaled.
//!
//! It does not create or pair instances (QR codes are Evolution's), set the webhook, or use
//! Evolution's integrations (Chatwoot, Typebot).

mod config;
mod inbound;
mod outbound;

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{ChatId, MediaRef, MessageId, Outgoing, OutgoingContent, SentMessage};
use botmesh::provider::{Capabilities, ProviderError};
use serde_json::{Value, json};

pub use config::{EvolutionConfig, EvolutionConfigError};

use crate::gateway::Gateway;
use crate::gateway::web::{WebConfig, plausible_message_id};
use crate::webhook::{SinkSlot, WebhookApi, WebhookProvider};

/// The provider's name, as media refs carry it.
pub const NAME: &str = "evolution";

/// The longest text one message carries.
pub const TEXT_LIMIT: usize = 4096;

/// The most buttons sent as buttons (more become a list).
pub const BUTTONS: usize = 3;

/// The largest local file or in-memory media sent (base64 in a JSON body).
pub const MEDIA_LIMIT: u64 = 16 * 1024 * 1024;

/// An Evolution API instance (one WhatsApp number). Cheap to clone.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::evolution::{EvolutionConfig, EvolutionProvider};
/// use botmesh_providers::webhook::WebhookServer;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let evolution = EvolutionProvider::new(EvolutionConfig::from_env()?)?;
/// let server = WebhookServer::new().mount(evolution.webhook_routes()).bind("0.0.0.0:8080").await?;
/// Bot::builder(evolution).build()?.run().await?;
/// server.shutdown().await;
/// # Ok(()) }
/// ```
pub type EvolutionProvider = WebhookProvider<Evolution>;

/// The Evolution API channel of a [`EvolutionProvider`]: its settings and HTTP clients.
#[derive(Debug)]
pub struct Evolution {
    inner: Arc<Gateway<WebConfig>>,
}

impl WebhookProvider<Evolution> {
    /// A provider with these settings.
    pub fn new(config: EvolutionConfig) -> Result<Self, ProviderError> {
        let inner = crate::gateway::web::gateway(NAME, config.0, &inbound::WEBHOOK)?;
        Ok(Self::with_api(Evolution { inner }))
    }
}

impl Evolution {
    /// POSTs `body` to `/<group>/<action>/<instance>`.
    async fn post(
        &self,
        route: &str,
        body: &Value,
        what: &str,
        acts: bool,
        chat: &str,
    ) -> Result<Value, ProviderError> {
        let c = &self.inner.config.settings;
        let request = self
            .inner
            .http
            .post(self.inner.url(&format!("/{route}/{}", c.scope)))
            .header("apikey", &*c.gateway.api_key)
            .json(body);
        crate::gateway::call(NAME, what, acts, request, |status, body| {
            outbound::specific(status, body, chat)
        })
        .await
    }
}

#[async_trait]
impl WebhookApi for Evolution {
    const NAME: &'static str = NAME;
    const MEDIA_FIELD: &'static str = "key_id";

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
        let answer = self
            .post(
                &format!("message/{route}"),
                &body,
                "send",
                true,
                chat.as_str(),
            )
            .await?;
        Ok(SentMessage {
            message_id: answer["key"]["id"]
                .as_str()
                .map(|id| MessageId(id.to_owned())),
        })
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        let text = crate::gateway::edit_text(NAME, content)?;
        let body = json!({"number": chat.as_str(), "text": text,
            "key": {"remoteJid": chat.as_str(), "fromMe": true, "id": message_id.as_str()}});
        self.post("chat/updateMessage", &body, "edit", false, chat.as_str())
            .await
            .map(drop)
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        let body = json!({"message": {"key": {"id": media.token}}, "convertToMp4": false});
        let answer = self
            .post(
                "chat/getBase64FromMediaMessage",
                &body,
                "media download",
                false,
                "",
            )
            .await?;
        crate::gateway::web::media_bytes(NAME, &answer)
    }
}
