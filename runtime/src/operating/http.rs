//! `/metrics` over HTTP: [`metrics_router`], an axum router to mount on the webhook server
//! (`WebhookServer::mount` of `botmesh-providers`) or on an application's own server, and
//! [`MetricsServer`], a lifecycle step that serves it on a port of its own for a bot that has
//! no HTTP server (with the admin page too, [`MetricsServer::admin`]).
//!
//! The router answers `GET /metrics` with [`prometheus::render`] and nothing else; it
//! neither authenticates nor terminates TLS (expose it on an internal interface, or put it
//! behind a proxy).
//!
//! ```no_run
//! use botmesh::operating::http::MetricsServer;
//! use botmesh::prelude::*;
//!
//! # async fn demo(provider: botmesh::testing::MockProvider) -> Result<(), BotError> {
//! let metrics = MetricsServer::new("0.0.0.0:9100");
//! let bot = Bot::builder(provider).step(metrics.clone()).build()?;
//! bot.start().await?;
//! tracing::info!(addr = ?metrics.local_addr(), "metrics on /metrics");
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::BotError;
use crate::kernel::Bot;
use crate::kernel::lifecycle::LifecycleStep;
use crate::operating::admin::{AdminOptions, admin_router};
use crate::operating::prometheus;

/// The path [`metrics_router`] serves.
pub const METRICS_PATH: &str = "/metrics";

/// A router with one route, `GET /metrics`, answering the bot's counters as OpenMetrics text.
pub fn metrics_router(bot: &Bot) -> Router {
    Router::new()
        .route(METRICS_PATH, get(scrape))
        .with_state(bot.clone())
}

async fn scrape(State(bot): State<Bot>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)],
        prometheus::render(&bot),
    )
}

/// A lifecycle step that serves [`metrics_router`] on its own address from `start()` to
/// `stop()`. Clones share the server, so keep one to read [`local_addr`](Self::local_addr)
/// (useful with port 0).
#[derive(Debug, Clone)]
pub struct MetricsServer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    addr: String,
    admin: Option<AdminOptions>,
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// A server for `addr` (`"0.0.0.0:9100"`, `"127.0.0.1:0"`), bound when the bot starts.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                addr: addr.into(),
                admin: None,
                running: Mutex::new(None),
            }),
        }
    }

    /// Serves the admin page ([`admin_router`]) under `/admin` too.
    pub fn admin(self, options: AdminOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                addr: self.inner.addr.clone(),
                admin: Some(options),
                running: Mutex::new(None),
            }),
        }
    }

    /// The bound address while the bot runs.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.lock().as_ref().map(|r| r.local_addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.inner.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl LifecycleStep for MetricsServer {
    fn name(&self) -> &str {
        "metrics"
    }

    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        let listener = tokio::net::TcpListener::bind(&self.inner.addr)
            .await
            .map_err(|e| {
                BotError::config(
                    "metrics",
                    format!("cannot bind the metrics server to {}: {e}", self.inner.addr),
                )
            })?;
        let local_addr = listener.local_addr().map_err(|e| {
            BotError::config("metrics", format!("cannot read the bound address: {e}"))
        })?;
        let (stop, mut stopped) = watch::channel(false);
        let mut router = metrics_router(bot);
        if let Some(options) = &self.inner.admin {
            router = router.merge(admin_router(bot, options.clone()));
        }
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "metrics server failed");
            }
        });
        tracing::info!(addr = %local_addr, "metrics server listening");
        *self.lock() = Some(Running {
            local_addr,
            stop,
            task,
        });
        Ok(())
    }

    async fn stop(&self, _bot: &Bot) -> Result<(), BotError> {
        let running = self.lock().take();
        if let Some(r) = running {
            let _ = r.stop.send(true);
            if let Err(e) = r.task.await {
                tracing::warn!(error = %e, "metrics server task ended abnormally");
            }
        }
        Ok(())
    }
}
