//! Local fake channel servers for the provider tests, and a recording pipeline.
//!
//! Each fake implements the part of its channel's HTTP API the provider uses, with the
//! request and response shapes of the channel's documentation (see
//! /work/shared/channels/*.md). They listen on 127.0.0.1 with a random port. They are test
//! code: they check what the real API would refuse, not everything it does.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod multipart;
#[cfg(feature = "telegram")]
pub mod telegram;
#[cfg(feature = "twilio")]
pub mod twilio;
#[cfg(feature = "whatsapp-cloud")]
pub mod whatsapp;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::provider::{
    Accepted, EventSink, InboundPipeline, ProviderEvent, Rejected, TransportStatus,
};
use tokio::sync::Notify;

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

    pub fn statuses(&self) -> Vec<TransportStatus> {
        self.state.lock().expect("recorder lock").statuses.clone()
    }

    /// Waits until `n` events were accepted (or 5 s); returns them.
    pub async fn wait_for(&self, n: usize) -> Vec<ProviderEvent> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let events = self.events();
            if events.len() >= n {
                return events;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.events();
            }
        }
    }
}

#[async_trait]
impl InboundPipeline for Recorder {
    async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
        let mode = self.state.lock().expect("recorder lock").mode;
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

/// Polls `f` every 20 ms until it returns `Some`, or panics after 5 s naming `what`.
pub async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A plain HTTP client for tests (plays the channel calling our webhook).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("test client")
}

/// Binds 127.0.0.1:0 and serves `router`; returns the address.
pub async fn serve(router: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
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
