//! Media a channel uploads itself (WhatsApp Cloud, Messenger, Instagram, WhatsApp Web): the
//! bytes and file name of a `Bytes` or `Path` source.

use botmesh::message::MediaSource;
use botmesh::provider::ProviderError;

/// The bytes and file name of media a channel uploads itself: a `Bytes` source as given, a
/// `Path` source read now. A URL or a channel token is sent by reference, not read:
/// `UnsupportedContent`.
pub(crate) async fn read(
    source: &MediaSource,
    provider: &str,
) -> Result<(Vec<u8>, Option<String>), ProviderError> {
    let unsupported = |what: String| ProviderError::UnsupportedContent {
        provider: provider.to_owned(),
        what,
    };
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
