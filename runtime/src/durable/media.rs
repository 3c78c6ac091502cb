//! Media on replay: the inbox journals the provider's serializable media reference
//! (`Provider::serialize_media_ref`) and, before a replayed handler runs, rebuilds it
//! (`Provider::rehydrate_media_ref`). `ctx.load_media(throw_on_error)` downloads the media of a
//! live or replayed message; a replayed message whose reference could not be rebuilt still runs
//! and its download fails with `MediaUnavailable` and one of three reasons: `NotDurable` (the
//! provider did not serialize it), `ProviderMismatch` (another provider wrote it),
//! `RehydrateFailed` (invalid, unknown version, tampered). No credentials are journaled.

use crate::error::BotError;
use crate::kernel::Kernel;
use crate::kernel::context::Ctx;
use crate::message::{Content, Message};
use crate::provider::{MediaUnavailableReason, ProviderError, ProviderEvent, StoredMediaRef};

/// The reference to journal with an inbound event, when it carries media and media refs are on.
pub(crate) fn serialize_for_journal(k: &Kernel, message: &Message) -> Option<StoredMediaRef> {
    let dur = k.durable.as_ref()?;
    if !dur.d.config().inbox.media_refs {
        return None;
    }
    match &message.content {
        Content::Media(m) => k.provider.serialize_media_ref(&m.media_ref),
        _ => None,
    }
}

/// Rebuilds the media reference of a replayed event in place; the reason when it cannot.
pub(crate) fn rehydrate(
    k: &Kernel,
    stored: Option<&StoredMediaRef>,
    event: &mut ProviderEvent,
) -> Option<MediaUnavailableReason> {
    let media_refs = k
        .durable
        .as_ref()
        .is_some_and(|d| d.d.config().inbox.media_refs);
    let ProviderEvent::Message(Message {
        content: Content::Media(m),
        ..
    }) = event
    else {
        return None;
    };
    if !media_refs {
        // Journaled as the token it was: the download may or may not work.
        return None;
    }
    let Some(stored) = stored else {
        return Some(MediaUnavailableReason::NotDurable);
    };
    if stored.provider != k.provider.name() {
        return Some(MediaUnavailableReason::ProviderMismatch);
    }
    match k.provider.rehydrate_media_ref(stored) {
        Ok(r) => {
            m.media_ref = r;
            None
        }
        Err(ProviderError::MediaUnavailable { reason, message }) => {
            tracing::warn!(provider = %stored.provider, %message, "media ref not rehydrated");
            Some(reason)
        }
        Err(e) => {
            tracing::warn!(provider = %stored.provider, error = %e, "media ref not rehydrated");
            Some(MediaUnavailableReason::RehydrateFailed)
        }
    }
}

impl Ctx {
    /// Downloads the media of the message (live or replayed).
    ///
    /// `Ok(None)` when the message carries no media, or when the download failed and
    /// `throw_on_error` is false; with `throw_on_error`, a replayed message whose reference
    /// could not be rebuilt fails with [`ProviderError::MediaUnavailable`] and its reason, and
    /// any other download error is returned as it is.
    pub async fn load_media(&self, throw_on_error: bool) -> Result<Option<Vec<u8>>, BotError> {
        let Some(Content::Media(media)) = self.message().map(|m| &m.content) else {
            return Ok(None);
        };
        if let Some(reason) = self.0.media_issue {
            if throw_on_error {
                return Err(ProviderError::MediaUnavailable {
                    reason,
                    message: format!(
                        "the media of {} cannot be loaded after a replay",
                        self.chat()
                    ),
                }
                .into());
            }
            return Ok(None);
        }
        match self
            .0
            .bot
            .kernel
            .provider
            .download_media(&media.media_ref)
            .await
        {
            Ok(bytes) => Ok(Some(bytes)),
            // On a replay, a refused download is media that did not survive the wait
            // (`MediaUnavailable`, reason `Expired`); a retryable failure stays what it is.
            Err(e) if throw_on_error && self.0.replay && !e.is_retryable() => {
                Err(ProviderError::MediaUnavailable {
                    reason: MediaUnavailableReason::Expired,
                    message: format!(
                        "the media of {} could not be downloaded after a replay (a hosted URL may have expired): {e}",
                        self.chat()
                    ),
                }
                .into())
            }
            Err(e) if throw_on_error => Err(e.into()),
            Err(e) => {
                tracing::debug!(chat = %self.chat(), error = %e, "media download failed");
                Ok(None)
            }
        }
    }

    /// Whether the message arrived after `inbox.max_age` (only with `StalePolicy::MarkStale`).
    pub fn is_stale(&self) -> bool {
        self.0.stale
    }

    /// Whether this message is a replay (after a crash, a retry, or an operator's replay).
    pub fn is_replay(&self) -> bool {
        self.0.replay
    }
}
