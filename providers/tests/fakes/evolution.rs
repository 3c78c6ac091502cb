//! A fake Evolution API v2 server: `POST /message/<action>/<instance>` (`sendText`,
//! `sendButtons`, `sendList`, `sendMedia`, …), `/chat/updateMessage/<instance>` and
//! `/chat/getBase64FromMediaMessage/<instance>`, header `apikey`; 201 with the stored Baileys
//! message (`key.id`), Evolution's error bodies (`{"status", "error", "response": {"message"}}`),
//! and the webhooks Evolution POSTs (they carry the instance's `apikey`).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

use super::json_resp;
use super::log::Account;

#[derive(Default)]
pub struct S {
    /// The instance's key and name.
    pub(super) account: Account,
    /// Every call's action and body; the media of received messages by key id.
    pub(super) log: super::gateway::Log<(String, Value)>,
}

/// The fake Evolution API.
pub type FakeEvolution = super::Served<S>;

impl FakeEvolution {
    pub async fn start(key: &str, instance: &str) -> Self {
        let router = Router::new().route("/{group}/{action}/{instance}", post(api));
        Self::serve_account("Evolution", Account::new(key, instance), router).await
    }

    /// The next call is answered `status` with Evolution's error body (and `Retry-After`).
    pub fn fail_next(&self, status: u16, message: Value, retry_after: Option<u64>) {
        let error = match status {
            400 => "Bad Request",
            401 => "Unauthorized",
            404 => "Not Found",
            429 => "Too Many Requests",
            _ => "Internal Server Error",
        };
        let body = json!({"status": status, "error": error, "response": {"message": message}});
        self.s().log.fail_next(status, body, retry_after);
    }

    /// The server keeps `bytes` as the media of the received message `key_id`.
    pub fn add_media(&self, key_id: &str, bytes: &[u8]) {
        self.s().log.media.push((key_id.to_owned(), bytes.to_vec()));
    }
}

fn error(status: StatusCode, message: Value) -> Response {
    let reason = status.canonical_reason().unwrap_or("Error");
    json_resp(
        status,
        json!({"status": status.as_u16(), "error": reason, "response": {"message": message}}),
    )
}

/// Checks the key and the instance; records the call; answers a queued failure.
fn admit(
    s: &mut S,
    headers: &HeaderMap,
    instance: &str,
    action: &str,
    body: &Value,
) -> Option<Response> {
    if headers.get("apikey").and_then(|v| v.to_str().ok()) != Some(s.account.secret.as_str()) {
        return Some(error(StatusCode::UNAUTHORIZED, json!("Unauthorized")));
    }
    if instance != s.account.id {
        return Some(error(
            StatusCode::NOT_FOUND,
            json!([format!("The \"{instance}\" instance does not exist")]),
        ));
    }
    s.log.sent.push((action.to_owned(), body.clone()));
    s.log.failure()
}

/// Every route: the key and the instance checked, the call logged, a queued failure
/// answered; then the route's own answer.
async fn api(
    State(state): State<Arc<Mutex<S>>>,
    Path((group, action, instance)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, json!(["Invalid JSON"]));
    };
    let mut s = state.lock().expect("lock");
    if let Some(refused) = admit(&mut s, &headers, &instance, &action, &body) {
        return refused;
    }
    match group.as_str() {
        "message" => message(&mut s, &action, &body),
        "chat" => chat(&mut s, &action, &body),
        _ => error(StatusCode::NOT_FOUND, json!(["Cannot POST"])),
    }
}

fn message(s: &mut S, action: &str, body: &Value) -> Response {
    let text = match action {
        "sendText" => body["text"].as_str(),
        "sendButtons" | "sendList" => body["description"].as_str(),
        "sendMedia" => body["caption"].as_str(),
        "sendLocation" | "sendContact" | "sendSticker" | "sendWhatsAppAudio" => Some(""),
        "sendReaction" => body["reaction"].as_str(),
        _ => return error(StatusCode::NOT_FOUND, json!(["Cannot POST"])),
    };
    let number = body["number"]
        .as_str()
        .or_else(|| body["key"]["remoteJid"].as_str())
        .unwrap_or_default()
        .to_owned();
    let Some(text) = text else {
        return error(
            StatusCode::BAD_REQUEST,
            json!(["instance requires property \"text\""]),
        );
    };
    if number.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            json!(["instance requires property \"number\""]),
        );
    }
    if number.starts_with("000") {
        return error(
            StatusCode::BAD_REQUEST,
            json!([{"jid": format!("{number}@s.whatsapp.net"), "exists": false, "number": number}]),
        );
    }
    let n = s.log.deliver(&number, text);
    let jid = if number.contains('@') {
        number
    } else {
        format!("{number}@s.whatsapp.net")
    };
    let answer = json_resp(
        StatusCode::CREATED,
        json!({"key": {"remoteJid": jid, "fromMe": true, "id": format!("BAE5{n:012X}")},
            "pushName": "", "status": "PENDING", "message": {"conversation": text},
            "messageType": "conversation", "messageTimestamp": 1_718_000_000, "instanceId": "fake", "source": "unknown"}),
    );
    s.log.answer(answer)
}

fn chat(s: &mut S, action: &str, body: &Value) -> Response {
    match action {
        "getBase64FromMediaMessage" => {
            let id = body["message"]["key"]["id"].as_str().unwrap_or_default();
            match s.log.media_of(id) {
                Some(bytes) => json_resp(
                    StatusCode::CREATED,
                    json!({"mediaType": "imageMessage", "fileName": "a.jpeg", "caption": null,
                        "size": {"fileLength": bytes.len()}, "mimetype": "image/jpeg",
                        "base64": botmesh::codec::encode_base64(&bytes)}),
                ),
                None => error(StatusCode::BAD_REQUEST, json!(["Message not found"])),
            }
        }
        "updateMessage" => json_resp(
            StatusCode::CREATED,
            json!({"key": body["key"], "message": {"editedMessage": {"text": body["text"]}}}),
        ),
        _ => error(StatusCode::NOT_FOUND, json!(["Cannot POST"])),
    }
}

/// The webhooks Evolution POSTs.
pub mod hooks {
    use serde_json::{Value, json};

    /// A `messages.upsert` of `instance` with `data`, carrying the instance's `apikey`.
    pub fn upsert(instance: &str, apikey: &str, data: Value) -> Value {
        json!({"event": "messages.upsert", "instance": instance, "data": data,
            "destination": "https://bot.example/evolution", "date_time": "2024-06-10T12:00:00.000Z",
            "sender": "5511888888888@s.whatsapp.net", "server_url": "https://evo.example", "apikey": apikey})
    }

    /// The data of a message `id` from `jid` with `message`, sent now.
    pub fn data(jid: &str, id: &str, message: Value) -> Value {
        json!({"key": {"remoteJid": jid, "fromMe": false, "id": id, "addressingMode": "pn"},
            "pushName": "Ana", "status": "DELIVERY_ACK", "message": message, "contextInfo": null,
            "messageType": "conversation", "messageTimestamp": botmesh::clock::now_ms() / 1000,
            "instanceId": "fake", "source": "android"})
    }

    /// A text message `id` from `jid`.
    pub fn text_from(instance: &str, apikey: &str, jid: &str, id: &str, text: &str) -> Value {
        upsert(
            instance,
            apikey,
            data(jid, id, json!({"conversation": text})),
        )
    }
}
