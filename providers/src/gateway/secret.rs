//! The shared secret of an unsigned webhook: the gateway (Gupshup, Evolution API, WPPConnect)
//! signs nothing, so a request is taken only when it carries the secret, in the header
//! [`SECRET_HEADER`] (Evolution's `webhook.headers`) or as the first path segment after the
//! route (`/gupshup/<secret>`, for gateways that only take a URL). Missing: 401; wrong: 403
//! (compared in constant time); neither value is logged.

use std::sync::Arc;

use axum::Router;

use crate::webhook::{Refused, WebhookChannel, WebhookRequest, constant_time_eq};

/// The header that may carry the secret.
pub(crate) const SECRET_HEADER: &str = "x-webhook-secret";

/// What a refusal names (never the value).
const NAMED: &str = "X-Webhook-Secret or the path secret";

/// A route's shared secret.
pub(crate) struct Secret<'a> {
    /// The secret.
    pub(crate) value: &'a str,
    /// The route it guards (the path secret follows it).
    pub(crate) path: &'a str,
}

impl Secret<'_> {
    /// Takes `request` when its header or its path carries the secret.
    pub(crate) fn check(&self, request: &WebhookRequest) -> Result<(), Refused> {
        let given = request.header(SECRET_HEADER).or_else(|| {
            request
                .uri
                .path()
                .strip_prefix(self.path.trim_end_matches('/'))
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(|rest| rest.split('/').next())
                .filter(|token| !token.is_empty())
        });
        match given {
            None => Err(Refused::MissingSignature(NAMED)),
            Some(g) if constant_time_eq(g.as_bytes(), self.value.as_bytes()) => Ok(()),
            Some(_) => Err(Refused::BadSignature(NAMED)),
        }
    }
}

/// The routes of `channel`: `path` (the secret in the header) and everything under it (the
/// secret as the first segment, then anything the gateway appends, e.g. Evolution's event
/// name when `byEvents` is on).
pub(crate) fn routes<C: WebhookChannel>(channel: Arc<C>, path: &str) -> Router {
    let under = format!("{}/{{*rest}}", path.trim_end_matches('/'));
    crate::webhook::route(channel.clone(), path).merge(crate::webhook::route(channel, &under))
}
