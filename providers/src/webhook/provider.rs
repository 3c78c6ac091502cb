//! [`WebhookProvider`]: the provider of a channel that receives on webhook routes and sends
//! through an HTTP API. It owns the [`SinkSlot`] its routes deliver to, so starting, stopping,
//! mounting the routes and journaling media refs are written once; the channel, a
//! [`WebhookApi`], brings only what is its own: its name, capabilities, routes (built with
//! [`route`](super::route)), sends and media downloads.
//!
//! | [`Provider`] method | what [`WebhookProvider`] does |
//! | --- | --- |
//! | `start` | reports the transport ready and puts the sink in the slot: the routes deliver |
//! | `stop` | empties the slot: the routes answer 503 and the channel redelivers later |
//! | `send`, `edit`, `typing`, `mark_read` | the channel's ([`WebhookApi`]; `edit` is `Unsupported` unless the channel edits) |
//! | `download_media` | refuses another provider's ref, then the channel's download |
//! | `serialize_media_ref`, `rehydrate_media_ref` | `{"<MEDIA_FIELD>": token}` in version 1, only for tokens the channel finds plausible ([`WebhookApi::media_token_ok`]) |
//!
//! It does not acknowledge interactions (the webhook channels need not), poll, hold
//! connections, or retry (the runtime does).

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{ChatId, MediaRef, MessageId, Outgoing, OutgoingContent, SentMessage};
use botmesh::provider::{Capabilities, EventSink, Provider, ProviderError, StoredMediaRef};

use super::SinkSlot;

/// A channel's part of a [`WebhookProvider`]: what it is, its webhook routes, its sends and its
/// media.
#[async_trait]
pub trait WebhookApi: Send + Sync + 'static {
    /// The provider's name, as media refs carry it.
    const NAME: &'static str;

    /// The field a journaled media ref keeps its token in (`{"<field>": token}`).
    const MEDIA_FIELD: &'static str;

    /// What the channel can do.
    fn capabilities(&self) -> Capabilities;

    /// The channel's webhook routes, delivering to the sink in `slot` (each built with
    /// [`route`](super::route)).
    fn routes(&self, slot: &SinkSlot) -> Router;

    /// Sends a message ([`Provider::send`]).
    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError>;

    /// Edits a sent message ([`Provider::edit`]); `Unsupported` by default (most webhook
    /// channels cannot).
    async fn edit(
        &self,
        _chat: &ChatId,
        _message_id: &MessageId,
        _content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        Err(crate::errors::unsupported(Self::NAME, "edit"))
    }

    /// Shows a typing indicator; nothing by default.
    async fn typing(&self, _chat: &ChatId) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Marks a message read; nothing by default.
    async fn mark_read(&self, _chat: &ChatId, _id: &MessageId) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Whether `token` is a media token the channel journals and takes back (an id of its
    /// shape, a URL its credentials may go to).
    fn media_token_ok(&self, token: &str) -> bool;

    /// Downloads inbound media; `media` is the channel's own (checked before).
    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError>;
}

/// A webhook channel's provider: the channel `A` and the slot its routes deliver to. Cheap to
/// clone (clones share both).
pub struct WebhookProvider<A> {
    api: Arc<A>,
    slot: SinkSlot,
}

impl<A> Clone for WebhookProvider<A> {
    fn clone(&self) -> Self {
        Self {
            api: self.api.clone(),
            slot: self.slot.clone(),
        }
    }
}

impl<A: std::fmt::Debug> std::fmt::Debug for WebhookProvider<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.api.fmt(f)
    }
}

impl<A: WebhookApi> WebhookProvider<A> {
    /// The provider of `api` (not started: its routes answer 503 until `start`).
    pub fn with_api(api: A) -> Self {
        Self {
            api: Arc::new(api),
            slot: SinkSlot::default(),
        }
    }

    /// The channel.
    pub fn api(&self) -> &A {
        &self.api
    }

    /// The channel's webhook routes to mount on a [`WebhookServer`](super::WebhookServer).
    pub fn webhook_routes(&self) -> Router {
        self.api.routes(&self.slot)
    }
}

#[async_trait]
impl<A: WebhookApi> Provider for WebhookProvider<A> {
    fn name(&self) -> &str {
        A::NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.api.capabilities()
    }

    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        self.slot.start(sink);
        Ok(())
    }

    async fn stop(&self) -> Result<(), ProviderError> {
        self.slot.set(None);
        Ok(())
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        self.api.send(chat, outgoing).await
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        self.api.edit(chat, message_id, content).await
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        self.api.typing(chat).await
    }

    async fn mark_read(&self, chat: &ChatId, message_id: &MessageId) -> Result<(), ProviderError> {
        self.api.mark_read(chat, message_id).await
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        crate::media::own(media, A::NAME)?;
        self.api.download_media(media).await
    }

    fn serialize_media_ref(&self, media: &MediaRef) -> Option<StoredMediaRef> {
        crate::media::store(media, A::NAME, A::MEDIA_FIELD, |t| {
            self.api.media_token_ok(t)
        })
    }

    fn rehydrate_media_ref(&self, stored: &StoredMediaRef) -> Result<MediaRef, ProviderError> {
        crate::media::rehydrate(stored, A::NAME, A::MEDIA_FIELD, |t| {
            self.api.media_token_ok(t)
        })
    }
}
