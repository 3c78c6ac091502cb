//! The settings every Meta channel has: the access token, the app secret and verify token of
//! its webhook, the Graph base URL and version, the webhook route, the media client and the
//! request timeout. A channel's config keeps them in a [`GraphSettings`], reads them with the
//! variable names it declares ([`EnvNames`]) and gets its builder methods from
//! [`graph_config_builders`].

use std::time::Duration;

use botmesh::provider::ProviderError;

use crate::http::GuardedClient;
use crate::settings::Redacted;

/// The default Graph base URL.
pub const DEFAULT_API_BASE: &str = "https://graph.facebook.com";
/// The default Graph version.
pub const DEFAULT_API_VERSION: &str = "v21.0";

/// A Meta channel's configuration error: the shared [`ConfigError`](crate::settings::ConfigError)
/// (names the setting or environment variable, never its value).
pub type MetaConfigError = crate::settings::ConfigError;

/// The environment variables of a channel's shared settings.
pub(crate) struct EnvNames {
    pub(crate) token: &'static str,
    pub(crate) app_secret: &'static str,
    pub(crate) verify_token: &'static str,
    pub(crate) api_base: &'static str,
    pub(crate) api_version: &'static str,
    pub(crate) webhook_path: &'static str,
}

impl From<[&'static str; 6]> for EnvNames {
    /// The names in the order of the fields: token, app secret, verify token, API base, API
    /// version, webhook path.
    fn from(names: [&'static str; 6]) -> Self {
        Self {
            token: names[0],
            app_secret: names[1],
            verify_token: names[2],
            api_base: names[3],
            api_version: names[4],
            webhook_path: names[5],
        }
    }
}

/// The settings every Meta channel has.
#[derive(Clone, Debug)]
pub(crate) struct GraphSettings {
    pub(crate) token: Redacted,
    pub(crate) app_secret: Redacted,
    pub(crate) verify_token: Redacted,
    pub(crate) api_base: String,
    pub(crate) api_version: String,
    pub(crate) path: String,
    pub(crate) media_client: Option<GuardedClient>,
    pub(crate) request_timeout: Duration,
}

impl GraphSettings {
    /// The credentials with the defaults, the webhook on `path`.
    pub(crate) fn new(
        token: impl Into<String>,
        app_secret: impl Into<String>,
        verify_token: impl Into<String>,
        path: &str,
    ) -> Self {
        Self {
            token: Redacted::from(token.into()),
            app_secret: Redacted::from(app_secret.into()),
            verify_token: Redacted::from(verify_token.into()),
            api_base: DEFAULT_API_BASE.to_owned(),
            api_version: DEFAULT_API_VERSION.to_owned(),
            path: path.to_owned(),
            media_client: None,
            request_timeout: Duration::from_secs(30),
        }
    }

    /// Reads the settings named by `names` through `get` (already trimmed, see
    /// `crate::settings::trimmed`); `path` is the route when the variable is unset.
    pub(crate) fn from_lookup(
        get: &impl Fn(&str) -> Option<String>,
        names: &EnvNames,
        path: &str,
    ) -> Result<Self, MetaConfigError> {
        let need = |k: &'static str| get(k).ok_or(MetaConfigError::MissingEnv(k));
        let mut settings = Self::new(
            need(names.token)?,
            need(names.app_secret)?,
            need(names.verify_token)?,
            path,
        );
        if let Some(b) = get(names.api_base) {
            settings.api_base = crate::settings::http_url(&b, names.api_base)?;
        }
        if let Some(v) = get(names.api_version) {
            settings.api_version = v;
        }
        if let Some(p) = get(names.webhook_path) {
            settings.path = crate::settings::route(p, names.webhook_path)?;
        }
        Ok(settings)
    }

    /// Refuses an empty app secret or verify token: HMAC takes the empty key and an empty
    /// token matches an empty `hub.verify_token`, so the webhook would not be authenticated.
    pub(crate) fn check_secrets(&self, provider: &str) -> Result<(), ProviderError> {
        for (setting, value) in [
            ("the app secret", &self.app_secret),
            ("the verify token", &self.verify_token),
        ] {
            if value.is_empty() {
                return Err(ProviderError::Api {
                    provider: provider.to_owned(),
                    status: None,
                    code: None,
                    message: format!("{setting} is empty: the webhook could not authenticate Meta"),
                    retryable: false,
                });
            }
        }
        Ok(())
    }
}

/// The builder methods of a Meta channel's config type, which keeps its [`GraphSettings`] in
/// a field `graph`; `[generics]` are the impl's generic parameters, `$default_path` the
/// default webhook route, for the docs.
macro_rules! graph_config_builders {
    ([$($generics:tt)*] $config:ty, $default_path:literal) => {
        impl<$($generics)*> $config {
            /// Another Graph base URL (a fake in tests, `https://graph.instagram.com` for
            /// Instagram Login).
            pub fn api_base(mut self, base: &str) -> Result<Self, $crate::meta::MetaConfigError> {
                self.graph.api_base = $crate::settings::http_url(base, "api_base")?;
                Ok(self)
            }

            /// Another Graph version (`v21.0`).
            pub fn api_version(mut self, version: impl Into<String>) -> Self {
                self.graph.api_version = version.into();
                self
            }

            #[doc = concat!("The webhook route (`", $default_path, "`).")]
            pub fn webhook_path(
                mut self,
                path: impl Into<String>,
            ) -> Result<Self, $crate::meta::MetaConfigError> {
                self.graph.path = $crate::settings::route(path.into(), "webhook path")?;
                Ok(self)
            }

            /// The client media downloads go through (a [`GuardedClient`](crate::http::GuardedClient)
            /// with no allow-list by default).
            pub fn media_client(mut self, client: $crate::http::GuardedClient) -> Self {
                self.graph.media_client = Some(client);
                self
            }

            /// The timeout of API calls (30 s by default).
            pub fn request_timeout(mut self, timeout: std::time::Duration) -> Self {
                self.graph.request_timeout = timeout;
                self
            }
        }
    };
}

pub(crate) use graph_config_builders;
