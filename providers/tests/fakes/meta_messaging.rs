//! A fake Messenger / Instagram Send API (Graph): `POST /<version>/<account>/messages`
//! (bearer token, the documented body checks, success and error bodies, sender actions, a
//! customer-service window it enforces per recipient), `POST …/message_attachments` uploads,
//! and a CDN serving hosted attachment URLs without auth; plus webhook bodies in the
//! `entry[].messaging[]` shape, signed with `X-Hub-Signature-256` as Meta does.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{json_resp, multipart};

#[derive(Default)]
struct S {
    token: String,
    /// Text limit: (limit, in bytes?).
    limit: (usize, bool),
    calls: Vec<Value>,
    uploads: Vec<Value>,
    failures: VecDeque<(u16, Value)>,
    drops: usize,
    /// Recipients whose window Meta says is closed (a RESPONSE is refused with 10/2018278).
    closed: HashSet<String>,
    cdn: HashMap<String, Vec<u8>>,
    next: u64,
    /// (recipient, text, `message`) of every message answered with success, in order.
    delivered: Vec<(String, String, Value)>,
}

#[derive(Clone)]
pub struct FakeSendApi {
    pub addr: SocketAddr,
    panics: super::Panics,
    state: Arc<Mutex<S>>,
}

impl FakeSendApi {
    /// A fake whose texts are limited to `limit` characters, or UTF-8 bytes when `bytes`
    /// (Messenger: 2000 characters; Instagram: 1000 bytes).
    pub async fn start(token: &str, limit: usize, bytes: bool) -> Self {
        let state = Arc::new(Mutex::new(S {
            token: token.to_owned(),
            limit: (limit, bytes),
            ..S::default()
        }));
        let router = Router::new()
            .route("/cdn/{name}", get(cdn))
            .route("/{version}/{id}/messages", post(messages))
            .route("/{version}/{id}/message_attachments", post(upload))
            .with_state(state.clone());
        let (addr, panics) = super::serve(router).await;
        Self {
            addr,
            panics,
            state,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn s(&self) -> std::sync::MutexGuard<'_, S> {
        self.state.lock().expect("fake send api lock")
    }

    /// Bodies POSTed to `/messages`, in order (sender actions included).
    pub fn sent(&self) -> Vec<Value> {
        self.s().calls.clone()
    }

    /// The messages (`message` objects) sent to `to` that succeeded, in order.
    pub fn delivered_to(&self, to: &str) -> Vec<String> {
        self.delivered_where(to, |(_, text, _)| text.clone())
    }

    /// The `message` objects sent to `to` that succeeded, in order.
    pub fn messages_to(&self, to: &str) -> Vec<Value> {
        self.delivered_where(to, |(_, _, message)| message.clone())
    }

    /// What `pick` takes of each send to `to` that succeeded, in order.
    fn delivered_where<T>(&self, to: &str, pick: fn(&(String, String, Value)) -> T) -> Vec<T> {
        let s = self.s();
        s.delivered
            .iter()
            .filter(|(t, _, _)| t == to)
            .map(pick)
            .collect()
    }

    pub fn uploads(&self) -> Vec<Value> {
        self.s().uploads.clone()
    }

    pub fn check(&self) {
        self.panics.check("Send API");
    }

    /// The next `/messages` call that succeeds drops its connection instead of answering.
    pub fn drop_next(&self) {
        self.s().drops += 1;
    }

    /// The next `/messages` call fails with a Graph error.
    pub fn fail_next(&self, status: u16, code: i64, subcode: Option<i64>, message: &str) {
        let mut error = json!({"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "AbC"});
        if let Some(s) = subcode {
            error["error_subcode"] = json!(s);
        }
        self.s()
            .failures
            .push_back((status, json!({ "error": error })));
    }

    /// Meta considers `recipient`'s window closed: a `RESPONSE` to it is refused.
    pub fn close_window(&self, recipient: &str) {
        self.s().closed.insert(recipient.to_owned());
    }

    /// Serves `bytes` at `<base>/cdn/<name>` (no auth; `expired` answers 403 as fbcdn does).
    pub fn host(&self, name: &str, bytes: &[u8]) -> String {
        self.s().cdn.insert(name.to_owned(), bytes.to_vec());
        format!("{}/cdn/{name}", self.base_url())
    }
}

fn graph_error(status: u16, code: i64, subcode: Option<i64>, message: &str) -> Response {
    let mut error =
        json!({"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "AbC"});
    if let Some(s) = subcode {
        error["error_subcode"] = json!(s);
    }
    json_resp(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        json!({ "error": error }),
    )
}

fn authorized(s: &S, headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", s.token))
}

/// Why the Send API would refuse `message`, if it would.
fn invalid(s: &S, message: &Value) -> Option<&'static str> {
    let too_long = |t: &str| {
        if s.limit.1 {
            t.len() > s.limit.0
        } else {
            t.chars().count() > s.limit.0
        }
    };
    let title_ok = |b: &Value| b["title"].as_str().is_some_and(|t| t.chars().count() <= 20);
    if let Some(text) = message["text"].as_str() {
        if text.is_empty() || too_long(text) {
            return Some("(#100) Length of param message[text] must be within the limit");
        }
        if let Some(q) = message.get("quick_replies") {
            let q = q.as_array()?;
            if q.is_empty() || q.len() > 13 || !q.iter().all(title_ok) {
                return Some("(#100) Invalid quick_replies");
            }
        }
        return None;
    }
    let attachment = &message["attachment"];
    let payload = &attachment["payload"];
    match (
        attachment["type"].as_str(),
        payload["template_type"].as_str(),
    ) {
        (Some("template"), Some("button")) => {
            let buttons = payload["buttons"].as_array()?;
            let text = payload["text"].as_str().unwrap_or_default();
            if buttons.is_empty()
                || buttons.len() > 3
                || !buttons.iter().all(title_ok)
                || text.chars().count() > 640
            {
                return Some("(#100) Invalid button template");
            }
            None
        }
        (Some("template"), Some("generic")) => {
            let elements = payload["elements"].as_array()?;
            if elements.is_empty() || elements.len() > 10 {
                return Some("(#100) Invalid generic template");
            }
            None
        }
        (Some("image" | "video" | "audio" | "file"), _)
            if payload["url"].is_string() || payload["attachment_id"].is_string() =>
        {
            None
        }
        _ => Some("(#100) param message must be a text or an attachment"),
    }
}

async fn messages(State(state): State<Arc<Mutex<S>>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut s = state.lock().expect("lock");
    if !authorized(&s, &headers) {
        return graph_error(401, 190, None, "Error validating access token");
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return graph_error(400, 100, None, "Invalid parameter");
    };
    s.calls.push(body.clone());
    if let Some((status, err)) = s.failures.pop_front() {
        return json_resp(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            err,
        );
    }
    let Some(to) = body["recipient"]["id"].as_str().map(str::to_owned) else {
        return graph_error(400, 100, None, "(#100) param recipient must be non-empty.");
    };
    if body.get("sender_action").is_some() {
        return json_resp(StatusCode::OK, json!({ "recipient_id": to }));
    }
    match (body["messaging_type"].as_str(), body["tag"].as_str()) {
        (Some("RESPONSE" | "UPDATE"), None) if s.closed.contains(&to) => {
            return graph_error(
                400,
                10,
                Some(2018278),
                "(#10) This message is sent outside of allowed window.",
            );
        }
        (Some("RESPONSE" | "UPDATE"), None) | (Some("MESSAGE_TAG"), Some(_)) => {}
        _ => return graph_error(400, 100, None, "(#100) Invalid messaging_type or tag"),
    }
    if let Some(why) = invalid(&s, &body["message"]) {
        return graph_error(400, 100, None, why);
    }
    s.next += 1;
    let message = &body["message"];
    let text = message["text"]
        .as_str()
        .or_else(|| message["attachment"]["payload"]["text"].as_str())
        .unwrap_or_default()
        .to_owned();
    s.delivered.push((to.clone(), text, message.clone()));
    let answer = json_resp(
        StatusCode::OK,
        json!({ "recipient_id": to, "message_id": format!("m_OUT{}", s.next) }),
    );
    super::server::answer_or_drop(&mut s.drops, answer)
}

async fn upload(State(state): State<Arc<Mutex<S>>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut s = state.lock().expect("lock");
    if !authorized(&s, &headers) {
        return graph_error(401, 190, None, "Error validating access token");
    }
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(fields) = multipart::parse(ct, &body) else {
        return graph_error(400, 100, None, "(#100) multipart expected");
    };
    let message = fields
        .get("message")
        .and_then(Value::as_str)
        .and_then(|m| serde_json::from_str::<Value>(m).ok());
    if message.is_none_or(|m| m["attachment"]["type"].as_str().is_none())
        || !fields.contains_key("filedata")
    {
        return graph_error(400, 100, None, "(#100) Upload attachment failure.");
    }
    s.uploads.push(Value::Object(fields));
    s.next += 1;
    json_resp(
        StatusCode::OK,
        json!({ "attachment_id": format!("77{}", s.next) }),
    )
}

async fn cdn(State(state): State<Arc<Mutex<S>>>, Path(name): Path<String>) -> Response {
    let s = state.lock().expect("lock");
    match s.cdn.get(&name) {
        Some(_) if name == "expired" => {
            (StatusCode::FORBIDDEN, "URL signature expired").into_response()
        }
        Some(bytes) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Webhook bodies in the documented `entry[].messaging[]` shape.
pub mod hooks {
    use serde_json::{Value, json};

    pub const ACCOUNT: &str = "1234567890";
    pub const USER: &str = "6543210987";

    /// When the events happened: now (inside the 24-hour window).
    pub fn now_ms() -> i64 {
        botmesh::clock::now_ms()
    }

    /// The envelope of `object` (`page` or `instagram`) with `items` in one entry.
    pub fn envelope(object: &str, items: Vec<Value>) -> Value {
        json!({"object": object, "entry": [{"id": ACCOUNT, "time": now_ms(), "messaging": items}]})
    }

    /// One `messaging[]` item from `from` carrying `key: value`.
    pub fn item_from(from: &str, key: &str, value: Value) -> Value {
        let mut item =
            json!({"sender": {"id": from}, "recipient": {"id": ACCOUNT}, "timestamp": now_ms()});
        item[key] = value;
        item
    }

    /// One item from [`USER`].
    pub fn item(key: &str, value: Value) -> Value {
        item_from(USER, key, value)
    }

    pub fn text(mid: &str, text: &str) -> Value {
        item("message", json!({"mid": mid, "text": text}))
    }

    pub fn postback(mid: &str, payload: &str, title: &str) -> Value {
        item(
            "postback",
            json!({"mid": mid, "title": title, "payload": payload}),
        )
    }

    /// The echo of a message the account sent (`app_id`: the bot's app).
    pub fn echo(mid: &str, text: &str) -> Value {
        let mut e = json!({"sender": {"id": ACCOUNT}, "recipient": {"id": USER}, "timestamp": now_ms(),
            "message": {"mid": mid, "is_echo": true, "app_id": 1517776481860111u64, "text": text}});
        e["message"]["metadata"] = json!("botmesh");
        e
    }
}
