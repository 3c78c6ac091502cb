//! A fake Telegram Bot API: `/bot<TOKEN>/<method>` with the `{"ok":…}` envelope, `getUpdates`
//! with offset confirmation and long polling, sends that return `Message` objects, `getFile`
//! and `/file/bot<TOKEN>/<path>` downloads, scripted failures, and a webhook sender that
//! retries until it gets a 2xx (as Telegram does). A benchmark drives it through
//! [`FakeTelegram::observe`] (updates handed out, messages delivered) with the call log off
//! ([`FakeTelegram::stop_recording`]).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use super::multipart;

/// What [`FakeTelegram::observe`] reports, in the order it happened.
#[derive(Debug, Clone)]
pub enum Observed {
    /// `getUpdates` handed out these updates for the first time: (update id, chat id) each.
    HandedOut(Vec<(i64, i64)>, std::time::Instant),
    /// A `sendMessage` to this chat succeeded, with this text.
    Delivered(i64, String, std::time::Instant),
}

#[derive(Default)]
struct S {
    updates: Vec<Value>,
    next_update_id: i64,
    /// Every update with a smaller id was confirmed by an offset.
    confirmed_below: i64,
    calls: Vec<(String, Value)>,
    failures: HashMap<String, VecDeque<(u16, Value)>>,
    files: HashMap<String, (String, Vec<u8>)>,
    /// Methods whose next successful call drops its connection instead of answering.
    drops: HashMap<String, usize>,
    next_message_id: i64,
    texts: HashMap<i64, String>,
    /// (chat, text) of every `sendMessage` answered with success, in order.
    delivered: Vec<(i64, String)>,
    /// The call log, message texts and deliveries are not kept (a long benchmark run).
    quiet: bool,
    /// Every update with a smaller id was handed out once.
    handed_out_below: i64,
    observer: Option<mpsc::UnboundedSender<Observed>>,
    /// Per caller (the first segment of a base URL `http://fake/<caller>`, `""` without
    /// one), its `getUpdates` calls being answered now (a long poll waits in here).
    polling: HashMap<String, usize>,
    /// When a caller's `getUpdates` call started while another caller's was being answered
    /// (two pollers at once), with both callers.
    overlaps: Vec<(std::time::Instant, String, String)>,
}

/// Counts a caller's `getUpdates` call as being answered until it is dropped (answered, or
/// its connection closed: a poller killed mid-poll stops counting).
struct Polling(Arc<Mutex<S>>, String);

impl Polling {
    fn start(state: &Arc<Mutex<S>>, caller: &str) -> Self {
        let mut s = state.lock().expect("fake telegram lock");
        let other = s
            .polling
            .iter()
            .find(|(c, n)| **n > 0 && c.as_str() != caller)
            .map(|(c, _)| c.clone());
        if let Some(other) = other {
            s.overlaps
                .push((std::time::Instant::now(), other, caller.to_owned()));
        }
        *s.polling.entry(caller.to_owned()).or_default() += 1;
        Polling(Arc::clone(state), caller.to_owned())
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = s.polling.get_mut(&self.1) {
            *n -= 1;
        }
    }
}

#[derive(Clone)]
pub struct FakeTelegram {
    pub addr: SocketAddr,
    pub token: String,
    panics: super::Panics,
    state: Arc<Mutex<S>>,
    changed: Arc<Notify>,
}

type Shared = (String, Arc<Mutex<S>>, Arc<Notify>);

impl FakeTelegram {
    pub async fn start(token: &str) -> Self {
        let state = Arc::new(Mutex::new(S {
            next_update_id: 100_000_001,
            next_message_id: 500,
            ..S::default()
        }));
        let changed = Arc::new(Notify::new());
        let shared: Shared = (token.to_owned(), state.clone(), changed.clone());
        let router = Router::new()
            .route("/file/{bot}/{*path}", get(file))
            .route("/{bot}/{method}", any(method))
            .route("/{caller}/{bot}/{method}", any(method_of))
            .with_state(shared);
        let (addr, panics) = super::serve(router).await;
        Self {
            addr,
            token: token.to_owned(),
            panics,
            state,
            changed,
        }
    }

