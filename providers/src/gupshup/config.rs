//! [`GupshupConfig`]: the account key, the app and its number, and the webhook settings, from
//! code or from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `GUPSHUP_API_KEY` | the account API key (header `apikey`) (required) | — |
//! | `GUPSHUP_APP_NAME` | the app (`src.name`); a v2 callback of another `app` is refused (required) | — |
//! | `GUPSHUP_SOURCE` | the app's WhatsApp number, digits with country code (required) | — |
//! | `GUPSHUP_WEBHOOK_SECRET` | the callback URL's secret: `https://bot.example/gupshup/<secret>` (Gupshup signs nothing; at least 16 URL-safe characters) (required) | — |
//! | `GUPSHUP_APP_ID` | the app id; a Meta-format callback of another `gs_app_id` is refused | unset: not checked |
//! | `GUPSHUP_WEBHOOK_PATH` | the callback route (the secret follows it) | `/gupshup` |
//! | `GUPSHUP_API_BASE` | the REST base URL | `https://api.gupshup.io` |

use derive_setters::Setters;

use crate::gateway::{GatewayEnv, GatewaySettings};
use crate::http::GuardedClient;

/// The Gupshup provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type GupshupConfigError = crate::settings::ConfigError;

/// The default REST base.
pub const DEFAULT_API_BASE: &str = "https://api.gupshup.io";

const ENV: GatewayEnv = GatewayEnv {
    key: "GUPSHUP_API_KEY",
    secret: "GUPSHUP_WEBHOOK_SECRET",
    api_base: "GUPSHUP_API_BASE",
    path: "GUPSHUP_WEBHOOK_PATH",
};

/// The Gupshup provider's settings.
#[derive(Clone, Debug, Setters)]
#[setters(generate = false)]
pub struct GupshupConfig {
    pub(crate) gateway: GatewaySettings,
    pub(crate) app_name: String,
    pub(crate) source: String,
    /// The app id that Meta-format callbacks must carry as `gs_app_id`.
    #[setters(generate, into, strip_option)]
    pub(crate) app_id: Option<String>,
}

impl GupshupConfig {
    /// Settings with the key, the app, its number and the webhook secret, and the defaults;
    /// refuses a secret shorter than 16 characters or not URL-safe.
    pub fn new(
        api_key: impl Into<String>,
        app_name: impl Into<String>,
        source: impl Into<String>,
        webhook_secret: impl Into<String>,
    ) -> Result<Self, GupshupConfigError> {
        let gateway = GatewaySettings::new(
            DEFAULT_API_BASE,
            api_key.into(),
            webhook_secret.into(),
            "/gupshup",
        );
        gateway.check_secret("webhook_secret")?;
        Ok(Self {
            gateway,
            app_name: app_name.into(),
            source: source.into(),
            app_id: None,
        })
    }

    crate::settings::from_env_fn!(GupshupConfigError);

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, GupshupConfigError> {
        let get = crate::settings::trimmed(get);
        let need = |k: &'static str| get(k).ok_or(GupshupConfigError::MissingEnv(k));
        let (app_name, source) = (need("GUPSHUP_APP_NAME")?, need("GUPSHUP_SOURCE")?);
        let gateway = GatewaySettings::from_lookup(&get, &ENV, DEFAULT_API_BASE, "/gupshup")?;
        Ok(Self {
            gateway,
            app_name,
            source,
            app_id: get("GUPSHUP_APP_ID"),
        })
    }

    /// Another REST base URL (a fake in tests).
    pub fn api_base(mut self, base: &str) -> Result<Self, GupshupConfigError> {
        self.gateway.api_base = crate::settings::http_url(base, "api_base")?;
        Ok(self)
    }

    /// The callback route (`/gupshup`); the secret is the segment after it.
    pub fn webhook_path(mut self, path: &str) -> Result<Self, GupshupConfigError> {
        self.gateway.path = crate::settings::route(path.to_owned(), "webhook_path")?;
        Ok(self)
    }

    /// The client media downloads go through (a [`GuardedClient`] with no allow-list by default).
    pub fn media_client(mut self, client: GuardedClient) -> Self {
        self.gateway.media_client = Some(client);
        self
    }
}
