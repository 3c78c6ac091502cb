//! The checks the network channels' settings share: an API or public base URL, a webhook
//! route, a value read from the environment. Each returns why a value is refused; the
//! channel's own config error names the setting.

/// A base URL: `http` or `https`, kept without its trailing `/`.
pub(crate) fn http_url(value: &str) -> Result<String, String> {
    let parsed = url::Url::parse(value).map_err(|e| e.to_string())?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("must be an http(s) URL".to_owned());
    }
    Ok(value.trim_end_matches('/').to_owned())
}

/// A webhook route: starts with `/`.
pub(crate) fn route(path: String) -> Result<String, String> {
    if path.starts_with('/') {
        Ok(path)
    } else {
        Err("must start with '/'".to_owned())
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
