//! [`GuardedClient`]: the HTTP client that downloads media for the network providers, and
//! refuses to reach private networks (anti-SSRF).
//!
//! A media URL comes from the outside world (a webhook body, a journaled reference), so a
//! download must not become a way into the bot's own network. The client refuses, unless an
//! address is explicitly allow-listed ([`GuardedClientBuilder::allow`]):
//!
//! | where the address comes from | when it is checked |
//! | --- | --- |
//! | an IP literal in the URL (`http://10.0.0.1/`, `http://[::1]/`, `http://2130706433/`) | before the request |
//! | a host name | after DNS resolution, by the client's own resolver: only permitted addresses are connected to (a name that resolves to both kinds keeps the public ones) |
//! | a redirect (`Location`) | on every hop, by the same two rules; at most 5 hops |
//!
//! Refused ranges ([`is_forbidden`]): loopback (`127/8`, `::1`), private (`10/8`, `172.16/12`,
//! `192.168/16`), link-local (`169.254/16`, `fe80::/10`), unique-local (`fc00::/7`), shared
//! address space (`100.64/10`), `0/8`, unspecified, broadcast, multicast, documentation and
//! benchmarking ranges, and IPv4-mapped IPv6 forms of all of these. Only `http` and `https` are
//! followed; system proxies are ignored (a proxy would resolve names where we cannot see).
//!
//! Bodies are read up to a size limit ([`GuardedClientBuilder::max_bytes`], 64 MiB by
//! default); a longer body is [`HttpError::TooLarge`]. Errors never carry the URL's path or
//! query (Telegram puts the bot token in the path): they name the host only.
//!
//! It does not retry, cache, or decide what a status code means for a channel: providers do.
//! TLS is reqwest's rustls with its built-in provider: nothing process-wide is installed, so
//! the program's own reqwest clients work whatever it builds first.

mod ip;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use derive_setters::Setters;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect;

pub use ip::{InvalidIpNet, IpNet, is_forbidden};

/// The most redirects a download follows.
pub const MAX_REDIRECTS: usize = 5;

/// The default body limit of a download (64 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// A failed request of the guarded client. Never carries a URL path (tokens live there).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The URL resolves only to refused addresses (or is a refused IP literal).
    #[error("refused to connect to {host}: {addr} is a private, loopback or link-local address")]
    Blocked {
        /// The host of the URL (or of the redirect).
        host: String,
        /// The refused address.
        addr: IpAddr,
    },
    /// The URL cannot be used (not http/https, no host, unparsable).
    #[error("invalid URL for a download: {reason}")]
    InvalidUrl {
        /// Why.
        reason: String,
    },
    /// More than [`MAX_REDIRECTS`] redirects.
    #[error("too many redirects from {host}")]
    TooManyRedirects {
        /// The first host.
        host: String,
    },
    /// The body is over the limit.
    #[error("body from {host} is over the limit of {limit} bytes")]
    TooLarge {
        /// The host.
        host: String,
        /// The limit.
        limit: u64,
    },
    /// The server answered with a non-2xx status.
    #[error("{host} answered HTTP {status}")]
    Status {
        /// The host.
        host: String,
        /// The status.
        status: u16,
    },
    /// The connection failed, timed out, or broke.
    #[error("request to {host} failed: {message}")]
    Network {
        /// The host.
        host: String,
        /// What failed (without the URL).
        message: String,
    },
}

impl HttpError {
    /// Whether trying again later may succeed (network failures and 5xx/429 statuses).
    pub fn is_retryable(&self) -> bool {
        match self {
            HttpError::Network { .. } => true,
            HttpError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// Which addresses may be connected to.
#[derive(Debug, Clone, Default)]
struct AddressPolicy {
    allow: Vec<IpNet>,
}

impl AddressPolicy {
    fn permits(&self, ip: IpAddr) -> bool {
        !is_forbidden(ip) || self.allow.iter().any(|n| n.contains(ip))
    }

    /// Checks a URL before a request or a redirect: scheme, host, and an IP-literal host.
    fn check_url(&self, url: &url::Url) -> Result<(), HttpError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HttpError::InvalidUrl {
                reason: format!("scheme {:?} is not http or https", url.scheme()),
            });
        }
        let ip = match url.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            Some(url::Host::Domain(_)) => return Ok(()),
            None => {
                return Err(HttpError::InvalidUrl {
                    reason: "no host".to_owned(),
                });
            }
        };
        if self.permits(ip) {
            Ok(())
        } else {
            Err(HttpError::Blocked {
                host: host_of(url),
                addr: ip,
            })
        }
    }
}

/// The host (and port) of a URL, for error messages: never the path or query.
pub(crate) fn host_of(url: &url::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        _ => "(no host)".to_owned(),
    }
}

