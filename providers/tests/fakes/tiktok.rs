//! A fake TikTok Business Messaging API: `POST /open_api/v1.3/business/message/send/`
//! (`Access-Token`, `{business_id, recipient_type: "CONVERSATION", recipient, message_type,
//! text | image}`), `…/message/media/upload/` (multipart) and `…/message/media/download/`,
//! answered as TikTok's API for Business does: HTTP 200 with `{"code", "message",
//! "request_id", "data"}`, `code` 0 on success and TikTok's error codes otherwise; `GET
//! /media/<id>` serves the download URLs it hands out. It signs the webhooks it "sends"
//! (`TikTok-Signature: t=…,s=…`).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::json_resp;
use super::log::Account;

#[derive(Default)]
pub struct S {
    /// The access token and the business.
    pub(super) account: Account,
    /// Every send's body; (conversation, text or `[image <media_id>]`) of every accepted send.
    pub(super) log: super::gateway::Log<Value>,
    /// Coded failures (HTTP 200) for the next sends.
    codes: std::collections::VecDeque<(i64, String)>,
    uploads: usize,
}

/// The fake TikTok API.
pub type FakeTikTok = super::Served<S>;

impl FakeTikTok {
    pub async fn start(token: &str, business: &str) -> Self {
        let router = Router::new()
            .route("/open_api/v1.3/business/message/send/", post(send))
            .route(
                "/open_api/v1.3/business/message/media/upload/",
                post(upload),
            )
            .route(
                "/open_api/v1.3/business/message/media/download/",
                post(download),
            )
            .route("/media/{id}", get(media));
        Self::serve_account("TikTok", Account::new(token, business), router).await
    }

    /// The next send is answered HTTP `status` (and `Retry-After`).
    pub fn fail_next(&self, status: u16, retry_after: Option<u64>) {
        let body = json!({"code": 50000, "message": "System error", "request_id": "r0"});
        self.s().log.fail_next(status, body, retry_after);
    }

    /// The next send is answered HTTP 200 with TikTok's error `code`.
    pub fn fail_next_code(&self, code: i64, message: &str) {
        self.s().codes.push_back((code, message.to_owned()));
    }

    /// Keeps `bytes` as the media `id` of a received message.
    pub fn add_media(&self, id: &str, bytes: &[u8]) {
        self.s().log.media.push((id.to_owned(), bytes.to_vec()));
    }

    /// How many images were uploaded.
    pub fn uploads(&self) -> usize {
        self.s().uploads
    }
}

fn coded(code: i64, message: &str, data: Value) -> Response {
    json_resp(
        StatusCode::OK,
        json!({"code": code, "message": message, "request_id": "2026120608000000", "data": data}),
    )
}

fn authorized(s: &S, headers: &HeaderMap) -> Option<Response> {
    let token = headers.get("access-token").and_then(|v| v.to_str().ok());
    (token != Some(s.account.secret.as_str())).then(|| {
        coded(
            40105,
            "Access token is incorrect or has been revoked.",
            json!({}),
        )
    })
}

async fn send(State(state): State<Arc<Mutex<S>>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut s = state.lock().expect("lock");
    if let Some(refused) = authorized(&s, &headers) {
        return refused;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return coded(40002, "Invalid JSON", json!({}));
    };
    s.log.sent.push(body.clone());
    if let Some(failure) = s.log.failure() {
        return failure;
    }
    if let Some((code, message)) = s.codes.pop_front() {
        return coded(code, &message, json!({}));
    }
    let recipient = body["recipient"].as_str().unwrap_or_default().to_owned();
    if body["business_id"].as_str() != Some(s.account.id.as_str())
        || body["recipient_type"] != "CONVERSATION"
        || recipient.is_empty()
    {
        return coded(
            40002,
            "business_id, recipient_type or recipient is invalid",
            json!({}),
        );
    }
    let text = match body["message_type"].as_str() {
        Some("TEXT") => body["text"]["body"].as_str().map(str::to_owned),
        Some("IMAGE") => body["image"]["media_id"]
            .as_str()
            .map(|m| format!("[image {m}]")),
        _ => None,
    };
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return coded(40002, "message content is missing", json!({}));
    };
    let n = s.log.deliver(&recipient, &text);
    let answer = coded(
        0,
        "OK",
        json!({"message": {"message_id": format!("tt-msg-{n:08}")}}),
    );
    s.log.answer(answer)
}

async fn upload(State(state): State<Arc<Mutex<S>>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut s = state.lock().expect("lock");
    if let Some(refused) = authorized(&s, &headers) {
        return refused;
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(form) = super::multipart::parse(content_type, &body) else {
        return coded(40002, "not multipart", json!({}));
    };
    if form.get("media_type") != Some(&json!("IMAGE")) || form.get("file").is_none() {
        return coded(40002, "media_type and file are required", json!({}));
    }
    s.uploads += 1;
    coded(
        0,
        "OK",
        json!({"media_id": format!("v0upload{:04}", s.uploads)}),
    )
}

async fn download(State(state): State<Arc<Mutex<S>>>, headers: HeaderMap, body: Bytes) -> Response {
    let s = state.lock().expect("lock");
    if let Some(refused) = authorized(&s, &headers) {
        return refused;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = body["media_id"].as_str().unwrap_or_default();
    if s.log.media_of(id).is_none() {
        return coded(40007, "The media does not exist.", json!({}));
    }
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1");
    coded(
        0,
        "OK",
        json!({"download_url": format!("http://{host}/media/{id}")}),
    )
}

async fn media(State(state): State<Arc<Mutex<S>>>, Path(id): Path<String>) -> Response {
    match state.lock().expect("lock").log.media_of(&id) {
        Some(bytes) => ([("content-type", "image/png")], bytes).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The webhooks TikTok POSTs.
pub mod hooks {
    use serde_json::{Value, json};

    /// An `im_receive_msg` to `business` in `conversation` from `user`, with `content`'s
    /// fields added (`{"type": "text", "text": {"body": …}}`).
    pub fn received(
        business: &str,
        conversation: &str,
        user: &str,
        id: &str,
        content: Value,
    ) -> Value {
        let mut c = json!({"conversation_id": conversation, "message_id": id,
            "timestamp": botmesh::clock::now_ms(), "from": format!("name-{user}"),
            "from_user": {"id": user}, "to": "shop", "to_user": {"id": business}});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), content.as_object()) {
            c.extend(extra.clone());
        }
        json!({"client_key": "aw-crash-client", "event": "im_receive_msg",
            "create_time": botmesh::clock::now_ms() / 1000, "user_openid": business,
            "content": c.to_string()})
    }

    /// A text message.
    pub fn text(business: &str, conversation: &str, user: &str, id: &str, text: &str) -> Value {
        received(
            business,
            conversation,
            user,
            id,
            json!({"type": "text", "text": {"body": text}}),
        )
    }

    /// `TikTok-Signature` of `body` now, with `secret`.
    pub fn sign(secret: &str, body: &[u8]) -> String {
        let t = botmesh::clock::now_ms() / 1000;
        format!(
            "t={t},s={}",
            botmesh_providers::tiktok::signature(secret, t, body)
        )
    }
}
