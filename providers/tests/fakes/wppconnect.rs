//! A fake WPPConnect Server: `POST /api/<session>/<route>` (`send-message`,
//! `send-list-message`, `send-image`, `send-file`, `send-location`, `react-message`,
//! `edit-message`, …) and `GET /api/<session>/get-media-by-message/<id>`, with
//! `Authorization: Bearer <token>`; 201 `{"status": "success", "response": [{… "id"}]}`, its
//! error bodies, and the webhooks WPPConnect POSTs.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::routing::any;
use serde_json::{Value, json};

use super::json_resp;
use super::log::Account;

#[derive(Default)]
pub struct S {
    /// The token and the session.
    pub(super) account: Account,
    /// Every call's route and body; the media of received messages by id.
    pub(super) log: super::gateway::Log<(String, Value)>,
}

/// The fake WPPConnect Server.
pub type FakeWppConnect = super::Served<S>;

impl FakeWppConnect {
    pub async fn start(token: &str, session: &str) -> Self {
        let router = Router::new().route("/api/{session}/{*route}", any(api));
        Self::serve_account("WPPConnect", Account::new(token, session), router).await
    }

    /// The next call is answered `status` with `body` (and `Retry-After`).
    pub fn fail_next(&self, status: u16, body: Value, retry_after: Option<u64>) {
        self.s().log.fail_next(status, body, retry_after);
    }

    /// The server keeps `bytes` as the media of message `id`.
    pub fn add_media(&self, id: &str, bytes: &[u8]) {
        self.s().log.media.push((id.to_owned(), bytes.to_vec()));
    }
}

async fn api(
    State(state): State<Arc<Mutex<S>>>,
    Path((session, route)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = state.lock().expect("lock");
    let bearer = format!("Bearer {}", s.account.secret);
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(bearer.as_str())
        || session != s.account.id
    {
        return json_resp(StatusCode::UNAUTHORIZED, json!({"message": "Unauthorized"}));
    }
    let body: Value = if method == Method::GET {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => {
                return json_resp(
                    StatusCode::BAD_REQUEST,
                    json!({"status": "error", "message": "Invalid body"}),
                );
            }
        }
    };
    s.log.sent.push((route.clone(), body.clone()));
    if let Some(failure) = s.log.failure() {
        return failure;
    }
    if let Some(id) = route.strip_prefix("get-media-by-message/") {
        return match s.log.media_of(id) {
            Some(bytes) => json_resp(
                StatusCode::OK,
                json!({"base64": botmesh::codec::encode_base64(&bytes), "mimetype": "image/jpeg"}),
            ),
            None => json_resp(
                StatusCode::NOT_FOUND,
                json!({"status": "error", "message": "Message not found"}),
            ),
        };
    }
    let text = match route.as_str() {
        "send-message" => body["message"].as_str(),
        "send-list-message" => body["description"].as_str(),
        "send-image" | "send-file" | "send-voice" | "send-sticker" => {
            body["caption"].as_str().or(Some(""))
        }
        "send-location" => Some(""),
        "react-message" => body["reaction"].as_str(),
        "edit-message" => body["newText"].as_str(),
        _ => {
            return json_resp(
                StatusCode::NOT_FOUND,
                json!({"status": "error", "message": "Cannot POST"}),
            );
        }
    };
    let Some(text) = text else {
        return json_resp(
            StatusCode::BAD_REQUEST,
            json!({"status": "error", "message": "Invalid body"}),
        );
    };
    let phone = body["phone"].as_str().unwrap_or_default().to_owned();
    let domain = if body["isGroup"].as_bool() == Some(true) {
        "g.us"
    } else if body["isLid"].as_bool() == Some(true) || phone.len() > 14 {
        "lid"
    } else {
        "c.us"
    };
    let n = s.log.deliver(&phone, text);
    let id = format!("true_{phone}@{domain}_3EB0{n:016X}");
    let answer = json_resp(
        StatusCode::CREATED,
        json!({"status": "success", "response": [{"id": id, "body": text, "type": "chat", "fromMe": true, "to": format!("{phone}@{domain}")}], "mapper": "return"}),
    );
    s.log.answer(answer)
}

/// The webhooks WPPConnect POSTs.
pub mod hooks {
    use serde_json::{Value, json};

    /// An `onmessage` of `session`: message `msg_id` from `chat` of `kind`, sent now, with
    /// `extra` fields.
    pub fn message(session: &str, chat: &str, msg_id: &str, kind: &str, extra: Value) -> Value {
        let mut body = json!({"event": "onmessage", "session": session,
            "id": format!("false_{chat}_{msg_id}"), "type": kind, "t": botmesh::clock::now_ms() / 1000,
            "notifyName": "Ana", "from": chat, "to": "5521888888888@c.us", "chatId": chat,
            "isGroupMsg": false, "fromMe": false, "sender": {"id": chat, "pushname": "Ana"}, "mimetype": null});
        if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
            b.extend(e);
        }
        body
    }

    /// A text message `msg_id` from `chat`.
    pub fn text_from(session: &str, chat: &str, msg_id: &str, text: &str) -> Value {
        message(session, chat, msg_id, "chat", json!({"body": text}))
    }
}
