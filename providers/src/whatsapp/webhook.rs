//! The webhook route's channel part: the `hub.challenge` handshake (GET) and the signed
//! notifications (POST), checked with `X-Hub-Signature-256` over the raw body before parsing.
//! The table of answers is in the parent module; [`crate::webhook::route`] does the rest.

use std::sync::Arc;

use botmesh::provider::ProviderEvent;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{Inner, SIGNATURE_HEADER, inbound};
use crate::webhook::{Refused, SinkSlot, WebhookChannel, WebhookRequest, constant_time_eq};

/// The WhatsApp Cloud webhook route's channel.
pub(super) struct Channel(pub(super) Arc<Inner>);

impl WebhookChannel for Channel {
    fn slot(&self) -> &SinkSlot {
        &self.0.slot
    }

    fn handshake(&self, request: &WebhookRequest) -> Option<Result<String, Refused>> {
        let mut mode = None;
        let mut token = None;
        let mut challenge = None;
        for (k, v) in request.query_pairs() {
            match k.as_str() {
                "hub.mode" => mode = Some(v),
                "hub.verify_token" => token = Some(v),
                "hub.challenge" => challenge = Some(v),
                _ => {}
            }
        }
        let expected = self.0.config.verify_token.as_bytes();
        let token_ok = !expected.is_empty()
            && token
                .as_deref()
                .is_some_and(|t| constant_time_eq(t.as_bytes(), expected));
        Some(match (mode.as_deref(), challenge) {
            (Some("subscribe"), Some(challenge)) if token_ok => Ok(challenge),
            _ => Err(Refused::BadSignature("hub.verify_token")),
        })
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        let Some(sig) = request.headers.get(SIGNATURE_HEADER) else {
            return Err(Refused::MissingSignature("X-Hub-Signature-256"));
        };
        let sig = sig.to_str().unwrap_or_default();
        if !signature_ok(&self.0.config.app_secret, sig, &request.body) {
            return Err(Refused::BadSignature("X-Hub-Signature-256"));
        }
        Ok(())
    }

    /// Parses the envelope and remembers when each chat wrote (the 24-hour window).
    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        let events =
            inbound::parse(&request.body).map_err(|e| Refused::Malformed(e.to_string()))?;
        let mut map = self
            .0
            .last_inbound
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for e in &events {
            let (chat, at) = match e {
                ProviderEvent::Message(m) => (&m.chat, m.timestamp_ms),
                ProviderEvent::Interaction(i) => (&i.chat, i.timestamp_ms),
                _ => continue,
            };
            super::remember_inbound(&mut map, chat, at);
        }
        Ok(events)
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
