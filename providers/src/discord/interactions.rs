//! Interactions: the endpoint Discord POSTs slash commands and component presses to, and the
//! one answer each interaction gets within its 3 seconds.
//!
//! The endpoint ([`routes`]) is a route of the webhook skeleton ([`crate::webhook::route`]),
//! which does the body limit (413), the order (signature before parsing), the 503 when the
//! pipeline did not accept the interaction and the logs; [`Endpoint`] is Discord's part. In
//! order:
//!
//! | request | answer |
//! | --- | --- |
//! | `X-Signature-Ed25519` / `X-Signature-Timestamp` missing | 401, nothing delivered |
//! | not a valid Ed25519 signature by the application's public key over `timestamp ‖ raw body` (`verify_strict`) | 401 (not the skeleton's 403: Discord sends forged ones on purpose and wants 401), nothing delivered |
//! | a body that is not an interaction | 400 |
//! | PING (type 1) | 200 `{"type":1}` (PONG), nothing delivered, started or not |
//! | autocomplete (type 4) | 200 with no choices, nothing delivered |
//! | provider not started, or the pipeline rejected it | 503, the interaction forgotten |
//! | command, component or modal, accepted | held open until the runtime's automatic ack ([`ack`]), then 200 with the deferred answer: `{"type":5}` (command, modal: "thinking…") or `{"type":6}` (component); `{"type":4,…,"flags":64}` when the ack carries a notice (`ctx.ack(notice)`, an ephemeral message) |
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
use axum::http::StatusCode;
use botmesh::provider::{Accepted, ProviderError, ProviderEvent};
use ed25519_dalek::{Signature, VerifyingKey};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Inner;
use super::inbound::{self, Kind, Parsed};
use super::rest::{Call, is_spent_interaction};
use crate::webhook::{Refused, SinkSlot, WebhookChannel, WebhookRequest};

/// How long after its arrival an interaction gets its deferred answer at the latest.
pub(crate) const FLOOR: Duration = Duration::from_millis(2_700);

/// How long an interaction token works.
const TOKEN_LIFE: Duration = Duration::from_secs(15 * 60);

/// Interaction types: a PING and an autocomplete are answered in the response without an
/// event; a component's deferred answer has no "thinking…" state.
const PING: u64 = 1;
const COMPONENT: u64 = 3;
const AUTOCOMPLETE: u64 = 4;

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
    /// The endpoint's end of `held`, until it waits on it.
    waiting: Option<oneshot::Receiver<Value>>,
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
    /// Registers an interaction and returns its event; `held`: it came to the endpoint, whose
    /// request its answer goes to (else to the callback endpoint).
    pub(crate) fn open(&self, parsed: Parsed, held: bool) -> ProviderEvent {
        let (held, waiting) = if held {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
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
                waiting,
                answered: false,
                since: Instant::now(),
            },
        );
        ProviderEvent::Interaction(parsed.interaction)
    }

    /// The endpoint's end of interaction `id`'s held request (once), and when it arrived.
    fn waiting(&self, id: &str) -> Option<(oneshot::Receiver<Value>, Instant)> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let o = open.get_mut(id)?;
        Some((o.waiting.take()?, o.since))
    }

    /// Forgets interaction `id`, unanswered: the pipeline did not accept it (its request got a
    /// 503), so nothing will ack it and there is no "thinking…" message to complete.
    fn forget(&self, id: &str) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
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

/// The interactions endpoint on `path`, for the webhook server; no route (404) without the
/// application's public key.
pub(crate) fn routes(inner: Arc<Inner>, path: &str) -> Router {
    match inner.config.public_key {
        Some(key) => crate::webhook::route(Arc::new(Endpoint { inner, key }), path),
        None => Router::new(),
    }
}

/// Discord's part of the interactions endpoint: the Ed25519 check, the interaction's event,
/// and its answer in the response.
struct Endpoint {
    inner: Arc<Inner>,
    key: VerifyingKey,
}

/// What the answer needs of a body the endpoint accepted: the interaction's type and id.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(rename = "type")]
    kind: u64,
    #[serde(default)]
    id: String,
}

