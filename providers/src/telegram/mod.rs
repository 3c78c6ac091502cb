//! [`TelegramProvider`]: the Telegram Bot API over long polling or webhooks.
//!
//! Updates become events (`update` has the table), sends become Bot API calls (`send`
//! has the table), errors become the runtime's classes (`api` has the table). The two
//! transports keep the acknowledgement rule of the runtime:
//!
//! | transport | an update is confirmed to Telegram when | a crash before that |
//! | --- | --- | --- |
//! | long polling | the next `getUpdates` carries `offset` past it, sent only after `deliver` accepted it (an update the pipeline rejected is fetched again after a backoff) | Telegram returns it to the next `getUpdates` |
//! | webhook | the route answers 200, only after `deliver` accepted it | Telegram retries the POST |
//!
//! A webhook request whose `X-Telegram-Bot-Api-Secret-Token` is missing gets 401, a wrong one
//! 403, a body that is not an `Update` 400; nothing enters the pipeline.
//!
//! Media: the journaled reference is `{"file_id": …}` (v1); a download calls `getFile` and
//! fetches the file through the SSRF-guarded [`GuardedClient`] (at most 20 MB, the Bot API's
//! cap). A `file_id` only works with the token that received it.
//!
//! It does not split captions, convert Markdown, or manage several bots on one token.
//! `mentions_bot` is set for a command in a group (the bot's username is not looked up).

mod api;
mod config;
mod send;
mod transport;
mod update;
mod webhook;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::message::{
    ChatId, Interaction, MediaRef, MessageId, Outgoing, OutgoingContent, SentMessage,
};
use botmesh::provider::{Capabilities, EventSink, Provider, ProviderError, StoredMediaRef};
use serde_json::json;

pub use config::{DEFAULT_API_BASE, TelegramConfig, TelegramConfigError, TelegramMode};

use crate::errors::with_chat;
use crate::http::GuardedClient;
use crate::webhook::SinkSlot;
use api::{Api, CallError, Size};

/// The provider's name, as media refs carry it.
pub const NAME: &str = "telegram";

/// The largest file the Bot API lets a bot download.
pub const DOWNLOAD_LIMIT: u64 = 20 * 1024 * 1024;

/// A Telegram bot. Cheap to clone; clones share the transport.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::telegram::{TelegramConfig, TelegramProvider};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let telegram = TelegramProvider::new(TelegramConfig::from_env()?)?;
/// let bot = Bot::builder(telegram).build()?;
/// bot.command("start", |ctx: Ctx| async move {
///     ctx.reply_buttons("Continue?", [("yes", "Yes"), ("no", "No")]).await?;
///     Ok(())
/// });
/// bot.run().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TelegramProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: TelegramConfig,
    api: Api,
    media: GuardedClient,
    slot: SinkSlot,
    poller: Mutex<Option<transport::Poller>>,
}

impl std::fmt::Debug for TelegramProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

fn config_error(message: String) -> ProviderError {
    crate::errors::local(NAME, message)
}

impl TelegramProvider {
    /// A provider with these settings (no network call yet: `start` checks the token).
    pub fn new(config: TelegramConfig) -> Result<Self, ProviderError> {
        let api = Api::new(&config.api_base, &config.token, config.request_timeout)?;
        let media =
            crate::http::media_client(config.media_client.as_ref()).map_err(config_error)?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                api,
                media,
                slot: SinkSlot::default(),
                poller: Mutex::new(None),
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &TelegramConfig {
        &self.inner.config
    }

    /// The webhook route to mount on a [`crate::webhook::WebhookServer`] (webhook mode; in
    /// polling mode the route answers 404).
    pub fn webhook_routes(&self) -> axum::Router {
        webhook::routes(self.inner.clone())
    }

    async fn call_json(
        &self,
        chat: &ChatId,
        method: &str,
        body: &serde_json::Value,
        size: Size,
    ) -> Result<serde_json::Value, ProviderError> {
        let timeout = self.inner.config.request_timeout;
        match self
            .inner
            .api
            .call_timeout(method, body, timeout, size)
            .await
        {
            Err(CallError::Migrated(new_chat)) => {
                tracing::warn!(%chat, new_chat, "telegram group migrated to a supergroup; retrying once");
                let mut body = body.clone();
                body["chat_id"] = json!(new_chat);
                self.inner
                    .api
                    .call_timeout(method, &body, timeout, size)
                    .await
                    .map_err(|e| with_chat(e.into(), chat))
            }
            other => other.map_err(|e| with_chat(e.into(), chat)),
        }
    }

    async fn run(
        &self,
        chat: &ChatId,
        req: send::Request,
    ) -> Result<serde_json::Value, ProviderError> {
        match req {
            send::Request::Json { method, body, size } => {
                self.call_json(chat, method, &body, size).await
            }
            send::Request::Upload {
                method,
                fields,
                file_field,
                bytes,
                file_name,
                mime,
                size,
            } => {
                let mut form = reqwest::multipart::Form::new();
                if let Some(map) = fields.as_object() {
                    for (k, v) in map {
                        let text = match v {
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        form = form.text(k.clone(), text);
                    }
                }
                let mut part = reqwest::multipart::Part::bytes(bytes).file_name(file_name);
                if let Some(m) = mime {
                    part = part
                        .mime_str(&m)
                        .map_err(|_| config_error(format!("invalid MIME type {m:?}")))?;
                }
                form = form.part(file_field, part);
                self.inner
                    .api
                    .call_multipart(method, form, size)
                    .await
                    .map_err(|e| with_chat(e.into(), chat))
            }
        }
    }
}

fn message_id_of(result: &serde_json::Value) -> Option<MessageId> {
    result
        .get("message_id")
        .and_then(|v| v.as_i64())
        .map(|id| MessageId(id.to_string()))
}

/// Whether a token looks like a Telegram `file_id` (URL-safe base64).
fn plausible_file_id(token: &str) -> bool {
    (10..=512).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[async_trait]
impl Provider for TelegramProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities::interactive(send::TEXT_LIMIT, false)
    }

    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        // Checks the token before anything else: a 401 here is a configuration error.
        self.inner
            .api
            .call("getMe", &json!({}))
            .await
            .map_err(ProviderError::from)?;
        match &self.inner.config.mode {
            TelegramMode::Polling { timeout } => {
                // getUpdates refuses to run while a webhook is set; pending updates are kept.
                self.inner
                    .api
                    .call("deleteWebhook", &json!({ "drop_pending_updates": false }))
                    .await
                    .map_err(ProviderError::from)?;
                let poller = transport::Poller::spawn(self.inner.api.clone(), *timeout, sink);
                let old = self
                    .inner
                    .poller
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .replace(poller);
                if let Some(old) = old {
                    old.stop().await;
                }
            }
            TelegramMode::Webhook {
                secret_token, url, ..
            } => {
                if let Some(url) = url {
                    self.inner
                        .api
                        .call(
                            "setWebhook",
                            &json!({ "url": url, "secret_token": secret_token,
                                     "allowed_updates": ["message", "edited_message", "callback_query", "my_chat_member"] }),
                        )
                        .await
                        .map_err(ProviderError::from)?;
                }
                sink.transport_status(botmesh::provider::TransportStatus::Ready);
                self.inner.slot.set(Some(sink));
            }
        }
        Ok(())
    }