    /// Reports every update handed out and every message delivered to the returned receiver.
    pub fn observe(&self) -> mpsc::UnboundedReceiver<Observed> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.s().observer = Some(tx);
        rx
    }

    /// Stops keeping the call log, the sent texts and the deliveries (what [`Self::calls`],
    /// [`Self::delivered_to`] and `editMessageText` read): memory stays flat over a long run.
    pub fn stop_recording(&self) {
        let mut s = self.s();
        s.quiet = true;
        s.calls.clear();
        s.texts.clear();
        s.delivered.clear();
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A provider configuration for this fake: its token and its base URL (long polling, the
    /// default media client).
    pub fn config(&self) -> botmesh_providers::telegram::TelegramConfig {
        botmesh_providers::telegram::TelegramConfig::new(&self.token)
            .api_base(&self.base_url())
            .expect("the fake's base url")
    }

    fn s(&self) -> std::sync::MutexGuard<'_, S> {
        self.state.lock().expect("fake telegram lock")
    }

    /// Queues an update (the payload without `update_id`); returns the id it got.
    pub fn push_update(&self, mut payload: Value) -> i64 {
        let id = {
            let mut s = self.s();
            let id = s.next_update_id;
            s.next_update_id += 1;
            payload["update_id"] = json!(id);
            s.updates.push(payload);
            id
        };
        self.changed.notify_waiters();
        id
    }

    /// Fails the test if a handler of the fake panicked.
    pub fn check(&self) {
        self.panics.check("Telegram");
    }

    /// The next call of `method` that succeeds (the message is delivered) drops its
    /// connection instead of answering: the bot cannot know it went out.
    pub fn drop_next(&self, method: &str) {
        *self.s().drops.entry(method.to_owned()).or_default() += 1;
    }

    /// The next call of `method` fails with this status and envelope.
    pub fn fail_next(&self, method: &str, status: u16, body: Value) {
        self.s()
            .failures
            .entry(method.to_owned())
            .or_default()
            .push_back((status, body));
    }

    pub fn add_file(&self, file_id: &str, file_path: &str, bytes: &[u8]) {
        self.s()
            .files
            .insert(file_id.to_owned(), (file_path.to_owned(), bytes.to_vec()));
    }

    /// The parameters of every call of `method`, in order.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        super::recorded_under(&self.s().calls, method)
    }

    /// Every call but `getUpdates`, as (method, params).
    pub fn sends(&self) -> Vec<(String, Value)> {
        self.s()
            .calls
            .iter()
            .filter(|(m, _)| m != "getUpdates")
            .cloned()
            .collect()
    }

    /// The texts of `sendMessage` calls to `chat`.
    pub fn texts_to(&self, chat: i64) -> Vec<String> {
        self.calls("sendMessage")
            .into_iter()
            .filter(|p| {
                p["chat_id"].as_i64() == Some(chat)
                    || p["chat_id"].as_str() == Some(&chat.to_string())
            })
            .filter_map(|p| p["text"].as_str().map(str::to_owned))
            .collect()
    }

    /// The texts of the `sendMessage` calls to `chat` that succeeded, in order.
    pub fn delivered_to(&self, chat: i64) -> Vec<String> {
        self.s()
            .delivered
            .iter()
            .filter(|(c, _)| *c == chat)
            .map(|(_, t)| t.clone())
            .collect()
    }

    /// When a caller's `getUpdates` call came while another caller's was being answered (two
    /// pollers at once; a poller whose connection closed mid-poll no longer counts), with
    /// the one polling and the one that came, in order. A caller is named by the first path
    /// segment of its base URL (`http://fake/<caller>`; see [`Self::base_url_for`]).
    pub fn poll_overlaps(&self) -> Vec<(std::time::Instant, String, String)> {
        self.s().overlaps.clone()
    }

    /// The base URL of caller `caller` (a path segment): the fake tells its calls apart.
    pub fn base_url_for(&self, caller: &str) -> String {
        format!("http://{}/{caller}", self.addr)
    }

    /// Ids of updates not confirmed yet.
    pub fn unconfirmed(&self) -> Vec<i64> {
        let s = self.s();
        s.updates
            .iter()
            .filter_map(|u| u["update_id"].as_i64())
            .filter(|id| *id >= s.confirmed_below)
            .collect()
    }

    /// Waits until `method` was called `n` times (or 5 s); returns the calls.
    pub async fn wait_calls(&self, method: &str, n: usize) -> Vec<Value> {
        self.wait_until(|| self.calls(method).len() >= n).await;
        self.calls(method)
    }

    /// Waits until every update was confirmed (an offset past it); fails the test after 5 s.
    pub async fn wait_confirmed(&self) {
        let confirmed = self.wait_until(|| self.unconfirmed().is_empty()).await;
        assert!(
            confirmed,
            "updates never confirmed: {:?}",
            self.unconfirmed()
        );
    }

    /// Waits until `done` holds, woken by each call the fake serves (or 5 s); whether it holds.
    async fn wait_until(&self, done: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done();
            }
        }
    }

    /// POSTs `update` to a webhook as Telegram does; returns the status.
    pub async fn post_webhook(url: &str, secret: Option<&str>, body: &Value) -> u16 {
        let mut req = super::client().post(url).json(body);
        if let Some(s) = secret {
            req = req.header("X-Telegram-Bot-Api-Secret-Token", s);
        }
        match req.send().await {
            Ok(r) => r.status().as_u16(),
            Err(_) => 0,
        }
    }
}

