//! The webhook skeleton the HTTP-webhook channels share: [`WebhookServer`] (one axum server
//! that several providers mount their routes on) and [`WebhookChannel`] with [`route`] (one
//! route's request handling), so that a channel writes only what is its own: how a request's
//! signature is checked, how its body becomes events, and how it sends. [`WebhookProvider`]
//! (with a channel's network feature) is the provider around a channel's [`WebhookApi`]: it
//! keeps the sink its routes deliver to, starts and stops, and journals media refs.
//!
//! A channel that pushes updates (Telegram webhooks, WhatsApp Cloud, Twilio) redelivers what
//! was not acknowledged. So a route answers 2xx only once the pipeline *accepted* every event
//! of the request ([`EventSink::deliver`] returned `Ok`): a crash before that point leaves the
//! update unacknowledged and the channel sends it again, and the runtime's inbox drops the
//! copy of what it had already accepted (it dedupes by the channel's message id). [`route`]
//! takes a request through these steps, in order, and answers at the first that refuses:
//!
//! | step | request | answer | what entered the pipeline |
//! | --- | --- | --- | --- |
//! | limit | body over [`BODY_LIMIT`] | 413 | nothing |
//! | handshake (`GET`) | [`WebhookChannel::handshake`] accepts | 200 with its body | nothing |
//! | handshake (`GET`) | refused, or the channel has none | 403, or 405 | nothing |
//! | [`verify`](WebhookChannel::verify) | signature header missing | 401 | nothing |
//! | [`verify`](WebhookChannel::verify) | signature header wrong | 403 ([`WebhookChannel::bad_signature_status`]) | nothing |
//! | [`parse`](WebhookChannel::parse) (checked whole, before anything is delivered) | body that does not parse | 400 | nothing |
//! | [`parse_and_keep`](WebhookChannel::parse_and_keep) | what the channel keeps before delivery could not be written | 503 | nothing |
//! | deliver | nothing to deliver (an update the bot does not handle, Discord's PING) | 200, with [`WebhookChannel::answer`] as body (empty by default) | nothing |
//! | deliver | provider not started (or stopped) | 503 ([`WebhookChannel::retry_status`]), after [`WebhookChannel::not_accepted`] | nothing |
//! | deliver | pipeline rejected an event (not running, journal down) | 503 ([`WebhookChannel::retry_status`]), after [`WebhookChannel::not_accepted`] | the events it accepted (other chats', and this chat's before it: deduped on redelivery) |
//! | deliver | every event accepted (queued, duplicate or handled) | 200, with [`WebhookChannel::answer`] as body ([`WebhookChannel::accepted`] by default) | all of them |
//!
//! The body of a 200 is empty unless the channel gives one: Twilio's empty TwiML
//! ([`accepted`](WebhookChannel::accepted)), or Discord's PONG and its answer to an
//! interaction, held until the runtime acks it ([`answer`](WebhookChannel::answer)).
//!
//! Each refusal is logged at `warn` with the header or the reason; signatures are compared in
//! constant time ([`constant_time_eq`]). The skeleton does not terminate TLS (put it behind a
//! proxy or a load balancer), route by host, or retry.
//!
//! ```no_run
//! use botmesh_providers::webhook::WebhookServer;
//! # async fn demo(routes: axum::Router) -> Result<(), botmesh_providers::webhook::WebhookError> {
//! let server = WebhookServer::new().mount(routes).bind("0.0.0.0:8080").await?;
//! tracing::info!(addr = %server.local_addr(), "webhook server listening");
//! # server.shutdown().await; Ok(()) }
//! ```
//!
//! A minimal channel: a shared secret in a header, a JSON body `{"id", "chat", "text"}`. On a
//! [`WebhookProvider`] the route gets the provider's [`SinkSlot`] in [`WebhookApi::routes`]; a
//! provider of its own keeps one (`slot.start(sink)` in `Provider::start`, `slot.set(None)` in
//! `stop`). Either hands `route(Arc::new(channel), "/hook")` to the server:
//!
//! ```no_run
//! use std::sync::Arc;
//! use botmesh::message::Message;
//! use botmesh::provider::ProviderEvent;
//! use botmesh_providers::webhook::{
//!     Refused, SinkSlot, WebhookChannel, WebhookRequest, WebhookServer, constant_time_eq, route,
//! };
//!
//! struct Hook {
//!     secret: String,
//!     slot: SinkSlot,
//! }
//!
//! impl WebhookChannel for Hook {
//!     fn slot(&self) -> &SinkSlot {
//!         &self.slot
//!     }
//!
//!     fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
//!         match request.header("x-hook-secret") {
//!             None => Err(Refused::MissingSignature("X-Hook-Secret")),
//!             Some(s) if !constant_time_eq(s.as_bytes(), self.secret.as_bytes()) => {
//!                 Err(Refused::BadSignature("X-Hook-Secret"))
//!             }
//!             Some(_) => Ok(()),
//!         }
//!     }
//!
//!     fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
//!         let v: serde_json::Value = serde_json::from_slice(&request.body)
//!             .map_err(|e| Refused::Malformed(format!("body is not JSON: {e}")))?;
//!         let field = |k: &str| v[k].as_str().ok_or_else(|| Refused::Malformed(format!("no {k}")));
//!         let message = Message::text(field("id")?, field("chat")?, field("text")?);
//!         Ok(vec![ProviderEvent::Message(message)])
//!     }
//! }
//!
//! # async fn demo() -> Result<(), botmesh_providers::webhook::WebhookError> {
//! let hook = Hook { secret: "s3cret".into(), slot: SinkSlot::default() };
//! let server = WebhookServer::new().mount(route(Arc::new(hook), "/hook")).bind("0.0.0.0:8080").await?;
//! # server.shutdown().await; Ok(()) }
//! ```

