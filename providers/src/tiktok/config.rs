//! [`TikTokConfig`]: the business account, its token, the app's secret and the webhook route,
//! from code or from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `TIKTOK_ACCESS_TOKEN` | the business account's access token (header `Access-Token`) (required) | — |
//! | `TIKTOK_BUSINESS_ID` | the business account's id (`business_id` of the sends, `user_openid` of the webhooks; other accounts' webhooks are not delivered) (required) | — |
//! | `TIKTOK_APP_SECRET` | the app's client secret, which signs the webhooks (required) | — |
//! | `TIKTOK_API_BASE` | the API | `https://business-api.tiktok.com` |
//! | `TIKTOK_WEBHOOK_PATH` | the webhook route | `/tiktok` |
//! | `TIKTOK_SIGNATURE_TOLERANCE_SECS` | how far a webhook's signed timestamp may be from now | `300` |

use std::time::Duration;

use crate::http::GuardedClient;

/// The TikTok provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type TikTokConfigError = crate::settings::ConfigError;

/// TikTok's API for Business.
pub const DEFAULT_API_BASE: &str = "https://business-api.tiktok.com";

/// The TikTok provider's settings.
#[derive(Clone)]
pub struct TikTokConfig {
    pub(crate) token: String,
    pub(crate) business_id: String,
    pub(crate) app_secret: String,
    pub(crate) api_base: String,
    pub(crate) path: String,
    pub(crate) tolerance: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) media_client: Option<GuardedClient>,
}

impl std::fmt::Debug for TikTokConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TikTokConfig")
            .field("business_id", &self.business_id)
            .field("api_base", &self.api_base)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn invalid(setting: &'static str, reason: impl Into<String>) -> TikTokConfigError {
    TikTokConfigError::Invalid {
        setting,
        reason: reason.into(),
    }
}

impl TikTokConfig {
    /// Settings for the business account `business_id` with its token and the app's secret,
    /// and the defaults; refuses an empty value.
    pub fn new(
        token: impl Into<String>,
        business_id: impl Into<String>,
        app_secret: impl Into<String>,
    ) -> Result<Self, TikTokConfigError> {
        let (token, business_id, app_secret) =
            (token.into(), business_id.into(), app_secret.into());
        for (setting, value) in [
            ("token", &token),
            ("business_id", &business_id),
            ("app_secret", &app_secret),
        ] {
            if value.trim().is_empty() {
                return Err(invalid(setting, "is empty"));
            }
        }
        Ok(Self {
            token,
            business_id,
            app_secret,
            api_base: DEFAULT_API_BASE.to_owned(),
            path: "/tiktok".to_owned(),
            tolerance: Duration::from_secs(300),
            request_timeout: Duration::from_secs(30),
            media_client: None,
        })
    }

    /// Reads the settings from the environment (see the module table).
    pub fn from_env() -> Result<Self, TikTokConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, TikTokConfigError> {
        let get = crate::settings::trimmed(get);
        let need = |k: &'static str| get(k).ok_or(TikTokConfigError::MissingEnv(k));
        let mut c = Self::new(
            need("TIKTOK_ACCESS_TOKEN")?,
            need("TIKTOK_BUSINESS_ID")?,
            need("TIKTOK_APP_SECRET")?,
        )?;
        if let Some(base) = get("TIKTOK_API_BASE") {
            c = c
                .api_base(&base)
                .map_err(|_| invalid("TIKTOK_API_BASE", "must be an http(s) URL"))?;
        }
        if let Some(p) = get("TIKTOK_WEBHOOK_PATH") {
            c = c
                .webhook_path(&p)
                .map_err(|_| invalid("TIKTOK_WEBHOOK_PATH", "must start with '/'"))?;
        }
        if let Some(t) = get("TIKTOK_SIGNATURE_TOLERANCE_SECS") {
            let secs = t.parse().map_err(|_| {
                invalid(
                    "TIKTOK_SIGNATURE_TOLERANCE_SECS",
                    "must be a number of seconds",
                )
            })?;
            c.tolerance = Duration::from_secs(secs);
        }
        Ok(c)
    }

    /// Another API base URL (a fake in tests).
    pub fn api_base(mut self, base: &str) -> Result<Self, TikTokConfigError> {
        self.api_base = crate::settings::http_url(base, "api_base")?;
        Ok(self)
    }

    /// Another webhook route (`/tiktok` by default).
    pub fn webhook_path(mut self, path: &str) -> Result<Self, TikTokConfigError> {
        self.path = crate::settings::route(path.to_owned(), "webhook_path")?;
        Ok(self)
    }

    /// How far a webhook's signed timestamp may be from now (5 minutes by default).
    pub fn signature_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The SSRF-guarded client media are downloaded (and URLs to send fetched) with.
    pub fn media_client(mut self, client: GuardedClient) -> Self {
        self.media_client = Some(client);
        self
    }
}