fn envelope_ok(result: Value) -> Response {
    super::json_resp(StatusCode::OK, json!({ "ok": true, "result": result }))
}

fn envelope_err(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    super::json_resp(
        status,
        json!({ "ok": false, "error_code": code, "description": description }),
    )
}

fn params(uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Value {
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut map = serde_json::Map::new();
    if let Some(q) = uri.query() {
        for pair in q.split('&') {
            if let Some((k, v)) = pair.split_once('=') {
                map.insert(k.to_owned(), json!(v));
            }
        }
    }
    if ct.starts_with("application/json") {
        if let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) {
            map.extend(o);
        }
    } else if ct.starts_with("multipart/form-data") {
        if let Some(o) = multipart::parse(ct, body) {
            map.extend(o);
        }
        map.insert("_multipart".to_owned(), json!(true));
    }
    Value::Object(map)
}

fn chat_i64(v: &Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

/// A call through a caller's base URL (`/<caller>/bot<TOKEN>/<method>`).
async fn method_of(
    shared: State<Shared>,
    Path((caller, bot, method)): Path<(String, String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(shared, &caller, bot, method, uri, headers, body).await
}

async fn method(
    shared: State<Shared>,
    Path((bot, method)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(shared, "", bot, method, uri, headers, body).await
}

async fn answer(
    State((token, state, changed)): State<Shared>,
    caller: &str,
    bot: String,
    method: String,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if bot != format!("bot{token}") {
        return envelope_err(401, "Unauthorized");
    }
    let p = params(&uri, &headers, &body);
    if method == "getUpdates" {
        return get_updates(&state, &changed, &p, caller).await;
    }
    let failure = {
        let mut s = state.lock().expect("fake telegram lock");
        if !s.quiet {
            s.calls.push((method.clone(), p.clone()));
        }
        s.failures.get_mut(&method).and_then(VecDeque::pop_front)
    };
    changed.notify_waiters();
    if let Some((status, body)) = failure {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        return super::json_resp(status, body);
    }
    let mut s = state.lock().expect("fake telegram lock");
    match method.as_str() {
        "getMe" => envelope_ok(
            json!({ "id": 42, "is_bot": true, "first_name": "Fake", "username": "fake_bot" }),
        ),
        "deleteWebhook"
        | "setWebhook"
        | "answerCallbackQuery"
        | "sendChatAction"
        | "setMessageReaction" => envelope_ok(json!(true)),
        "sendMessage" | "sendPhoto" | "sendDocument" | "sendVoice" | "sendAudio" | "sendVideo"
        | "sendSticker" | "sendLocation" | "sendContact" => {
            let text = p["text"].as_str().unwrap_or_default().to_owned();
            if method == "sendMessage" {
                if text.trim().is_empty() {
                    return envelope_err(400, "Bad Request: message text is empty");
                }
                if text.chars().count() > 4096 {
                    return envelope_err(400, "Bad Request: message is too long");
                }
            }
            if let Some(markup) = p.get("reply_markup") {
                let markup: Value = match markup {
                    Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
                    other => other.clone(),
                };
                for row in markup["inline_keyboard"].as_array().into_iter().flatten() {
                    for b in row.as_array().into_iter().flatten() {
                        let len = b["callback_data"].as_str().map_or(0, str::len);
                        if !(1..=64).contains(&len) {
                            return envelope_err(400, "Bad Request: BUTTON_DATA_INVALID");
                        }
                    }
                }
            }
            s.next_message_id += 1;
            let id = s.next_message_id;
            let chat = chat_i64(&p["chat_id"]);
            if !s.quiet {
                s.texts.insert(id, text.clone());
                if method == "sendMessage" {
                    s.delivered.push((chat, text.clone()));
                }
            }
            if let Some(observer) = s.observer.as_ref().filter(|_| method == "sendMessage") {
                let now = std::time::Instant::now();
                let _ = observer.send(Observed::Delivered(chat, text.clone(), now));
            }
            let mut answer = envelope_ok(json!({
                "message_id": id, "date": 1718000100,
                "chat": { "id": chat, "type": "private" }, "text": text,
            }));
            if let Some(n) = s.drops.get_mut(&method).filter(|n| **n > 0) {
                *n -= 1;
                answer.headers_mut().insert(
                    super::DROP_CONNECTION,
                    axum::http::HeaderValue::from_static("1"),
                );
            }
            answer
        }
        "editMessageText" => {
            let id = p["message_id"].as_i64().unwrap_or(0);
            let text = p["text"].as_str().unwrap_or_default().to_owned();
            match s.texts.get(&id) {
                None => envelope_err(400, "Bad Request: message to edit not found"),
                Some(old) if *old == text && p.get("reply_markup").is_none() => envelope_err(
                    400,
                    "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
                ),
                Some(_) => {
                    s.texts.insert(id, text.clone());
                    envelope_ok(
                        json!({ "message_id": id, "date": 1718000100, "chat": { "id": chat_i64(&p["chat_id"]), "type": "private" }, "text": text }),
                    )
                }
            }
        }
        "getFile" => {
            let file_id = p["file_id"].as_str().unwrap_or_default();
            match s.files.get(file_id) {
                Some((path, bytes)) => envelope_ok(json!({
                    "file_id": file_id, "file_unique_id": "AQADuniq",
                    "file_size": bytes.len(), "file_path": path,
                })),
                None => envelope_err(400, "Bad Request: invalid file_id"),
            }
        }
        _ => envelope_err(404, "Not Found"),
    }
}

async fn get_updates(
    state: &Arc<Mutex<S>>,
    changed: &Arc<Notify>,
    p: &Value,
    caller: &str,
) -> Response {
    let offset = p["offset"]
        .as_i64()
        .or_else(|| p["offset"].as_str().and_then(|s| s.parse().ok()));
    let timeout = p["timeout"]
        .as_u64()
        .or_else(|| p["timeout"].as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0);
    let limit = p["limit"].as_u64().unwrap_or(100) as usize;
    let _polling = Polling::start(state, caller);
    {
        let mut s = state.lock().expect("fake telegram lock");
        if !s.quiet {
            s.calls.push(("getUpdates".to_owned(), p.clone()));
        }
        if let Some(o) = offset {
            s.confirmed_below = s.confirmed_below.max(o);
            let below = s.confirmed_below;
            s.updates
                .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= below);
        }
        if let Some((status, body)) = s
            .failures
            .get_mut("getUpdates")
            .and_then(VecDeque::pop_front)
        {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
            return super::json_resp(status, body);
        }
    }
    changed.notify_waiters();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let ready: Vec<Value> = {
            let mut s = state.lock().expect("fake telegram lock");
            let ready: Vec<Value> = s.updates.iter().take(limit).cloned().collect();
            handed_out(&mut s, &ready);
            ready
        };
        if !ready.is_empty() || timeout == 0 {
            return envelope_ok(Value::Array(ready));
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return envelope_ok(json!([]));
        }
    }
}

/// Reports the updates of `ready` not handed out before to the observer.
fn handed_out(s: &mut S, ready: &[Value]) {
    let below = s.handed_out_below;
    let first: Vec<(i64, i64)> = ready
        .iter()
        .filter_map(|u| {
            let id = u["update_id"].as_i64()?;
            let chat = u["message"]["chat"]["id"]
                .as_i64()
                .or_else(|| u["callback_query"]["message"]["chat"]["id"].as_i64())
                .unwrap_or(0);
            (id >= below).then_some((id, chat))
        })
        .collect();
    if let Some(last) = first.last() {
        s.handed_out_below = last.0 + 1;
    }
    if let Some(observer) = s.observer.as_ref().filter(|_| !first.is_empty()) {
        let _ = observer.send(Observed::HandedOut(first, std::time::Instant::now()));
    }
}

async fn file(
    State((token, state, _)): State<Shared>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if bot != format!("bot{token}") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let s = state.lock().expect("fake telegram lock");
    match s.files.values().find(|(p, _)| *p == path) {
        Some((_, bytes)) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Update payloads with the documented shapes.
pub mod updates {
    use serde_json::{Value, json};

    pub fn from(user: i64) -> Value {
        json!({ "id": user, "is_bot": false, "first_name": "Ana", "username": "ana", "language_code": "en" })
    }

    pub fn message(user: i64, message_id: i64, extra: Value) -> Value {
        let mut m = json!({
            "message_id": message_id, "date": 1718000000,
            "from": from(user), "chat": { "id": user, "type": "private", "first_name": "Ana" },
        });
        if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
            m.extend(extra.clone());
        }
        json!({ "message": m })
    }

    pub fn text(user: i64, message_id: i64, text: &str) -> Value {
        message(user, message_id, json!({ "text": text }))
    }

    pub fn callback(user: i64, query_id: &str, message_id: i64, data: &str) -> Value {
        json!({ "callback_query": {
            "id": query_id, "from": from(user),
            "message": { "message_id": message_id, "chat": { "id": user, "type": "private" }, "date": 1718000050, "text": "Pick one" },
            "chat_instance": "-7788", "data": data,
        }})
    }
}