/// The interaction a verified body carries; `None` for a PING or an autocomplete, answered
/// in the response with nothing delivered.
fn interaction_of(request: &WebhookRequest) -> Result<Option<Parsed>, Refused> {
    let v: Value = serde_json::from_slice(&request.body)
        .map_err(|e| Refused::Malformed(format!("body is not JSON: {e}")))?;
    if matches!(v["type"].as_u64(), Some(PING | AUTOCOMPLETE)) {
        return Ok(None);
    }
    inbound::interaction(&v, botmesh::clock::now_ms())
        .map_err(Refused::Malformed)?
        .map(Some)
        .ok_or_else(|| Refused::Malformed("unsupported interaction type".to_owned()))
}

impl Endpoint {
    /// The answer of the accepted interaction `head`: the runtime's ack when it comes by the
    /// floor (`queued`: a handler will run), else the deferred answer now.
    async fn deferred(&self, head: &Head, queued: bool) -> Value {
        let interactions = &self.inner.interactions;
        let mut waiting = interactions.waiting(&head.id);
        if let (true, Some((acked, arrived))) = (queued, waiting.as_mut()) {
            match tokio::time::timeout_at(*arrived + FLOOR, acked).await {
                Ok(Ok(body)) => return body,
                Ok(Err(_)) => {}
                Err(_) => {
                    tracing::warn!(
                        id = head.id,
                        "discord interaction not acked in time: deferring it"
                    );
                }
            }
        }
        // The floor, a duplicate, or one routed nowhere: the deferred answer, unless the ack
        // took it just now (its body is then in `waiting`).
        match interactions.take(&head.id, None) {
            Answer::Held(_, body) | Answer::Callback { body, .. } => body,
            Answer::Done => waiting
                .and_then(|(mut acked, _)| acked.try_recv().ok())
                .unwrap_or_else(|| json!({"type": if head.kind == COMPONENT { 6 } else { 5 }})),
        }
    }
}

impl WebhookChannel for Endpoint {
    fn slot(&self) -> &SinkSlot {
        &self.inner.slot
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        let signature = request
            .header("x-signature-ed25519")
            .ok_or(Refused::MissingSignature("X-Signature-Ed25519"))?;
        let timestamp = request
            .header("x-signature-timestamp")
            .ok_or(Refused::MissingSignature("X-Signature-Timestamp"))?;
        if verify(&self.key, timestamp, signature, &request.body) {
            Ok(())
        } else {
            Err(Refused::BadSignature("X-Signature-Ed25519"))
        }
    }

    fn bad_signature_status(&self) -> StatusCode {
        StatusCode::UNAUTHORIZED
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        let parsed = interaction_of(request)?;
        Ok(parsed
            .map(|p| ProviderEvent::Interaction(p.interaction))
            .into_iter()
            .collect())
    }

    /// Registers the interaction before it is delivered: its handler may ack it at once.
    fn parse_and_keep(
        &self,
        request: &WebhookRequest,
    ) -> impl std::future::Future<Output = Result<Vec<ProviderEvent>, Refused>> + Send {
        let events = interaction_of(request).map(|parsed| {
            parsed
                .map(|p| self.inner.interactions.open(p, true))
                .into_iter()
                .collect()
        });
        std::future::ready(events)
    }

    async fn answer(
        &self,
        request: &WebhookRequest,
        outcomes: &[Accepted],
    ) -> Option<(&'static str, String)> {
        let head: Head = serde_json::from_slice(&request.body).ok()?;
        let body = match (head.kind, outcomes) {
            (PING, _) => json!({"type": 1}),
            (AUTOCOMPLETE, _) => json!({"type": 8, "data": {"choices": []}}),
            (_, [accepted]) => {
                self.deferred(&head, matches!(accepted, Accepted::Queued))
                    .await
            }
            _ => return None,
        };
        Some(("application/json", body.to_string()))
    }

    fn not_accepted(&self, request: &WebhookRequest) {
        if let Ok(head) = serde_json::from_slice::<Head>(&request.body) {
            self.inner.interactions.forget(&head.id);
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
