//! The `getUpdates` poller (the webhook route is in `webhook`).
//!
//! The poller hands each `getUpdates` batch to the pipeline at once
//! ([`EventSink::deliver_batch`]: chats concurrently, each chat's updates in order, their
//! journal writes sharing commits), then keeps `offset` = one past the last update before the
//! first one not accepted (updates with nothing to deliver count as accepted); after a
//! backoff the next `getUpdates` returns the rejected update again, with those after it (the
//! accepted ones among them are duplicates the pipeline drops). On a graceful stop it confirms what was accepted with one
//! last `getUpdates(offset, timeout = 0)`. A malformed update in a batch is logged and
//! skipped (fetching it again would not mend it).

use std::time::Duration;

use botmesh::provider::{EventSink, ProviderError, TransportStatus};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::api::{Api, CallError, Size};
use super::{backoff, update};

const ALLOWED_UPDATES: [&str; 4] = [
    "message",
    "edited_message",
    "callback_query",
    "my_chat_member",
];

/// A running poller.
pub(crate) struct Poller {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Poller {
    pub(crate) fn spawn(api: Api, timeout: Duration, sink: EventSink) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(poll_loop(api, timeout, sink, stop_rx));
        Self { stop, task }
    }

    /// Stops after the update being delivered (if any); waits up to 2 s, then aborts (a crash).
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let abort = self.task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(2), self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

async fn poll_loop(api: Api, timeout: Duration, sink: EventSink, mut stop: watch::Receiver<bool>) {
    let mut offset: Option<i64> = None;
    let mut confirmed: Option<i64> = None;
    let mut failures: u32 = 0;
    let mut status = TransportStatus::Starting;
    let mut report = |s: TransportStatus| {
        if s != status {
            status = s;
            sink.transport_status(s);
        }
    };
    loop {
        if *stop.borrow() {
            break;
        }
        let mut body = json!({ "timeout": timeout.as_secs(), "allowed_updates": ALLOWED_UPDATES });
        if let Some(o) = offset {
            body["offset"] = json!(o);
        }
        let call = api.call_timeout(
            "getUpdates",
            &body,
            timeout + Duration::from_secs(10),
            Size::default(),
        );
        let result = tokio::select! {
            r = call => r,
            _ = stop.changed() => break,
        };
        let wait = match result {
            Ok(Value::Array(updates)) => {
                report(TransportStatus::Ready);
                failures = 0;
                confirmed = offset;
                // The batch's update ids in order, each with its event (if it has one).
                let mut ids = Vec::with_capacity(updates.len());
                let mut events = Vec::with_capacity(updates.len());
                for raw in updates {
                    let Some(id) = raw.get("update_id").and_then(Value::as_i64) else {
                        tracing::warn!("telegram: an update without update_id; ignored");
                        continue;
                    };
                    match update::parse_update(raw) {
                        Err(e) => {
                            tracing::warn!(update_id = id, error = %e, "telegram: skipping a malformed update");
                            ids.push((id, false));
                        }
                        Ok((_, None)) => {
                            tracing::debug!(
                                update_id = id,
                                "telegram: update of a kind the bot does not take"
                            );
                            ids.push((id, false));
                        }
                        Ok((_, Some(event))) => {
                            ids.push((id, true));
                            events.push(event);
                        }
                    }
                }
                // The whole batch at once (chats concurrently, each in order); the offset
                // then moves past every update up to the first one not accepted.
                let mut outcomes = sink.deliver_batch(events).await.into_iter();
                let mut rejected = false;
                for (id, has_event) in ids {
                    if has_event && let Some(Err(r)) = outcomes.next() {
                        tracing::warn!(update_id = id, reason = %r, "telegram: update not accepted; it will be fetched again");
                        rejected = true;
                        break;
                    }
                    offset = Some(id + 1);
                }
                rejected.then(|| backoff(0))
            }
            Ok(other) => {
                tracing::warn!(answer = %other, "telegram: getUpdates returned no array");
                failures += 1;
                Some(backoff(failures))
            }
            Err(e) => {
                failures += 1;
                let e = ProviderError::from(e);
                match &e {
                    ProviderError::RateLimited { retry_after, .. } => {
                        Some(retry_after.unwrap_or_else(|| backoff(failures)))
                    }
                    ProviderError::Network { .. } => {
                        report(TransportStatus::Disconnected);
                        tracing::warn!(error = %e, "telegram: getUpdates failed; retrying");
                        Some(backoff(failures))
                    }
                    _ => {
                        report(TransportStatus::Disconnected);
                        tracing::error!(error = %e, "telegram: getUpdates refused (token revoked? a webhook set elsewhere?)");
                        Some(backoff(failures.max(4)))
                    }
                }
            }
        };
        if let Some(wait) = wait {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => break,
            }
        }
    }
    // Confirms what the pipeline accepted since the last poll, so a restart does not fetch it
    // again. Best effort: if it fails, the durable inbox dedupes the redelivery.
    if let Some(o) = offset
        && offset != confirmed
    {
        let body =
            json!({ "offset": o, "timeout": 0, "limit": 1, "allowed_updates": ALLOWED_UPDATES });
        if let Err(CallError::Provider(e)) = api
            .call_timeout("getUpdates", &body, Duration::from_secs(5), Size::default())
            .await
        {
            tracing::warn!(error = %e, "telegram: could not confirm the last offset on stop");
        }
    }
    report(TransportStatus::Stopped);
}
