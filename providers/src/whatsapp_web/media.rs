//! Media refs of WhatsApp Web: what a message's media needs to be downloaded later, by this
//! process or after a restart.
//!
//! A [`MediaRef`]'s token is the JSON of the media fields (direct path, media key, the two
//! SHA-256s, length, MIME type) and of the message's key (id, chat, author), which the
//! re-upload request names. The journal keeps the same fields ([`StoredMediaRef`] v1, no
//! URL: the CDN host comes from the session). A download whose CDN copy expired (404/410)
//! asks the sender's phone to upload the file again and downloads from the new path; when
//! the phone no longer has it, the download fails with
//! [`MediaUnavailableReason::Expired`].

use botmesh::message::MediaRef;
use botmesh::provider::{MediaUnavailableReason, ProviderError, StoredMediaRef};
use serde::{Deserialize, Serialize};

use super::NAME;
use super::session::{WaMedia, WaMediaOrigin};

/// The version of the journaled form.
const V: u32 = 1;

/// What a media ref carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MediaToken {
    pub(crate) media: WaMedia,
    pub(crate) origin: WaMediaOrigin,
}

impl MediaToken {
    pub(crate) fn media_ref(&self) -> MediaRef {
        MediaRef {
            provider: NAME.to_owned(),
            token: serde_json::to_string(self).unwrap_or_default(),
        }
    }

    /// The token of `media`, validated.
    pub(crate) fn parse(media: &MediaRef) -> Result<Self, ProviderError> {
        if media.provider != NAME {
            return Err(unavailable(
                MediaUnavailableReason::ProviderMismatch,
                format!("a {} media ref given to {NAME}", media.provider),
            ));
        }
        let token: MediaToken = serde_json::from_str(&media.token).map_err(|e| {
            unavailable(
                MediaUnavailableReason::RehydrateFailed,
                format!("not a {NAME} media ref: {e}"),
            )
        })?;
        token.validate()?;
        Ok(token)
    }

    fn validate(&self) -> Result<(), ProviderError> {
        let m = &self.media;
        let bad = |what: &str| {
            Err(unavailable(
                MediaUnavailableReason::RehydrateFailed,
                format!("invalid {NAME} media ref: {what}"),
            ))
        };
        if m.media_key.len() != 32 {
            return bad("the media key is not 32 bytes");
        }
        if m.file_sha256.len() != 32 || m.file_enc_sha256.len() != 32 {
            return bad("a SHA-256 is not 32 bytes");
        }
        if !m.direct_path.starts_with('/') {
            return bad("the direct path is not a path");
        }
        if self.origin.message_id.is_empty() || self.origin.chat.is_empty() {
            return bad("the message key is missing");
        }
        Ok(())
    }

    /// The journaled form.
    pub(crate) fn stored(&self) -> Option<StoredMediaRef> {
        Some(StoredMediaRef {
            provider: NAME.to_owned(),
            v: V,
            data: serde_json::to_value(self).ok()?,
        })
    }

    /// The media ref of a journaled form, validated.
    pub(crate) fn rehydrate(stored: &StoredMediaRef) -> Result<MediaRef, ProviderError> {
        if stored.provider != NAME {
            return Err(unavailable(
                MediaUnavailableReason::ProviderMismatch,
                format!("written by {}, read by {NAME}", stored.provider),
            ));
        }
        if stored.v != V {
            return Err(unavailable(
                MediaUnavailableReason::RehydrateFailed,
                format!("unknown {NAME} media ref v{}", stored.v),
            ));
        }
        let token: MediaToken = serde_json::from_value(stored.data.clone()).map_err(|e| {
            unavailable(
                MediaUnavailableReason::RehydrateFailed,
                format!("invalid {NAME} media ref: {e}"),
            )
        })?;
        token.validate()?;
        Ok(token.media_ref())
    }
}

fn unavailable(reason: MediaUnavailableReason, message: String) -> ProviderError {
    ProviderError::MediaUnavailable { reason, message }
}
