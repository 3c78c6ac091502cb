//! [`ScheduleError`]: why an operation on a scheduled job failed, naming the job.

use crate::kv::KvError;

/// Why an operation on a scheduled job failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The backend failed while reading or writing the job.
    #[error("job `{id}`: backend failed during {operation}: {source}")]
    Backend {
        /// The job id (`*` for a listing).
        id: String,
        /// What was being done (`schedule`, `claim`, `finish`, `list`, …).
        operation: &'static str,
        /// The backend's error.
        #[source]
        source: KvError,
    },
    /// The stored bytes are not a job record.
    #[error("job `{id}` is undecodable: {reason}")]
    Corrupt {
        /// The job id.
        id: String,
        /// Why decoding failed.
        reason: String,
    },
    /// The job id cannot be used.
    #[error("job id `{id}` {reason}")]
    InvalidId {
        /// The id given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The claim's fencing token no longer holds the job: its lease expired and another
    /// replica took the occurrence over, or the job was cancelled.
    #[error("job `{id}`: occurrence token {token} is stale (current {})", current.map_or_else(|| "none: the job was cancelled".to_owned(), |c| c.to_string()))]
    Stale {
        /// The job id.
        id: String,
        /// The token presented.
        token: u64,
        /// The job's current token, `None` when the job is gone.
        current: Option<u64>,
    },
    /// Too many concurrent writers changed the job at once.
    #[error("job `{id}`: {operation} kept conflicting with concurrent writers")]
    Contention {
        /// The job id.
        id: String,
        /// What was being done.
        operation: &'static str,
    },
}
