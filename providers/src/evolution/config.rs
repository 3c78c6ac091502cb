//! [`EvolutionConfig`]: the gateway's URL and key, the instance, and the webhook settings, from
//! code or from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `EVOLUTION_API_URL` | the Evolution API server (`https://evo.example`) (required) | — |
//! | `EVOLUTION_API_KEY` | the instance's key (its `hash`) or the global key (header `apikey`) (required) | — |
//! | `EVOLUTION_INSTANCE` | the instance name; webhooks of another `instance` are refused (required) | — |
//! | `EVOLUTION_WEBHOOK_SECRET` | the webhook's shared secret: the header `X-Webhook-Secret` (set it in the instance's `webhook.headers`) or the URL `https://bot.example/evolution/<secret>` (at least 16 URL-safe characters) (required) | — |
//! | `EVOLUTION_WEBHOOK_PATH` | the webhook route | `/evolution` |
//! | `EVOLUTION_HISTORY_SECS` | messages older than this are history, not answered | `1800` |

use std::time::Duration;

use crate::gateway::GatewayEnv;
use crate::gateway::web::{WebEnv, WebSettings};

/// The Evolution provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type EvolutionConfigError = crate::settings::ConfigError;

const ENV: WebEnv = WebEnv {
    gateway: GatewayEnv {
        key: "EVOLUTION_API_KEY",
        secret: "EVOLUTION_WEBHOOK_SECRET",
        api_base: "EVOLUTION_API_URL",
        path: "EVOLUTION_WEBHOOK_PATH",
    },
    scope: "EVOLUTION_INSTANCE",
    history: "EVOLUTION_HISTORY_SECS",
    default_path: "/evolution",
};

/// The Evolution API provider's settings.
#[derive(Clone, Debug)]
pub struct EvolutionConfig(pub(crate) WebSettings);

impl EvolutionConfig {
    /// Settings with the server, the key, the instance and the webhook secret, and the
    /// defaults; refuses a server URL that is not `http(s)` and a weak secret.
    pub fn new(
        api_url: &str,
        api_key: impl Into<String>,
        instance: impl Into<String>,
        webhook_secret: impl Into<String>,
    ) -> Result<Self, EvolutionConfigError> {
        let (key, scope) = (api_key.into(), instance.into());
        WebSettings::new(api_url, key, scope, webhook_secret.into(), "/evolution").map(Self)
    }

    crate::settings::from_env_fn!(EvolutionConfigError);

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, EvolutionConfigError> {
        WebSettings::from_lookup(get, &ENV).map(Self)
    }

    /// The webhook route (`/evolution`); a path secret is the segment after it.
    pub fn webhook_path(self, path: &str) -> Result<Self, EvolutionConfigError> {
        self.0.with_path(path).map(Self)
    }

    /// How old a message may be and still be answered (30 minutes by default).
    pub fn history_horizon(mut self, horizon: Duration) -> Self {
        self.0.history_horizon = horizon;
        self
    }
}
