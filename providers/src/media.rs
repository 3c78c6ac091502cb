//! Media references of the network channels: the checks their `download_media`,
//! `serialize_media_ref` and `rehydrate_media_ref` share, and a download through the
//! [`GuardedClient`](crate::http::GuardedClient) (`fetch`), its failure read as a provider
//! error.
//!
//! A channel journals a media ref as `{"<field>": "<token>"}` in version 1; it is taken back
//! only when written by the same channel and when the channel finds the token plausible (an
//! id of its shape, a URL its credentials may go to).

use botmesh::message::{MediaKind, MediaRef};
use botmesh::provider::{MediaUnavailableReason, ProviderError, StoredMediaRef};
use serde_json::json;

use crate::http::HttpError;

/// Refuses a media ref of another provider.
pub(crate) fn own(media: &MediaRef, provider: &str) -> Result<(), ProviderError> {
    if media.provider == provider {
        return Ok(());
    }
    Err(ProviderError::MediaUnavailable {
        reason: MediaUnavailableReason::ProviderMismatch,
        message: format!("a {} media ref given to {provider}", media.provider),
    })
}

/// The stored form of `provider`'s media ref: `{field: token}`, version 1; `None` for another
/// provider's ref or an implausible token.
pub(crate) fn store(
    media: &MediaRef,
    provider: &str,
    field: &str,
    plausible: impl Fn(&str) -> bool,
) -> Option<StoredMediaRef> {
    (media.provider == provider && plausible(&media.token)).then(|| StoredMediaRef {
        provider: provider.to_owned(),
        v: 1,
        data: json!({ field: media.token }),
    })
}

/// The media ref back from its stored form, refused when another provider wrote it, in
/// another version, or without a plausible `field`.
pub(crate) fn rehydrate(
    stored: &StoredMediaRef,
    provider: &str,
    field: &str,
    plausible: impl Fn(&str) -> bool,
) -> Result<MediaRef, ProviderError> {
    let fail = |reason, message: String| ProviderError::MediaUnavailable { reason, message };
    if stored.provider != provider {
        return Err(fail(
            MediaUnavailableReason::ProviderMismatch,
            format!("written by {}, read by {provider}", stored.provider),
        ));
    }
    if stored.v != 1 {
        return Err(fail(
            MediaUnavailableReason::RehydrateFailed,
            format!("unknown {provider} media ref v{}", stored.v),
        ));
    }
    match stored.data.get(field).and_then(|v| v.as_str()) {
        Some(token) if plausible(token) => Ok(MediaRef {
            provider: provider.to_owned(),
            token: token.to_owned(),
        }),
        _ => Err(fail(
            MediaUnavailableReason::RehydrateFailed,
            format!("the stored {provider} media ref has no valid {field}"),
        )),
    }
}

/// A failed download as `provider`'s error: over the limit, retryable (network, 5xx, 429), or
/// final with the status.
#[cfg_attr(not(media_download_channel), allow(dead_code))]
fn download_error(e: HttpError, provider: &str) -> ProviderError {
    match e {
        HttpError::TooLarge { limit, .. } => ProviderError::PayloadTooLarge {
            provider: provider.to_owned(),
            size: limit.saturating_add(1),
            limit,
        },
        e if e.is_retryable() => ProviderError::Network {
            provider: provider.to_owned(),
            message: e.to_string(),
        },
        e => ProviderError::Api {
            provider: provider.to_owned(),
            status: match &e {
                HttpError::Status { status, .. } => Some(*status),
                _ => None,
            },
            code: None,
            message: format!("media download: {e}"),
            retryable: false,
        },
    }
}

/// Downloads `url` through `client` (at most `limit` bytes, with `auth`) as `provider`'s
/// media: the bytes, or the error [`download_error`] classes.
#[cfg_attr(not(media_download_channel), allow(dead_code))]
pub(crate) async fn fetch(
    client: &crate::http::GuardedClient,
    url: &str,
    auth: Option<&crate::http::Auth>,
    limit: u64,
    provider: &str,
) -> Result<Vec<u8>, ProviderError> {
    client
        .download_limited(url, auth, limit)
        .await
        .map(|d| d.bytes)
        .map_err(|e| download_error(e, provider))
}

/// The media kind of a MIME type: `image/*`, `audio/ogg` and `audio/opus` (voice notes),
/// other `audio/*`, `video/*`, and anything else a document.
#[cfg_attr(not(any(feature = "twilio", feature = "email")), allow(dead_code))]
pub(crate) fn kind_of_mime(content_type: &str) -> MediaKind {
    let ct = content_type.to_ascii_lowercase();
    if ct.starts_with("image/") {
        MediaKind::Image
    } else if ct.starts_with("audio/ogg") || ct.starts_with("audio/opus") {
        MediaKind::Voice
    } else if ct.starts_with("audio/") {
        MediaKind::Audio
    } else if ct.starts_with("video/") {
        MediaKind::Video
    } else {
        MediaKind::Document
    }
}
