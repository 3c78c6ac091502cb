//! [`Gateway`]: what each gateway channel holds (its settings, its API and media clients) and
//! its webhook route, checked with the shared secret and parsed by the channel
//! ([`GatewayConfig::parse`]), delivering to the slot of its
//! [`WebhookProvider`](crate::webhook::WebhookProvider).

use std::sync::Arc;

use axum::Router;
use botmesh::provider::{Capabilities, ProviderError, ProviderEvent};

use super::{GatewaySettings, Secret};
use crate::http::GuardedClient;
use crate::webhook::{Refused, SinkSlot, WebhookChannel, WebhookRequest};

/// A gateway channel's settings: the shared part, and how its webhook bodies read.
pub(crate) trait GatewayConfig: std::fmt::Debug + Send + Sync + 'static {
    /// The shared settings.
    fn settings(&self) -> &GatewaySettings;

    /// The events of a webhook body whose secret was checked.
    fn parse(&self, body: &[u8]) -> Result<Vec<ProviderEvent>, Refused>;
}

/// A gateway channel's state, shared by its provider's clones and its webhook route.
pub(crate) struct Gateway<C> {
    pub(crate) config: C,
    pub(crate) http: reqwest::Client,
    /// Media downloads from hosted URLs (Gupshup's; the WhatsApp-Web gateways serve media
    /// through their API).
    #[cfg_attr(not(feature = "gupshup"), allow(dead_code))]
    pub(crate) media: GuardedClient,
}

/// A gateway's webhook route: the gateway and the slot it delivers to.
struct Route<C> {
    gateway: Arc<Gateway<C>>,
    slot: SinkSlot,
}

impl<C: GatewayConfig> Gateway<C> {
    /// The state of `provider` with `config`.
    pub(crate) fn new(provider: &str, config: C) -> Result<Arc<Self>, ProviderError> {
        let (http, media) = config.settings().clients(provider)?;
        Ok(Arc::new(Self {
            config,
            http,
            media,
        }))
    }

    /// The webhook routes, delivering to `slot`: the route (the secret in the header) and
    /// the paths under it (the secret as their first segment).
    pub(crate) fn routes(self: &Arc<Self>, slot: &SinkSlot) -> Router {
        let route = Route {
            gateway: self.clone(),
            slot: slot.clone(),
        };
        super::routes(Arc::new(route), &self.config.settings().path)
    }

    /// The capabilities of a gateway channel ([`crate::capabilities::rest`]).
    pub(crate) fn capabilities(
        text_limit: usize,
        buttons_text_limit: Option<usize>,
        edits: bool,
    ) -> Capabilities {
        crate::capabilities::rest(text_limit, buttons_text_limit, edits)
    }

    /// The API base URL followed by `tail`.
    pub(crate) fn url(&self, tail: &str) -> String {
        format!("{}{tail}", self.config.settings().api_base)
    }
}

impl<C> std::fmt::Debug for Gateway<C>
where
    C: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<C: GatewayConfig> WebhookChannel for Route<C> {
    fn slot(&self) -> &SinkSlot {
        &self.slot
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        let s = self.gateway.config.settings();
        Secret {
            value: &s.secret,
            path: &s.path,
        }
        .check(request)
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        self.gateway.config.parse(&request.body)
    }
}

/// The text of an edit: gateways edit texts only, without buttons.
#[cfg(any(feature = "evolution", feature = "wppconnect"))]
pub(crate) fn edit_text<'a>(
    provider: &str,
    content: &'a botmesh::message::OutgoingContent,
) -> Result<&'a str, ProviderError> {
    match content {
        botmesh::message::OutgoingContent::Text { text, buttons } if buttons.is_empty() => Ok(text),
        _ => Err(crate::errors::unsupported_content(
            provider,
            "an edit of anything but a text without buttons",
        )),
    }
}
