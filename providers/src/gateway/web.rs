//! What the two WhatsApp-Web gateways (Evolution API, WPPConnect) share: the history horizon
//! (a message older than it is history the gateway replays after a reconnect or a sync, not
//! answered), the media bytes they return as base64, and the inner WhatsApp message id.

use std::time::Duration;

use botmesh::message::MediaSource;
use botmesh::provider::ProviderError;
use serde_json::Value;

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
pub(crate) async fn outgoing_bytes(
    provider: &str,
    source: &MediaSource,
    limit: u64,
) -> Result<Option<Vec<u8>>, ProviderError> {
    let bytes = match source {
        MediaSource::Bytes { data, .. } => data.clone(),
        MediaSource::Path { path } => tokio::fs::read(path).await.map_err(|e| {
            crate::gateway::unsupported(provider, format!("the file {}: {e}", path.display()))
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
pub(crate) fn horizon_from(
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
