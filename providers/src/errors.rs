//! The provider errors the network channels build alike: a final error of their own setup
//! (`local`), an operation the channel cannot do ([`unsupported`]), content it cannot carry
//! ([`unsupported_content`]), and the chat filled into a `RecipientUnreachable` their API layer
//! could not name (`with_chat`). Each channel classifies its API's answers itself.

use botmesh::provider::ProviderError;

/// A final error of `provider`'s own making (a client that cannot be built, an answer
/// without a field it needs), with no status or code.
#[cfg(any(
    rest_channel,
    feature = "discord",
    feature = "telegram",
    feature = "email"
))]
pub(crate) fn local(provider: &str, message: String) -> ProviderError {
    ProviderError::Api {
        provider: provider.to_owned(),
        status: None,
        code: None,
        message,
        retryable: false,
    }
}

/// `provider` cannot do `operation` (an edit, an edit of media): final.
pub(crate) fn unsupported(provider: &str, operation: &'static str) -> ProviderError {
    ProviderError::Unsupported {
        provider: provider.to_owned(),
        operation,
    }
}

/// Content `provider` cannot carry (a kind of media, too many buttons): final.
pub(crate) fn unsupported_content(provider: &str, what: impl Into<String>) -> ProviderError {
    ProviderError::UnsupportedContent {
        provider: provider.to_owned(),
        what: what.into(),
    }
}

/// Fills `chat` into a `RecipientUnreachable` the API layer could not name.
#[cfg(any(feature = "discord", feature = "telegram"))]
pub(crate) fn with_chat(err: ProviderError, chat: &botmesh::message::ChatId) -> ProviderError {
    match err {
        ProviderError::RecipientUnreachable {
            provider, reason, ..
        } => ProviderError::RecipientUnreachable {
            provider,
            chat: chat.to_string(),
            reason,
        },
        other => other,
    }
}
