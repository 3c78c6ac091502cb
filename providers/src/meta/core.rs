//! [`MetaCore`]: what every Meta provider holds (its config, Graph client, sink slot and
//! session window) and how it builds them and its webhook route.

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
    pub(crate) slot: SinkSlot,
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
            slot: SinkSlot::default(),
            window: Arc::default(),
        })
    }

    /// The webhook route, parsing with `inbound`.
    pub(crate) fn route<I: MetaInbound>(&self, inbound: I) -> axum::Router {
        MetaWebhook::route(self.config.graph(), &self.slot, &self.window, inbound)
    }
}