/// The resolver that drops refused addresses after DNS resolution.
struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let permitted: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|a| {
                    let ok = policy.permits(a.ip());
                    if !ok {
                        refused = Some(a.ip());
                    }
                    ok
                })
                .collect();
            match (permitted.is_empty(), refused) {
                (true, Some(addr)) => Err(Box::new(HttpError::Blocked { host, addr }) as _),
                (true, None) => Err(Box::new(HttpError::Network {
                    host,
                    message: "the name resolved to no address".to_owned(),
                }) as _),
                (false, _) => Ok(Box::new(permitted.into_iter()) as Addrs),
            }
        })
    }
}

/// Credentials added to a download (never logged, never in errors).
#[derive(Clone)]
pub enum Auth {
    /// `Authorization: Bearer <token>` (Meta Graph media).
    Bearer(String),
    /// HTTP Basic (Twilio media with "Enforce HTTP Auth").
    Basic {
        /// The user (an Account SID or API key SID).
        user: String,
        /// The password (an auth token or API key secret).
        password: String,
    },
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Bearer(_) => f.write_str("Bearer(…)"),
            Auth::Basic { user, .. } => write!(f, "Basic({user}:…)"),
        }
    }
}

/// A downloaded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downloaded {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// The `Content-Type` the server gave, if any.
    pub content_type: Option<String>,
}

/// Builds a [`GuardedClient`].
#[derive(Debug, Clone, Setters)]
pub struct GuardedClientBuilder {
    #[setters(skip)]
    allow: Vec<IpNet>,
    /// The whole-request timeout (60 s by default).
    timeout: Duration,
    /// The largest body a download reads (64 MiB by default).
    max_bytes: u64,
}

impl Default for GuardedClientBuilder {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            timeout: Duration::from_secs(60),
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

impl GuardedClientBuilder {
    /// Permits a network the guard would refuse (tests allow `127.0.0.1/32`; a deployment may
    /// allow a media proxy on its private network).
    pub fn allow(mut self, net: IpNet) -> Self {
        self.allow.push(net);
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<GuardedClient, HttpError> {
        let policy = Arc::new(AddressPolicy { allow: self.allow });
        let redirect_policy = policy.clone();
        let redirects = redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                let host = attempt.previous().first().map(host_of).unwrap_or_default();
                return attempt.error(HttpError::TooManyRedirects { host });
            }
            match redirect_policy.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        });
        let client = base_builder()
            .timeout(self.timeout)
            .redirect(redirects)
            .dns_resolver(Arc::new(GuardedResolver {
                policy: policy.clone(),
            }))
            .build()
            .map_err(|e| HttpError::InvalidUrl {
                reason: format!("cannot build the HTTP client: {}", e.without_url()),
            })?;
        Ok(GuardedClient {
            client,
            policy,
            max_bytes: self.max_bytes,
        })
    }
}

/// A network channel's two clients: its API client (system proxies off, `timeout` per
/// request) and the [`GuardedClient`] its media downloads go through (`media`, or one with
/// the defaults). `Err` says what could not be built.
#[cfg(any(meta_channel, rest_channel, feature = "twilio"))]
pub(crate) fn channel_clients(
    timeout: Duration,
    media: Option<&GuardedClient>,
) -> Result<(reqwest::Client, GuardedClient), String> {
    let api = base_builder()
        .timeout(timeout)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {}", e.without_url()))?;
    Ok((api, media_client(media)?))
}

/// The [`GuardedClient`] a channel's media downloads go through: `media`, or one with the
/// defaults. `Err` says why it could not be built.
#[cfg(http_api_channel)]
pub(crate) fn media_client(media: Option<&GuardedClient>) -> Result<GuardedClient, String> {
    match media {
        Some(c) => Ok(c.clone()),
        None => GuardedClient::new().map_err(|e| e.to_string()),
    }
}

/// The `Retry-After` of an answer, in seconds (the HTTP-date form is not read).
#[cfg(any(meta_channel, rest_channel, feature = "twilio"))]
pub(crate) fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    resp.headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// How long a connection may take to open: a request whose connection never opened never
/// reached the channel, so its failure is a [`ProviderError::Network`], safe to retry (a
/// connection still opening when the whole request's timeout fires would be taken for a
/// request that may have been received).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A reqwest builder with system proxies off and [`CONNECT_TIMEOUT`].
pub(crate) fn base_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("botmesh/", env!("CARGO_PKG_VERSION")))
}

