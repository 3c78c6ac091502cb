//! What the network channels' settings share: [`ConfigError`], the error of a channel's
//! configuration (each channel names it, e.g. `TelegramConfigError`), `Redacted` (a secret
//! setting whose `Debug` never shows it, so settings derive `Debug`), and the checks of an API
//! or public base URL, a webhook route and a value read from the environment, each returning
//! why a value is refused for the error to name the setting with.

/// A channel's configuration error; names the setting or environment variable, never its
/// value (it may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
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

/// A secret setting (a token, an API key, a webhook secret): reads as the `str` it holds, but
/// its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Redacted(String);

impl From<String> for Redacted {
    fn from(secret: String) -> Self {
        Self(secret)
    }
}

impl std::ops::Deref for Redacted {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The `from_env` constructor of a channel's config type: the settings read from the
/// environment by the type's `from_lookup`, which fails with `$error`; the doc names where the
/// variables are listed (the module table by default).
#[cfg_attr(not(http_api_channel), allow(unused_macros))]
macro_rules! from_env_fn {
    ($error:ty) => {
        $crate::settings::from_env_fn!(
            $error,
            "Reads the settings from the environment (see the module table)."
        );
    };
    ($error:ty, $doc:literal) => {
        #[doc = $doc]
        pub fn from_env() -> Result<Self, $error> {
            Self::from_lookup(|k| std::env::var(k).ok())
        }
    };
}

#[cfg_attr(not(http_api_channel), allow(unused_imports))]
pub(crate) use from_env_fn;

/// The checked `api_base` and `webhook_path` setters of a channel's config type that keeps
/// them in its fields `api_base` (an http(s) URL) and `path` (a route, `$default_path` by
/// default); a refused value fails with `$error`.
#[cfg_attr(
    not(any(feature = "tiktok", feature = "gohighlevel")),
    allow(unused_macros)
)]
macro_rules! url_setters {
    ($error:ty, $default_path:literal) => {
        /// Another API base URL (a fake in tests).
        pub fn api_base(mut self, base: &str) -> Result<Self, $error> {
            self.api_base = $crate::settings::http_url(base, "api_base")?;
            Ok(self)
        }

        #[doc = concat!("Another webhook route (`", $default_path, "` by default).")]
        pub fn webhook_path(mut self, path: &str) -> Result<Self, $error> {
            self.path = $crate::settings::route(path.to_owned(), "webhook_path")?;
            Ok(self)
        }
    };
}

#[cfg_attr(
    not(any(feature = "tiktok", feature = "gohighlevel")),
    allow(unused_imports)
)]
pub(crate) use url_setters;

/// A setting refused for `reason`.
#[cfg_attr(
    not(any(feature = "tiktok", feature = "gohighlevel", feature = "email")),
    allow(dead_code)
)]
pub(crate) fn invalid(setting: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting,
        reason: reason.into(),
    }
}

/// A base URL: `http` or `https`, kept without its trailing `/`; refused naming `setting`.
#[cfg_attr(not(http_api_channel), allow(dead_code))]
pub(crate) fn http_url(value: &str, setting: &'static str) -> Result<String, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid { setting, reason };
    let parsed = url::Url::parse(value).map_err(|e| invalid(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("must be an http(s) URL".to_owned()));
    }
    Ok(value.trim_end_matches('/').to_owned())
}

/// A webhook route: starts with `/`; refused naming `setting`.
pub(crate) fn route(path: String, setting: &'static str) -> Result<String, ConfigError> {
    if path.starts_with('/') {
        Ok(path)
    } else {
        Err(ConfigError::Invalid {
            setting,
            reason: "must start with '/'".to_owned(),
        })
    }
}

/// An environment lookup that takes an unset, empty or blank variable as absent, and trims.
pub(crate) fn trimmed(get: impl Fn(&str) -> Option<String>) -> impl Fn(&str) -> Option<String> {
    move |k| {
        get(k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }
}
