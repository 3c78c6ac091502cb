//! The admin page: a small web page served by the bot (feature `http`) that shows what it
//! is doing and lets a person act on what it could not do. Server-rendered HTML, no script:
//! the counters, a chart of sends and failed sends per minute over the last hour (SVG), the
//! dead letters of both journals with their error and payload, the conversations waiting
//! with their state, and the scheduled jobs (schedule, next run, last run and its outcome; the
//! asks' idle timeouts among them). With actions enabled, each dead letter has buttons: retry
//! (a send) or replay (an inbound record), and discard; the bot's sweeper picks up what was
//! retried; each job has a cancel button.
//!
//! [`admin_router`] mounts it under `/admin` on the webhook server (like
//! [`metrics_router`](crate::operating::http::metrics_router)), or
//! [`MetricsServer::admin`](crate::operating::http::MetricsServer::admin) serves it next to
//! `/metrics` on a port of its own:
//!
//! ```no_run
//! use botmesh::operating::admin::AdminOptions;
//! use botmesh::operating::http::MetricsServer;
//! use botmesh::prelude::*;
//!
//! # async fn demo(provider: botmesh::testing::MockProvider) -> Result<(), BotError> {
//! let token = std::env::var("BOTMESH_ADMIN_TOKEN").unwrap_or_default();
//! let server = MetricsServer::new("127.0.0.1:9100").admin(AdminOptions::new(token).actions(true));
//! let bot = Bot::builder(provider).step(server.clone()).build()?;
//! bot.start().await?;
//! // http://127.0.0.1:9100/admin?token=… once; a cookie keeps it for the session.
//! # Ok(()) }
//! ```
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /admin` with the token (cookie `botmesh_admin`, or `Authorization: Bearer …`) | the page |
//! | `GET /admin?token=…` with the right token | sets the cookie (`HttpOnly`, `SameSite=Strict`), redirects to `/admin` |
//! | anything without the token | 401 and a form that asks for it |
//! | `POST /admin/dead/{retry,replay,discard}` (form `kind`, `id`, `csrf`) | acts, redirects to the page with what it did; 403 when actions are disabled or the form is not the page's |
//! | `POST /admin/jobs/cancel` (form `id`, `csrf`) | cancels the job (as `bot.cancel_job`), redirects to the page; 403 as above |
//!
//! An empty token refuses every request. The page does not terminate TLS: serve it on an
//! internal interface or behind a proxy.

mod chart;
mod page;

use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::kernel::Bot;
use crate::operating::views::{Conversation, DeadLetter, JobRow};
use botmesh_durability::operating::RecordKind;

/// The path the page is served at.
pub const ADMIN_PATH: &str = "/admin";
/// The cookie that carries the token after `?token=`.
const COOKIE: &str = "botmesh_admin";
/// How many dead letters of each journal the page lists.
const LIST_LIMIT: usize = 200;

/// Who may open the page and what it may do.
#[derive(Clone)]
pub struct AdminOptions {
    token: String,
    actions: bool,
}

impl std::fmt::Debug for AdminOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminOptions")
            .field("token", &"<redacted>")
            .field("actions", &self.actions)
            .finish()
    }
}

impl AdminOptions {
    /// The page for whoever presents `token`, read-only.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            actions: false,
        }
    }

    /// Enables (or not) the retry, replay and discard buttons.
    pub fn actions(mut self, enabled: bool) -> Self {
        self.actions = enabled;
        self
    }
}

struct AdminState {
    bot: Bot,
    options: AdminOptions,
    /// A random value of this router that each form carries: a form posted from another
    /// page cannot know it.
    csrf: String,
    history: chart::SendHistory,
}

impl AdminState {
    fn sample(&self) {
        let m = self.bot.metrics();
        let now = self.bot.kernel.clock.now_ms();
        self.history.record(now, m.sent, m.send_failed);
    }
}

/// A router serving the admin page under [`ADMIN_PATH`]. Inside a tokio runtime it also
/// samples the send counters every 10 s for the chart, until the router is dropped.
pub fn admin_router(bot: &Bot, options: AdminOptions) -> Router {
    let csrf = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    let state = Arc::new(AdminState {
        bot: bot.clone(),
        options,
        csrf,
        history: chart::SendHistory::default(),
    });
    state.sample();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(sample_while_alive(Arc::downgrade(&state)));
    }
    Router::new()
        .route(ADMIN_PATH, get(show))
        .route(&format!("{ADMIN_PATH}/dead/{{action}}"), post(act))
        .route(&format!("{ADMIN_PATH}/jobs/cancel"), post(cancel_job))
        .with_state(state)
}

async fn sample_while_alive(state: Weak<AdminState>) {
    let period = Duration::from_millis(u64::try_from(chart::SAMPLE_EVERY_MS).unwrap_or(10_000));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(state) = state.upgrade() else {
            return;
        };
        state.sample();
    }
}

/// Equal in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether the request carries the token.
fn authorized(state: &AdminState, headers: &HeaderMap) -> bool {
    let token = &state.options.token;
    if token.is_empty() {
        return false;
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value);
    bearer.is_some_and(|t| same(t, token)) || cookie.is_some_and(|c| same(c, &cookie_value(token)))
}

/// The cookie's value for `token`: its bytes in hex, so that any token makes a valid cookie.
fn cookie_value(token: &str) -> String {
    token.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unauthorized(wrong: bool) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Html(page::login(ADMIN_PATH, wrong)),
    )
        .into_response()
}

#[derive(Deserialize)]
struct PageQuery {
    token: Option<String>,
    done: Option<String>,
}

async fn show(
    State(state): State<Arc<AdminState>>,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
) -> Response {
    if let Some(token) = &q.token {
        if state.options.token.is_empty() || !same(token, &state.options.token) {
            tracing::warn!("admin page: a wrong token was presented");
            return unauthorized(true);
        }
        let cookie = format!(
            "{COOKIE}={}; Path={ADMIN_PATH}; HttpOnly; SameSite=Strict",
            cookie_value(token)
        );
        return ([(header::SET_COOKIE, cookie)], Redirect::to(ADMIN_PATH)).into_response();
    }
    if !authorized(&state, &headers) {
        return unauthorized(false);
    }
    match render(&state, q.done.as_deref()).await {
        Ok(html) => ([(header::CACHE_CONTROL, "no-store")], Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "admin page: reading the journals or the store failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read the bot's records: {e}"),
            )
                .into_response()
        }
    }
}

async fn render(state: &AdminState, flash: Option<&str>) -> Result<String, String> {
    let bot = &state.bot;
    state.sample();
    let dead = match bot.durability() {
        Some(d) => {
            let mut rows = Vec::new();
            for kind in [RecordKind::Inbound, RecordKind::Outbound] {
                let listed = DeadLetter::listed(d, kind, LIST_LIMIT).await;
                rows.extend(listed.map_err(|e| e.to_string())?);
            }
            Some(rows)
        }
        None => None,
    };
    let mut conversations: Vec<Conversation> = bot
        .store()
        .checkpoints()
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(Conversation::of)
        .collect();
    conversations.sort_by(|a, b| a.chat.cmp(&b.chat));
    let jobs: Vec<JobRow> = bot
        .jobs(LIST_LIMIT)
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(JobRow::of)
        .collect();
    let chart = chart::svg(&state.history.minutes(bot.kernel.clock.now_ms()));
    let metrics = bot.metrics();
    Ok(page::render(&page::View {
        metrics: &metrics,
        dead: dead.as_deref(),
        conversations: &conversations,
        jobs: &jobs,
        chart: &chart,
        actions: state.options.actions,
        csrf: &state.csrf,
        flash,
        base: ADMIN_PATH,
    }))
}

#[derive(Deserialize)]
struct ActForm {
    kind: String,
    id: String,
    csrf: String,
}

/// Why a posted form may not act: no token, actions disabled, or not the page's form.
fn refused(state: &AdminState, headers: &HeaderMap, csrf: &str) -> Option<Response> {
    if !authorized(state, headers) {
        return Some(unauthorized(false));
    }
    if !state.options.actions {
        return Some((StatusCode::FORBIDDEN, "admin actions are disabled").into_response());
    }
    if !same(csrf, &state.csrf) {
        return Some(
            (
                StatusCode::FORBIDDEN,
                "this form is not from this admin page",
            )
                .into_response(),
        );
    }
    None
}

/// Back to the page, telling what was done.
fn done_redirect(done: &str) -> Response {
    let query = serde_urlencoded::to_string([("done", done)]).unwrap_or_default();
    Redirect::to(&format!("{ADMIN_PATH}?{query}")).into_response()
}

#[derive(Deserialize)]
struct JobForm {
    id: String,
    csrf: String,
}

async fn cancel_job(
    State(state): State<Arc<AdminState>>,
    headers: HeaderMap,
    Form(form): Form<JobForm>,
) -> Response {
    if let Some(refused) = refused(&state, &headers, &form.csrf) {
        return refused;
    }
    let id = form.id.as_str();
    match state.bot.cancel_job(id).await {
        Ok(found) => {
            let done = if found {
                format!("job {id} cancelled")
            } else {
                format!("job {id} was already gone")
            };
            tracing::info!(id = %id, "admin page: {done}");
            done_redirect(&done)
        }
        Err(e) => (
            StatusCode::CONFLICT,
            format!("cancel of job {id} failed: {e}"),
        )
            .into_response(),
    }
}

async fn act(
    State(state): State<Arc<AdminState>>,
    Path(action): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActForm>,
) -> Response {
    if let Some(refused) = refused(&state, &headers, &form.csrf) {
        return refused;
    }
    let Some(journals) = state.bot.durability() else {
        return (
            StatusCode::CONFLICT,
            "this bot runs without durable journals",
        )
            .into_response();
    };
    let id = form.id.as_str();
    let done = match (action.as_str(), form.kind.as_str()) {
        ("retry", "outbound") => journals
            .retry_send(id)
            .await
            .map(|_| format!("send {id} is pending again")),
        ("replay", "inbound") => journals
            .replay_inbound(id)
            .await
            .map(|_| format!("inbound record {id} is pending again")),
        ("discard", "outbound") => journals
            .discard_send(id)
            .await
            .map(|found| discarded(id, found)),
        ("discard", "inbound") => journals
            .inbox()
            .discard(id)
            .await
            .map(|found| discarded(id, found)),
        (action, kind) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("no action {action} on a {kind} record"),
            )
                .into_response();
        }
    };
    match done {
        Ok(done) => {
            tracing::info!(action = %action, kind = %form.kind, id = %id, "admin page: {done}");
            done_redirect(&done)
        }
        Err(e) => (
            StatusCode::CONFLICT,
            format!("{action} of {} record {id} failed: {e}", form.kind),
        )
            .into_response(),
    }
}

fn discarded(id: &str, found: bool) -> String {
    if found {
        format!("record {id} discarded")
    } else {
        format!("record {id} was already gone")
    }
}
