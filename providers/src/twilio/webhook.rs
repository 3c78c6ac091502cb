//! The inbound and status-callback routes' channel part: rebuild the public URL, check
//! `X-Twilio-Signature` over it and every parameter, decode; [`crate::webhook::route`] does
//! the rest (delivery, answers), and acknowledges an inbound message with empty TwiML.

use std::sync::Arc;

use axum::http::{HeaderMap, Uri};
use botmesh::message::ChatId;
use botmesh::provider::ProviderEvent;

use super::inbound::{self, Form};
use super::{Inner, TWIML_EMPTY, verify};
use crate::webhook::{Refused, SinkSlot, WebhookChannel, WebhookRequest};

/// Which of the two routes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// Inbound messages.
    Inbound,
    /// Status callbacks of sent messages.
    Status,
}

/// A Twilio webhook route's channel.
pub(super) struct Channel {
    pub(super) inner: Arc<Inner>,
    pub(super) slot: SinkSlot,
    pub(super) kind: Kind,
}

/// Rebuilds the URL Twilio requested (for the signature).
fn public_url(inner: &Inner, headers: &HeaderMap, uri: &Uri) -> String {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    if let Some(base) = &inner.config.webhook_base_url {
        return format!("{base}{path}");
    }
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let proto = header("x-forwarded-proto").unwrap_or("http");
    let host = header("x-forwarded-host")
        .or_else(|| header("host"))
        .unwrap_or("localhost");
    format!("{proto}://{host}{path}")
}

/// Decodes the form.
fn form(body: &[u8]) -> Result<Form, Refused> {
    serde_urlencoded::from_bytes(body)
        .map(Form)
        .map_err(|e| Refused::Malformed(format!("body is not a form: {e}")))
}

impl WebhookChannel for Channel {
    fn slot(&self) -> &SinkSlot {
        &self.slot
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        let Some(sig) = request.header("x-twilio-signature") else {
            return Err(Refused::MissingSignature("X-Twilio-Signature"));
        };
        let Form(params) = form(&request.body)?;
        let url = public_url(&self.inner, &request.headers, &request.uri);
        if !verify(&self.inner.config.auth_token, &url, &params, sig) {
            return Err(Refused::BadSignature("X-Twilio-Signature"));
        }
        Ok(())
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        let form = form(&request.body)?;
        let malformed = |e: inbound::Malformed| Refused::Malformed(e.to_string());
        match self.kind {
            Kind::Inbound => {
                let options = |chat: &ChatId| {
                    self.inner
                        .options
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(chat)
                        .cloned()
                        .unwrap_or_default()
                };
                inbound::message_events(&form, options).map_err(malformed)
            }
            Kind::Status => inbound::status_event(&form)
                .map(|e| vec![e])
                .map_err(malformed),
        }
    }

    fn accepted(&self) -> Option<(&'static str, String)> {
        match self.kind {
            Kind::Inbound => Some(("text/xml", TWIML_EMPTY.to_owned())),
            Kind::Status => None,
        }
    }
}
