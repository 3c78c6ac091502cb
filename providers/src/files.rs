//! Outgoing media: [`OutgoingMedia`], the parts of a media message every channel that sends
//! media reads (WhatsApp Cloud, Messenger, Instagram, WhatsApp Web, the HTTP gateways), and
//! [`read`], the bytes and file name of a `Bytes` or `Path` source for the channels that
//! upload media themselves.

use botmesh::message::{MediaKind, MediaSource, OutgoingContent};
use botmesh::provider::ProviderError;

/// The parts of an [`OutgoingContent::Media`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutgoingMedia<'a> {
    /// The kind (image, voice, document…).
    pub(crate) kind: MediaKind,
    /// Where the bytes come from.
    pub(crate) source: &'a MediaSource,
    /// The caption, when there is one.
    pub(crate) caption: Option<&'a str>,
    /// The MIME type, when known.
    pub(crate) mime: Option<&'a str>,
}

impl<'a> OutgoingMedia<'a> {
    /// The media parts of `content`; `None` when it is not media.
    pub(crate) fn of(content: &'a OutgoingContent) -> Option<Self> {
        match content {
            OutgoingContent::Media {
                media_kind,
                source,
                caption,
                mime,
            } => Some(Self {
                kind: *media_kind,
                source,
                caption: caption.as_deref(),
                mime: mime.as_deref(),
            }),
            _ => None,
        }
    }
}

/// The bytes and file name of media a channel uploads itself: a `Bytes` source as given, a
/// `Path` source read now. A URL or a channel token is sent by reference, not read:
/// `UnsupportedContent`.
#[cfg_attr(not(any(meta_channel, feature = "whatsapp-web")), allow(dead_code))]
pub(crate) async fn read(
    source: &MediaSource,
    provider: &str,
) -> Result<(Vec<u8>, Option<String>), ProviderError> {
    let unsupported = |what: String| crate::errors::unsupported_content(provider, what);
    match source {
        MediaSource::Bytes { data, file_name } => Ok((data.clone(), file_name.clone())),
        MediaSource::Path { path } => {
            let data = tokio::fs::read(path)
                .await
                .map_err(|e| unsupported(format!("cannot read {}: {e}", path.display())))?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            Ok((data, name))
        }
        MediaSource::Url { .. } | MediaSource::Token { .. } => {
            Err(unsupported("a URL or token read as local media".to_owned()))
        }
    }
}
