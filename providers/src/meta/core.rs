//! [`MetaCore`]: what every Meta channel holds (its config, Graph client and session window)
//! and how it builds them and its webhook route (the sink slot is the
//! [`WebhookProvider`](crate::webhook::WebhookProvider)'s).

use std::sync::Arc;

use botmesh::provider::ProviderError;

use super::graph::Table;
use super::{GraphClient, GraphSettings, MetaInbound, MetaWebhook, SessionWindow};
use crate::webhook::SinkSlot;

/// A Meta channel's config: it keeps the shared settings.
pub(crate) trait MetaConfig {
    /// The shared settings.
    fn graph(&self) -> &GraphSettings;
}

/// A Meta provider's shared state; `Cfg` is the channel's config.
pub(crate) struct MetaCore<Cfg> {
    pub(crate) config: Cfg,
    pub(crate) graph: GraphClient,
    pub(crate) window: Arc<SessionWindow>,
}

impl<Cfg: MetaConfig> MetaCore<Cfg> {
    /// The state of `provider` with `config`; `table` and `payload_limit` are its Graph
    /// client's.
    pub(crate) fn new(
        provider: &'static str,
        config: Cfg,
        table: Table,
        payload_limit: u64,
    ) -> Result<Self, ProviderError> {
        let graph = GraphClient::new(provider, config.graph(), table, payload_limit)?;
        Ok(Self {
            config,
            graph,
            window: Arc::default(),
        })
    }

    /// The webhook route, parsing with `inbound` and delivering to the sink in `slot`.
    pub(crate) fn route<I: MetaInbound>(&self, slot: &SinkSlot, inbound: I) -> axum::Router {
        MetaWebhook::route(self.config.graph(), slot, &self.window, inbound)
    }
}
