//! [`DiscordProvider`]: Discord bots over the gateway (messages) and the interactions
//! endpoint (slash commands, buttons, selects, modals), sending through the REST API.
//!
//! Messages arrive over the gateway (`gateway` has the lifecycle: Identify once, Resume with
//! `session_id` and the last accepted sequence after every drop, so Discord replays what was
//! missed; `inbound` has the shapes). Interactions arrive at the endpoint, signed with
//! Ed25519, and get the runtime's single automatic ack as their deferred answer within the
//! 3 seconds (`interactions` has the table); from the gateway when no endpoint is configured.
//!
//! Sends (`outbound` has the bodies) are `POST /channels/{id}/messages` carrying
//! `nonce` + `enforce_nonce` made from the send's outbox key
//! ([`current_send_nonce`](botmesh::provider::current_send_nonce)): a second attempt of the
//! same send inside Discord's window (a few minutes) returns the first message instead of
//! posting another. So the provider declares `resends_deduplicated`, and a send of unknown
//! outcome (a timeout, a crash mid-send) is sent again rather than skipped. The first send after
//! a deferred slash command completes its "thinking…" message through the interaction token.
//! REST calls keep Discord's per-route buckets and the global limit (`ratelimit`); errors get
//! the runtime's classes (`rest` has the table).
//!
//! Media: the journaled reference is `{"attachment": "<channel>/<message>/<attachment>"}`
//! (v1), never the signed CDN URL, which expires within a day; a download fetches the message
//! again for a fresh URL and reads it through the SSRF-guarded client (at most 25 MiB).
//!
//! It does not shard, register slash commands (do that once with
//! `PUT /applications/{id}/commands`), upload files, or follow up through the interaction
//! token after the first answer (follow-up webhooks take no nonce, so a resend would post
//! twice: later sends are channel messages). `docs/discord.md` says why it is a thin client
//! of its own rather than twilight or serenity.

mod config;
mod gateway;
mod inbound;
mod interactions;
mod outbound;
mod ratelimit;
mod rest;

use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use botmesh::message::{
    ChatId, Interaction, MediaRef, MessageId, Outgoing, OutgoingContent, SentMessage,
};
use botmesh::provider::{Capabilities, EventSink, Provider, ProviderError, StoredMediaRef};
use reqwest::Method;
use serde_json::Value;

pub use config::{
    DEFAULT_API_BASE, DEFAULT_INTENTS, DEFAULT_INTERACTIONS_PATH, DiscordConfig, DiscordConfigError,
};

use crate::errors::with_chat;
use crate::http::GuardedClient;
use crate::webhook::SinkSlot;
use rest::{Call, Rest};

/// The provider's name, as media refs carry it.
pub const NAME: &str = "discord";

/// The largest attachment a download reads (Discord's request limit).
pub const DOWNLOAD_LIMIT: u64 = 25 * 1024 * 1024;

fn config_error(message: String) -> ProviderError {
    crate::errors::local(NAME, message)
}

/// A Discord bot. Cheap to clone; clones share the connection.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::discord::{DiscordConfig, DiscordProvider};
/// use botmesh_providers::webhook::WebhookServer;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let discord = DiscordProvider::new(DiscordConfig::from_env()?)?;
/// // The interactions endpoint (with DISCORD_PUBLIC_KEY): the URL you give the Developer Portal.
/// let server = WebhookServer::new().mount(discord.interactions_routes()).bind("0.0.0.0:8080").await?;
/// let bot = Bot::builder(discord).build()?;
/// bot.command("ping", |ctx: Ctx| async move {
///     ctx.reply_buttons("pong", [("again", "Again")]).await?;
///     Ok(())
/// });
/// bot.run().await?;
/// # server.shutdown().await; Ok(()) }
/// ```
#[derive(Clone)]
pub struct DiscordProvider {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    config: DiscordConfig,
    rest: Rest,
    media: GuardedClient,
    slot: SinkSlot,
    interactions: interactions::Interactions,
    own_id: Mutex<Option<String>>,
    gateway: tokio::sync::Mutex<Option<gateway::Gateway>>,
    tls: OnceLock<Arc<rustls::ClientConfig>>,
}

impl Inner {
    fn own_id(&self) -> Option<String> {
        self.own_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_own_id(&self, id: Option<&str>) {
        if let Some(id) = id {
            *self.own_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.to_owned());
        }
    }

