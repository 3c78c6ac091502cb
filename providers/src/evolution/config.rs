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

use crate::gateway::web::DEFAULT_HISTORY_HORIZON;
use crate::gateway::{GatewayEnv, GatewaySettings};

/// The Evolution provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type EvolutionConfigError = crate::settings::ConfigError;

const ENV: GatewayEnv = GatewayEnv {
    key: "EVOLUTION_API_KEY",
    secret: "EVOLUTION_WEBHOOK_SECRET",
    api_base: "EVOLUTION_API_URL",
    path: "EVOLUTION_WEBHOOK_PATH",
};

/// The Evolution API provider's settings.
#[derive(Clone)]
pub struct EvolutionConfig {
    pub(crate) gateway: GatewaySettings,
    pub(crate) instance: String,
    pub(crate) history_horizon: Duration,
}

impl std::fmt::Debug for EvolutionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvolutionConfig")
            .field("instance", &self.instance)
            .field("history_horizon", &self.history_horizon)
            .field("gateway", &self.gateway)
            .finish_non_exhaustive()
    }
}

impl EvolutionConfig {
    /// Settings with the server, the key, the instance and the webhook secret, and the
    /// defaults; refuses a server URL that is not `http(s)` and a weak secret.
    pub fn new(
        api_url: &str,
        api_key: impl Into<String>,
        instance: impl Into<String>,
        webhook_secret: impl Into<String>,
    ) -> Result<Self, EvolutionConfigError> {
        let mut gateway =
            GatewaySettings::new(api_url, api_key.into(), webhook_secret.into(), "/evolution");
        gateway.set_api_base(api_url, "api_url")?;
        gateway.check_secret("webhook_secret")?;
        Ok(Self {
            gateway,
            instance: instance.into(),
            history_horizon: DEFAULT_HISTORY_HORIZON,
        })
    }

    /// Reads the settings from the environment (see the module table).
    pub fn from_env() -> Result<Self, EvolutionConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, EvolutionConfigError> {
        let get = crate::settings::trimmed(get);
        let need = |k: &'static str| get(k).ok_or(EvolutionConfigError::MissingEnv(k));
        need(ENV.api_base)?;
        let instance = need("EVOLUTION_INSTANCE")?;
        let gateway = GatewaySettings::from_lookup(&get, &ENV, "http://localhost", "/evolution")?;
        let history_horizon = crate::gateway::web::horizon_from(&get, "EVOLUTION_HISTORY_SECS")?;
        Ok(Self {
            gateway,
            instance,
            history_horizon,
        })
    }

    /// The webhook route (`/evolution`); a path secret is the segment after it.
    pub fn webhook_path(mut self, path: &str) -> Result<Self, EvolutionConfigError> {
        self.gateway.set_path(path.to_owned(), "webhook_path")?;
        Ok(self)
    }

    /// How old a message may be and still be answered (30 minutes by default).
    pub fn history_horizon(mut self, horizon: Duration) -> Self {
        self.history_horizon = horizon;
        self
    }
}
