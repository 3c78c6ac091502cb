//! [`Gateway`]: what each gateway provider holds (its settings, its API and media clients,
//! the sink its webhook route delivers to) and the webhook route itself, checked with the
//! shared secret and parsed by the channel ([`GatewayConfig::parse`]).

use std::sync::Arc;

use axum::Router;
use botmesh::provider::{ProviderError, ProviderEvent};

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

/// A gateway provider's state, shared by its clones and its webhook route.
pub(crate) struct Gateway<C> {
    pub(crate) config: C,
    pub(crate) http: reqwest::Client,
    pub(crate) media: GuardedClient,
    pub(crate) slot: SinkSlot,
}

impl<C: GatewayConfig> Gateway<C> {
    /// The state of `provider` with `config`.
    pub(crate) fn new(provider: &str, config: C) -> Result<Arc<Self>, ProviderError> {
        let (http, media) = config.settings().clients(provider)?;
        Ok(Arc::new(Self {
            config,
            http,
            media,
            slot: SinkSlot::default(),
        }))
    }

    /// The webhook routes: the route (the secret in the header) and the paths under it (the
    /// secret as their first segment).
    pub(crate) fn routes(self: &Arc<Self>) -> Router {
        super::routes(self.clone(), &self.config.settings().path)
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

impl<C: GatewayConfig> WebhookChannel for Gateway<C> {
    fn slot(&self) -> &SinkSlot {
        &self.slot
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        let s = self.config.settings();
        Secret {
            value: &s.secret,
            path: &s.path,
        }
        .check(request)
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        self.config.parse(&request.body)
    }
}

/// The text of an edit: gateways edit texts only, without buttons.
pub(crate) fn edit_text<'a>(
    provider: &str,
    content: &'a botmesh::message::OutgoingContent,
) -> Result<&'a str, ProviderError> {
    match content {
        botmesh::message::OutgoingContent::Text { text, buttons } if buttons.is_empty() => Ok(text),
        _ => Err(super::unsupported(
            provider,
            "an edit of anything but a text without buttons",
        )),
    }
}

/// `impl Provider` for a gateway provider whose state is `self.inner` (an
/// `Arc<Gateway<_>>`): its name (`NAME` where it is used), its capabilities (the text limits
/// and edits given; no typing, read marks or acknowledgements), `start` and `stop` (the
/// webhook route's sink), and the channel's own items.
macro_rules! gateway_provider {
    ($provider:ty, text_limit: $text:expr, buttons_text_limit: $buttons:expr, edits: $edits:expr, { $($items:tt)* }) => {
        #[async_trait::async_trait]
        impl botmesh::provider::Provider for $provider {
            fn name(&self) -> &str {
                NAME
            }

            fn capabilities(&self) -> botmesh::provider::Capabilities {
                botmesh::provider::Capabilities {
                    text_limit: $text,
                    buttons_text_limit: $buttons,
                    interactions_require_ack: false,
                    edits: $edits,
                    typing: false,
                    mark_read: false,
                }
            }

            async fn start(
                &self,
                sink: botmesh::provider::EventSink,
            ) -> Result<(), botmesh::provider::ProviderError> {
                self.inner.slot.start(sink);
                Ok(())
            }

            async fn stop(&self) -> Result<(), botmesh::provider::ProviderError> {
                self.inner.slot.set(None);
                Ok(())
            }

            $($items)*
        }
    };
}
pub(crate) use gateway_provider;
