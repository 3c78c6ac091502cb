//! [`GatewaySettings`]: the settings every HTTP-gateway channel has, from code or from the
//! environment under the channel's variable names ([`GatewayEnv`]).

use std::time::Duration;

use crate::http::GuardedClient;
use crate::settings::{ConfigError, Redacted};

/// The environment variables of a gateway channel's shared settings.
pub(crate) struct GatewayEnv {
    /// The API key or token (required).
    pub(crate) key: &'static str,
    /// The webhook's shared secret (required).
    pub(crate) secret: &'static str,
    /// The API base URL.
    pub(crate) api_base: &'static str,
    /// The webhook route.
    pub(crate) path: &'static str,
}

/// The shortest webhook secret taken: it is the only thing that authenticates the gateway.
pub(crate) const SECRET_MIN_LEN: usize = 16;

/// A gateway channel's API, credential and webhook settings.
#[derive(Clone, Debug)]
pub(crate) struct GatewaySettings {
    pub(crate) api_base: String,
    pub(crate) api_key: Redacted,
    pub(crate) secret: Redacted,
    pub(crate) path: String,
    pub(crate) request_timeout: Duration,
    pub(crate) media_client: Option<GuardedClient>,
}

/// Why a webhook secret is refused: shorter than [`SECRET_MIN_LEN`], or with a character
/// that cannot stand in a URL path segment as it is.
pub(crate) fn secret_problem(secret: &str) -> Option<String> {
    if secret.chars().count() < SECRET_MIN_LEN {
        return Some(format!("must be at least {SECRET_MIN_LEN} characters"));
    }
    let url_safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~');
    (!secret.chars().all(url_safe))
        .then(|| "may only hold letters, digits and - _ . ~ (it may be a path segment)".to_owned())
}

impl GatewaySettings {
    /// Settings with the credential, secret and route, and the other defaults.
    pub(crate) fn new(api_base: &str, api_key: String, secret: String, path: &str) -> Self {
        Self {
            api_base: api_base.trim_end_matches('/').to_owned(),
            api_key: api_key.into(),
            secret: secret.into(),
            path: path.to_owned(),
            request_timeout: Duration::from_secs(30),
            media_client: None,
        }
    }

    /// Reads the settings from `get` under `env`'s names, with these defaults.
    pub(crate) fn from_lookup(
        get: &impl Fn(&str) -> Option<String>,
        env: &GatewayEnv,
        api_base: &str,
        path: &str,
    ) -> Result<Self, ConfigError> {
        let need = |k: &'static str| get(k).ok_or(ConfigError::MissingEnv(k));
        let mut s = Self::new(api_base, need(env.key)?, need(env.secret)?, path);
        s.check_secret(env.secret)?;
        if let Some(b) = get(env.api_base) {
            s.api_base = crate::settings::http_url(&b, env.api_base)?;
        }
        if let Some(p) = get(env.path) {
            s.path = crate::settings::route(p, env.path)?;
        }
        Ok(s)
    }

    /// Refuses a weak or unusable secret, naming `setting`.
    pub(crate) fn check_secret(&self, setting: &'static str) -> Result<(), ConfigError> {
        match secret_problem(&self.secret) {
            Some(reason) => Err(ConfigError::Invalid { setting, reason }),
            None => Ok(()),
        }
    }

    /// The API client and the media client of these settings.
    pub(crate) fn clients(
        &self,
        provider: &str,
    ) -> Result<(reqwest::Client, GuardedClient), botmesh::provider::ProviderError> {
        crate::http::channel_clients(self.request_timeout, self.media_client.as_ref())
            .map_err(|message| crate::errors::local(provider, message))
    }
}
