//! [`DiscordConfig`]: the bot token, the application's public key (interactions), the API and
//! gateway URLs and the intents, from code or from environment variables.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `DISCORD_BOT_TOKEN` | the bot token (required) | — |
//! | `DISCORD_PUBLIC_KEY` | the application's public key (64 hex digits): turns on the interactions route, which checks each request's Ed25519 signature with it | unset: no interactions route (interactions then come over the gateway) |
//! | `DISCORD_INTERACTIONS_PATH` | the interactions route the webhook server serves | `/discord/interactions` |
//! | `DISCORD_API_BASE` | the REST base URL, with its version | `https://discord.com/api/v10` |
//! | `DISCORD_GATEWAY_URL` | the gateway's WebSocket URL (skips `GET /gateway/bot`) | from `GET /gateway/bot` |
//! | `DISCORD_INTENTS` | the gateway intents, a number | `37377` (guilds, guild messages, direct messages, message content) |
//! | `DISCORD_GATEWAY` | `off`: no gateway connection (interactions only) | on |
//! | `DISCORD_SESSION_FILE` | where the gateway session is kept, so a restarted process resumes it (what was written meanwhile is replayed) | unset: a restart Identifies afresh |

use std::time::Duration;

use derive_setters::Setters;
use ed25519_dalek::VerifyingKey;

use crate::http::GuardedClient;
use crate::settings::Redacted;

/// The Discord provider's configuration error (see [`ConfigError`](crate::settings::ConfigError)).
pub type DiscordConfigError = crate::settings::ConfigError;

/// The default REST base (API version 10).
pub const DEFAULT_API_BASE: &str = "https://discord.com/api/v10";

/// The default route of the interactions endpoint.
pub const DEFAULT_INTERACTIONS_PATH: &str = "/discord/interactions";

/// `GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT`: what a chat bot needs.
/// `MESSAGE_CONTENT` is privileged: turn it on in the Developer Portal, or the gateway closes
/// with 4014.
pub const DEFAULT_INTENTS: u64 = 1 | (1 << 9) | (1 << 12) | (1 << 15);

/// The Discord provider's settings.
#[derive(Clone, Debug, Setters)]
#[setters(generate = false, strip_option)]
pub struct DiscordConfig {
    pub(crate) token: Redacted,
    pub(crate) public_key: Option<VerifyingKey>,
    pub(crate) interactions_path: String,
    pub(crate) api_base: String,
    pub(crate) gateway_url: Option<String>,
    /// Connects the gateway (messages) or not (`false`: interactions only).
    #[setters(generate)]
    pub(crate) gateway: bool,
    /// The gateway intents ([`DEFAULT_INTENTS`] by default).
    #[setters(generate)]
    pub(crate) intents: u64,
    /// The timeout of a REST call (30 s by default).
    #[setters(generate)]
    pub(crate) request_timeout: Duration,
    /// The client attachment downloads go through (by default a [`GuardedClient`] with no
    /// allow-list).
    #[setters(generate)]
    pub(crate) media_client: Option<GuardedClient>,
    /// Keeps the gateway session in this file, so that a restarted process resumes it and
    /// Discord replays what came while it was down (within the few minutes Discord keeps a
    /// session).
    #[setters(generate, into)]
    pub(crate) session_file: Option<std::path::PathBuf>,
}

