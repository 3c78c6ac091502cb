//! The presence-while-disconnected policy: typing indicators and read marks go out only
//! while the transport is `Ready`; otherwise they are skipped, logged at debug level and
//! counted in `metrics().presence_skipped`. Presence failures never fail the caller.

use crate::kernel::Kernel;
use crate::message::{ChatId, MessageId};
use crate::metrics::Counters;
use crate::provider::TransportStatus;

fn ready(k: &Kernel, what: &str, chat: &ChatId) -> bool {
    if k.transport_status() == TransportStatus::Ready {
        return true;
    }
    Counters::inc(&k.counters.presence_skipped);
    tracing::debug!(chat = %chat, status = ?k.transport_status(), "{what} skipped: transport not ready");
    false
}

pub(crate) async fn typing(k: &Kernel, chat: &ChatId) {
    if !k.capabilities.typing || !ready(k, "typing", chat) {
        return;
    }
    match k.provider.typing(chat).await {
        Ok(()) => Counters::inc(&k.counters.typing_sent),
        Err(e) => tracing::debug!(chat = %chat, error = %e, "typing failed"),
    }
}

pub(crate) async fn mark_read(k: &Kernel, chat: &ChatId, message: &MessageId) {
    if !k.capabilities.mark_read || !ready(k, "mark_read", chat) {
        return;
    }
    if let Err(e) = k.provider.mark_read(chat, message).await {
        tracing::debug!(chat = %chat, error = %e, "mark_read failed");
    }
}
