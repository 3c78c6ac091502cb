//! What the two WhatsApp-Web gateways (Evolution API, WPPConnect) share: their settings
//! ([`WebSettings`]: the gateway's, the instance or session whose webhooks are taken, the
//! history horizon) and their state ([`gateway`]: the settings and the channel's webhook
//! parser in a [`Gateway`]), the history horizon itself (a message older than it is history
//! the gateway replays after a reconnect or a sync, not answered), the media they send
//! ([`OutgoingFile`]: a URL they fetch, or bytes they take as base64) and return as base64,
//! what an inbound message the bot does not read carries ([`other_content`]), and the inner
//! WhatsApp message id.

use std::sync::Arc;
use std::time::Duration;

use botmesh::message::{Content, MediaSource};
use botmesh::provider::{ProviderError, ProviderEvent};
use serde_json::Value;

use super::{Gateway, GatewayConfig, GatewayEnv, GatewaySettings};
use crate::settings::ConfigError;
use crate::webhook::Refused;

/// How a WhatsApp-Web gateway channel reads its webhooks: a body is JSON naming its `event`
/// and, in `scope_field`, the instance or session it is for ([`webhook_event`]); `parse`
/// turns it into events.
pub(crate) struct WebWebhook {
    /// The field naming the instance (Evolution) or session (WPPConnect).
    pub(crate) scope_field: &'static str,
    /// The refusal of a body that is not the channel's webhook.
    pub(crate) malformed: fn(String) -> Refused,
    /// The events of a webhook (its JSON and its event), a message older than the history
    /// horizon skipped.
    pub(crate) parse: fn(&Value, &str, Duration) -> Result<Vec<ProviderEvent>, Refused>,
}

impl WebWebhook {
    /// The events of a webhook body for the instance or session `scope`.
    pub(crate) fn read(
        &self,
        body: &[u8],
        scope: &str,
        horizon: Duration,
    ) -> Result<Vec<ProviderEvent>, Refused> {
        let (v, event) = webhook_event(body, (self.scope_field, scope), self.malformed)?;
        (self.parse)(&v, &event, horizon)
    }
}

/// A WhatsApp-Web gateway channel's config as its [`Gateway`] holds it: the settings and how
/// the channel reads its webhooks.
pub(crate) struct WebConfig {
    pub(crate) settings: WebSettings,
    webhook: &'static WebWebhook,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.settings.fmt(f)
    }
}

impl GatewayConfig for WebConfig {
    fn settings(&self) -> &GatewaySettings {
        &self.settings.gateway
    }

    fn parse(&self, body: &[u8]) -> Result<Vec<ProviderEvent>, Refused> {
        let s = &self.settings;
        self.webhook.read(body, &s.scope, s.history_horizon)
    }
}

/// The state of the WhatsApp-Web gateway channel `provider` with `settings`, its webhooks
/// read as `webhook` says.
pub(crate) fn gateway(
    provider: &str,
    settings: WebSettings,
    webhook: &'static WebWebhook,
) -> Result<Arc<Gateway<WebConfig>>, ProviderError> {
    Gateway::new(provider, WebConfig { settings, webhook })
}

