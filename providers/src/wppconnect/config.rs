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

use crate::gateway::GatewayEnv;
use crate::gateway::web::{WebEnv, WebSettings};

/// The WPPConnect provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type WppConnectConfigError = crate::settings::ConfigError;

const ENV: WebEnv = WebEnv {
    gateway: GatewayEnv {
        key: "WPPCONNECT_TOKEN",
        secret: "WPPCONNECT_WEBHOOK_SECRET",
        api_base: "WPPCONNECT_API_URL",
        path: "WPPCONNECT_WEBHOOK_PATH",
    },
    scope: "WPPCONNECT_SESSION",
    history: "WPPCONNECT_HISTORY_SECS",
    default_path: "/wppconnect",
};

/// The WPPConnect provider's settings.
#[derive(Clone, Debug)]
pub struct WppConnectConfig(pub(crate) WebSettings);

impl WppConnectConfig {
    /// Settings with the server, the session, its token and the webhook secret, and the
    /// defaults; refuses a server URL that is not `http(s)` and a weak secret.
    pub fn new(
        api_url: &str,
        session: impl Into<String>,
        token: impl Into<String>,
        webhook_secret: impl Into<String>,
    ) -> Result<Self, WppConnectConfigError> {
        let (key, scope) = (token.into(), session.into());
        WebSettings::new(api_url, key, scope, webhook_secret.into(), "/wppconnect").map(Self)
    }

    crate::settings::from_env_fn!(WppConnectConfigError);

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, WppConnectConfigError> {
        WebSettings::from_lookup(get, &ENV).map(Self)
    }

    /// The webhook route (`/wppconnect`); the path secret is the segment after it.
    pub fn webhook_path(self, path: &str) -> Result<Self, WppConnectConfigError> {
        self.0.with_path(path).map(Self)
    }

    /// How old a message may be and still be answered (30 minutes by default).
    pub fn history_horizon(mut self, horizon: Duration) -> Self {
        self.0.history_horizon = horizon;
        self
    }
}
