//! The inbound and status-callback handlers: rebuild the public URL, check
//! `X-Twilio-Signature` over it and every parameter, decode, deliver, answer TwiML.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use botmesh::message::ChatId;

use super::inbound::{self, Form};
use super::{Inner, TWIML_EMPTY, verify};
use crate::webhook::{Answer, deliver_all};

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

/// Checks the signature and decodes the form.
fn verified_form(
    inner: &Inner,
    headers: &HeaderMap,
    uri: &Uri,
    body: &[u8],
) -> Result<Form, Answer> {
    let Some(sig) = headers
        .get("x-twilio-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return Err(Answer::MissingSignature("X-Twilio-Signature"));
    };
    let params: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
        .map_err(|e| Answer::Malformed(format!("body is not a form: {e}")))?;
    let url = public_url(inner, headers, uri);
    if !verify(&inner.config.auth_token, &url, &params, sig) {
        return Err(Answer::BadSignature("X-Twilio-Signature"));
    }
    Ok(Form(params))
}

pub(super) async fn inbound_route(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Answer {
    let form = match verified_form(&inner, &headers, &uri, &body) {
        Ok(f) => f,
        Err(a) => return a,
    };
    let options = |chat: &ChatId| {
        inner
            .options
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(chat)
            .cloned()
            .unwrap_or_default()
    };
    let events = match inbound::message_events(&form, options) {
        Ok(e) => e,
        Err(e) => return Answer::Malformed(e.to_string()),
    };
    match deliver_all(&inner.slot, events).await {
        Ok(()) => Answer::Ok(Some(("text/xml", TWIML_EMPTY.to_owned()))),
        Err(a) => a,
    }
}

pub(super) async fn status_route(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Answer {
    let form = match verified_form(&inner, &headers, &uri, &body) {
        Ok(f) => f,
        Err(a) => return a,
    };
    let event = match inbound::status_event(&form) {
        Ok(e) => e,
        Err(e) => return Answer::Malformed(e.to_string()),
    };
    match deliver_all(&inner.slot, vec![event]).await {
        Ok(()) => Answer::Ok(None),
        Err(a) => a,
    }
}
