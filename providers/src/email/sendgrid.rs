//! SendGrid Inbound Parse posts on the shared webhook server.
//!
//! Inbound Parse signs nothing (there is no signature header to check), so the route takes a
//! request only when it carries the shared secret: as the path segment after the route (the
//! URL given to SendGrid is `https://bot.example/email/sendgrid/<secret>`) or as the password
//! of basic auth (`https://user:<secret>@bot.example/email/sendgrid`). Keep the secret long
//! and random, serve the route over HTTPS only, and rotate the secret if a URL leaks.
//!
//! | request | answer |
//! | --- | --- |
//! | no secret | 401, nothing delivered |
//! | a wrong secret (compared in constant time) | 403 |
//! | not a multipart form, or no `from` / `headers` / `email` field | 400 |
//! | a mail the rules drop | 200, nothing delivered |
//! | accepted by the pipeline | 200 |
//! | not started, the store or the pipeline unavailable | 503: SendGrid retries (for up to 3 days) |
//!
//! Both of SendGrid's formats are read: the parsed one (`headers`, the raw header block
//! that carries Message-ID and the threading headers; `text`; `attachment1…N` files) and
//! "send raw" (the whole mail in `email`).

use super::ParseApi;
use super::config::EmailConfig;
use super::form::Form;
use super::inbound::{self, Mail};
use crate::webhook::{Refused, WebhookRequest, constant_time_eq};

/// What a refusal names (never the value).
const NAMED: &str = "the path secret or basic auth";

/// SendGrid's part of its route: the shared secret.
pub(super) struct SendGrid;

/// The secret a request carries: the first path segment after the route, else the password
/// of its basic auth.
fn given_secret(request: &WebhookRequest, path: &str) -> Option<String> {
    let in_path = request
        .uri
        .path()
        .strip_prefix(path.trim_end_matches('/'))
        .and_then(|rest| rest.strip_prefix('/'))
        .and_then(|rest| rest.split('/').next())
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    in_path.or_else(|| {
        let auth = request.header("authorization")?;
        let encoded = auth
            .strip_prefix("Basic ")
            .or_else(|| auth.strip_prefix("basic "))?;
        let decoded = botmesh::codec::decode_base64(encoded.trim())?;
        let text = String::from_utf8(decoded).ok()?;
        text.split_once(':')
            .map(|(_, password)| password.to_owned())
    })
}

/// The mail of a SendGrid post.
fn mail_of(form: &Form) -> Result<Mail, String> {
    if let Some(raw) = form.value("email") {
        return inbound::from_mime(raw.as_bytes()).map_err(|e| e.to_string());
    }
    let Some(headers) = form.value("headers") else {
        return Err("neither headers nor email is given".to_owned());
    };
    let text = form.get("text").unwrap_or_default().to_owned();
    inbound::from_parts(headers, text, form.files_named("attachment")).map_err(|e| e.to_string())
}

impl ParseApi for SendGrid {
    fn verify(&self, config: &EmailConfig, request: &WebhookRequest) -> Result<(), Refused> {
        let Some(secret) = config.sendgrid_secret.as_deref() else {
            return Err(Refused::BadSignature(NAMED));
        };
        match given_secret(request, &config.sendgrid_path) {
            None => Err(Refused::MissingSignature(NAMED)),
            Some(g) if constant_time_eq(g.as_bytes(), secret.as_bytes()) => Ok(()),
            Some(_) => Err(Refused::BadSignature(NAMED)),
        }
    }

    fn mail_of(form: &Form) -> Result<Mail, String> {
        mail_of(form)
    }
}
