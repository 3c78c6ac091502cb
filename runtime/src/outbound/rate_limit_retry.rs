//! The short in-place retry of rate-limited handler replies (`BotConfig::rate_limit_retry`).
//!
//! A reply the channel refuses with a rate limit is retried after the channel's `retry_after`
//! (or the configured default), up to `retries` times, as long as the wait is not longer than
//! `max_wait`; otherwise the error goes to the caller. Other errors are not retried here (the
//! durable outbox retries them, when configured).

use crate::error::BotError;
use crate::kernel::Kernel;
use crate::message::{ChatId, Outgoing, SentMessage};
use crate::metrics::Counters;
use crate::provider::ProviderError;

pub(crate) async fn send_with_retry(
    k: &Kernel,
    chat: &ChatId,
    outgoing: &Outgoing,
    key: &str,
) -> Result<SentMessage, BotError> {
    let policy = &k.config.rate_limit_retry;
    let mut retries = 0;
    loop {
        match crate::outbound::provider_send(k, chat, outgoing, key).await {
            Ok(sent) => return Ok(sent),
            Err(ProviderError::RateLimited {
                provider,
                retry_after,
            }) => {
                let wait = retry_after.unwrap_or(policy.default_wait);
                if retries >= policy.retries || wait > policy.max_wait {
                    return Err(ProviderError::RateLimited {
                        provider,
                        retry_after,
                    }
                    .into());
                }
                retries += 1;
                Counters::inc(&k.counters.rate_limit_retries);
                tracing::debug!(chat = %chat, ?wait, retries, "rate limited: retrying in place");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
