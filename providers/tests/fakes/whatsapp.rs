//! A fake WhatsApp Cloud API (Graph): `POST /<version>/<phone id>/messages` (bearer token,
//! body checks, the documented success and error bodies), `POST …/media` uploads,
//! `GET /<version>/<media id>` lookups and a CDN that wants the bearer token, plus a webhook
//! sender that signs bodies with `X-Hub-Signature-256` as Meta does.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{json_resp, multipart};

#[derive(Default)]
pub struct S {
    token: String,
    base: String,
    calls: Vec<Value>,
    uploads: Vec<Value>,
    failures: VecDeque<(u16, Value)>,
    /// How many of the next successful `/messages` calls drop their connection.
    drops: usize,
    media: HashMap<String, (Vec<u8>, String)>,
    next: u64,
    /// (to, text) of every message answered with success, in order.
    delivered: Vec<(String, String)>,
}

/// The fake WhatsApp Cloud API.
pub type FakeWhatsApp = super::Served<S>;

impl FakeWhatsApp {
    pub async fn start(token: &str) -> Self {
        let state = S {
            token: token.to_owned(),
            ..S::default()
        };
        let router = Router::new()
            .route("/cdn/{media_id}", get(cdn))
            .route("/{version}/{id}/messages", post(messages))
            .route("/{version}/{id}/media", post(upload))
            .route("/{version}/{media_id}", get(lookup));
        let fake = Self::serve_state("WhatsApp Cloud API", state, router).await;
        fake.s().base = fake.base_url();
        fake
    }

    /// Bodies POSTed to `/messages`, in order.
    pub fn sent(&self) -> Vec<Value> {
        self.s().calls.clone()
    }

    /// The texts (a text's body, an interactive message's body text) of the messages to `to`
    /// that succeeded, in order.
    pub fn delivered_to(&self, to: &str) -> Vec<String> {
        super::recorded_under(&self.s().delivered, to)
    }

    pub fn uploads(&self) -> Vec<Value> {
        self.s().uploads.clone()
    }

    /// The next `/messages` call that succeeds (the message is delivered) drops its
    /// connection instead of answering: the bot cannot know it went out.
    pub fn drop_next(&self) {
        self.s().drops += 1;
    }

    /// The next `/messages` call fails with a Graph error of `code`.
    pub fn fail_next(&self, status: u16, code: i64, message: &str) {
        self.s().failures.push_back((
            status,
            json!({"error": {"message": message, "type": "OAuthException", "code": code,
                "error_data": {"messaging_product": "whatsapp", "details": message}, "fbtrace_id": "Az8or2yhqkZfEZ"}}),
        ));
    }

    pub fn add_media(&self, id: &str, bytes: &[u8], mime: &str) {
        self.s()
            .media
            .insert(id.to_owned(), (bytes.to_vec(), mime.to_owned()));
    }

    /// Signs `body` as Meta does.
    pub fn sign(app_secret: &str, body: &[u8]) -> String {
        super::meta::sign(app_secret, body)
    }

    /// POSTs a webhook body; `signature` is the header value (None: no header).
    pub async fn post_webhook(url: &str, signature: Option<&str>, body: &[u8]) -> u16 {
        let header = signature.map(|s| ("X-Hub-Signature-256", s.to_owned()));
        super::post_signed(url, header, body).await
    }
}

fn authorized(s: &S, headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", s.token))
}

fn graph_error(status: u16, code: i64, message: &str) -> Response {
    json_resp(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        json!({"error": {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "Az8"}}),
    )
}

