//! [`Rest`]: what a REST channel with signed webhooks holds (GoHighLevel, TikTok): its
//! settings, its API client and the SSRF-guarded media client; and [`Hook`], its webhook
//! route's state (the channel and the slot it delivers to), for which the channel writes its
//! [`WebhookChannel`](crate::webhook::WebhookChannel) (its signature check and its parser).

use std::sync::Arc;
use std::time::Duration;

use botmesh::provider::ProviderError;

use crate::http::GuardedClient;
use crate::webhook::SinkSlot;

/// A REST channel's state, shared by its provider's clones and its webhook route.
pub(crate) struct Rest<C> {
    pub(crate) config: C,
    pub(crate) http: reqwest::Client,
    pub(crate) media: GuardedClient,
}

impl<C> Rest<C> {
    /// The state of `provider` with `config`: an API client with `timeout`, and `media` (or a
    /// default [`GuardedClient`]).
    pub(crate) fn new(
        provider: &str,
        config: C,
        timeout: Duration,
        media: Option<&GuardedClient>,
    ) -> Result<Arc<Self>, ProviderError> {
        let (http, media) = crate::http::channel_clients(timeout, media)
            .map_err(|m| crate::errors::local(provider, m))?;
        Ok(Arc::new(Self {
            config,
            http,
            media,
        }))
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
pub(crate) struct Hook<C> {
    pub(crate) rest: Arc<Rest<C>>,
    pub(crate) slot: SinkSlot,
}

impl<C: Send + Sync + 'static> Hook<C>
where
    Self: crate::webhook::WebhookChannel,
{
    /// The route on `path` of `rest`, delivering to `slot`.
    pub(crate) fn route(rest: &Arc<Rest<C>>, slot: &SinkSlot, path: &str) -> axum::Router {
        let hook = Self {
            rest: rest.clone(),
            slot: slot.clone(),
        };
        crate::webhook::route(Arc::new(hook), path)
    }
}
