//! [`TwilioConfig`]: account credentials, the sender, and the webhook settings, from code or
//! from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `TWILIO_ACCOUNT_SID` | the account (`AC…`) (required) | — |
//! | `TWILIO_AUTH_TOKEN` | the primary auth token: Basic auth and the webhook signature key (required) | — |
//! | `TWILIO_FROM` | the sender: `+15557654321` for SMS, `whatsapp:+14155238886` for WhatsApp | — |
//! | `TWILIO_MESSAGING_SERVICE_SID` | a Messaging Service (`MG…`) instead of `TWILIO_FROM` | — |
//! | `TWILIO_WEBHOOK_BASE_URL` | the public scheme and host Twilio calls (`https://bot.example`), for the signature | from `X-Forwarded-Proto` and `Host` |
//! | `TWILIO_WEBHOOK_PATH` | the inbound message route | `/twilio` |
//! | `TWILIO_STATUS_PATH` | the status callback route | `/twilio/status` |
//! | `TWILIO_STATUS_CALLBACK_URL` | the `StatusCallback` given with each send | unset: none |
//! | `TWILIO_API_BASE` | the REST base URL | `https://api.twilio.com` |
//!
//! One of `TWILIO_FROM` and `TWILIO_MESSAGING_SERVICE_SID` is required.

use std::time::Duration;

use derive_setters::Setters;

use crate::http::GuardedClient;
use crate::settings::{Redacted, http_url, route};

/// The Twilio provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type TwilioConfigError = crate::settings::ConfigError;

/// Who sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TwilioSender {
    /// A number (`+1…`, or `whatsapp:+1…`).
    From(String),
    /// A Messaging Service SID.
    MessagingService(String),
}

/// The Twilio provider's settings.
#[derive(Clone, Debug, Setters)]
#[setters(generate = false)]
pub struct TwilioConfig {
    pub(crate) account_sid: String,
    pub(crate) auth_token: Redacted,
    pub(crate) sender: TwilioSender,
    pub(crate) api_base: String,
    pub(crate) webhook_base_url: Option<String>,
    pub(crate) path: String,
    pub(crate) status_path: String,
    pub(crate) status_callback: Option<String>,
    /// The client media downloads go through (a [`GuardedClient`] with no allow-list by default).
    #[setters(generate, strip_option)]
    pub(crate) media_client: Option<GuardedClient>,
    pub(crate) request_timeout: Duration,
}

/// The default REST base.
pub const DEFAULT_API_BASE: &str = "https://api.twilio.com";

impl TwilioConfig {
    /// Settings with the credentials and sender, and the defaults.
    pub fn new(
        account_sid: impl Into<String>,
        auth_token: impl Into<String>,
        sender: TwilioSender,
    ) -> Self {
        Self {
            account_sid: account_sid.into(),
            auth_token: Redacted::from(auth_token.into()),
            sender,
            api_base: DEFAULT_API_BASE.to_owned(),
            webhook_base_url: None,
            path: "/twilio".to_owned(),
            status_path: "/twilio/status".to_owned(),
            status_callback: None,
            media_client: None,
            request_timeout: Duration::from_secs(30),
        }
    }

    crate::settings::from_env_fn!(TwilioConfigError);

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, TwilioConfigError> {
        let get = crate::settings::trimmed(get);
        let sid =
            get("TWILIO_ACCOUNT_SID").ok_or(TwilioConfigError::MissingEnv("TWILIO_ACCOUNT_SID"))?;
        let token =
            get("TWILIO_AUTH_TOKEN").ok_or(TwilioConfigError::MissingEnv("TWILIO_AUTH_TOKEN"))?;
        let sender = match (get("TWILIO_FROM"), get("TWILIO_MESSAGING_SERVICE_SID")) {
            (Some(from), _) => TwilioSender::From(from),
            (None, Some(mg)) => TwilioSender::MessagingService(mg),
            (None, None) => return Err(TwilioConfigError::MissingEnv("TWILIO_FROM")),
        };
        let mut cfg = Self::new(sid, token, sender);
        if let Some(b) = get("TWILIO_API_BASE") {
            cfg.api_base = http_url(&b, "TWILIO_API_BASE")?;
        }
        if let Some(b) = get("TWILIO_WEBHOOK_BASE_URL") {
            cfg.webhook_base_url = Some(http_url(&b, "TWILIO_WEBHOOK_BASE_URL")?);
        }
        if let Some(p) = get("TWILIO_WEBHOOK_PATH") {
            cfg.path = route(p, "TWILIO_WEBHOOK_PATH")?;
        }
        if let Some(p) = get("TWILIO_STATUS_PATH") {
            cfg.status_path = route(p, "TWILIO_STATUS_PATH")?;
        }
        if let Some(u) = get("TWILIO_STATUS_CALLBACK_URL") {
            cfg.status_callback = Some(http_url(&u, "TWILIO_STATUS_CALLBACK_URL")?);
        }
        Ok(cfg)
    }

    /// Another REST base URL (a fake in tests).
    pub fn api_base(mut self, base: &str) -> Result<Self, TwilioConfigError> {
        self.api_base = http_url(base, "api_base")?;
        Ok(self)
    }

    /// The public scheme and host Twilio calls (`https://bot.example`), used to rebuild the
    /// signed URL; without it the `X-Forwarded-Proto` and `Host` headers are used.
    pub fn webhook_base_url(mut self, base: &str) -> Result<Self, TwilioConfigError> {
        self.webhook_base_url = Some(http_url(base, "webhook_base_url")?);
        Ok(self)
    }

    /// The inbound and status routes (`/twilio`, `/twilio/status`).
    pub fn paths(mut self, inbound: &str, status: &str) -> Result<Self, TwilioConfigError> {
        self.path = route(inbound.to_owned(), "webhook path")?;
        self.status_path = route(status.to_owned(), "status path")?;
        Ok(self)
    }

    /// The `StatusCallback` URL sent with each message.
    pub fn status_callback(mut self, url: &str) -> Result<Self, TwilioConfigError> {
        self.status_callback = Some(http_url(url, "status_callback")?);
        Ok(self)
    }
}
