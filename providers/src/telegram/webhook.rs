//! The webhook route's channel part: the `X-Telegram-Bot-Api-Secret-Token` check and one
//! update per request; [`crate::webhook::route`] does the rest.

use std::sync::Arc;

use axum::Router;
use botmesh::provider::ProviderEvent;
use serde_json::Value;

use super::{Inner, TelegramMode, update};
use crate::webhook::{Refused, SinkSlot, WebhookChannel, WebhookRequest, constant_time_eq};

/// The header Telegram puts the `secret_token` in.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// The Telegram webhook route's channel.
struct Channel {
    inner: Arc<Inner>,
    secret_token: String,
}

/// The webhook route (empty in polling mode).
pub(super) fn routes(inner: Arc<Inner>) -> Router {
    let TelegramMode::Webhook {
        path, secret_token, ..
    } = &inner.config.mode
    else {
        return Router::new();
    };
    let (path, secret_token) = (path.clone(), secret_token.clone());
    crate::webhook::route(
        Arc::new(Channel {
            inner,
            secret_token,
        }),
        &path,
    )
}

impl WebhookChannel for Channel {
    fn slot(&self) -> &SinkSlot {
        &self.inner.slot
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        match request.headers.get(SECRET_HEADER) {
            None => Err(Refused::MissingSignature("X-Telegram-Bot-Api-Secret-Token")),
            Some(v) if !constant_time_eq(v.as_bytes(), self.secret_token.as_bytes()) => {
                Err(Refused::BadSignature("X-Telegram-Bot-Api-Secret-Token"))
            }
            Some(_) => Ok(()),
        }
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        let value: Value = serde_json::from_slice(&request.body)
            .map_err(|e| Refused::Malformed(format!("body is not JSON: {e}")))?;
        let (_, event) =
            update::parse_update(value).map_err(|e| Refused::Malformed(e.to_string()))?;
        Ok(event.into_iter().collect())
    }
}
