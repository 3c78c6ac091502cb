//! [`CrashableProvider`]: a provider that "dies" with its process when a crashable journal
//! ([`botmesh_durability::testing::crash::crashable`]) crashed: from then on nothing reaches
//! the channel (sends, edits, typing and acks fail as if the process were gone), so a test can
//! abandon the crashed bot and start a new one on the same backend, as after a real crash.

use std::sync::Arc;

use async_trait::async_trait;
use botmesh_durability::DurableKv;
use botmesh_durability::testing::crash::Crashable;

use crate::message::{
    ChatId, Interaction, MediaRef, MessageId, Outgoing, OutgoingContent, SentMessage,
};
use crate::provider::{Capabilities, EventSink, Provider, ProviderError, StoredMediaRef};

/// A provider that stops reaching its channel once the crash switch tripped.
#[derive(Clone)]
pub struct CrashableProvider {
    inner: Arc<dyn Provider>,
    crashed: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl std::fmt::Debug for CrashableProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashableProvider")
            .field("inner", &self.inner.name())
            .field("crashed", &(self.crashed)())
            .finish()
    }
}

impl CrashableProvider {
    /// Wraps `inner`; it dies when `switch` crashed.
    pub fn new<K: DurableKv + ?Sized>(inner: impl Provider, switch: &Crashable<K>) -> Self {
        let switch = switch.clone();
        Self {
            inner: Arc::new(inner),
            crashed: Arc::new(move || switch.is_crashed()),
        }
    }

    /// Wraps `inner`; it dies when `crashed()` says so.
    pub fn with_switch(
        inner: impl Provider,
        crashed: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner: Arc::new(inner),
            crashed: Arc::new(crashed),
        }
    }

    fn dead(&self) -> Result<(), ProviderError> {
        if (self.crashed)() {
            return Err(ProviderError::NotConnected {
                provider: self.inner.name().to_owned(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Provider for CrashableProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        self.dead()?;
        self.inner.start(sink).await
    }

    async fn stop(&self) -> Result<(), ProviderError> {
        self.inner.stop().await
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        self.dead()?;
        self.inner.send(chat, outgoing).await
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        self.dead()?;
        self.inner.edit(chat, message_id, content).await
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        self.dead()?;
        self.inner.typing(chat).await
    }

    async fn mark_read(&self, chat: &ChatId, message_id: &MessageId) -> Result<(), ProviderError> {
        self.dead()?;
        self.inner.mark_read(chat, message_id).await
    }

    async fn ack_interaction(
        &self,
        interaction: &Interaction,
        notice: Option<&str>,
    ) -> Result<(), ProviderError> {
        self.dead()?;
        self.inner.ack_interaction(interaction, notice).await
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        self.dead()?;
        self.inner.download_media(media).await
    }

    fn serialize_media_ref(&self, media: &MediaRef) -> Option<StoredMediaRef> {
        self.inner.serialize_media_ref(media)
    }

    fn rehydrate_media_ref(&self, stored: &StoredMediaRef) -> Result<MediaRef, ProviderError> {
        self.inner.rehydrate_media_ref(stored)
    }
}
