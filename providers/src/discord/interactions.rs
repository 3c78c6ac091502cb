//! Interactions: the endpoint Discord POSTs slash commands and component presses to, and the
//! one answer each interaction gets within its 3 seconds.
//!
//! The endpoint ([`routes`]), in order:
//!
//! | request | answer |
//! | --- | --- |
//! | `X-Signature-Ed25519` / `X-Signature-Timestamp` missing, or not a valid Ed25519 signature by the application's public key over `timestamp ‖ raw body` (`verify_strict`) | 401, nothing delivered (Discord sends forged ones on purpose) |
//! | a body that is not an interaction | 400 |
//! | PING (type 1) | 200 `{"type":1}` (PONG) |
//! | autocomplete (type 4) | 200 with no choices |
//! | provider not started, or the pipeline rejected it | 503 |
//! | command, component or modal, accepted | held open until the runtime's automatic ack ([`Interactions::ack`]), then 200 with the deferred answer: `{"type":5}` (command, modal: "thinking…") or `{"type":6}` (component); `{"type":4,…,"flags":64}` when the ack carries a notice (`ctx.ack(notice)`, an ephemeral message) |
//! | the ack did not come 2.7 s after arrival (the runtime's timer acks 0.5 s before the deadline; this is the floor) | the deferred answer anyway: Discord never drops the interaction |
//! | a duplicate, or one the pipeline handled without a handler | the deferred answer at once |
//!
//! Each interaction is answered exactly once: the ack and the floor take the answer from the
//! same entry under one lock. An interaction from the gateway (`INTERACTION_CREATE`, when no
//! endpoint is configured) has no request to answer: its ack is
//! `POST /interactions/{id}/{token}/callback`. After a deferred command, the chat's next send
//! completes the "thinking…" message (`PATCH /webhooks/{app}/{token}/messages/@original`,
//! harmless to repeat) while the 15-minute token lives; later sends are channel messages with
//! a nonce. An interaction replayed after a restart has no token any more: its ack does
//! nothing (it expired with the process) and its answers are channel messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use botmesh::provider::{Accepted, ProviderError, ProviderEvent};
use ed25519_dalek::{Signature, VerifyingKey};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Inner;
use super::inbound::{self, Kind, Parsed};
use super::rest::{Call, is_spent_interaction};

/// How long after its arrival an interaction gets its deferred answer at the latest.
pub(crate) const FLOOR: Duration = Duration::from_millis(2_700);

/// How long an interaction token works.
const TOKEN_LIFE: Duration = Duration::from_secs(15 * 60);

/// Checks Discord's signature of an interactions request: Ed25519 by `key` over the
/// timestamp header's bytes followed by the raw body.
pub(crate) fn verify(
    key: &VerifyingKey,
    timestamp: &str,
    signature_hex: &str,
    body: &[u8],
) -> bool {
    let Some(bytes) = hex::decode(signature_hex.trim())
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
    else {
        return false;
    };
    let mut message = Vec::with_capacity(timestamp.len() + body.len());
    message.extend_from_slice(timestamp.as_bytes());
    message.extend_from_slice(body);
    key.verify_strict(&message, &Signature::from_bytes(&bytes))
        .is_ok()
}

/// An interaction waiting for its answer, or answered.
struct Open {
    kind: Kind,
    chat: String,
    application_id: String,
    token: String,
    /// The held request of the endpoint, answered with the deferred response.
    held: Option<oneshot::Sender<Value>>,
    answered: bool,
    since: Instant,
}

/// A deferred command's "thinking…" message, which the chat's next send completes.
#[derive(Debug, Clone)]
pub(crate) struct Original {
    pub(crate) application_id: String,
    pub(crate) token: String,
    since: Instant,
}

/// The interactions of this process: answered once each, and the originals to complete.
#[derive(Default)]
pub(crate) struct Interactions {
    open: Mutex<HashMap<String, Open>>,
    originals: Mutex<HashMap<String, Original>>,
}

/// How an answer goes out.
enum Answer {
    /// Through the held request.
    Held(oneshot::Sender<Value>, Value),
    /// Through the callback endpoint.
    Callback {
        id: String,
        token: String,
        body: Value,
    },
    /// Already answered, or unknown here.
    Done,
}

impl Interactions {
    /// Registers an interaction (with the request to answer, for the endpoint).
    pub(crate) fn open(&self, parsed: Parsed, held: Option<oneshot::Sender<Value>>) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|_, o| o.since.elapsed() < TOKEN_LIFE);
        open.insert(
            parsed.interaction.id.clone(),
            Open {
                kind: parsed.kind,
                chat: parsed.interaction.chat.0.clone(),
                application_id: parsed.application_id,
                token: parsed.token,
                held,
                answered: false,
                since: Instant::now(),
            },
        );
    }

    /// Takes the answer of interaction `id` (once): the deferred one, or the notice.
    fn take(&self, id: &str, notice: Option<&str>) -> Answer {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(o) = open.get_mut(id).filter(|o| !o.answered) else {
            return Answer::Done;
        };
        o.answered = true;
        let body = match (notice.filter(|n| !n.is_empty()), o.kind) {
            (Some(n), _) => {
                json!({"type": 4, "data": {"content": n.chars().take(2000).collect::<String>(), "flags": 64, "allowed_mentions": {"parse": []}}})
            }
            (None, Kind::Command) => {
                self.originals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(
                        o.chat.clone(),
                        Original {
                            application_id: o.application_id.clone(),
                            token: o.token.clone(),
                            since: o.since,
                        },
                    );
                json!({"type": 5})
            }
            (None, Kind::Component) => json!({"type": 6}),
        };
        match o.held.take() {
            Some(held) => Answer::Held(held, body),
            None => Answer::Callback {
                id: id.to_owned(),
                token: o.token.clone(),
                body,
            },
        }
    }

    /// The "thinking…" message the next send in `chat` completes, while its token lives.
    pub(crate) fn original(&self, chat: &str) -> Option<Original> {
        let mut originals = self.originals.lock().unwrap_or_else(|e| e.into_inner());
        originals.retain(|_, o| o.since.elapsed() < TOKEN_LIFE - Duration::from_secs(30));
        originals.get(chat).cloned()
    }

    /// The original of `chat` was completed (or cannot be).
    pub(crate) fn completed(&self, chat: &str) {
        self.originals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(chat);
    }
}