/// A failed call `what` of `provider`'s API as its [`ProviderError`], by whether the request
/// may have reached the channel. `acts`: the call makes the channel do something a second
/// call would do again (a send); a call that reads, or that is harmless twice, is retryable
/// whatever happened.
///
/// | reqwest says | the request | error |
/// | --- | --- | --- |
/// | `is_builder` | never built | final `Api` |
/// | `is_connect` (refused, DNS, TLS, [`CONNECT_TIMEOUT`]) | never left | `Network` (retryable) |
/// | anything else: `is_timeout` after the connection opened, `is_request` (a connection closed or reset while waiting for the answer), `is_body` / `is_decode` (the answer cut off) | may have been received and acted on | `Ambiguous` when `acts`, else `Network` |
///
/// The URL (which may carry a token) is never in the message.
#[cfg(network_channel)]
#[cfg_attr(not(http_api_channel), allow(dead_code))]
pub(crate) fn call_error(
    provider: &str,
    what: &str,
    e: reqwest::Error,
    acts: bool,
) -> botmesh::provider::ProviderError {
    use botmesh::provider::ProviderError;
    let e = e.without_url();
    let kind = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "the answer was cut off"
    } else {
        "the connection was lost"
    };
    let mut message = format!("{what}: {kind}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    let provider = provider.to_owned();
    if e.is_builder() {
        ProviderError::Api {
            provider,
            status: None,
            code: None,
            message,
            retryable: false,
        }
    } else if e.is_connect() || !acts {
        ProviderError::Network { provider, message }
    } else {
        ProviderError::Ambiguous { provider, message }
    }
}

/// The SSRF-guarded download client. Cheap to clone.
///
/// ```no_run
/// use botmesh_providers::http::GuardedClient;
/// # async fn demo() -> Result<(), botmesh_providers::http::HttpError> {
/// let client = GuardedClient::new()?;
/// let media = client.download("https://example.com/a.jpg", None).await?;
/// assert!(client.download("http://169.254.169.254/latest", None).await.is_err());
/// # let _ = media; Ok(()) }
/// ```
#[derive(Clone)]
pub struct GuardedClient {
    client: reqwest::Client,
    policy: Arc<AddressPolicy>,
    max_bytes: u64,
}

impl fmt::Debug for GuardedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedClient")
            .field("allow", &self.policy.allow)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl GuardedClient {
    /// A client with the default settings and no allow-list.
    pub fn new() -> Result<Self, HttpError> {
        Self::builder().build()
    }

    /// A builder.
    pub fn builder() -> GuardedClientBuilder {
        GuardedClientBuilder::default()
    }

    /// A client that also permits `127.0.0.1` (for tests against local fake servers).
    pub fn allowing_localhost() -> Result<Self, HttpError> {
        Self::builder()
            .allow(IpNet::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 32))
            .build()
    }

    /// The body limit.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// GETs `url` (following permitted redirects) and reads the body up to the limit.
    pub async fn download(&self, url: &str, auth: Option<&Auth>) -> Result<Downloaded, HttpError> {
        self.download_limited(url, auth, self.max_bytes).await
    }

    /// As [`download`](Self::download), with a body limit of `limit` (a channel's own cap) or
    /// this client's [`max_bytes`](Self::max_bytes), whichever is lower.
    pub async fn download_limited(
        &self,
        url: &str,
        auth: Option<&Auth>,
        limit: u64,
    ) -> Result<Downloaded, HttpError> {
        let limit = limit.min(self.max_bytes);
        let parsed = url::Url::parse(url).map_err(|e| HttpError::InvalidUrl {
            reason: e.to_string(),
        })?;
        self.policy.check_url(&parsed)?;
        let host = host_of(&parsed);
        let mut req = self.client.get(parsed);
        req = match auth {
            Some(Auth::Bearer(t)) => req.bearer_auth(t),
            Some(Auth::Basic { user, password }) => req.basic_auth(user, Some(password)),
            None => req,
        };
        let mut resp = req.send().await.map_err(|e| classify(&host, e))?;
        let status = resp.status();
        let final_host = host_of(resp.url());
        if !status.is_success() {
            return Err(HttpError::Status {
                host: final_host,
                status: status.as_u16(),
            });
        }
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(HttpError::TooLarge {
                host: final_host,
                limit,
            });
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| classify(&final_host, e))? {
            if bytes.len() as u64 + chunk.len() as u64 > limit {
                return Err(HttpError::TooLarge {
                    host: final_host,
                    limit,
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Downloaded {
            bytes,
            content_type,
        })
    }
}

/// Turns a reqwest error into ours: a guard refusal found in the source chain wins; the URL
/// is dropped.
fn classify(host: &str, err: reqwest::Error) -> HttpError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(ours) = e.downcast_ref::<HttpError>() {
            return ours.clone();
        }
        source = e.source();
    }
    let err = err.without_url();
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        message.push_str(": ");
        message.push_str(&e.to_string());
        source = e.source();
    }
    HttpError::Network {
        host: host.to_owned(),
        message,
    }
}
