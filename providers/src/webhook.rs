//! [`WebhookServer`]: one axum server that several providers mount their webhook routes on,
//! and the acknowledgement rule they share.
//!
//! A channel that pushes updates (Telegram webhooks, WhatsApp Cloud, Twilio) redelivers what
//! was not acknowledged. So a route answers 2xx only once the pipeline *accepted* every event
//! of the request ([`EventSink::deliver`] returned `Ok`): a crash before that point leaves the
//! update unacknowledged and the channel sends it again.
//!
//! | request | answer | what entered the pipeline |
//! | --- | --- | --- |
//! | signature header missing | 401 | nothing |
//! | signature header wrong | 403 | nothing |
//! | body that does not parse (checked whole, before anything is delivered) | 400 | nothing |
//! | provider not started (or stopped) | 503 | nothing |
//! | pipeline rejected an event (not running, journal down) | 503 | the events before it (deduped on redelivery) |
//! | every event accepted (queued, duplicate or handled) | 200 | all of them |
//!
//! Each provider verifies its own channel's signature (Telegram's secret token, Meta's
//! `X-Hub-Signature-256`, `X-Twilio-Signature`) before parsing; this module provides the
//! constant-time comparison they use. It does not terminate TLS (put it behind a proxy or a
//! load balancer), route by host, or retry.
//!
//! ```no_run
//! use botmesh_providers::webhook::WebhookServer;
//! # async fn demo(routes: axum::Router) -> Result<(), botmesh_providers::webhook::WebhookError> {
//! let server = WebhookServer::new().mount(routes).bind("0.0.0.0:8080").await?;
//! tracing::info!(addr = %server.local_addr(), "webhook server listening");
//! # server.shutdown().await; Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use botmesh::provider::{EventSink, ProviderEvent, Rejected};
use tokio::net::ToSocketAddrs;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A failure to run the webhook server.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The listen address could not be bound.
    #[error("cannot bind the webhook server: {0}")]
    Bind(#[source] std::io::Error),
}

/// Collects the routes of several providers; [`bind`](Self::bind) serves them.
#[derive(Debug, Default)]
pub struct WebhookServer {
    router: Router,
}

impl WebhookServer {
    /// An empty server (every path answers 404).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a provider's routes (paths must not overlap: axum panics on a duplicate route at
    /// mount time, before anything is served).
    pub fn mount(mut self, routes: Router) -> Self {
        self.router = self.router.merge(routes);
        self
    }

    /// The router, to embed in an application's own axum server instead.
    pub fn into_router(self) -> Router {
        self.router
    }

    /// Binds `addr` and serves in a background task until [`RunningWebhookServer::shutdown`].
    pub async fn bind(
        self,
        addr: impl ToSocketAddrs,
    ) -> Result<RunningWebhookServer, WebhookError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(WebhookError::Bind)?;
        let local_addr = listener.local_addr().map_err(WebhookError::Bind)?;
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let router = self.router;
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "webhook server stopped with an error");
            }
        });
        tracing::info!(%local_addr, "webhook server listening");
        Ok(RunningWebhookServer {
            local_addr,
            stop: stop_tx,
            task,
        })
    }
}

/// A running webhook server.
#[derive(Debug)]
pub struct RunningWebhookServer {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningWebhookServer {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting connections, lets requests in flight finish, and waits.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Stops at once, dropping requests in flight unanswered (a crash, for tests).
    pub fn abort(self) {
        self.task.abort();
    }
}

/// Where a provider keeps the sink it got in `start()`; its webhook routes read it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SinkSlot(Arc<RwLock<Option<EventSink>>>);

impl SinkSlot {
    pub(crate) fn set(&self, sink: Option<EventSink>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = sink;
    }

    pub(crate) fn get(&self) -> Option<EventSink> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What a webhook route answers.
#[derive(Debug)]
pub(crate) enum Answer {
    /// 200 with an empty body (or the given content type and body).
    Ok(Option<(&'static str, String)>),
    /// 401: the named signature header is missing.
    MissingSignature(&'static str),
    /// 403: the named signature header does not match.
    BadSignature(&'static str),
    /// 400: the body does not parse.
    Malformed(String),
    /// 503: not started, or the pipeline did not accept an event.
    NotAccepted(Option<Rejected>),
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self {
            Answer::Ok(None) => StatusCode::OK.into_response(),
            Answer::Ok(Some((content_type, body))) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
                body,
            )
                .into_response(),
            Answer::MissingSignature(h) => {
                tracing::warn!(header = h, "webhook refused: signature header missing");
                (StatusCode::UNAUTHORIZED, format!("missing {h}")).into_response()
            }
            Answer::BadSignature(h) => {
                tracing::warn!(header = h, "webhook refused: signature does not match");
                (StatusCode::FORBIDDEN, format!("invalid {h}")).into_response()
            }
            Answer::Malformed(reason) => {
                tracing::warn!(%reason, "webhook refused: malformed body");
                (StatusCode::BAD_REQUEST, reason).into_response()
            }
            Answer::NotAccepted(reason) => {
                match &reason {
                    Some(r) => {
                        tracing::warn!(reason = %r, "webhook not acknowledged: the channel will redeliver")
                    }
                    None => tracing::warn!("webhook not acknowledged: the provider is not started"),
                }
                (StatusCode::SERVICE_UNAVAILABLE, "not accepted, retry later").into_response()
            }
        }
    }
}

/// Delivers `events` in order; `Ok` only when every one was accepted.
pub(crate) async fn deliver_all(slot: &SinkSlot, events: Vec<ProviderEvent>) -> Result<(), Answer> {
    let Some(sink) = slot.get() else {
        return Err(Answer::NotAccepted(None));
    };
    for event in events {
        if let Err(rejected) = sink.deliver(event).await {
            return Err(Answer::NotAccepted(Some(rejected)));
        }
    }
    Ok(())
}

/// Compares two byte strings in time that depends only on their lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(constant_time_eq(b"", b""));
    }
}