/// The runtime's ack of `interaction_id`: its one answer, now, unless it had it.
pub(crate) async fn ack(
    inner: &Inner,
    interaction_id: &str,
    notice: Option<&str>,
) -> Result<(), ProviderError> {
    match inner.interactions.take(interaction_id, notice) {
        Answer::Done => Ok(()),
        Answer::Held(held, body) => {
            // The request may be gone (Discord hung up): nothing else can answer it.
            let _ = held.send(body);
            Ok(())
        }
        Answer::Callback { id, token, body } => {
            let call = Call::new(
                Method::POST,
                format!("/interactions/{id}/{token}/callback"),
                "POST /interactions/{}/{}/callback",
                &id,
            )
            .json(&body)
            .interaction();
            match inner.rest.call(call).await {
                Ok(_) => Ok(()),
                Err(e) if is_spent_interaction(&e) => {
                    tracing::debug!(id, "interaction already answered or expired");
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// The interactions endpoint on `path`, for the webhook server.
pub(crate) fn routes(inner: Arc<Inner>, path: &str) -> Router {
    Router::new()
        .route(path, post(endpoint))
        .layer(DefaultBodyLimit::max(crate::webhook::BODY_LIMIT))
        .with_state(inner)
}

fn json_answer(body: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn endpoint(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(key) = inner.config.public_key.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let signed = match (
        header("x-signature-ed25519"),
        header("x-signature-timestamp"),
    ) {
        (Some(sig), Some(ts)) => verify(key, ts, sig, &body),
        _ => false,
    };
    if !signed {
        tracing::warn!("discord interaction refused: invalid request signature");
        return (StatusCode::UNAUTHORIZED, "invalid request signature").into_response();
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    match v["type"].as_u64() {
        Some(1) => return json_answer(&json!({"type": 1})),
        Some(4) => return json_answer(&json!({"type": 8, "data": {"choices": []}})),
        _ => {}
    }
    let arrived = Instant::now();
    let parsed = match inbound::interaction(&v, botmesh::clock::now_ms()) {
        Ok(Some(p)) => p,
        Ok(None) => {
            return (StatusCode::BAD_REQUEST, "unsupported interaction type").into_response();
        }
        Err(e) => {
            tracing::warn!(reason = %e, "discord interaction refused: malformed body");
            return (StatusCode::BAD_REQUEST, e).into_response();
        }
    };
    let Some(sink) = inner.slot.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "not started").into_response();
    };
    let id = parsed.interaction.id.clone();
    let event = ProviderEvent::Interaction(parsed.interaction.clone());
    let (held, answer) = oneshot::channel();
    inner.interactions.open(parsed, Some(held));
    match sink.deliver(event).await {
        Ok(Accepted::Queued) => {
            if let Ok(Ok(body)) = tokio::time::timeout_at(arrived + FLOOR, answer).await {
                return json_answer(&body);
            }
            tracing::warn!(id, "discord interaction not acked in time: deferring it");
        }
        Ok(_) => {}
        Err(rejected) => {
            tracing::warn!(reason = %rejected, id, "discord interaction not accepted");
            inner.interactions.take(&id, None);
            return (StatusCode::SERVICE_UNAVAILABLE, "not accepted").into_response();
        }
    }
    // The floor, a duplicate, or one routed nowhere: the deferred answer, unless the ack
    // took it just now (its body is then in the channel).
    match inner.interactions.take(&id, None) {
        Answer::Held(_, body) | Answer::Callback { body, .. } => json_answer(&body),
        Answer::Done => {
            json_answer(&json!({"type": if matches!(v["type"].as_u64(), Some(3)) { 6 } else { 5 }}))
        }
    }
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signer, SigningKey};

    use super::*;

    #[test]
    fn only_a_signature_over_timestamp_and_body_by_the_key_verifies() {
        let signing = SigningKey::from_bytes(&[7; 32]);
        let key = signing.verifying_key();
        let body = br#"{"type":1}"#;
        let sig = hex::encode(signing.sign(b"1700000000{\"type\":1}").to_bytes());
        assert!(verify(&key, "1700000000", &sig, body));
        assert!(!verify(&key, "1700000001", &sig, body), "another timestamp");
        assert!(
            !verify(&key, "1700000000", &sig, br#"{"type":2}"#),
            "another body"
        );
        assert!(!verify(&key, "1700000000", "zz", body), "not hex");
        let other = SigningKey::from_bytes(&[8; 32]);
        let forged = hex::encode(other.sign(b"1700000000{\"type\":1}").to_bytes());
        assert!(!verify(&key, "1700000000", &forged, body), "another key");
    }
}
