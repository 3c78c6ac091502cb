//! Local fake channel servers for the provider tests, and a recording pipeline.
//!
//! Each fake implements the part of its channel's HTTP API the provider uses, with the
//! request and response shapes of the channel's documentation (see
//! /work/shared/channels/*.md). They listen on 127.0.0.1 with a random port. They are test
//! code: they check what the real API would refuse, not everything it does.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod contents;
#[cfg(feature = "discord")]
pub mod discord;
#[cfg(feature = "evolution")]
pub mod evolution;
#[cfg(rest_channel)]
pub mod gateway;
#[cfg(feature = "gohighlevel")]
pub mod gohighlevel;
#[cfg(feature = "gupshup")]
pub mod gupshup;
#[cfg(feature = "email")]
pub mod imap;
#[cfg(any(rest_channel, feature = "twilio"))]
pub mod log;
#[cfg(any(
    feature = "whatsapp-cloud",
    feature = "messenger",
    feature = "instagram"
))]
pub mod meta;
#[cfg(any(feature = "messenger", feature = "instagram"))]
pub mod meta_messaging;
pub mod multipart;
pub mod poll;
pub mod server;
#[cfg(feature = "email")]
pub mod smtp;
#[cfg(feature = "telegram")]
pub mod telegram;
#[cfg(feature = "tiktok")]
pub mod tiktok;
#[cfg(feature = "twilio")]
pub mod twilio;
#[cfg(feature = "whatsapp-cloud")]
pub mod whatsapp;
#[cfg(feature = "wppconnect")]
pub mod wppconnect;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::provider::{
    Accepted, ErrorClass, EventSink, InboundPipeline, ProviderEvent, Rejected, TransportStatus,
};
use tokio::sync::Notify;

#[allow(unused_imports)] // not every channel's fakes use them
pub use server::{DROP_CONNECTION, Panics, Served};

/// Checks that a send through `provider` (configured with an API base nothing listens on)
/// fails as a retryable network error whose text does not show `token`.
pub async fn assert_network_error(
    provider: &dyn botmesh::provider::Provider,
    chat: &botmesh::message::ChatId,
    token: &str,
) {
    let hi = botmesh::message::Outgoing::from("hi");
    let network = |e: &botmesh::provider::ProviderError| {
        matches!(e, botmesh::provider::ProviderError::Network { .. })
            && !e.to_string().contains(token)
    };
    assert_refused_with(provider, chat, &hi, &network).await;
}

/// Checks that `provider` refuses to send `outgoing` to `chat` with an error `expected` takes.
pub async fn assert_refused_with(
    provider: &dyn botmesh::provider::Provider,
    chat: &botmesh::message::ChatId,
    outgoing: &botmesh::message::Outgoing,
    expected: &dyn Fn(&botmesh::provider::ProviderError) -> bool,
) {
    let sent = provider.send(chat, outgoing).await;
    assert!(sent.as_ref().is_err_and(expected), "{outgoing:?}: {sent:?}");
}

/// What a refused send's error must be.
pub type Expected = dyn Fn(&botmesh::provider::ProviderError) -> bool;

/// `N` cases of refused sends: what makes the fake refuse (`C`), and what the error must be.
pub type Refusals<'a, C, const N: usize> = [(C, &'a Expected); N];

/// An error of class `class`.
pub fn class_is(class: ErrorClass) -> impl Fn(&botmesh::provider::ProviderError) -> bool {
    move |e| e.class() == class
}

/// A rate limit that asks to wait `secs` seconds.
pub fn rate_limited(secs: u64) -> impl Fn(&botmesh::provider::ProviderError) -> bool {
    class_is(ErrorClass::RateLimited(Some(Duration::from_secs(secs))))
}

/// A retryable error.
pub fn retryable(e: &botmesh::provider::ProviderError) -> bool {
    e.class() == ErrorClass::Retryable
}

/// A recipient the channel cannot reach.
pub fn unreachable(e: &botmesh::provider::ProviderError) -> bool {
    matches!(
        e,
        botmesh::provider::ProviderError::RecipientUnreachable { .. }
    )
}

