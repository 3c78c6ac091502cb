//! A fake Gupshup WhatsApp API: `POST /wa/api/v1/msg` and `/wa/api/v1/template/msg` (header
//! `apikey`, form body with `channel`, `source`, `src.name`, `destination` and the `message` /
//! `template` JSON; 2xx `{"status": "submitted", "messageId": <Gupshup id>}`, error bodies
//! `{"status": "error", "message": …}`), hosted media, and the callbacks Gupshup POSTs.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::json_resp;
use super::log::Account;

#[derive(Default)]
pub struct S {
    /// The API key.
    pub(super) account: Account,
    /// Every send call's path and form.
    pub(super) log: super::gateway::Log<(String, Vec<(String, String)>)>,
}

/// The fake Gupshup API.
pub type FakeGupshup = super::Served<S>;

impl FakeGupshup {
    pub async fn start(key: &str) -> Self {
        let router = Router::new()
            .route("/wa/api/v1/msg", post(send))
            .route("/wa/api/v1/template/msg", post(send))
            .route("/fm/wamedia/{name}", get(media));
        Self::serve_account("Gupshup", Account::of_secret(key), router).await
    }

    /// The `message` (or `template`) JSON of the `n`-th send call.
    pub fn message(&self, n: usize) -> Value {
        let sent = self.sent();
        let form = &sent.get(n).expect("a send call").1;
        form.iter()
            .find(|(k, _)| k == "message" || k == "template")
            .and_then(|(_, v)| serde_json::from_str(v).ok())
            .unwrap_or(Value::Null)
    }

    /// The next send is answered `status` with Gupshup's error body (and `Retry-After`).
    pub fn fail_next(&self, status: u16, message: &str, retry_after: Option<u64>) {
        let body = json!({"status": "error", "message": message});
        self.s().log.fail_next(status, body, retry_after);
    }

    /// Hosts `bytes` as `name`; returns its URL.
    pub fn add_media(&self, name: &str, bytes: &[u8]) -> String {
        self.s().log.media.push((name.to_owned(), bytes.to_vec()));
        format!("http://{}/fm/wamedia/{name}", self.addr)
    }
}

/// The text a user sees of a `message`.
fn text_of(m: &Value) -> String {
    let at = |v: &Value| v.as_str().map(str::to_owned);
    match m["type"].as_str() {
        Some("text") => at(&m["text"]),
        Some("quick_reply") => at(&m["content"]["text"]),
        Some("list") => at(&m["body"]),
        _ => at(&m["caption"]),
    }
    .unwrap_or_default()
}

fn error(status: StatusCode, message: &str) -> Response {
    json_resp(status, json!({"status": "error", "message": message}))
}

async fn send(
    State(state): State<Arc<Mutex<S>>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = state.lock().expect("lock");
    if headers.get("apikey").and_then(|v| v.to_str().ok()) != Some(s.account.secret.as_str()) {
        return error(StatusCode::UNAUTHORIZED, "Authentication Failed");
    }
    let Ok(form) = serde_urlencoded::from_bytes::<Vec<(String, String)>>(&body) else {
        return error(StatusCode::BAD_REQUEST, "Invalid form");
    };
    s.log.sent.push((uri.path().to_owned(), form.clone()));
    if let Some(failure) = s.log.failure() {
        return failure;
    }
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    for k in ["source", "src.name", "destination"] {
        if get(k).is_none_or(str::is_empty) {
            return error(StatusCode::BAD_REQUEST, &format!("Invalid {k}"));
        }
    }
    let template = uri.path().ends_with("/template/msg");
    let field = if template { "template" } else { "message" };
    let Some(message) = get(field).and_then(|m| serde_json::from_str::<Value>(m).ok()) else {
        return error(StatusCode::BAD_REQUEST, &format!("Invalid {field}"));
    };
    if !template && get("channel") != Some("whatsapp") {
        return error(StatusCode::BAD_REQUEST, "Invalid Channel");
    }
    if !template && message["type"].as_str().is_none() {
        return error(StatusCode::BAD_REQUEST, "Invalid Message Type");
    }
    let text = text_of(&message);
    if text.chars().count() > 4096 {
        return error(StatusCode::BAD_REQUEST, "Message too long");
    }
    let n = s.log.deliver(get("destination").unwrap_or_default(), &text);
    let id = format!("ee4a68a0-1203-4c85-8dc3-{n:012x}");
    let answer = json_resp(
        StatusCode::ACCEPTED,
        json!({"status": "submitted", "messageId": id}),
    );
    s.log.answer(answer)
}

async fn media(State(state): State<Arc<Mutex<S>>>, Path(name): Path<String>) -> Response {
    let s = state.lock().expect("lock");
    s.log.serve_media(&name)
}

/// The callbacks Gupshup POSTs (v2 format).
pub mod hooks {
    use serde_json::{Value, json};

    /// A v2 callback of `app`.
    pub fn v2(app: &str, kind: &str, payload: Value) -> Value {
        json!({"app": app, "timestamp": 1_580_227_766_370_i64, "version": 2, "type": kind, "payload": payload})
    }

    /// A text message `id` from `from`.
    pub fn text_from(app: &str, from: &str, id: &str, text: &str) -> Value {
        inbound(app, from, id, "text", json!({"text": text}))
    }

    /// A message `id` of `kind` from `from` with its inner `payload`.
    pub fn inbound(app: &str, from: &str, id: &str, kind: &str, payload: Value) -> Value {
        v2(
            app,
            "message",
            json!({"id": id, "source": from, "type": kind, "payload": payload,
                "sender": {"phone": from, "name": "Andy", "country_code": "91", "dial_code": &from[2..]}}),
        )
    }
}
