//! The provider's typed errors ([`WhatsAppWebError`]) and the classes of the session's send
//! errors ([`WaError`] → [`ProviderError`]), which drive the outbox's retries:
//!
//! | session error | provider error | class |
//! | --- | --- | --- |
//! | `NotConnected` (reconnecting, pairing) | `NotConnected` | retryable |
//! | `Timeout` (the request left, no answer) | `Network` | retryable: the resend carries the same message id, so the recipient gets one message |
//! | `RateLimited` | `RateLimited` | rate limited |
//! | `Server` | `Api { retryable: true }` | retryable |
//! | `Unreachable` | `RecipientUnreachable` | final |
//! | `Refused` (413: too large; others) | `UnsupportedContent` / `Api { retryable: false }` | final |
//! | `MediaExpired`, `MediaGone` | `MediaUnavailable { Expired }` | final |
//! | `MediaCorrupt` | `Api { retryable: false }` | final |
//! | `Store`, `Client`, `NotAccepted` | `Api { retryable: true }` | retryable |

use botmesh::provider::{MediaUnavailableReason, ProviderError};

use super::NAME;
use super::session::WaError;

/// Why the WhatsApp Web provider could not start or keep its session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhatsAppWebError {
    /// Another process holds the session (its lease did not run out within the wait): only
    /// one process may be connected as the linked device.
    #[error("WhatsApp Web session `{session}` is held by another process ({})", holder.as_deref().unwrap_or("unknown holder"))]
    SessionHeld {
        /// The session.
        session: String,
        /// The holder's instance id, when known.
        holder: Option<String>,
    },
    /// The session store (the bot's durable backend) failed.
    #[error("WhatsApp Web session `{session}`: store: {reason}")]
    Store {
        /// The session.
        session: String,
        /// What failed.
        reason: String,
    },
    /// A setting is invalid.
    #[error("WhatsApp Web setting `{option}`: {reason}")]
    Config {
        /// The setting.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// The client could not start.
    #[error("WhatsApp Web session `{session}`: {source}")]
    Session {
        /// The session.
        session: String,
        /// The client's error.
        #[source]
        source: WaError,
    },
}

impl WhatsAppWebError {
    /// A stable code (`session-held`, `store`, `config`, `session`), carried as the
    /// [`ProviderError::Api`] code when the bot starts the provider.
    pub fn code(&self) -> &'static str {
        match self {
            WhatsAppWebError::SessionHeld { .. } => "session-held",
            WhatsAppWebError::Store { .. } => "store",
            WhatsAppWebError::Config { .. } => "config",
            WhatsAppWebError::Session { .. } => "session",
        }
    }
}

impl From<WhatsAppWebError> for ProviderError {
    fn from(e: WhatsAppWebError) -> Self {
        let retryable = matches!(e, WhatsAppWebError::Store { .. });
        ProviderError::Api {
            provider: NAME.to_owned(),
            status: None,
            code: Some(e.code().to_owned()),
            message: e.to_string(),
            retryable,
        }
    }
}

/// The provider error of a failed session call (the table in the module documentation).
pub(crate) fn classify(e: WaError) -> ProviderError {
    let provider = NAME.to_owned();
    let api = |code: Option<u16>, message: String, retryable: bool| ProviderError::Api {
        provider: NAME.to_owned(),
        status: code,
        code: None,
        message,
        retryable,
    };
    match e {
        WaError::NotConnected => ProviderError::NotConnected { provider },
        WaError::Timeout(after) => ProviderError::Network {
            provider,
            message: format!("no answer within {after:?}; sent again under the same message id"),
        },
        WaError::RateLimited { retry_after } => ProviderError::RateLimited {
            provider,
            retry_after,
        },
        WaError::Server { code, message } => api(Some(code), message, true),
        WaError::Unreachable { to, reason } => ProviderError::RecipientUnreachable {
            provider,
            chat: to,
            reason,
        },
        WaError::Refused { code: 413, message } => ProviderError::UnsupportedContent {
            provider,
            what: format!("too large: {message}"),
        },
        WaError::Refused { code, message } => api(Some(code), message, false),
        e @ (WaError::MediaExpired { .. } | WaError::MediaGone(_)) => {
            ProviderError::MediaUnavailable {
                reason: MediaUnavailableReason::Expired,
                message: e.to_string(),
            }
        }
        e @ WaError::MediaCorrupt(_) => api(None, e.to_string(), false),
        e @ (WaError::Store(_) | WaError::Client(_) | WaError::NotAccepted { .. }) => {
            api(None, e.to_string(), true)
        }
    }
}