/// A final error whose text does not show `secret`.
pub fn final_hiding(secret: &str) -> impl Fn(&botmesh::provider::ProviderError) -> bool + '_ {
    move |e| e.class() == ErrorClass::Final && !e.to_string().contains(secret)
}

/// Checks how `provider` classes refused sends: for each case, `fail` makes the fake refuse
/// the next send as the case says, and the error of sending "hi" to `chat` must be as the
/// case expects (a failure names the case).
pub async fn assert_refusals<C: Clone + std::fmt::Debug>(
    provider: &dyn botmesh::provider::Provider,
    chat: &str,
    fail: impl Fn(C),
    cases: &[(C, &Expected)],
) {
    let hi = botmesh::message::Outgoing::from("hi");
    for (case, expected) in cases {
        fail(case.clone());
        let e = provider
            .send(&botmesh::message::ChatId::from(chat), &hi)
            .await
            .expect_err("refused");
        assert!(expected(&e), "{case:?}: {e:?}");
    }
}

/// Checks that a send whose answer the fake drops (`drop_next`) is ambiguous.
pub async fn assert_dropped_is_ambiguous(
    provider: &dyn botmesh::provider::Provider,
    chat: &str,
    drop_next: impl Fn(),
) {
    drop_next();
    let hi = botmesh::message::Outgoing::from("hi");
    let ambiguous = |e: &botmesh::provider::ProviderError| {
        matches!(e, botmesh::provider::ProviderError::Ambiguous { .. })
    };
    assert_refused_with(provider, &chat.into(), &hi, &ambiguous).await;
}

/// Checks that `provider` refuses each of `sends` to `chat` as content it cannot send.
pub async fn assert_unsupported(
    provider: &dyn botmesh::provider::Provider,
    chat: &botmesh::message::ChatId,
    sends: &[botmesh::message::Outgoing],
) {
    let unsupported = |e: &botmesh::provider::ProviderError| {
        matches!(
            e,
            botmesh::provider::ProviderError::UnsupportedContent { .. }
        )
    };
    for outgoing in sends {
        assert_refused_with(provider, chat, outgoing, &unsupported).await;
    }
}

/// Checks that `provider` refuses to download `media`, saying `why`.
pub async fn assert_download_refused(
    provider: &dyn botmesh::provider::Provider,
    media: &botmesh::message::MediaRef,
    why: &str,
) {
    let e = provider.download_media(media).await.expect_err(why);
    assert!(e.to_string().contains(why), "{e}");
}

/// Event `i` of `events`, which must be a message.
pub fn message_at(events: &[ProviderEvent], i: usize) -> botmesh::message::Message {
    match &events[i] {
        ProviderEvent::Message(m) => m.clone(),
        other => panic!("event {i} is not a message: {other:?}"),
    }
}

/// What the recording pipeline does with the next events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Accept (queued).
    Accept,
    /// Reject as not running.
    Reject,
    /// Never answer (the process "dies" while journaling).
    Hang,
}

struct RecState {
    events: Vec<ProviderEvent>,
    /// Every call of `deliver`, whatever the mode.
    deliveries: usize,
    mode: Mode,
    statuses: Vec<TransportStatus>,
}

/// An [`InboundPipeline`] that records what it accepted.
#[derive(Clone)]
pub struct Recorder {
    state: Arc<Mutex<RecState>>,
    changed: Arc<Notify>,
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(RecState {
                events: Vec::new(),
                deliveries: 0,
                mode: Mode::Accept,
                statuses: Vec::new(),
            })),
            changed: Arc::new(Notify::new()),
        }
    }

    pub fn sink(&self) -> EventSink {
        EventSink::new(Arc::new(self.clone()))
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().expect("recorder lock").mode = mode;
    }

    pub fn events(&self) -> Vec<ProviderEvent> {
        self.state.lock().expect("recorder lock").events.clone()
    }

    /// The events, which must be `n`.
    pub fn exactly(&self, n: usize) -> Vec<ProviderEvent> {
        let events = self.events();
        assert_eq!(events.len(), n, "{events:#?}");
        events
    }

    pub fn statuses(&self) -> Vec<TransportStatus> {
        self.state.lock().expect("recorder lock").statuses.clone()
    }

    /// Waits until `n` events were accepted (or 5 s); returns them.
    pub async fn wait_for(&self, n: usize) -> Vec<ProviderEvent> {
        self.wait_until(|s| s.events.len() >= n).await;
        self.events()
    }

    /// Waits until `deliver` was called `n` times, in any mode (or 5 s).
    pub async fn wait_for_deliveries(&self, n: usize) {
        self.wait_until(|s| s.deliveries >= n).await;
    }

    async fn wait_until(&self, done: impl Fn(&RecState) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(&self.state.lock().expect("recorder lock")) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }
}

