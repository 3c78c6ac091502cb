//! `DurabilityError`: everything the inbox and outbox journals can fail with.
//!
//! Every variant names the record concerned (its kind and its inbound id or outbox key), so a
//! log line or an alert says which message is affected. Outcomes that are part of normal
//! operation (a duplicate inbound, a send already recorded, a record leased elsewhere) are not
//! errors: they are variants of each operation's outcome enum. Configuration errors have their
//! own type, [`crate::config::ConfigError`], wrapped here when a durability is built.

use crate::config::ConfigError;
use crate::kv::KvError;
use crate::metrics::RecordKind;

/// An error of the durable journals.
#[derive(Debug, thiserror::Error)]
pub enum DurabilityError {
    /// The backend failed while reading or writing a record.
    #[error("{kind} `{id}`: backend failed during {operation}: {source}")]
    Backend {
        /// Inbound or outbound.
        kind: RecordKind,
        /// The inbound record id or outbox key (or the listing, for a range query).
        id: String,
        /// The journal operation (`journal`, `claim`, `mark_sent`, …).
        operation: &'static str,
        /// The backend's error.
        #[source]
        source: KvError,
    },
    /// The lease's fencing token is no longer the record's current one: another holder (or a
    /// restart) took the record over. Counted in `stale_leases`.
    #[error("{kind} `{id}`: lease token {token} is stale (current token {current})")]
    StaleLease {
        /// Inbound or outbound.
        kind: RecordKind,
        /// The record.
        id: String,
        /// The token presented.
        token: u64,
        /// The record's current token.
        current: u64,
    },
    /// No record exists under that id or key.
    #[error("{kind} `{id}` not found")]
    NotFound {
        /// Inbound or outbound.
        kind: RecordKind,
        /// The record.
        id: String,
    },
    /// The operation does not apply to the record in its current state.
    #[error("{kind} `{id}`: cannot {operation} a record in state `{state}`")]
    InvalidState {
        /// Inbound or outbound.
        kind: RecordKind,
        /// The record.
        id: String,
        /// The record's state.
        state: &'static str,
        /// What was attempted.
        operation: &'static str,
    },
    /// The stored bytes are not a valid record. The record was quarantined and reported.
    #[error("{kind} `{id}` is undecodable and was quarantined: {reason}")]
    Corrupt {
        /// Inbound or outbound.
        kind: RecordKind,
        /// The record.
        id: String,
        /// Why decoding failed.
        reason: String,
    },
    /// A record could not be encoded (its payload cannot be serialized).
    #[error("{kind} `{id}` cannot be encoded: {reason}")]
    Encode {
        /// Inbound or outbound.
        kind: RecordKind,
        /// The record.
        id: String,
        /// Why.
        reason: String,
    },
    /// Too many concurrent writers changed the record while this operation retried.
    #[error("{kind} `{id}`: {operation} kept conflicting with concurrent writers")]
    Contention {
        /// Inbound or outbound.
        kind: RecordKind,
        /// The record.
        id: String,
        /// What was attempted.
        operation: &'static str,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl DurabilityError {
    /// The id or key of the record concerned, when the error is about one.
    pub fn record_id(&self) -> Option<&str> {
        match self {
            DurabilityError::Backend { id, .. }
            | DurabilityError::StaleLease { id, .. }
            | DurabilityError::NotFound { id, .. }
            | DurabilityError::InvalidState { id, .. }
            | DurabilityError::Corrupt { id, .. }
            | DurabilityError::Encode { id, .. }
            | DurabilityError::Contention { id, .. } => Some(id),
            DurabilityError::Config(_) => None,
        }
    }

    /// Whether the error is a stale lease (the runtime logs it and moves on).
    pub fn is_stale_lease(&self) -> bool {
        matches!(self, DurabilityError::StaleLease { .. })
    }

    /// Whether the backend itself failed (the journal could not record anything).
    pub fn is_backend(&self) -> bool {
        matches!(self, DurabilityError::Backend { .. })
    }

    /// Whether the same call may succeed a moment later: the backend failed, or concurrent
    /// writers kept changing the record. A lease heartbeat that fails so beats again at its
    /// next tick; any other error means the lease is gone.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            DurabilityError::Backend { .. } | DurabilityError::Contention { .. }
        )
    }
}