async fn messages(State(state): State<Arc<Mutex<S>>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut s = state.lock().expect("lock");
    if !authorized(&s, &headers) {
        return graph_error(401, 190, "Error validating access token");
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return graph_error(400, 100, "Invalid parameter");
    };
    s.calls.push(body.clone());
    if let Some((status, err)) = s.failures.pop_front() {
        return json_resp(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            err,
        );
    }
    if body["messaging_product"] != "whatsapp" {
        return graph_error(
            400,
            100,
            "(#100) The parameter messaging_product is required.",
        );
    }
    if body["status"] == "read" {
        return json_resp(StatusCode::OK, json!({"success": true}));
    }
    let Some(kind) = body["type"].as_str() else {
        return graph_error(400, 100, "(#100) The parameter type is required.");
    };
    if body[kind].is_null() {
        return graph_error(400, 131009, "(#131009) Parameter value is not valid");
    }
    if kind == "text"
        && body["text"]["body"]
            .as_str()
            .map_or(0, |t| t.chars().count())
            > 4096
    {
        return graph_error(
            400,
            100,
            "(#100) Param text['body'] must be at most 4096 characters long.",
        );
    }
    if kind == "interactive" && body["interactive"]["type"] == "button" {
        let buttons = body["interactive"]["action"]["buttons"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !(1..=3).contains(&buttons.len())
            || buttons.iter().any(|b| {
                b["reply"]["title"]
                    .as_str()
                    .map_or(0, |t| t.chars().count())
                    > 20
            })
        {
            return graph_error(400, 131009, "(#131009) Parameter value is not valid");
        }
    }
    s.next += 1;
    let to = body["to"].clone();
    let text = body["text"]["body"]
        .as_str()
        .or_else(|| body["interactive"]["body"]["text"].as_str())
        .unwrap_or_default()
        .to_owned();
    s.delivered
        .push((to.as_str().unwrap_or_default().to_owned(), text));
    let answer = json_resp(
        StatusCode::OK,
        json!({"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}],
               "messages": [{"id": format!("wamid.OUT{}", s.next), "message_status": "accepted"}]}),
    );
    super::server::answer_or_drop(&mut s.drops, answer)
}

async fn upload(State(state): State<Arc<Mutex<S>>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut s = state.lock().expect("lock");
    if !authorized(&s, &headers) {
        return graph_error(401, 190, "Error validating access token");
    }
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(fields) = multipart::parse(ct, &body) else {
        return graph_error(400, 100, "(#100) multipart expected");
    };
    if fields.get("messaging_product") != Some(&json!("whatsapp")) || !fields.contains_key("file") {
        return graph_error(400, 100, "(#100) The parameter file is required.");
    }
    s.uploads.push(Value::Object(fields));
    s.next += 1;
    json_resp(StatusCode::OK, json!({"id": format!("9000{}", s.next)}))
}

async fn lookup(
    State(state): State<Arc<Mutex<S>>>,
    Path((_version, media_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let s = state.lock().expect("lock");
    if !authorized(&s, &headers) {
        return graph_error(401, 190, "Error validating access token");
    }
    match s.media.get(&media_id) {
        Some((bytes, mime)) => json_resp(
            StatusCode::OK,
            json!({"messaging_product": "whatsapp", "url": format!("{}/cdn/{media_id}", s.base),
                   "mime_type": mime, "sha256": hex::encode(Sha256::digest(bytes)),
                   "file_size": bytes.len().to_string(), "id": media_id}),
        ),
        None => graph_error(404, 100, "(#100) Unsupported get request."),
    }
}

async fn cdn(
    State(state): State<Arc<Mutex<S>>>,
    Path(media_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let s = state.lock().expect("lock");
    if !authorized(&s, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    match s.media.get(&media_id) {
        // The "tampered" id serves other bytes than its sha256 says.
        Some(_) if media_id == "666" => (StatusCode::OK, b"tampered".to_vec()).into_response(),
        Some((bytes, _)) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Webhook bodies with the documented shapes.
pub mod hooks {
    use serde_json::{Value, json};

    pub const WA_ID: &str = "16315551181";

    pub fn envelope(value: Value) -> Value {
        json!({"object": "whatsapp_business_account", "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": value}]}]})
    }

    pub fn messages(msgs: Vec<Value>) -> Value {
        envelope(json!({
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
            "contacts": [{"profile": {"name": "Ana"}, "wa_id": WA_ID}],
            "messages": msgs,
        }))
    }

    pub fn msg(id: &str, kind: &str, payload: Value) -> Value {
        let mut m = json!({"from": WA_ID, "id": id, "timestamp": "1718000000", "type": kind});
        m[kind] = payload;
        m
    }

    pub fn text(id: &str, body: &str) -> Value {
        messages(vec![msg(id, "text", json!({"body": body}))])
    }

    /// A text from the user `wa_id`, written now (inside the 24-hour window).
    pub fn text_from(wa_id: &str, id: &str, body: &str) -> Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        envelope(json!({
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
            "contacts": [{"profile": {"name": "Ana"}, "wa_id": wa_id}],
            "messages": [{"from": wa_id, "id": id, "timestamp": now.to_string(), "type": "text", "text": {"body": body}}],
        }))
    }
}