#[async_trait]
impl InboundPipeline for Recorder {
    async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
        let mode = {
            let mut state = self.state.lock().expect("recorder lock");
            state.deliveries += 1;
            state.mode
        };
        self.changed.notify_waiters();
        match mode {
            Mode::Accept => {
                self.state.lock().expect("recorder lock").events.push(event);
                self.changed.notify_waiters();
                Ok(Accepted::Queued)
            }
            Mode::Reject => Err(Rejected::NotRunning),
            Mode::Hang => std::future::pending().await,
        }
    }

    fn transport_status(&self, status: TransportStatus) {
        self.state
            .lock()
            .expect("recorder lock")
            .statuses
            .push(status);
    }

    fn end_of_input(&self) {}
}

/// A plain HTTP client for tests (plays the channel calling our webhook).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("test client")
}

/// The values recorded under `key`, in order: a fake's calls of one method, its deliveries to
/// one recipient.
pub fn recorded_under<V: Clone>(records: &[(String, V)], key: &str) -> Vec<V> {
    records
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .collect()
}

/// Binds 127.0.0.1:0 and serves `router`; returns the address and where the panics of its
/// handlers are recorded (see [`server`]).
pub async fn serve(router: axum::Router) -> (std::net::SocketAddr, Panics) {
    server::serve(router).await
}