/// A webhook body as JSON and its `event`: refused by `malformed` when it is not JSON or
/// names no event, and as a bad signature when its `field` (the instance or session) is not
/// `scope` (another instance's webhooks are not taken).
fn webhook_event(
    body: &[u8],
    (field, scope): (&'static str, &str),
    malformed: impl Fn(String) -> Refused,
) -> Result<(Value, String), Refused> {
    let (v, event) = super::inbound::typed_body(body, "event", malformed)?;
    if v[field].as_str() != Some(scope) {
        return Err(Refused::BadSignature(field));
    }
    Ok((v, event))
}

/// The content of an inbound message the bot does not read: the message as it came, without
/// the embedded media payload `field` (never journaled).
pub(crate) fn other_content(message: &Value, field: &str) -> Content {
    let mut other = message.clone();
    if let Some(o) = other.as_object_mut() {
        o.remove(field);
    }
    Content::Other(other)
}

/// The environment variables of a WhatsApp-Web gateway's settings.
pub(crate) struct WebEnv {
    /// The shared settings' variables.
    pub(crate) gateway: GatewayEnv,
    /// The instance (Evolution) or session (WPPConnect) (required).
    pub(crate) scope: &'static str,
    /// The history horizon, in seconds.
    pub(crate) history: &'static str,
    /// The default webhook route (`/evolution`).
    pub(crate) default_path: &'static str,
}

/// A WhatsApp-Web gateway channel's settings: the shared ones, the instance or session whose
/// webhooks are taken (another's are refused), and the history horizon.
#[derive(Clone, Debug)]
pub(crate) struct WebSettings {
    pub(crate) gateway: GatewaySettings,
    pub(crate) scope: String,
    pub(crate) history_horizon: Duration,
}

impl WebSettings {
    /// Settings with the server, the credential, the scope and the webhook secret, and the
    /// defaults; refuses a server URL that is not `http(s)` and a weak secret.
    pub(crate) fn new(
        api_url: &str,
        api_key: String,
        scope: String,
        webhook_secret: String,
        path: &str,
    ) -> Result<Self, ConfigError> {
        let mut gateway = GatewaySettings::new(api_url, api_key, webhook_secret, path);
        gateway.api_base = crate::settings::http_url(api_url, "api_url")?;
        gateway.check_secret("webhook_secret")?;
        Ok(Self {
            gateway,
            scope,
            history_horizon: DEFAULT_HISTORY_HORIZON,
        })
    }

    /// Reads the settings from `get` under `env`'s names (the server URL is required).
    pub(crate) fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        env: &WebEnv,
    ) -> Result<Self, ConfigError> {
        let get = crate::settings::trimmed(get);
        let need = |k: &'static str| get(k).ok_or(ConfigError::MissingEnv(k));
        need(env.gateway.api_base)?;
        let scope = need(env.scope)?;
        let gateway =
            GatewaySettings::from_lookup(&get, &env.gateway, "http://localhost", env.default_path)?;
        Ok(Self {
            gateway,
            scope,
            history_horizon: horizon_from(&get, env.history)?,
        })
    }

    /// Another webhook route.
    pub(crate) fn with_path(mut self, path: &str) -> Result<Self, ConfigError> {
        self.gateway.path = crate::settings::route(path.to_owned(), "webhook_path")?;
        Ok(self)
    }
}

/// What a WhatsApp-Web gateway sends as media: a URL it fetches, or bytes it takes as base64.
#[derive(Debug)]
pub(crate) enum Payload {
    /// A URL the gateway fetches.
    Url(String),
    /// A local file's or in-memory media's bytes.
    Bytes(Vec<u8>),
}

impl Payload {
    /// The URL, or the bytes as base64.
    #[cfg(feature = "evolution")]
    pub(crate) fn into_base64(self) -> String {
        match self {
            Payload::Url(url) => url,
            Payload::Bytes(b) => botmesh::codec::encode_base64(&b),
        }
    }
}

/// Media to send, with the file name the recipient sees.
#[derive(Debug)]
pub(crate) struct OutgoingFile {
    pub(crate) payload: Payload,
    pub(crate) file_name: String,
}

impl OutgoingFile {
    /// The media of `source`: a URL as it is (named by its last segment), or the bytes of
    /// in-memory media or a local file (refused over `limit`); a channel token is refused.
    pub(crate) async fn of(
        provider: &str,
        source: &MediaSource,
        limit: u64,
    ) -> Result<Self, ProviderError> {
        let file_name = match source {
            MediaSource::Url { url } => {
                return Ok(Self {
                    payload: Payload::Url(url.clone()),
                    file_name: url.rsplit('/').next().unwrap_or("file").to_owned(),
                });
            }
            MediaSource::Bytes { file_name, .. } => file_name.clone(),
            MediaSource::Path { path } => {
                path.file_name().map(|n| n.to_string_lossy().into_owned())
            }
            MediaSource::Token { .. } => {
                return Err(crate::errors::unsupported_content(
                    provider,
                    "a media token (send a URL, a path or bytes)",
                ));
            }
        };
        let bytes = outgoing_bytes(provider, source, limit)
            .await?
            .unwrap_or_default();
        Ok(Self {
            payload: Payload::Bytes(bytes),
            file_name: file_name.unwrap_or_else(|| "file".to_owned()),
        })
    }
}