    /// `GET /gateway/bot`'s URL.
    async fn gateway_url(&self) -> Result<String, ProviderError> {
        let answer = self.rest.call(Call::get("/gateway/bot")).await?;
        answer["url"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| config_error("GET /gateway/bot returned no url".to_owned()))
    }

    /// The TLS configuration of the gateway's connection: rustls with the aws-lc-rs
    /// provider (as reqwest's) and the system's roots, nothing installed process-wide.
    fn tls(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        if let Some(tls) = self.tls.get() {
            return Ok(tls.clone());
        }
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            return Err("no TLS root certificates found on this system".to_owned());
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(self.tls.get_or_init(|| Arc::new(tls)).clone())
    }
}

impl std::fmt::Debug for DiscordProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// A snowflake: 1 to 20 digits.
fn snowflake(s: &str) -> bool {
    (1..=20).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

/// An attachment's media token: `<channel>/<message>/<attachment>`.
fn plausible_attachment(token: &str) -> bool {
    let parts: Vec<&str> = token.split('/').collect();
    parts.len() == 3 && parts.iter().all(|p| snowflake(p))
}

/// A chat id usable in a path (a channel snowflake).
fn channel_of(chat: &ChatId) -> Result<&str, ProviderError> {
    let id = chat.as_str();
    if snowflake(id) {
        Ok(id)
    } else {
        Err(ProviderError::RecipientUnreachable {
            provider: NAME.to_owned(),
            chat: id.to_owned(),
            reason: "not a Discord channel id".to_owned(),
        })
    }
}

fn message_id_of(answer: &Value) -> Option<MessageId> {
    answer["id"].as_str().map(|id| MessageId(id.to_owned()))
}

impl DiscordProvider {
    /// Makes `call` about `chat`, its answer unused (an unreachable recipient names `chat`).
    async fn call_for(&self, chat: &ChatId, call: Call<'_>) -> Result<(), ProviderError> {
        self.inner
            .rest
            .call(call)
            .await
            .map(drop)
            .map_err(|e| with_chat(e, chat))
    }

    /// A provider with these settings (no network call yet: `start` checks the token).
    pub fn new(config: DiscordConfig) -> Result<Self, ProviderError> {
        let rest = Rest::new(&config.api_base, &config.token, config.request_timeout)?;
        let media =
            crate::http::media_client(config.media_client.as_ref()).map_err(config_error)?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                rest,
                media,
                slot: SinkSlot::default(),
                interactions: interactions::Interactions::default(),
                own_id: Mutex::new(None),
                gateway: tokio::sync::Mutex::new(None),
                tls: OnceLock::new(),
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &DiscordConfig {
        &self.inner.config
    }

    /// The interactions endpoint to mount on a [`crate::webhook::WebhookServer`] (answers 404
    /// without a public key).
    pub fn interactions_routes(&self) -> axum::Router {
        interactions::routes(self.inner.clone(), &self.inner.config.interactions_path)
    }

    /// Creates a channel message (with the send's nonce).
    async fn create(&self, channel: &str, outgoing: &Outgoing) -> Result<Value, ProviderError> {
        let nonce = botmesh::provider::current_send_nonce();
        let body = outbound::create(outgoing, nonce.as_deref())?;
        let call = Call::new(
            Method::POST,
            format!("/channels/{channel}/messages"),
            "POST /channels/{}/messages",
            channel,
        )
        .json(&body)
        .acts();
        self.inner.rest.call(call).await
    }

    /// Completes a deferred command's "thinking…" message; `None` when there is none to
    /// complete (or its token stopped working).
    async fn complete_original(
        &self,
        channel: &str,
        outgoing: &Outgoing,
    ) -> Option<Result<Value, ProviderError>> {
        let original = self.inner.interactions.original(channel)?;
        let body = match outbound::fields(&outgoing.content) {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let call = Call::new(
            Method::PATCH,
            format!(
                "/webhooks/{}/{}/messages/@original",
                original.application_id, original.token
            ),
            "PATCH /webhooks/{}/{}/messages/@original",
            &original.token,
        )
        .json(&body)
        .interaction();
        match self.inner.rest.call(call).await {
            Ok(answer) => {
                self.inner.interactions.completed(channel);
                Some(Ok(answer))
            }
            Err(
                e @ ProviderError::Api {
                    status: Some(404), ..
                },
            )
            | Err(
                e @ ProviderError::Api {
                    status: Some(401), ..
                },
            ) => {
                tracing::debug!(error = %e, "interaction token no longer works: sending a message instead");
                self.inner.interactions.completed(channel);
                None
            }
            Err(e) => Some(Err(e)),
        }
    }
}

#[async_trait]
impl Provider for DiscordProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities::interactive(outbound::TEXT_LIMIT, true)
    }

    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        // Checks the token first: a 401 here is a configuration error.
        let me = self.inner.rest.call(Call::get("/users/@me")).await?;
        self.inner.set_own_id(me["id"].as_str());
        if self.inner.config.gateway {
            self.inner.slot.set(Some(sink.clone()));
            let gateway = gateway::Gateway::spawn(self.inner.clone(), sink);
            if let Some(old) = self.inner.gateway.lock().await.replace(gateway) {
                old.stop().await;
            }
        } else {
            self.inner.slot.start(sink);
        }
        Ok(())
    }

    async fn stop(&self) -> Result<(), ProviderError> {
        self.inner.slot.set(None);
        if let Some(gateway) = self.inner.gateway.lock().await.take() {
            gateway.stop().await;
        }
        Ok(())
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let channel = channel_of(chat)?;
        if let OutgoingContent::Reaction(r) = &outgoing.content {
            let emoji: String = url::form_urlencoded::byte_serialize(r.emoji.as_bytes()).collect();
            let message = r.message_id.as_str();
            let (method, route) = if r.emoji.is_empty() {
                return Err(ProviderError::UnsupportedContent {
                    provider: NAME.to_owned(),
                    what: "removing a reaction".to_owned(),
                });
            } else {
                (Method::PUT, "PUT /channels/{}/messages/{}/reactions/{}/@me")
            };
            let call = Call::new(
                method,
                format!("/channels/{channel}/messages/{message}/reactions/{emoji}/@me"),
                route,
                channel,
            );
            self.inner
                .rest
                .call(call)
                .await
                .map_err(|e| with_chat(e, chat))?;
            return Ok(SentMessage { message_id: None });
        }
        let answer = match self.complete_original(channel, outgoing).await {
            Some(done) => done,
            None => self.create(channel, outgoing).await,
        }
        .map_err(|e| with_chat(e, chat))?;
        Ok(SentMessage {
            message_id: message_id_of(&answer),
        })
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        let channel = channel_of(chat)?;
        let message = message_id.as_str();
        let body = outbound::fields(content)?;
        let call = Call::new(
            Method::PATCH,
            format!("/channels/{channel}/messages/{message}"),
            "PATCH /channels/{}/messages/{}",
            channel,
        )
        .json(&body);
        self.call_for(chat, call).await
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        let channel = channel_of(chat)?;
        let call = Call::new(
            Method::POST,
            format!("/channels/{channel}/typing"),
            "POST /channels/{}/typing",
            channel,
        );
        self.call_for(chat, call).await
    }

    async fn ack_interaction(
        &self,
        interaction: &Interaction,
        notice: Option<&str>,
    ) -> Result<(), ProviderError> {
        interactions::ack(&self.inner, &interaction.id, notice).await
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        crate::media::own(media, NAME)?;
        let mut ids = media.token.split('/');
        let (Some(channel), Some(message), Some(attachment), None) =
            (ids.next(), ids.next(), ids.next(), ids.next())
        else {
            return Err(config_error(format!(
                "not a Discord attachment: {:?}",
                media.token
            )));
        };
        // The signed CDN URLs expire: the message gives fresh ones.
        let call = Call::new(
            Method::GET,
            format!("/channels/{channel}/messages/{message}"),
            "GET /channels/{}/messages/{}",
            channel,
        );
        let answer = self.inner.rest.call(call).await?;
        let found = answer["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["id"].as_str() == Some(attachment));
        let Some(url) = found.and_then(|a| a["url"].as_str()) else {
            return Err(ProviderError::MediaUnavailable {
                reason: botmesh::provider::MediaUnavailableReason::Expired,
                message: format!("attachment {attachment} is no longer on message {message}"),
            });
        };
        crate::media::fetch(&self.inner.media, url, None, DOWNLOAD_LIMIT, NAME).await
    }

    fn serialize_media_ref(&self, media: &MediaRef) -> Option<StoredMediaRef> {
        crate::media::store(media, NAME, "attachment", plausible_attachment)
    }

    fn rehydrate_media_ref(&self, stored: &StoredMediaRef) -> Result<MediaRef, ProviderError> {
        crate::media::rehydrate(stored, NAME, "attachment", plausible_attachment)
    }
}
