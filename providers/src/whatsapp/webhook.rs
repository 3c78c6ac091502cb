//! The webhook route's two handlers: the `hub.challenge` handshake (GET) and the signed
//! notifications (POST), checked with `X-Hub-Signature-256` over the raw body before parsing.
//! The table of answers is in the parent module.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use botmesh::provider::ProviderEvent;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{Inner, SIGNATURE_HEADER, inbound};
use crate::webhook::{Answer, constant_time_eq, deliver_all};

pub(super) async fn verify(State(inner): State<Arc<Inner>>, uri: Uri) -> Answer {
    let mut mode = None;
    let mut token = None;
    let mut challenge = None;
    for (k, v) in url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "hub.mode" => mode = Some(v.into_owned()),
            "hub.verify_token" => token = Some(v.into_owned()),
            "hub.challenge" => challenge = Some(v.into_owned()),
            _ => {}
        }
    }
    let expected = inner.config.verify_token.as_bytes();
    let token_ok = !expected.is_empty()
        && token
            .as_deref()
            .is_some_and(|t| constant_time_eq(t.as_bytes(), expected));
    match (mode.as_deref(), challenge) {
        (Some("subscribe"), Some(challenge)) if token_ok => {
            Answer::Ok(Some(("text/plain", challenge)))
        }
        _ => Answer::BadSignature("hub.verify_token"),
    }
}

/// Checks `X-Hub-Signature-256: sha256=<hex>` against the raw body.
pub(crate) fn signature_ok(app_secret: &str, header: &str, body: &[u8]) -> bool {
    if app_secret.is_empty() {
        return false;
    }
    let Some(hex_sig) = header.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Ok(given) = hex::decode(hex_sig) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&given).is_ok()
}

pub(super) async fn notify(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let Some(sig) = headers.get(SIGNATURE_HEADER) else {
        return Answer::MissingSignature("X-Hub-Signature-256");
    };
    let sig = sig.to_str().unwrap_or_default();
    if !signature_ok(&inner.config.app_secret, sig, &body) {
        return Answer::BadSignature("X-Hub-Signature-256");
    }
    let events = match inbound::parse(&body) {
        Ok(events) => events,
        Err(e) => return Answer::Malformed(e.to_string()),
    };
    {
        let mut map = inner.last_inbound.lock().unwrap_or_else(|e| e.into_inner());
        for e in &events {
            let (chat, at) = match e {
                ProviderEvent::Message(m) => (&m.chat, m.timestamp_ms),
                ProviderEvent::Interaction(i) => (&i.chat, i.timestamp_ms),
                _ => continue,
            };
            super::remember_inbound(&mut map, chat, at);
        }
    }
    match deliver_all(&inner.slot, events).await {
        Ok(()) => Answer::Ok(None),
        Err(answer) => answer,
    }
}
