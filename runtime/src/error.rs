//! The runtime's errors: [`BotError`] for the bot's own operations and [`HandlerError`] for
//! what a user's handler returns.
//!
//! Provider failures keep their [`ProviderError`] (and so their retry class); store failures
//! keep their [`StoreError`] (and so the file or record they concern).

use botmesh_durability::StoreError;

use crate::provider::ProviderError;

/// What a handler, hook or flow may fail with: any error (like `anyhow`), boxed.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result of a handler.
pub type HandlerResult = Result<(), HandlerError>;

/// Errors of the bot's operations.
#[derive(Debug, thiserror::Error)]
pub enum BotError {
    /// The provider failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An invalid configuration value, refused when the bot is built.
    #[error("invalid configuration `{option}`: {reason}")]
    Config {
        /// The option (`pacing.min_delay`, `durability.outbox.lease`, …).
        option: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `start()` on a running bot.
    #[error("the bot is already started")]
    AlreadyStarted,
    /// An operation that needs a running bot.
    #[error("the bot is not running")]
    NotRunning,
    /// A lifecycle step failed in `start()`; the steps before it were rolled back.
    #[error("lifecycle step `{step}` failed to start: {source}")]
    StartFailed {
        /// The step's name.
        step: String,
        /// Why.
        #[source]
        source: Box<BotError>,
    },
    /// A lifecycle step failed (from a custom step or a plugin).
    #[error("lifecycle step `{step}`: {message}")]
    Step {
        /// The step's name.
        step: String,
        /// What went wrong.
        message: String,
    },
    /// A send kept failing inline for `outbox.inline_max`; the sweeper keeps trying it.
    #[error("send {key} deferred: the outbox keeps retrying it in the background")]
    SendDeferred {
        /// The outbox key of the send.
        key: String,
    },
    /// The durable journal failed (the record it concerns is in the error).
    #[error(transparent)]
    Durability(#[from] botmesh_durability::DurabilityError),
    /// Refused by coordination: this replica lost the chat's turn (`Fenced`), or is not the
    /// leader of a leader-only transport (`NotLeader`).
    #[error(transparent)]
    Coordination(#[from] botmesh_durability::coordination::CoordinationError),
    /// A scheduled job's record could not be read or written, or its id is invalid.
    #[error(transparent)]
    Schedule(#[from] botmesh_durability::schedule::ScheduleError),
    /// A send was dead-lettered (final error, or out of retries); an operator can retry it.
    #[error("send {key} is dead-lettered: {error}")]
    SendDead {
        /// The outbox key.
        key: String,
        /// The last error.
        error: String,
    },
    /// The chat is handed off to a human: the bot's send was refused.
    #[error("chat {chat} is handed off to a human")]
    HandedOff {
        /// The chat.
        chat: String,
    },
    /// A handler failed.
    #[error("handler failed: {0}")]
    Handler(HandlerError),
    /// The bot was stopped while the operation waited.
    #[error("the bot stopped while {0}")]
    Stopped(&'static str),
    /// The requested item does not exist.
    #[error("{what} `{name}` not found")]
    NotFound {
        /// What kind of item (`plugin`, `flow`, …).
        what: &'static str,
        /// Its name.
        name: String,
    },
}

impl BotError {
    /// A configuration error.
    pub fn config(option: impl Into<String>, reason: impl Into<String>) -> Self {
        BotError::Config {
            option: option.into(),
            reason: reason.into(),
        }
    }
}
