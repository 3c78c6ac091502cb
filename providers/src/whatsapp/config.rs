//! [`WhatsAppConfig`]: the Cloud API credentials, ids and webhook settings, from code or
//! from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `WHATSAPP_ACCESS_TOKEN` | the system-user access token (required) | — |
//! | `WHATSAPP_PHONE_NUMBER_ID` | the sender's phone number id (required) | — |
//! | `WHATSAPP_APP_SECRET` | the app secret that signs webhooks (`X-Hub-Signature-256`) (required) | — |
//! | `WHATSAPP_VERIFY_TOKEN` | the token of the `hub.challenge` handshake (required) | — |
//! | `WHATSAPP_API_BASE` | the Graph base URL | `https://graph.facebook.com` |
//! | `WHATSAPP_API_VERSION` | the Graph version | `v21.0` |
//! | `WHATSAPP_WEBHOOK_PATH` | the route on the webhook server | `/whatsapp` |
//! | `WHATSAPP_WINDOW_TEMPLATE` | the approved template sent instead of a message outside the 24-hour window, with the message's text as its one body parameter (`{{1}}`) | none: such a send fails with `OutsideSessionWindow` |
//! | `WHATSAPP_WINDOW_TEMPLATE_LANGUAGE` | that template's language code | `en_US` |

use std::time::Duration;

use crate::http::GuardedClient;

/// A configuration error; names the setting or environment variable, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhatsAppConfigError {
    /// A required environment variable is not set.
    #[error("{0} is not set")]
    MissingEnv(&'static str),
    /// A setting has an invalid value.
    #[error("{setting} is invalid: {reason}")]
    Invalid {
        /// The setting or environment variable.
        setting: &'static str,
        /// Why.
        reason: String,
    },
}

/// The WhatsApp Cloud provider's settings.
#[derive(Clone)]
pub struct WhatsAppConfig {
    pub(crate) access_token: String,
    pub(crate) phone_number_id: String,
    pub(crate) app_secret: String,
    pub(crate) verify_token: String,
    pub(crate) api_base: String,
    pub(crate) api_version: String,
    pub(crate) path: String,
    pub(crate) media_client: Option<GuardedClient>,
    pub(crate) request_timeout: Duration,
    pub(crate) window_template: Option<WindowTemplate>,
}

/// The approved template a send outside the 24-hour customer-service window goes out as
/// ([`WhatsAppConfig::window_template`]): the message's text (its caption for media) is its one
/// body parameter, `{{1}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowTemplate {
    /// The template's name.
    pub name: String,
    /// Its language code (`en_US`).
    pub language: String,
}

impl std::fmt::Debug for WhatsAppConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppConfig")
            .field("phone_number_id", &self.phone_number_id)
            .field("api_base", &self.api_base)
            .field("api_version", &self.api_version)
            .field("path", &self.path)
            .field("window_template", &self.window_template)
            .finish_non_exhaustive()
    }
}

/// The default Graph base URL.
pub const DEFAULT_API_BASE: &str = "https://graph.facebook.com";
/// The default Graph version.
pub const DEFAULT_API_VERSION: &str = "v21.0";

impl WhatsAppConfig {
    /// Settings with the required credentials and the defaults.
    pub fn new(
        access_token: impl Into<String>,
        phone_number_id: impl Into<String>,
        app_secret: impl Into<String>,
        verify_token: impl Into<String>,
    ) -> Self {
        Self {
            access_token: access_token.into(),
            phone_number_id: phone_number_id.into(),
            app_secret: app_secret.into(),
            verify_token: verify_token.into(),
            api_base: DEFAULT_API_BASE.to_owned(),
            api_version: DEFAULT_API_VERSION.to_owned(),
            path: "/whatsapp".to_owned(),
            media_client: None,
            request_timeout: Duration::from_secs(30),
            window_template: None,
        }
    }

    /// Reads the settings from the environment (see the module table).
    pub fn from_env() -> Result<Self, WhatsAppConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, WhatsAppConfigError> {
        let get = crate::settings::trimmed(get);
        let need = |k: &'static str| get(k).ok_or(WhatsAppConfigError::MissingEnv(k));
        let mut cfg = Self::new(
            need("WHATSAPP_ACCESS_TOKEN")?,
            need("WHATSAPP_PHONE_NUMBER_ID")?,
            need("WHATSAPP_APP_SECRET")?,
            need("WHATSAPP_VERIFY_TOKEN")?,
        );
        if let Some(b) = get("WHATSAPP_API_BASE") {
            cfg = cfg.base_checked(&b, "WHATSAPP_API_BASE")?;
        }
        if let Some(v) = get("WHATSAPP_API_VERSION") {
            cfg.api_version = v;
        }
        if let Some(p) = get("WHATSAPP_WEBHOOK_PATH") {
            cfg = cfg.path_checked(p, "WHATSAPP_WEBHOOK_PATH")?;
        }
        if let Some(name) = get("WHATSAPP_WINDOW_TEMPLATE") {
            let language =
                get("WHATSAPP_WINDOW_TEMPLATE_LANGUAGE").unwrap_or_else(|| "en_US".to_owned());
            cfg = cfg.window_template(name, language);
        }
        if !cfg.phone_number_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(WhatsAppConfigError::Invalid {
                setting: "WHATSAPP_PHONE_NUMBER_ID",
                reason: "must be the numeric phone number id".to_owned(),
            });
        }
        Ok(cfg)
    }

    fn base_checked(
        mut self,
        base: &str,
        setting: &'static str,
    ) -> Result<Self, WhatsAppConfigError> {
        self.api_base = crate::settings::http_url(base)
            .map_err(|reason| WhatsAppConfigError::Invalid { setting, reason })?;
        Ok(self)
    }

    fn path_checked(
        mut self,
        path: String,
        setting: &'static str,
    ) -> Result<Self, WhatsAppConfigError> {
        self.path = crate::settings::route(path)
            .map_err(|reason| WhatsAppConfigError::Invalid { setting, reason })?;
        Ok(self)
    }

    /// Another Graph base URL (a fake in tests).
    pub fn api_base(self, base: &str) -> Result<Self, WhatsAppConfigError> {
        self.base_checked(base, "api_base")
    }

    /// Another Graph version (`v21.0`).
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.api_version = version.into();
        self
    }

    /// The webhook route (`/whatsapp`).
    pub fn webhook_path(self, path: impl Into<String>) -> Result<Self, WhatsAppConfigError> {
        self.path_checked(path.into(), "webhook path")
    }

    /// The client media downloads go through (a [`GuardedClient`] with no allow-list by default).
    pub fn media_client(mut self, client: GuardedClient) -> Self {
        self.media_client = Some(client);
        self
    }

    /// Sends outside the 24-hour customer-service window (the chat wrote more than 24 h ago,
    /// or Meta answers 131047) go out as this approved template, with the message's text as
    /// its one body parameter. Without it, such a send fails with
    /// `ProviderError::OutsideSessionWindow` (final: dead-lettered, not retried).
    pub fn window_template(mut self, name: impl Into<String>, language: impl Into<String>) -> Self {
        self.window_template = Some(WindowTemplate {
            name: name.into(),
            language: language.into(),
        });
        self
    }

    /// The timeout of API calls (30 s by default).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}
