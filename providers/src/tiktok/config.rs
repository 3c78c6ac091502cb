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

use derive_setters::Setters;

use crate::http::GuardedClient;
use crate::settings::{Redacted, invalid};

/// The TikTok provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type TikTokConfigError = crate::settings::ConfigError;

/// TikTok's API for Business.
pub const DEFAULT_API_BASE: &str = "https://business-api.tiktok.com";

/// The TikTok provider's settings.
#[derive(Clone, Debug, Setters)]
#[setters(generate = false)]
pub struct TikTokConfig {
    pub(crate) token: Redacted,
    pub(crate) business_id: String,
    pub(crate) app_secret: Redacted,
    pub(crate) api_base: String,
    pub(crate) path: String,
    /// How far a webhook's signed timestamp may be from now (5 minutes by default).
    #[setters(generate, rename = "signature_tolerance")]
    pub(crate) tolerance: Duration,
    pub(crate) request_timeout: Duration,
    /// The SSRF-guarded client media are downloaded (and URLs to send fetched) with.
    #[setters(generate, strip_option)]
    pub(crate) media_client: Option<GuardedClient>,
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
            token: token.into(),
            business_id,
            app_secret: app_secret.into(),
            api_base: DEFAULT_API_BASE.to_owned(),
            path: "/tiktok".to_owned(),
            tolerance: Duration::from_secs(300),
            request_timeout: Duration::from_secs(30),
            media_client: None,
        })
    }

    crate::settings::from_env_fn!(TikTokConfigError);

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

    crate::settings::url_setters!(TikTokConfigError, "/tiktok");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_account_and_hides_the_token_and_the_secret() {
        let cfg = TikTokConfig::new("tok3n-value", "biz-1", "s3cret-value").expect("config");
        let shown = format!("{cfg:?}");
        assert!(shown.contains("biz-1"), "{shown}");
        assert!(
            !shown.contains("tok3n-value") && !shown.contains("s3cret-value"),
            "{shown}"
        );
    }
}
