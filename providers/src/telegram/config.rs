//! [`TelegramConfig`]: the token, the API base URL, and how updates arrive (long polling or
//! a webhook), from code or from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `TELEGRAM_BOT_TOKEN` | the token from @BotFather (required) | — |
//! | `TELEGRAM_API_BASE` | the Bot API base URL (a local Bot API server, a fake in tests) | `https://api.telegram.org` |
//! | `TELEGRAM_WEBHOOK_SECRET` | set: webhook mode, with this `secret_token` (1–256 of `A-Z a-z 0-9 _ -`) | unset: long polling |
//! | `TELEGRAM_WEBHOOK_PATH` | the route the webhook server serves | `/telegram` |
//! | `TELEGRAM_WEBHOOK_URL` | the public URL given to `setWebhook` at start | unset: set it yourself |
//! | `TELEGRAM_POLL_TIMEOUT_SECS` | the long-poll timeout of `getUpdates`, in seconds (at least 1) | `30` |

use std::time::Duration;

use derive_setters::Setters;

use crate::http::GuardedClient;
use crate::settings::Redacted;

/// The Telegram provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type TelegramConfigError = crate::settings::ConfigError;

/// How updates arrive.
#[derive(Clone, PartialEq, Eq)]
pub enum TelegramMode {
    /// `getUpdates` long polling; the offset is confirmed only after the pipeline accepted.
    Polling {
        /// The long-poll timeout.
        timeout: Duration,
    },
    /// Telegram POSTs updates to a route of the [`crate::webhook::WebhookServer`].
    Webhook {
        /// The `secret_token` checked against `X-Telegram-Bot-Api-Secret-Token`.
        secret_token: String,
        /// The route (`/telegram`).
        path: String,
        /// The public URL to register with `setWebhook` at start, if any.
        url: Option<String>,
    },
}

impl std::fmt::Debug for TelegramMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TelegramMode::Polling { timeout } => {
                f.debug_struct("Polling").field("timeout", timeout).finish()
            }
            TelegramMode::Webhook { path, url, .. } => f
                .debug_struct("Webhook")
                .field("path", path)
                .field("url", url)
                .finish_non_exhaustive(),
        }
    }
}

/// The Telegram provider's settings.
#[derive(Clone, Debug, Setters)]
#[setters(generate = false)]
pub struct TelegramConfig {
    pub(crate) token: Redacted,
    pub(crate) api_base: String,
    pub(crate) mode: TelegramMode,
    /// The client media downloads go through (by default a [`GuardedClient`] with no
    /// allow-list).
    #[setters(generate, strip_option)]
    pub(crate) media_client: Option<GuardedClient>,
    /// The timeout of API calls other than the long poll (30 s by default).
    #[setters(generate)]
    pub(crate) request_timeout: Duration,
}

/// The default API base.
pub const DEFAULT_API_BASE: &str = "https://api.telegram.org";

impl TelegramConfig {
    /// Long polling on the public Bot API with `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: Redacted::from(token.into()),
            api_base: DEFAULT_API_BASE.to_owned(),
            mode: TelegramMode::Polling {
                timeout: Duration::from_secs(30),
            },
            media_client: None,
            request_timeout: Duration::from_secs(30),
        }
    }

    crate::settings::from_env_fn!(TelegramConfigError);

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, TelegramConfigError> {
        let get = crate::settings::trimmed(get);
        let token = get("TELEGRAM_BOT_TOKEN")
            .ok_or(TelegramConfigError::MissingEnv("TELEGRAM_BOT_TOKEN"))?;
        let mut cfg = Self::new(token);
        if let Some(base) = get("TELEGRAM_API_BASE") {
            cfg = cfg.api_base_checked(&base, "TELEGRAM_API_BASE")?;
        }
        if let Some(secret) = get("TELEGRAM_WEBHOOK_SECRET") {
            check_secret(&secret, "TELEGRAM_WEBHOOK_SECRET")?;
            let path = get("TELEGRAM_WEBHOOK_PATH").unwrap_or_else(|| "/telegram".to_owned());
            let path = crate::settings::route(path, "TELEGRAM_WEBHOOK_PATH")?;
            cfg.mode = TelegramMode::Webhook {
                secret_token: secret,
                path,
                url: get("TELEGRAM_WEBHOOK_URL"),
            };
        } else if let Some(t) = get("TELEGRAM_POLL_TIMEOUT_SECS") {
            let secs = t
                .trim()
                .parse::<u64>()
                .map_err(|_| TelegramConfigError::Invalid {
                    setting: "TELEGRAM_POLL_TIMEOUT_SECS",
                    reason: format!("{t:?} is not a number of seconds"),
                })?;
            if secs == 0 {
                // Short polling: `getUpdates` back to back until Telegram answers 429.
                return Err(TelegramConfigError::Invalid {
                    setting: "TELEGRAM_POLL_TIMEOUT_SECS",
                    reason: "0 would poll without waiting; use at least 1 (long polling)"
                        .to_owned(),
                });
            }
            cfg.mode = TelegramMode::Polling {
                timeout: Duration::from_secs(secs),
            };
        }
        Ok(cfg)
    }

    fn api_base_checked(
        mut self,
        base: &str,
        setting: &'static str,
    ) -> Result<Self, TelegramConfigError> {
        self.api_base = crate::settings::http_url(base, setting)?;
        Ok(self)
    }

    /// Uses another Bot API base URL (a local Bot API server, or a fake in tests).
    pub fn api_base(self, base: &str) -> Result<Self, TelegramConfigError> {
        self.api_base_checked(base, "api_base")
    }

    /// Long polling with this `getUpdates` timeout, in whole seconds, at least 1 (a shorter
    /// one is raised to 1 s: a timeout of 0 would call `getUpdates` back to back).
    pub fn polling(mut self, timeout: Duration) -> Self {
        self.mode = TelegramMode::Polling {
            timeout: timeout.max(Duration::from_secs(1)),
        };
        self
    }

    /// Webhook mode: updates arrive on `path` of the webhook server, carrying `secret_token`.
    pub fn webhook(
        mut self,
        path: impl Into<String>,
        secret_token: impl Into<String>,
    ) -> Result<Self, TelegramConfigError> {
        let secret_token = secret_token.into();
        check_secret(&secret_token, "secret_token")?;
        let path = crate::settings::route(path.into(), "webhook path")?;
        self.mode = TelegramMode::Webhook {
            secret_token,
            path,
            url: None,
        };
        Ok(self)
    }

    /// In webhook mode, registers `url` with `setWebhook` at start.
    pub fn set_webhook_url(mut self, public_url: impl Into<String>) -> Self {
        if let TelegramMode::Webhook { url, .. } = &mut self.mode {
            *url = Some(public_url.into());
        }
        self
    }

    /// The mode.
    pub fn mode(&self) -> &TelegramMode {
        &self.mode
    }
}

fn check_secret(secret: &str, setting: &'static str) -> Result<(), TelegramConfigError> {
    let ok = (1..=256).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(TelegramConfigError::Invalid {
            setting,
            reason: "must be 1-256 characters of A-Z, a-z, 0-9, _ and -".to_owned(),
        })
    }
}