/// A JSON response.
pub fn json_resp(
    status: axum::http::StatusCode,
    body: serde_json::Value,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Serves `routes` on a [`WebhookServer`](botmesh_providers::webhook::WebhookServer) at
/// 127.0.0.1:0; returns it and its base URL (`http://127.0.0.1:<port>`).
pub async fn mount(
    routes: axum::Router,
) -> (botmesh_providers::webhook::RunningWebhookServer, String) {
    let server = botmesh_providers::webhook::WebhookServer::new()
        .mount(routes)
        .bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", server.local_addr());
    (server, base)
}

/// Starts `provider` on a [`Recorder`] (accepting) and serves `routes` as [`mount`] does;
/// returns the recorder, the server and its base URL.
pub async fn started(
    provider: &impl botmesh::provider::Provider,
    routes: axum::Router,
) -> (
    Recorder,
    botmesh_providers::webhook::RunningWebhookServer,
    String,
) {
    let rec = Recorder::new();
    provider.start(rec.sink()).await.expect("start");
    let (server, base) = mount(routes).await;
    (rec, server, base)
}

/// A bot on `provider` that answers each message `pong: <text>`.
pub fn pong_bot(provider: impl botmesh::provider::Provider) -> botmesh::prelude::Bot {
    use botmesh::prelude::*;
    let bot = Bot::builder(provider).build().expect("bot");
    bot.on_message(|ctx: Ctx| async move {
        ctx.reply(format!("pong: {}", ctx.text())).await?;
        Ok(())
    });
    bot
}

/// A bot on `provider` with the durable journals (in memory, a backoff of 10 to 20 ms): its
/// sends go through the outbox, which retries 5xx and 429 answers. Not started, no handlers.
pub fn durable_bot(provider: impl botmesh::provider::Provider) -> botmesh::prelude::Bot {
    use botmesh::durability::{DurabilityConfig, MemoryKv, MemoryStore};
    use botmesh::durable::DurabilityOptions;
    let mut config = DurabilityConfig::default();
    config.outbox.backoff.base = Duration::from_millis(10);
    config.outbox.backoff.cap = Duration::from_millis(20);
    botmesh::prelude::Bot::builder(provider)
        .store(MemoryStore::new())
        .durability(
            DurabilityOptions::shared(Arc::new(MemoryKv::new()))
                .instance_id("i1")
                .config(config),
        )
        .build()
        .expect("bot")
}

/// A [`durable_bot`] that answers each message `pong: <text>`.
pub fn durable_pong_bot(provider: impl botmesh::provider::Provider) -> botmesh::prelude::Bot {
    use botmesh::prelude::*;
    let bot = durable_bot(provider);
    bot.on_message(|ctx: Ctx| async move {
        ctx.reply(format!("pong: {}", ctx.text())).await?;
        Ok(())
    });
    bot
}

/// POSTs the JSON `body` to `url`, with the header `X-Webhook-Secret: <secret>` when given
/// (a gateway's webhook); the status and the answer (0 when no answer came).
pub async fn post_json(url: &str, secret: Option<&str>, body: &serde_json::Value) -> (u16, String) {
    let mut req = client().post(url).json(body);
    if let Some(s) = secret {
        req = req.header("X-Webhook-Secret", s);
    }
    match req.send().await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// POSTs the JSON bytes `body` to `url` with the signature `headers` (a channel's signed
/// webhook); the status (0 when no answer came).
pub async fn post_signed(
    url: &str,
    headers: impl IntoIterator<Item = (&'static str, String)>,
    body: &[u8],
) -> u16 {
    post_as(url, "application/json", headers, body.to_vec()).await
}

/// POSTs the form `body` (URL-encoded) to `url` with `headers`; the status (0 when no answer
/// came).
pub async fn post_form(
    url: &str,
    headers: impl IntoIterator<Item = (&'static str, String)>,
    body: &str,
) -> u16 {
    let form = "application/x-www-form-urlencoded";
    post_as(url, form, headers, body.as_bytes().to_vec()).await
}

async fn post_as(
    url: &str,
    content_type: &str,
    headers: impl IntoIterator<Item = (&'static str, String)>,
    body: Vec<u8>,
) -> u16 {
    let request = client()
        .post(url)
        .header("content-type", content_type)
        .body(body);
    let with_headers = headers
        .into_iter()
        .fold(request, |r, (k, v)| r.header(k, v));
    with_headers.send().await.map_or(0, |r| r.status().as_u16())
}

/// A [`durable_pong_bot`] on `provider` gets the webhook `body` twice on `path` of its routes
/// (a redelivery), while the fake answers the failures the caller queued (5xx, 429): once
/// the outbox retried them, `delivered()` is the one reply.
#[cfg(rest_channel)]
pub async fn retried_and_answered_once<A: botmesh_providers::webhook::WebhookApi>(
    provider: botmesh_providers::webhook::WebhookProvider<A>,
    path: &str,
    body: &serde_json::Value,
    delivered: impl Fn() -> Vec<String>,
) {
    let post = async |local: &str| post_json(&format!("{local}{path}"), None, body).await.0;
    retried_and_answered_once_by(provider, post, delivered).await;
}

/// [`retried_and_answered_once`] for a webhook that `post` sends (signed as the channel signs
/// it) to the server whose base URL it is given; its status.
#[cfg(rest_channel)]
pub async fn retried_and_answered_once_by<A: botmesh_providers::webhook::WebhookApi>(
    provider: botmesh_providers::webhook::WebhookProvider<A>,
    post: impl AsyncFn(&str) -> u16,
    delivered: impl Fn() -> Vec<String>,
) {
    let routes = provider.webhook_routes();
    let (server, local) = mount(routes).await;
    let bot = durable_pong_bot(provider);
    bot.start().await.expect("start");
    for attempt in ["the webhook", "its redelivery"] {
        assert_eq!(post(&local).await, 200, "{attempt}");
    }
    eventually(|| !delivered().is_empty()).await;
    bot.stop_with(drained()).await.expect("stop");
    server.shutdown().await;
    assert_eq!(delivered(), ["pong: ping"]);
}

#[allow(unused_imports)] // not every channel's fakes use it
pub use poll::eventually;

/// The crash before the 200, on a webhook channel: process A receives the channel's request
/// and dies while its pipeline journals it, so no 2xx reaches the channel; process B, a
/// [`pong_bot`], gets the channel's redelivery, and once more (our 200 lost on the way).
/// `signed(request)` adds the channel's headers and body to a POST on `path`. The caller
/// checks that the fake channel got one `pong`.
pub async fn crash_before_the_200<P: botmesh::provider::Provider>(
    (provider, routes): (impl Fn() -> P, impl Fn(&P) -> axum::Router),
    path: &str,
    signed: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
) {
    // The status, or `None` when no answer came in time.
    let post = async |base: &str, timeout| {
        let request = signed(client().post(format!("{base}{path}")));
        let resp = request.timeout(timeout).send().await;
        resp.ok().map(|r| r.status().as_u16())
    };
    let a = provider();
    let rec = Recorder::new();
    rec.set_mode(Mode::Hang);
    a.start(rec.sink()).await.expect("start a");
    let (server_a, base_a) = mount(routes(&a)).await;
    assert_eq!(
        post(&base_a, Duration::from_millis(500)).await,
        None,
        "A never answered, so the channel saw no 2xx"
    );
    server_a.abort();
    drop(a);

    let b = provider();
    let (server_b, base_b) = mount(routes(&b)).await;
    let bot = pong_bot(b);
    bot.start().await.expect("start b");
    for attempt in ["the redelivery", "a retry after a lost 200"] {
        assert_eq!(
            post(&base_b, Duration::from_secs(10)).await,
            Some(200),
            "{attempt}"
        );
    }
    // Both were accepted before their 200: a drain covers the handler and its reply, and
    // nothing can come after it.
    bot.stop_with(drained()).await.expect("stop");
    server_b.shutdown().await;
}

/// [`crash_before_the_200`] for the JSON webhook `body` posted on `path` with the signature
/// `headers`.
pub async fn crash_before_the_signed_200<P: botmesh::provider::Provider>(
    channel: (impl Fn() -> P, impl Fn(&P) -> axum::Router),
    path: &str,
    body: &[u8],
    headers: &[(&'static str, String)],
) {
    crash_before_the_200(channel, path, |req| {
        let request = req.header("content-type", "application/json");
        let signed = headers.iter().fold(request, |r, (k, v)| r.header(*k, v));
        signed.body(body.to_vec())
    })
    .await;
}

/// A stop that lets queued work and sends finish: what was sent is final once it returns.
pub fn drained() -> botmesh::prelude::StopOptions {
    botmesh::prelude::StopOptions {
        drain: true,
        ..Default::default()
    }
}

/// An environment lookup over `pairs` (for `from_lookup` configs).
pub fn env(
    pairs: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> + Copy {
    move |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    }
}

/// [`env`] of `pairs` with `name` set to `value` over them.
pub fn env_with(
    pairs: &'static [(&'static str, &'static str)],
    name: &'static str,
    value: &'static str,
) -> impl Fn(&str) -> Option<String> + Copy {
    move |k: &str| {
        if k == name {
            Some(value.to_owned())
        } else {
            env(pairs)(k)
        }
    }
}

/// A list with one section `S1` of one row `row1` ("Row 1") behind the button "Options".
pub fn menu_list() -> botmesh::message::Outgoing {
    use botmesh::message::{Button, ListSection, Outgoing, OutgoingContent};
    Outgoing::from(OutgoingContent::List {
        text: "Menu".into(),
        button: "Options".into(),
        sections: vec![ListSection {
            title: "S1".into(),
            rows: vec![Button::with_id("row1", "Row 1")],
        }],
    })
}

/// `fake` and a provider made on it.
pub fn provided<F, P, E: std::fmt::Debug>(
    fake: F,
    make: impl FnOnce(&F) -> Result<P, E>,
) -> (F, P) {
    let provider = make(&fake).expect("provider");
    (fake, provider)
}

/// Sends `outgoing` to `chat` through `provider`: the message id it answered.
pub async fn sent_id(
    provider: &impl botmesh::provider::Provider,
    chat: &str,
    outgoing: &botmesh::message::Outgoing,
) -> String {
    let chat = botmesh::message::ChatId::from(chat);
    let sent = provider.send(&chat, outgoing).await.expect("sent");
    sent.message_id.expect("a message id").as_str().to_owned()
}

/// Checks `provider`'s media reference `token` end to end: journaled as `data`, rehydrated as
/// the same reference, downloaded as `bytes`; and the journaled reference refused as
/// [`assert_refuses_foreign_refs`] says, with each of `bad_data`. The rehydrated reference.
pub async fn assert_media_round_trip(
    provider: &dyn botmesh::provider::Provider,
    token: &str,
    data: serde_json::Value,
    bytes: &[u8],
    bad_data: &[serde_json::Value],
) -> botmesh::message::MediaRef {
    let media = botmesh::message::MediaRef {
        provider: provider.name().into(),
        token: token.into(),
    };
    let stored = provider.serialize_media_ref(&media).expect("journaled");
    assert_eq!(stored.data, data);
    let back = provider.rehydrate_media_ref(&stored).expect("rehydrated");
    assert_eq!(back, media);
    assert_eq!(
        provider.download_media(&back).await.expect("download"),
        bytes
    );
    assert_refuses_foreign_refs(provider, &stored, bad_data);
    back
}

/// The error of a send of "hi" to `chat` through the provider `made` (one whose credentials
/// or server the send cannot get past).
pub async fn refused_send<P: botmesh::provider::Provider, E: std::fmt::Debug>(
    made: Result<P, E>,
    chat: &str,
) -> botmesh::provider::ProviderError {
    let provider = made.expect("provider");
    let hi = botmesh::message::Outgoing::from("hi");
    let chat = botmesh::message::ChatId::from(chat);
    provider.send(&chat, &hi).await.expect_err("refused")
}

/// Checks that downloading `provider`'s media `token` fails as a final error.
pub async fn assert_download_is_final(provider: &dyn botmesh::provider::Provider, token: &str) {
    let media = botmesh::message::MediaRef {
        provider: provider.name().into(),
        token: token.into(),
    };
    let class = provider.download_media(&media).await.map_err(|e| e.class());
    assert_eq!(class.err(), Some(ErrorClass::Final), "{token}");
}

/// A media reference of `provider` as it journals one (format version 1), with `data`.
pub fn stored_ref(
    provider: &dyn botmesh::provider::Provider,
    data: serde_json::Value,
) -> botmesh::provider::StoredMediaRef {
    botmesh::provider::StoredMediaRef {
        provider: provider.name().to_owned(),
        v: 1,
        data,
    }
}

/// Checks that `provider` refuses to rehydrate what it did not write, starting from a stored
/// reference it wrote (`own`): the same data under another provider's name is a provider
/// mismatch; another format version, and `own` with each of `bad_data`, fail to rehydrate.
pub fn assert_refuses_foreign_refs(
    provider: &dyn botmesh::provider::Provider,
    own: &botmesh::provider::StoredMediaRef,
    bad_data: &[serde_json::Value],
) {
    use botmesh::provider::{MediaUnavailableReason, ProviderError, StoredMediaRef};
    let reason = |s: StoredMediaRef| match provider.rehydrate_media_ref(&s) {
        Err(ProviderError::MediaUnavailable { reason, .. }) => reason,
        other => panic!("expected MediaUnavailable for {s:?}, got {other:?}"),
    };
    let from_another = StoredMediaRef {
        provider: format!("not-{}", own.provider),
        ..own.clone()
    };
    assert_eq!(
        reason(from_another),
        MediaUnavailableReason::ProviderMismatch
    );
    let mut refused = vec![StoredMediaRef {
        v: own.v + 1,
        ..own.clone()
    }];
    refused.extend(bad_data.iter().map(|data| StoredMediaRef {
        data: data.clone(),
        ..own.clone()
    }));
    for stored in refused {
        assert_eq!(reason(stored), MediaUnavailableReason::RehydrateFailed);
    }
}
