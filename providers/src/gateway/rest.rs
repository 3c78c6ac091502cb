//! [`Rest`]: what a REST channel with signed webhooks holds (GoHighLevel, TikTok): its
//! settings, its API client and the SSRF-guarded media client; and its webhook route, which
//! checks and reads a request as the channel's [`RestConfig`] says (its signature check and
//! its parser) and delivers to the slot of its provider.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use botmesh::provider::{ProviderError, ProviderEvent};

use crate::http::GuardedClient;
use crate::webhook::{Refused, SinkSlot, WebhookChannel, WebhookRequest};

/// A REST channel's settings: what its clients are made of, and how its webhook requests are
/// checked and read.
pub(crate) trait RestConfig: Send + Sync + 'static {
    /// The timeout of one API call, and the media client given (a default one otherwise).
    fn clients(&self) -> (Duration, Option<&GuardedClient>);

    /// Checks a webhook request's signature ([`WebhookChannel::verify`]).
    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused>;

    /// The events of a checked webhook request ([`WebhookChannel::parse`]).
    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused>;

    /// The status that makes the channel deliver a request again
    /// ([`WebhookChannel::retry_status`]; 503 by default).
    fn retry_status(&self) -> StatusCode {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// A REST channel's state, shared by its provider's clones and its webhook route.
pub(crate) struct Rest<C> {
    pub(crate) config: C,
    pub(crate) http: reqwest::Client,
    pub(crate) media: GuardedClient,
}

impl<C: RestConfig> Rest<C> {
    /// The state of `provider` with `config`: an API client and a media client as the config
    /// says.
    pub(crate) fn new(provider: &str, config: C) -> Result<Arc<Self>, ProviderError> {
        let (timeout, media) = config.clients();
        let (http, media) = crate::http::channel_clients(timeout, media)
            .map_err(|m| crate::errors::local(provider, m))?;
        Ok(Arc::new(Self {
            config,
            http,
            media,
        }))
    }

    /// The webhook route on `path`, delivering to `slot`.
    pub(crate) fn routes(self: &Arc<Self>, slot: &SinkSlot, path: &str) -> axum::Router {
        let hook = Hook {
            rest: self.clone(),
            slot: slot.clone(),
        };
        crate::webhook::route(Arc::new(hook), path)
    }
}

impl<C: std::fmt::Debug> std::fmt::Debug for Rest<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rest")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A REST channel's webhook route: the channel, and the slot it delivers to.
struct Hook<C> {
    rest: Arc<Rest<C>>,
    slot: SinkSlot,
}

impl<C: RestConfig> WebhookChannel for Hook<C> {
    fn slot(&self) -> &SinkSlot {
        &self.slot
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        self.rest.config.verify(request)
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        self.rest.config.parse(request)
    }

    fn retry_status(&self) -> StatusCode {
        self.rest.config.retry_status()
    }
}