impl DiscordConfig {
    /// The gateway on the public API with `token`, no interactions route.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: Redacted::from(token.into()),
            public_key: None,
            interactions_path: DEFAULT_INTERACTIONS_PATH.to_owned(),
            api_base: DEFAULT_API_BASE.to_owned(),
            gateway_url: None,
            gateway: true,
            intents: DEFAULT_INTENTS,
            request_timeout: Duration::from_secs(30),
            media_client: None,
            session_file: None,
        }
    }

    crate::settings::from_env_fn!(DiscordConfigError);

    /// As [`from_env`](Self::from_env), from any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, DiscordConfigError> {
        let get = crate::settings::trimmed(get);
        let token =
            get("DISCORD_BOT_TOKEN").ok_or(DiscordConfigError::MissingEnv("DISCORD_BOT_TOKEN"))?;
        let mut cfg = Self::new(token);
        if let Some(key) = get("DISCORD_PUBLIC_KEY") {
            cfg.public_key = Some(parse_key(&key, "DISCORD_PUBLIC_KEY")?);
        }
        if let Some(path) = get("DISCORD_INTERACTIONS_PATH") {
            cfg.interactions_path = crate::settings::route(path, "DISCORD_INTERACTIONS_PATH")?;
        }
        if let Some(base) = get("DISCORD_API_BASE") {
            cfg.api_base = crate::settings::http_url(&base, "DISCORD_API_BASE")?;
        }
        if let Some(url) = get("DISCORD_GATEWAY_URL") {
            cfg.gateway_url = Some(ws_checked(&url, "DISCORD_GATEWAY_URL")?);
        }
        if let Some(intents) = get("DISCORD_INTENTS") {
            cfg.intents = intents.parse().map_err(|_| DiscordConfigError::Invalid {
                setting: "DISCORD_INTENTS",
                reason: format!("{intents:?} is not a number"),
            })?;
        }
        if let Some(path) = get("DISCORD_SESSION_FILE") {
            cfg.session_file = Some(path.into());
        }
        if let Some(gateway) = get("DISCORD_GATEWAY") {
            cfg.gateway = match gateway.to_ascii_lowercase().as_str() {
                "off" | "false" | "0" => false,
                "on" | "true" | "1" => true,
                _ => {
                    return Err(DiscordConfigError::Invalid {
                        setting: "DISCORD_GATEWAY",
                        reason: "must be on or off".to_owned(),
                    });
                }
            };
        }
        Ok(cfg)
    }

    /// Serves the interactions endpoint, checking signatures with the application's public
    /// key (64 hex digits, from the Developer Portal).
    pub fn public_key(mut self, hex_key: &str) -> Result<Self, DiscordConfigError> {
        self.public_key = Some(parse_key(hex_key, "public_key")?);
        Ok(self)
    }

    /// The route of the interactions endpoint (`/discord/interactions` by default).
    pub fn interactions_path(
        mut self,
        path: impl Into<String>,
    ) -> Result<Self, DiscordConfigError> {
        self.interactions_path = crate::settings::route(path.into(), "interactions_path")?;
        Ok(self)
    }

    /// Another REST base URL, with its version (a fake in tests).
    pub fn api_base(mut self, base: &str) -> Result<Self, DiscordConfigError> {
        self.api_base = crate::settings::http_url(base, "api_base")?;
        Ok(self)
    }

    /// The gateway's URL, instead of asking `GET /gateway/bot`.
    pub fn gateway_url(mut self, url: &str) -> Result<Self, DiscordConfigError> {
        self.gateway_url = Some(ws_checked(url, "gateway_url")?);
        Ok(self)
    }
}

fn ws_checked(value: &str, setting: &'static str) -> Result<String, DiscordConfigError> {
    let invalid = |reason: String| DiscordConfigError::Invalid { setting, reason };
    let parsed = url::Url::parse(value).map_err(|e| invalid(e.to_string()))?;
    if !matches!(parsed.scheme(), "ws" | "wss") {
        return Err(invalid("must be a ws(s) URL".to_owned()));
    }
    Ok(value.trim_end_matches('/').to_owned())
}

fn parse_key(hex_key: &str, setting: &'static str) -> Result<VerifyingKey, DiscordConfigError> {
    let invalid = |reason: &str| DiscordConfigError::Invalid {
        setting,
        reason: reason.to_owned(),
    };
    let bytes: [u8; 32] = hex::decode(hex_key.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| invalid("must be 64 hex digits (32 bytes)"))?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| invalid("is not an Ed25519 public key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn reads_the_environment_and_names_a_bad_setting_without_its_value() {
        let cfg =
            DiscordConfig::from_lookup(env(&[("DISCORD_BOT_TOKEN", "t0k3n")])).expect("config");
        assert_eq!(cfg.intents, 37377);
        assert_eq!(cfg.api_base, DEFAULT_API_BASE);
        assert!(cfg.public_key.is_none() && cfg.gateway);
        assert!(!format!("{cfg:?}").contains("t0k3n"));
        assert_eq!(
            DiscordConfig::from_lookup(env(&[])).err(),
            Some(DiscordConfigError::MissingEnv("DISCORD_BOT_TOKEN"))
        );
        let bad = DiscordConfig::from_lookup(env(&[
            ("DISCORD_BOT_TOKEN", "t"),
            ("DISCORD_PUBLIC_KEY", "secretish"),
        ]))
        .expect_err("a bad key");
        assert!(
            bad.to_string().contains("DISCORD_PUBLIC_KEY")
                && !bad.to_string().contains("secretish")
        );
        let bad = DiscordConfig::from_lookup(env(&[
            ("DISCORD_BOT_TOKEN", "t"),
            ("DISCORD_GATEWAY_URL", "http://x"),
        ]));
        assert!(bad.is_err());
    }
}
