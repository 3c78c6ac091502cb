//! The Meta Graph core that WhatsApp Cloud, Messenger and Instagram share: what their
//! webhooks, API calls and media have in common, so each channel writes only its own wire
//! format.
//!
//! | part | what it does | used by |
//! | --- | --- | --- |
//! | `config` | the credentials, Graph base and version, webhook route and timeouts, from code or the environment ([`MetaConfigError`] names the variable) | every Meta channel's config |
//! | `webhook` | the `hub.challenge` handshake (`GET`: 200 with the challenge when `hub.mode=subscribe` and the verify token match, else 403) and `X-Hub-Signature-256` (HMAC-SHA256 of the raw body with the app secret, constant time: missing 401, wrong 403), on the shared [`crate::webhook`] skeleton | every Meta webhook route |
//! | `graph` | the Graph client (bearer token, JSON, multipart) and its error classes, decided on `error.code` and `error_subcode` (a channel's own table first, then the shared rules below) | every send, upload and media lookup |
//! | `window` | the 24-hour customer-service window: when each chat last wrote, in memory, bounded ([`WINDOW_CHATS`]) | sends outside the window |
//! | [`url_allowed`] | media downloads reach the Graph's origin and `https` URLs on Meta's hosts only | media downloads and media refs |
//!
//! Shared error rules (after the channel's table):
//!
//! | Graph answer | class |
//! | --- | --- |
//! | `code` 1, 2 (unknown, service) | retryable `Api` |
//! | `code` 4 (application request limit) | `RateLimited` (with `Retry-After` when given) |
//! | HTTP 413 | `PayloadTooLarge` |
//! | HTTP 429 | `RateLimited` |
//! | any 5xx (the Graph answered: nothing was accepted) | retryable `Api` |
//! | no connection | `Network` (retryable) |
//! | a timeout or connection lost after the request was written, on a send | `Ambiguous` (`crate::http::call_error`) |
//! | anything else (100 invalid parameter, 190 token, 200 permission, …) | final `Api` with the code |

mod config;
mod core;
mod graph;
mod webhook;
mod window;

#[cfg(any(feature = "messenger", feature = "instagram"))]
pub mod messaging;

pub use config::{DEFAULT_API_BASE, DEFAULT_API_VERSION, MetaConfigError};
pub(crate) use config::{EnvNames, GraphSettings, graph_config_builders};
pub(crate) use core::{MetaConfig, MetaCore};
pub(crate) use graph::{Class, GraphClient};
pub(crate) use webhook::{MetaInbound, MetaWebhook};
pub(crate) use window::SessionWindow;
pub use window::{SESSION_WINDOW_MS, WINDOW_CHATS};

/// Whether a media URL may be fetched (with the access token, for WhatsApp): the Graph API's
/// origin (`api_base`), or an `https` URL on one of `hosts` or their subdomains.
pub fn url_allowed<H: AsRef<str>>(api_base: &str, url: &str, hosts: &[H]) -> bool {
    let Ok(u) = url::Url::parse(url) else {
        return false;
    };
    if url::Url::parse(api_base).is_ok_and(|a| a.origin() == u.origin()) {
        return true;
    }
    u.scheme() == "https"
        && u.host_str().is_some_and(|h| {
            let h = h.to_ascii_lowercase();
            hosts.iter().any(|m| {
                let m = m.as_ref();
                h == m || h.strip_suffix(m).is_some_and(|rest| rest.ends_with('.'))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_on_meta_hosts_only() {
        let hosts = ["fbsbx.com", "fbcdn.net"];
        let api = "https://graph.facebook.com";
        for ok in [
            "https://graph.facebook.com/v21.0/123",
            "https://lookaside.fbsbx.com/x",
            "https://scontent.xx.fbcdn.net/v/t1/abc",
            "https://fbcdn.net/a",
        ] {
            assert!(url_allowed(api, ok, &hosts), "{ok}");
        }
        for refused in [
            "http://lookaside.fbsbx.com/x",
            "https://fbsbx.com.evil.example/x",
            "https://evil.example/?u=fbsbx.com",
            "https://notfbcdn.net/x",
            "not a url",
        ] {
            assert!(!url_allowed(api, refused, &hosts), "{refused}");
        }
    }
}