#[cfg(network_channel)]
mod provider;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use botmesh::provider::{Accepted, EventSink, ProviderEvent, Rejected};
use tokio::net::ToSocketAddrs;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[cfg(network_channel)]
pub use provider::{WebhookApi, WebhookProvider};

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

/// Where a provider keeps the sink it got in `start()`; its webhook routes read it. Cheap to
/// clone (clones share the slot).
#[derive(Debug, Clone, Default)]
pub struct SinkSlot(Arc<RwLock<Option<EventSink>>>);

impl SinkSlot {
    /// Puts the sink (in `Provider::start`), or empties the slot (`None`, in `stop`): a
    /// route answers 503 while it is empty.
    pub fn set(&self, sink: Option<EventSink>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = sink;
    }

    /// A webhook provider's `start`: reports the transport ready (the route is its transport)
    /// and keeps `sink` for the route.
    pub fn start(&self, sink: EventSink) {
        sink.transport_status(botmesh::provider::TransportStatus::Ready);
        self.set(Some(sink));
    }

    /// The sink, while the provider runs.
    pub fn get(&self) -> Option<EventSink> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The largest request body a webhook route reads (2 MiB; the channels' own notifications are
/// a few kilobytes: media comes by reference). A longer body is answered 413.
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// One webhook request, as a [`WebhookChannel`] sees it.
#[derive(Debug, Clone)]
pub struct WebhookRequest {
    /// The request's URI (path and query, as the server received it).
    pub uri: Uri,
    /// The request's headers.
    pub headers: HeaderMap,
    /// The raw body (signatures are computed over it, so it is kept as received).
    pub body: Bytes,
}

impl WebhookRequest {
    /// A header's value, when present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The query string's pairs, decoded.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(self.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect()
    }
}

/// Why a webhook request is refused, before anything is delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The named signature header is missing: 401.
    #[error("missing {0}")]
    MissingSignature(&'static str),
    /// The named signature (header, or handshake token) does not match: 403.
    #[error("invalid {0}")]
    BadSignature(&'static str),
    /// The body does not parse, with why: 400.
    #[error("malformed body: {0}")]
    Malformed(String),
    /// Something the request needs before delivery is unavailable (the bot's store, where the
    /// email channel keeps attachments), with why: 503, the channel redelivers later.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// A channel's part of one webhook route: checking a request and turning its body into
/// events. [`route`] does the rest (limits, answers, delivery, logs).
pub trait WebhookChannel: Send + Sync + 'static {
    /// Where the provider keeps the sink it got in `start()`.
    fn slot(&self) -> &SinkSlot;

    /// Checks that the request comes from the channel (its signature over the raw body, a
    /// shared secret), before anything is parsed. May refuse a body it cannot read as
    /// [`Refused::Malformed`] when the signature is computed over its parsed form.
    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused>;

    /// Turns a verified body into the events to deliver, in order (empty: nothing the bot
    /// handles, answered 200). The whole body is parsed before the first event is delivered.
    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused>;

    /// What [`route`] calls: [`parse`](Self::parse) by default. A channel that must write
    /// something before its events are delivered overrides it (the email channel keeps a
    /// mail's attachments in the bot's store, so that their media refs still resolve after a
    /// restart; Discord registers an interaction, so that the runtime's ack can answer its
    /// held request); a failure to write is [`Refused::Unavailable`].
    fn parse_and_keep(
        &self,
        request: &WebhookRequest,
    ) -> impl std::future::Future<Output = Result<Vec<ProviderEvent>, Refused>> + Send {
        std::future::ready(self.parse(request))
    }

    /// The body of the 200 that acknowledges an accepted request: `(content type, body)`.
    /// Empty by default.
    fn accepted(&self) -> Option<(&'static str, String)> {
        None
    }

    /// What [`route`] answers a verified request with: the body of its 200, `outcomes` saying
    /// how the pipeline took each event [`parse_and_keep`](Self::parse_and_keep) gave, in
    /// order. By default [`accepted`](Self::accepted) when there were events, and an empty
    /// body when there were none (an update the bot does not handle). A channel that answers
    /// in the response overrides it (Discord: PONG to a PING, which carries no event, and an
    /// interaction's answer, held until the runtime acks it).
    fn answer(
        &self,
        request: &WebhookRequest,
        outcomes: &[Accepted],
    ) -> impl std::future::Future<Output = Option<(&'static str, String)>> + Send {
        let _ = request;
        std::future::ready(if outcomes.is_empty() {
            None
        } else {
            self.accepted()
        })
    }

    /// The pipeline did not accept the request's events (the route answers
    /// [`retry_status`](Self::retry_status)): drops what
    /// [`parse_and_keep`](Self::parse_and_keep) kept for them that only an accepted request
    /// needs (Discord's held interaction). Nothing by default.
    fn not_accepted(&self, request: &WebhookRequest) {
        let _ = request;
    }

    /// A `GET` on the route: the channel's subscription handshake, answered with a 200 and
    /// the returned plain-text body. `None` (the default): the channel has none, 405.
    fn handshake(&self, request: &WebhookRequest) -> Option<Result<String, Refused>> {
        let _ = request;
        None
    }

    /// The status answering a request the pipeline did not accept (not started, rejected):
    /// the one that makes the channel deliver it again. 503 by default; a channel that
    /// redelivers on another status only says which (GoHighLevel retries a 429 only).
    fn retry_status(&self) -> StatusCode {
        StatusCode::SERVICE_UNAVAILABLE
    }

    /// The status answering a request whose signature does not match
    /// ([`Refused::BadSignature`]): 403 by default; Discord requires 401.
    fn bad_signature_status(&self) -> StatusCode {
        StatusCode::FORBIDDEN
    }
}

/// The route serving `channel` on `path`: `POST` carries the channel's notifications, `GET`
/// its [handshake](WebhookChannel::handshake). Mount it on a [`WebhookServer`].
pub fn route<C: WebhookChannel>(channel: Arc<C>, path: &str) -> Router {
    route_limited(channel, path, BODY_LIMIT)
}

/// As [`route`], reading bodies of up to `limit` bytes instead of [`BODY_LIMIT`] (the email
/// channel's inbound-parse posts carry the attachments themselves).
pub fn route_limited<C: WebhookChannel>(channel: Arc<C>, path: &str, limit: usize) -> Router {
    Router::new()
        .route(path, get(handshake::<C>).post(notify::<C>))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(channel)
}

async fn handshake<C: WebhookChannel>(
    State(channel): State<Arc<C>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let request = WebhookRequest {
        uri,
        headers,
        body: Bytes::new(),
    };
    match channel.handshake(&request) {
        None => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        Some(Ok(body)) => Answer::Ok(Some(("text/plain", body))).into_response(),
        Some(Err(refused)) => Answer::from(refused).into_response(),
    }
}

async fn notify<C: WebhookChannel>(
    State(channel): State<Arc<C>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let request = WebhookRequest { uri, headers, body };
    match channel.verify(&request) {
        Ok(()) => {}
        Err(Refused::BadSignature(h)) => {
            return Answer::BadSignature(h, channel.bad_signature_status());
        }
        Err(refused) => return refused.into(),
    }
    let events = match channel.parse_and_keep(&request).await {
        Ok(events) => events,
        Err(refused) => return refused.into(),
    };
    match deliver_all(channel.slot(), events).await {
        Ok(outcomes) => Answer::Ok(channel.answer(&request, &outcomes).await),
        Err(reason) => {
            channel.not_accepted(&request);
            Answer::NotAccepted(reason, channel.retry_status())
        }
    }
}

/// What a webhook route answers.
#[derive(Debug)]
enum Answer {
    /// 200 with an empty body (or the given content type and body).
    Ok(Option<(&'static str, String)>),
    /// 401: the named signature header is missing.
    MissingSignature(&'static str),
    /// 403 (or the channel's [`WebhookChannel::bad_signature_status`]): the named signature
    /// header does not match.
    BadSignature(&'static str, StatusCode),
    /// 400: the body does not parse.
    Malformed(String),
    /// 503 (or the channel's [`WebhookChannel::retry_status`]): not started, or the pipeline
    /// did not accept an event.
    NotAccepted(Option<Rejected>, StatusCode),
    /// 503: something needed before delivery is unavailable.
    Unavailable(String),
}

impl From<Refused> for Answer {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::MissingSignature(h) => Answer::MissingSignature(h),
            Refused::BadSignature(h) => Answer::BadSignature(h, StatusCode::FORBIDDEN),
            Refused::Malformed(reason) => Answer::Malformed(reason),
            Refused::Unavailable(reason) => Answer::Unavailable(reason),
        }
    }
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
            Answer::BadSignature(h, status) => {
                tracing::warn!(header = h, "webhook refused: signature does not match");
                (status, format!("invalid {h}")).into_response()
            }
            Answer::Malformed(reason) => {
                tracing::warn!(%reason, "webhook refused: malformed body");
                (StatusCode::BAD_REQUEST, reason).into_response()
            }
            Answer::Unavailable(reason) => {
                tracing::warn!(%reason, "webhook not acknowledged: the channel will redeliver");
                (StatusCode::SERVICE_UNAVAILABLE, "not accepted, retry later").into_response()
            }
            Answer::NotAccepted(reason, status) => {
                match &reason {
                    Some(r) => {
                        tracing::warn!(reason = %r, "webhook not acknowledged: the channel will redeliver")
                    }
                    None => tracing::warn!("webhook not acknowledged: the provider is not started"),
                }
                (status, "not accepted, retry later").into_response()
            }
        }
    }
}

/// Delivers `events` that arrived together ([`EventSink::deliver_batch`](botmesh::provider::EventSink::deliver_batch):
/// chats concurrently, each chat's in order); `Ok` with how each was accepted only when every
/// one was (none to deliver: at once, started or not), else why not (`None`: not started).
async fn deliver_all(
    slot: &SinkSlot,
    events: Vec<ProviderEvent>,
) -> Result<Vec<Accepted>, Option<Rejected>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let Some(sink) = slot.get() else {
        return Err(None);
    };
    sink.deliver_batch(events)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(Some)
}

/// Compares two byte strings in time that depends only on their lengths (for secrets and
/// signatures).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
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
