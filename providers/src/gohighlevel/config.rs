//! [`GoHighLevelConfig`]: the location, its token, HighLevel's webhook keys and the webhook
//! route, from code or from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `GHL_ACCESS_TOKEN` | the location's Private Integration token, or its OAuth access token (`Authorization: Bearer`) (required) | — |
//! | `GHL_LOCATION_ID` | the location (sub-account); webhooks of other locations are not delivered (required) | — |
//! | `GHL_WEBHOOK_PUBLIC_KEY` | HighLevel's webhook public key, PEM: the Ed25519 key (`X-GHL-Signature`) or the legacy RSA key (`X-WH-Signature`) (required) | — |
//! | `GHL_WEBHOOK_LEGACY_PUBLIC_KEY` | a second key, PEM (the legacy RSA key next to the Ed25519 one, while HighLevel sends both) | — |
//! | `GHL_API_BASE` | the API | `https://services.leadconnectorhq.com` |
//! | `GHL_API_VERSION` | the `Version` header | `2021-04-15` |
//! | `GHL_WEBHOOK_PATH` | the webhook route | `/gohighlevel` |
//! | `GHL_MEDIA_HOSTS` | more hosts attachments may be downloaded from, comma-separated (`cdn.example.com`, `.example.com` for its subdomains) | HighLevel's (see the module) |

use std::time::Duration;

use super::signature::WebhookKey;
use crate::http::GuardedClient;
use crate::settings::invalid;

/// The GoHighLevel provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type GoHighLevelConfigError = crate::settings::ConfigError;

/// HighLevel's API.
pub const DEFAULT_API_BASE: &str = "https://services.leadconnectorhq.com";

/// The API version the Conversations endpoints take.
pub const DEFAULT_API_VERSION: &str = "2021-04-15";

/// The GoHighLevel provider's settings.
#[derive(Clone, Debug)]
pub struct GoHighLevelConfig {
    pub(crate) token: crate::settings::Redacted,
    pub(crate) location_id: String,
    pub(crate) keys: Vec<WebhookKey>,
    pub(crate) api_base: String,
    pub(crate) api_version: String,
    pub(crate) path: String,
    pub(crate) media_hosts: Vec<String>,
    pub(crate) request_timeout: Duration,
    pub(crate) media_client: Option<GuardedClient>,
}

impl GoHighLevelConfig {
    /// Settings for `location_id` with its token and HighLevel's webhook key (PEM), and the
    /// defaults; refuses an empty token or location and a key that is not Ed25519 or RSA.
    pub fn new(
        token: impl Into<String>,
        location_id: impl Into<String>,
        webhook_public_key: &str,
    ) -> Result<Self, GoHighLevelConfigError> {
        let token = token.into();
        let location_id = location_id.into();
        if token.trim().is_empty() {
            return Err(invalid("token", "is empty"));
        }
        if location_id.trim().is_empty() {
            return Err(invalid("location_id", "is empty"));
        }
        let key = WebhookKey::from_pem(webhook_public_key)
            .map_err(|r| invalid("webhook_public_key", r))?;
        Ok(Self {
            token: token.into(),
            location_id,
            keys: vec![key],
            api_base: DEFAULT_API_BASE.to_owned(),
            api_version: DEFAULT_API_VERSION.to_owned(),
            path: "/gohighlevel".to_owned(),
            media_hosts: Vec::new(),
            request_timeout: Duration::from_secs(30),
            media_client: None,
        })
    }

    crate::settings::from_env_fn!(GoHighLevelConfigError);

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, GoHighLevelConfigError> {
        let get = crate::settings::trimmed(get);
        let need = |k: &'static str| get(k).ok_or(GoHighLevelConfigError::MissingEnv(k));
        let key = need("GHL_WEBHOOK_PUBLIC_KEY")?;
        let mut c =
            Self::new(need("GHL_ACCESS_TOKEN")?, need("GHL_LOCATION_ID")?, &key).map_err(|e| {
                match e {
                    GoHighLevelConfigError::Invalid { setting, reason } => invalid(
                        match setting {
                            "token" => "GHL_ACCESS_TOKEN",
                            "location_id" => "GHL_LOCATION_ID",
                            _ => "GHL_WEBHOOK_PUBLIC_KEY",
                        },
                        reason,
                    ),
                    other => other,
                }
            })?;
        if let Some(legacy) = get("GHL_WEBHOOK_LEGACY_PUBLIC_KEY") {
            c = c.legacy_key(&legacy).map_err(|_| {
                invalid(
                    "GHL_WEBHOOK_LEGACY_PUBLIC_KEY",
                    "not an RSA or Ed25519 PEM key",
                )
            })?;
        }
        if let Some(base) = get("GHL_API_BASE") {
            c = c
                .api_base(&base)
                .map_err(|_| invalid("GHL_API_BASE", "must be an http(s) URL"))?;
        }
        if let Some(v) = get("GHL_API_VERSION") {
            c.api_version = v;
        }
        if let Some(p) = get("GHL_WEBHOOK_PATH") {
            c = c
                .webhook_path(&p)
                .map_err(|_| invalid("GHL_WEBHOOK_PATH", "must start with '/'"))?;
        }
        if let Some(hosts) = get("GHL_MEDIA_HOSTS") {
            c = c.media_hosts(hosts.split(',').map(str::trim).filter(|h| !h.is_empty()));
        }
        Ok(c)
    }

    /// A second webhook key (PEM): HighLevel's legacy RSA key next to its Ed25519 one.
    pub fn legacy_key(mut self, pem: &str) -> Result<Self, GoHighLevelConfigError> {
        let key = WebhookKey::from_pem(pem).map_err(|r| invalid("legacy_key", r))?;
        self.keys.push(key);
        Ok(self)
    }

    crate::settings::url_setters!(GoHighLevelConfigError, "/gohighlevel");

    /// More hosts inbound attachments may be downloaded from (`cdn.example.com`, or
    /// `.example.com` for its subdomains).
    pub fn media_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.media_hosts
            .extend(hosts.into_iter().map(|h| h.into().to_ascii_lowercase()));
        self
    }

    /// The SSRF-guarded client attachments are downloaded with (tests allow localhost), and
    /// the timeout of one API call (30 s by default).
    pub fn clients(mut self, media: GuardedClient, request_timeout: Duration) -> Self {
        self.media_client = Some(media);
        self.request_timeout = request_timeout;
        self
    }
}
