//! [`MetaWebhook`]: the webhook route's channel part every Meta channel shares, on the
//! [`crate::webhook`] skeleton: the `hub.challenge` handshake (GET), `X-Hub-Signature-256`
//! over the raw body before anything is parsed (POST), and the session window noted from what
//! was parsed. The channel brings its body parser ([`MetaInbound`]).

use std::sync::Arc;

use botmesh::provider::ProviderEvent;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{GraphSettings, SessionWindow};
use crate::webhook::{Refused, SinkSlot, WebhookChannel, WebhookRequest, constant_time_eq};

/// The signature header.
const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// A Meta channel's webhook body parser.
pub(crate) trait MetaInbound: Send + Sync + 'static {
    /// The events of a verified body, in order; `Err` says why it is not the channel's
    /// webhook (answered 400, nothing delivered).
    fn parse(&self, body: &[u8]) -> Result<Vec<ProviderEvent>, String>;
}

/// One Meta webhook route.
pub(crate) struct MetaWebhook<I> {
    slot: SinkSlot,
    app_secret: String,
    verify_token: String,
    window: Arc<SessionWindow>,
    inbound: I,
}

impl<I: MetaInbound> MetaWebhook<I> {
    /// The route on `settings.path`, authenticated with `settings`' secrets, delivering to
    /// the sink in `slot` what `inbound` parses and noting it in `window`.
    pub(crate) fn route(
        settings: &GraphSettings,
        slot: &SinkSlot,
        window: &Arc<SessionWindow>,
        inbound: I,
    ) -> axum::Router {
        let channel = Self {
            slot: slot.clone(),
            app_secret: settings.app_secret.to_string(),
            verify_token: settings.verify_token.to_string(),
            window: window.clone(),
            inbound,
        };
        crate::webhook::route(Arc::new(channel), &settings.path)
    }
}

impl<I: MetaInbound> WebhookChannel for MetaWebhook<I> {
    fn slot(&self) -> &SinkSlot {
        &self.slot
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
        let expected = self.verify_token.as_bytes();
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
        if !signature_ok(&self.app_secret, sig, &request.body) {
            return Err(Refused::BadSignature("X-Hub-Signature-256"));
        }
        Ok(())
    }

    /// Parses the body and notes when each chat wrote (the 24-hour window).
    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        let events = self
            .inbound
            .parse(&request.body)
            .map_err(Refused::Malformed)?;
        self.window.note_events(&events);
        Ok(events)
    }
}

/// Checks `X-Hub-Signature-256: sha256=<hex>` against the raw body.
fn signature_ok(app_secret: &str, header: &str, body: &[u8]) -> bool {
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

#[cfg(test)]
mod tests {
    use super::signature_ok;

    #[test]
    fn meta_check_vector() {
        let vector = "sha256=0329a06b62cd16b33eb6792be8c60b158d89a2ee3a876fce9a881ebb488c0914";
        assert!(signature_ok("secret", vector, b"test"));
        assert!(!signature_ok("secret", vector, b"test "));
        assert!(!signature_ok("", vector, b"test"));
    }
}