    async fn stop(&self) -> Result<(), ProviderError> {
        self.inner.slot.set(None);
        let poller = self
            .inner
            .poller
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(p) = poller {
            p.stop().await;
        }
        Ok(())
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let requests = send::requests(chat, outgoing).await?;
        let mut last = None;
        for req in requests {
            let result = self.run(chat, req).await?;
            last = message_id_of(&result).or(last);
        }
        Ok(SentMessage { message_id: last })
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        let OutgoingContent::Text { text, buttons } = content else {
            return Err(crate::errors::unsupported(NAME, "edit of non-text content"));
        };
        let id =
            message_id
                .as_str()
                .parse::<i64>()
                .map_err(|_| ProviderError::UnsupportedContent {
                    provider: NAME.to_owned(),
                    what: format!(
                        "edit of a non-Telegram message id {:?}",
                        message_id.as_str()
                    ),
                })?;
        if text.chars().count() > send::TEXT_LIMIT {
            return Err(ProviderError::PayloadTooLarge {
                provider: NAME.to_owned(),
                size: text.chars().count() as u64,
                limit: send::TEXT_LIMIT as u64,
            });
        }
        let mut body = json!({ "chat_id": send::chat_value(chat), "message_id": id, "text": text });
        if let Some(markup) = send::keyboard(buttons)? {
            body["reply_markup"] = markup;
        }
        match self.inner.api.call("editMessageText", &body).await {
            Ok(_) => Ok(()),
            Err(e) if api::is_not_modified(&e) => Ok(()),
            Err(e) => Err(with_chat(e.into(), chat)),
        }
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        let body = json!({ "chat_id": send::chat_value(chat), "action": "typing" });
        self.inner
            .api
            .call("sendChatAction", &body)
            .await
            .map(|_| ())
            .map_err(|e| with_chat(e.into(), chat))
    }

    async fn ack_interaction(
        &self,
        interaction: &Interaction,
        notice: Option<&str>,
    ) -> Result<(), ProviderError> {
        let mut body = json!({ "callback_query_id": interaction.id });
        if let Some(text) = notice.filter(|t| !t.is_empty()) {
            body["text"] = json!(text.chars().take(200).collect::<String>());
        }
        match self.inner.api.call("answerCallbackQuery", &body).await {
            Ok(_) => Ok(()),
            Err(e) if api::is_stale_query(&e) => {
                tracing::debug!(id = %interaction.id, "callback query too old to answer (replayed?)");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        crate::media::own(media, NAME)?;
        let file = self
            .inner
            .api
            .call("getFile", &json!({ "file_id": media.token }))
            .await
            .map_err(ProviderError::from)?;
        if let Some(size) = file.get("file_size").and_then(|s| s.as_u64())
            && size > DOWNLOAD_LIMIT
        {
            return Err(ProviderError::PayloadTooLarge {
                provider: NAME.to_owned(),
                size,
                limit: DOWNLOAD_LIMIT,
            });
        }
        let path = file
            .get("file_path")
            .and_then(|p| p.as_str())
            .ok_or_else(|| config_error("getFile returned no file_path".to_owned()))?;
        let url = self.inner.api.file_url(path);
        crate::media::fetch(&self.inner.media, &url, None, DOWNLOAD_LIMIT, NAME).await
    }

    fn serialize_media_ref(&self, media: &MediaRef) -> Option<StoredMediaRef> {
        crate::media::store(media, NAME, "file_id", plausible_file_id)
    }

    fn rehydrate_media_ref(&self, stored: &StoredMediaRef) -> Result<MediaRef, ProviderError> {
        crate::media::rehydrate(stored, NAME, "file_id", plausible_file_id)
    }
}

/// The delay between failed polls: 1 s doubling to 30 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.min(5)).min(Duration::from_secs(30))
}
