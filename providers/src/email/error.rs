//! [`EmailError`]: what fails inside the email provider (its store, IMAP, a mail that cannot
//! be built), each naming the key, server or mail it concerns. Sends report
//! [`ProviderError`]s with the runtime's retry classes (the SMTP table is in `smtp`); this
//! type is for the rest, and converts into a `ProviderError` where a send meets it.

use botmesh::provider::ProviderError;

use super::NAME;

/// An error of the email provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmailError {
    /// The bot's store could not be read or written.
    #[error("email store, key {key}: {reason}")]
    Store {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The IMAP server failed or refused a command.
    #[error("IMAP {server}: {reason}")]
    Imap {
        /// `host:port`.
        server: String,
        /// What failed.
        reason: String,
    },
    /// The bot did not accept a mail's events (stopping, journal down): it is read again.
    #[error("mail {mail} not accepted by the bot: {reason}")]
    NotAccepted {
        /// The mail's Message-ID.
        mail: String,
        /// Why.
        reason: String,
    },
    /// A mail could not be read (no sender, unparsable MIME).
    #[error("unreadable mail {mail}: {reason}")]
    Unreadable {
        /// The mail (its Message-ID, UID or field).
        mail: String,
        /// Why.
        reason: String,
    },
}

impl From<EmailError> for ProviderError {
    /// A store failure is retryable (the store comes back); the rest is final.
    fn from(e: EmailError) -> Self {
        let retryable = matches!(e, EmailError::Store { .. } | EmailError::Imap { .. });
        ProviderError::Api {
            provider: NAME.to_owned(),
            status: None,
            code: None,
            message: e.to_string(),
            retryable,
        }
    }
}
