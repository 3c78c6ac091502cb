//! A fake HighLevel API: `POST /conversations/messages` (`Authorization: Bearer`, header
//! `Version: 2021-04-15`, body `{type, contactId, message, attachments, replyMessageId}`),
//! answered 201 `{conversationId, messageId, msg}` or with HighLevel's error bodies
//! (`{"statusCode", "message", "error"}`); `GET /media/<name>` serves the attachments it keeps.
//! It signs the webhooks it "sends" as HighLevel does: Ed25519 over the raw body, base64, in
//! `X-GHL-Signature` (and RSA-SHA256 in the legacy `X-WH-Signature`).

use std::sync::{Arc, Mutex};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair, RSA_PKCS1_SHA256, RsaKeyPair};
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
    /// The private integration token.
    pub(super) account: Account,
    /// Every call's body; (chat `<type>:<contactId>`, message) of every accepted send.
    pub(super) log: super::gateway::Log<Value>,
}

/// HighLevel's webhook keys (the fake's own).
pub struct Keys {
    ed25519: Ed25519KeyPair,
    rsa: RsaKeyPair,
}

/// The fake HighLevel API.
pub type FakeGhl = super::Served<S>;

fn pem(der: &[u8]) -> String {
    format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        botmesh::codec::encode_base64(der)
    )
}

impl Keys {
    pub fn new() -> Self {
        Self {
            ed25519: Ed25519KeyPair::generate().expect("an Ed25519 key"),
            rsa: RsaKeyPair::generate(KeySize::Rsa2048).expect("an RSA key"),
        }
    }

    /// The Ed25519 public key, PEM (`SubjectPublicKeyInfo`, as HighLevel publishes it).
    pub fn ed25519_pem(&self) -> String {
        let mut spki = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        spki.extend_from_slice(self.ed25519.public_key().as_ref());
        pem(&spki)
    }

    /// The RSA public key, PEM (PKCS#1 DER inside).
    pub fn rsa_pem(&self) -> String {
        pem(self.rsa.public_key().as_ref())
    }

    /// `X-GHL-Signature` of `body`.
    pub fn sign(&self, body: &[u8]) -> String {
        botmesh::codec::encode_base64(self.ed25519.sign(body).as_ref())
    }

    /// `X-WH-Signature` of `body` (legacy RSA-SHA256).
    pub fn sign_rsa(&self, body: &[u8]) -> String {
        let mut sig = vec![0; self.rsa.public_modulus_len()];
        self.rsa
            .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), body, &mut sig)
            .expect("an RSA signature");
        botmesh::codec::encode_base64(&sig)
    }
}

impl FakeGhl {
    pub async fn start(token: &str) -> Self {
        let router = Router::new()
            .route("/conversations/messages", post(send))
            .route("/media/{name}", get(media));
        Self::serve_account("HighLevel", Account::of_secret(token), router).await
    }

    /// The next send is answered `status` with HighLevel's error body (and `Retry-After`).
    pub fn fail_next(&self, status: u16, message: &str, retry_after: Option<u64>) {
        let error = StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        let body = json!({"statusCode": status, "message": message, "error": error});
        self.s().log.fail_next(status, body, retry_after);
    }

    /// Keeps `bytes` as the attachment `name`; its URL.
    pub fn add_media(&self, name: &str, bytes: &[u8]) -> String {
        self.s().log.media.push((name.to_owned(), bytes.to_vec()));
        format!("{}/media/{name}", self.base_url())
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    let reason = status.canonical_reason().unwrap_or("Error");
    json_resp(
        status,
        json!({"statusCode": status.as_u16(), "message": message, "error": reason}),
    )
}

async fn send(State(state): State<Arc<Mutex<S>>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut s = state.lock().expect("lock");
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    if header("authorization") != Some(format!("Bearer {}", s.account.secret).as_str()) {
        return error(
            StatusCode::UNAUTHORIZED,
            "Invalid token: access token is invalid",
        );
    }
    if header("version") != Some("2021-04-15") {
        return error(StatusCode::BAD_REQUEST, "version header is invalid");
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "Bad Request");
    };
    s.log.sent.push(body.clone());
    if let Some(failure) = s.log.failure() {
        return failure;
    }
    let kind = body["type"].as_str().unwrap_or_default();
    let contact = body["contactId"].as_str().unwrap_or_default();
    if contact.is_empty()
        || ![
            "SMS",
            "Email",
            "WhatsApp",
            "IG",
            "FB",
            "Custom",
            "Live_Chat",
            "GMB",
        ]
        .contains(&kind)
    {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "type must be a valid enum value; contactId should not be empty",
        );
    }
    let message = body["message"].as_str().unwrap_or_default();
    let attachments = body["attachments"].as_array().map_or(0, Vec::len);
    if message.is_empty() && attachments == 0 {
        return error(StatusCode::BAD_REQUEST, "Message body is empty");
    }
    let n = s.log.deliver(&format!("{kind}:{contact}"), message);
    let answer = json_resp(
        StatusCode::CREATED,
        json!({"conversationId": format!("cv-{contact}"), "messageId": format!("msg{n:08}"),
            "msg": "Message queued successfully."}),
    );
    s.log.answer(answer)
}

async fn media(State(state): State<Arc<Mutex<S>>>, Path(name): Path<String>) -> Response {
    match state.lock().expect("lock").log.media_of(&name) {
        Some(bytes) => ([("content-type", "image/jpeg")], bytes).into_response(),
        None => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

/// The webhooks HighLevel POSTs.
pub mod hooks {
    use serde_json::{Value, json};

    /// An `InboundMessage` of `location` from `contact` on `channel` (`SMS`, `Live Chat`…).
    pub fn inbound(location: &str, channel: &str, contact: &str, id: &str, text: &str) -> Value {
        json!({"type": "InboundMessage", "locationId": location, "attachments": [], "body": text,
            "contactId": contact, "contentType": "text/plain", "conversationId": format!("cv-{contact}"),
            "dateAdded": "2026-12-06T08:00:00.000Z", "direction": "inbound", "messageType": channel,
            "messageId": id, "status": "delivered"})
    }

    /// An `OutboundMessage`: HighLevel's echo of a send.
    pub fn outbound(location: &str, contact: &str, id: &str, text: &str) -> Value {
        json!({"type": "OutboundMessage", "locationId": location, "attachments": [], "body": text,
            "contactId": contact, "conversationId": format!("cv-{contact}"), "dateAdded": "2026-12-06T08:00:01.000Z",
            "direction": "outbound", "messageType": "SMS", "messageId": id, "source": "api"})
    }
}