/// The default history horizon: longer than Evolution's webhook retries last (10 attempts
/// backing off from 5 s to 300 s, about 25 minutes), so a message redelivered after the bot
/// was down that long is still answered.
pub(crate) const DEFAULT_HISTORY_HORIZON: Duration = Duration::from_secs(30 * 60);

/// Whether a message sent at `sent_secs` (unix seconds) is older than `horizon` now: history.
pub(crate) fn is_history(sent_secs: Option<i64>, horizon: Duration) -> bool {
    let Some(sent) = sent_secs else {
        return false;
    };
    let now = botmesh::clock::now_ms() / 1000;
    now.saturating_sub(sent) > i64::try_from(horizon.as_secs()).unwrap_or(i64::MAX)
}

/// The bytes of a gateway's media answer: `base64` (a data URL's payload too), decoded.
pub(crate) fn media_bytes(provider: &str, body: &Value) -> Result<Vec<u8>, ProviderError> {
    let text = body["base64"]
        .as_str()
        .or_else(|| body["data"].as_str())
        .unwrap_or_default();
    let payload = text.split_once("base64,").map_or(text, |(_, p)| p);
    botmesh::codec::decode_base64(payload.trim())
        .filter(|b| !b.is_empty())
        .ok_or_else(|| ProviderError::Api {
            provider: provider.to_owned(),
            status: None,
            code: None,
            message: "the media answer carries no base64 body".to_owned(),
            retryable: false,
        })
}

/// The bytes of a local file or of in-memory media to send (`None` for a URL or a token),
/// refused over `limit`.
async fn outgoing_bytes(
    provider: &str,
    source: &MediaSource,
    limit: u64,
) -> Result<Option<Vec<u8>>, ProviderError> {
    let bytes = match source {
        MediaSource::Bytes { data, .. } => data.clone(),
        MediaSource::Path { path } => tokio::fs::read(path).await.map_err(|e| {
            crate::errors::unsupported_content(
                provider,
                format!("the file {}: {e}", path.display()),
            )
        })?,
        _ => return Ok(None),
    };
    if bytes.len() as u64 > limit {
        return Err(ProviderError::PayloadTooLarge {
            provider: provider.to_owned(),
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(Some(bytes))
}

/// A WhatsApp message id as the gateways give it (`3EB0C431C26A1916B5F2`, Baileys' `BAE5…`):
/// letters and digits, 8 to 64 of them.
#[cfg(feature = "evolution")]
pub(crate) fn plausible_message_id(id: &str) -> bool {
    (8..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The history horizon read from `setting` (seconds), or the default.
fn horizon_from(
    get: &impl Fn(&str) -> Option<String>,
    setting: &'static str,
) -> Result<Duration, crate::settings::ConfigError> {
    match get(setting) {
        None => Ok(DEFAULT_HISTORY_HORIZON),
        Some(s) => {
            s.parse()
                .map(Duration::from_secs)
                .map_err(|_| crate::settings::ConfigError::Invalid {
                    setting,
                    reason: "must be a number of seconds".to_owned(),
                })
        }
    }
}

/// A contact card named `name`, with the phone numbers of `vcard`.
pub(crate) fn vcard_contact(name: Option<&str>, vcard: Option<&str>) -> botmesh::message::Content {
    botmesh::message::Content::Contacts(vec![botmesh::message::ContactCard {
        name: name.unwrap_or_default().to_owned(),
        phones: vcard.map(vcard_phones).unwrap_or_default(),
    }])
}

/// The phone numbers of a vCard's `TEL` lines.
fn vcard_phones(vcard: &str) -> Vec<String> {
    vcard
        .lines()
        .filter(|l| l.to_ascii_uppercase().starts_with("TEL") || l.contains(".TEL"))
        .filter_map(|l| l.rsplit_once(':').map(|(_, n)| n.trim().to_owned()))
        .filter(|n| !n.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcard_numbers_and_history() {
        let vcard =
            "BEGIN:VCARD\nVERSION:3.0\nFN:Ana\nitem1.TEL;waid=5511999:+55 11 999\nEND:VCARD";
        assert_eq!(vcard_phones(vcard), ["+55 11 999"]);
        let now = botmesh::clock::now_ms() / 1000;
        let horizon = Duration::from_secs(60);
        assert!(!is_history(Some(now - 30), horizon));
        assert!(is_history(Some(now - 120), horizon));
        assert!(!is_history(None, horizon));
    }
}
