//! [`WppConnectConfig`]: the server's URL, the session and its token, and the webhook
//! settings, from code or from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `WPPCONNECT_API_URL` | the WPPConnect Server (`https://wpp.example`) (required) | — |
//! | `WPPCONNECT_SESSION` | the session; webhooks of another `session` are refused (required) | — |
//! | `WPPCONNECT_TOKEN` | the session's bearer token (from `POST /api/<session>/<secret key>/generate-token`) (required) | — |
//! | `WPPCONNECT_WEBHOOK_SECRET` | the webhook's shared secret, in its URL: `https://bot.example/wppconnect/<secret>` (at least 16 URL-safe characters) (required) | — |
//! | `WPPCONNECT_WEBHOOK_PATH` | the webhook route | `/wppconnect` |
//! | `WPPCONNECT_HISTORY_SECS` | messages older than this are history, not answered | `1800` |

use std::time::Duration;

use crate::gateway::web::DEFAULT_HISTORY_HORIZON;
use crate::gateway::{GatewayEnv, GatewaySettings};

/// The WPPConnect provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type WppConnectConfigError = crate::settings::ConfigError;

const ENV: GatewayEnv = GatewayEnv {
    key: "WPPCONNECT_TOKEN",
    secret: "WPPCONNECT_WEBHOOK_SECRET",
    api_base: "WPPCONNECT_API_URL",
    path: "WPPCONNECT_WEBHOOK_PATH",
};

/// The WPPConnect provider's settings.
#[derive(Clone)]
pub struct WppConnectConfig {
    pub(crate) gateway: GatewaySettings,
    pub(crate) session: String,
    pub(crate) history_horizon: Duration,
}

impl std::fmt::Debug for WppConnectConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WppConnectConfig")
            .field("session", &self.session)
            .field("history_horizon", &self.history_horizon)
            .field("gateway", &self.gateway)
            .finish_non_exhaustive()
    }
}

impl WppConnectConfig {
    /// Settings with the server, the session, its token and the webhook secret, and the
    /// defaults; refuses a server URL that is not `http(s)` and a weak secret.
    pub fn new(
        api_url: &str,
        session: impl Into<String>,
        token: impl Into<String>,
        webhook_secret: impl Into<String>,
    ) -> Result<Self, WppConnectConfigError> {
        let mut gateway =
            GatewaySettings::new(api_url, token.into(), webhook_secret.into(), "/wppconnect");
        gateway.set_api_base(api_url, "api_url")?;
        gateway.check_secret("webhook_secret")?;
        Ok(Self {
            gateway,
            session: session.into(),
            history_horizon: DEFAULT_HISTORY_HORIZON,
        })
    }

    /// Reads the settings from the environment (see the module table).
    pub fn from_env() -> Result<Self, WppConnectConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, WppConnectConfigError> {
        let get = crate::settings::trimmed(get);
        let need = |k: &'static str| get(k).ok_or(WppConnectConfigError::MissingEnv(k));
        need(ENV.api_base)?;
        let session = need("WPPCONNECT_SESSION")?;
        let gateway = GatewaySettings::from_lookup(&get, &ENV, "http://localhost", "/wppconnect")?;
        let history_horizon = crate::gateway::web::horizon_from(&get, "WPPCONNECT_HISTORY_SECS")?;
        Ok(Self {
            gateway,
            session,
            history_horizon,
        })
    }

    /// The webhook route (`/wppconnect`); the path secret is the segment after it.
    pub fn webhook_path(mut self, path: &str) -> Result<Self, WppConnectConfigError> {
        self.gateway.set_path(path.to_owned(), "webhook_path")?;
        Ok(self)
    }

    /// How old a message may be and still be answered (30 minutes by default).
    pub fn history_horizon(mut self, horizon: Duration) -> Self {
        self.history_horizon = horizon;
        self
    }
}
