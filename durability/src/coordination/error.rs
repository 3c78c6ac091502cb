//! The errors of coordination: a fenced-off holder, a standby asked to act as the leader, and
//! the backend failing under a lease record.

use crate::kv::KvError;

use super::FenceKind;

/// Why a coordination call was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CoordinationError {
    /// The caller's lease was taken over (or released, or has too little time left to write
    /// under it): whatever it was about to write must not be written. The chat's turn (or the
    /// leader lease) belongs to the holder of token `current`.
    #[error("{kind} `{name}`: token {token} was fenced off (current token {current}, held by {holder})", holder = holder.as_deref().unwrap_or("nobody"))]
    Fenced {
        /// A chat turn or a leader lease.
        kind: FenceKind,
        /// The chat, or the leader lease's name.
        name: String,
        /// The caller's token.
        token: u64,
        /// The newest token issued.
        current: u64,
        /// The instance id holding the lease now, if any.
        holder: Option<String>,
    },
    /// This replica is not the leader of `name`: an exclusive transport is not called from here.
    #[error("not the leader of `{name}` (the leader is {leader})", leader = leader.as_deref().unwrap_or("not elected yet"))]
    NotLeader {
        /// The leader lease's name (`telegram`, …).
        name: String,
        /// The instance id of the leader, if one holds the lease.
        leader: Option<String>,
    },
    /// The backend failed.
    #[error("{kind} `{name}`: backend failed during {operation}: {source}")]
    Backend {
        /// A chat turn or a leader lease.
        kind: FenceKind,
        /// The chat, or the leader lease's name.
        name: String,
        /// What was being done (`take`, `renew`, …).
        operation: &'static str,
        /// The backend error.
        #[source]
        source: KvError,
    },
    /// The stored lease record does not decode (written by something else).
    #[error("{kind} `{name}`: the stored lease record is undecodable: {reason}")]
    Corrupt {
        /// A chat turn or a leader lease.
        kind: FenceKind,
        /// The chat, or the leader lease's name.
        name: String,
        /// The decoder's message.
        reason: String,
    },
    /// An invalid coordination configuration.
    #[error("{option}: {reason}")]
    Config {
        /// The option (`coordination.turn_lease`, …).
        option: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// Too many concurrent writers kept changing the record between a read and a write.
    #[error("{kind} `{name}`: {operation} kept conflicting with concurrent writers")]
    Contention {
        /// A chat turn or a leader lease.
        kind: FenceKind,
        /// The chat, or the leader lease's name.
        name: String,
        /// What was being done.
        operation: &'static str,
    },
}

impl CoordinationError {
    /// Whether this is a refusal of a stale holder ([`Fenced`](Self::Fenced)) or of a standby
    /// ([`NotLeader`](Self::NotLeader)), as opposed to a failure of the backend.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            CoordinationError::Fenced { .. } | CoordinationError::NotLeader { .. }
        )
    }
}
