//! [`EventRecord`]: one event of an app's journal, its states, and what a caller passes to
//! append, list and claim events.
//!
//! | status | reached by | next |
//! | --- | --- | --- |
//! | `pending` | [`append`](super::EventJournal::append), a [`fail`](super::EventJournal::fail) with a retry, [`replay`](super::EventJournal::replay) | `claimed` once due (`available_at_ms <= now`) |
//! | `claimed` | [`claim`](super::EventJournal::claim): a lease with a fencing token | `done`, `pending`, `failed`; claimed again under a higher token once the lease expired |
//! | `done` | [`complete`](super::EventJournal::complete) by the current holder | `pending` by `replay` |
//! | `failed` | `fail` without a retry | `pending` by `replay` |

use std::fmt;
use std::time::Duration;

use derive_setters::Setters;
use serde::{Deserialize, Serialize};

/// Where an event is in its life (see the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventStatus {
    /// Waiting to be claimed once due.
    Pending,
    /// Leased to a worker.
    Claimed,
    /// Handled.
    Done,
    /// Given up on (a `fail` without a retry); a replay makes it pending again.
    Failed,
}

impl EventStatus {
    /// `pending`, `claimed`, `done` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Pending => "pending",
            EventStatus::Claimed => "claimed",
            EventStatus::Done => "done",
            EventStatus::Failed => "failed",
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The lease of a claimed event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLease {
    /// Who claimed it.
    pub owner: String,
    /// The fencing token of this claim: higher for every new claim of the event, across
    /// processes. Only its holder may heartbeat, complete or fail the event.
    pub token: u64,
    /// When the lease runs out unless renewed (Unix ms); another claim may take it after.
    pub expires_at_ms: i64,
}

/// One event of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Unique in the journal (given by the app or generated).
    pub id: String,
    /// What happened (`order.paid`, …).
    pub event_type: String,
    /// The channel the event belongs to; a claim of a channel takes only its events, a claim
    /// without a channel only events without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The app's data.
    pub payload: serde_json::Value,
    /// The status.
    pub status: EventStatus,
    /// How many times it was claimed.
    pub attempts: u32,
    /// When it was appended (Unix ms).
    pub created_at_ms: i64,
    /// When it is due (Unix ms): a pending event is claimed only from then on.
    pub available_at_ms: i64,
    /// The lease while `claimed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<EventLease>,
    /// The highest fencing token given so far (the next claim gets one more).
    pub fence: u64,
    /// The error of the last failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq, Setters)]
#[setters(generate = false, into, strip_option)]
pub struct NewEvent {
    /// Its id: appending an id the journal holds already returns the stored event instead
    /// (an idempotent append).
    #[setters(generate)]
    pub(crate) id: Option<String>,
    pub(crate) event_type: String,
    /// Its channel.
    #[setters(generate)]
    pub(crate) channel: Option<String>,
    pub(crate) payload: serde_json::Value,
    /// Due only after `delay`.
    #[setters(generate, into = false)]
    pub(crate) delay: Duration,
}

impl NewEvent {
    /// An event of `event_type` carrying `payload`, without a channel, due at once, under a
    /// generated id.
    pub fn new(event_type: impl Into<String>, payload: serde_json::Value) -> Self {
        NewEvent {
            id: None,
            event_type: event_type.into(),
            channel: None,
            payload,
            delay: Duration::ZERO,
        }
    }
}

/// Which events [`list`](super::EventJournal::list) returns, in append time order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Setters)]
#[setters(strip_option)]
pub struct EventQuery {
    #[setters(skip)]
    pub(crate) channel: Option<Option<String>>,
    /// Only events in `status`.
    pub(crate) status: Option<EventStatus>,
    /// At most `limit` events.
    pub(crate) limit: Option<usize>,
}

impl EventQuery {
    /// Every event.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only the events of `channel` (`None`: only events without a channel).
    pub fn channel(mut self, channel: Option<&str>) -> Self {
        self.channel = Some(channel.map(str::to_owned));
        self
    }

    pub(crate) fn matches(&self, record: &EventRecord) -> bool {
        self.channel
            .as_ref()
            .is_none_or(|c| c.as_deref() == record.channel.as_deref())
            && self.status.is_none_or(|s| s == record.status)
    }
}

/// A claim request: due events of one channel (or of none), leased to `owner`.
#[derive(Debug, Clone, PartialEq, Eq, Setters)]
pub struct ClaimRequest {
    #[setters(skip)]
    pub(crate) owner: String,
    /// Claims the events of `channel` instead.
    #[setters(into, strip_option)]
    pub(crate) channel: Option<String>,
    /// The lease length.
    pub(crate) lease: Duration,
    /// At most `limit` events.
    pub(crate) limit: usize,
}

impl ClaimRequest {
    /// Due events without a channel for `owner`, under a 30 s lease, at most 10.
    pub fn new(owner: impl Into<String>) -> Self {
        ClaimRequest {
            owner: owner.into(),
            channel: None,
            lease: Duration::from_secs(30),
            limit: 10,
        }
    }
}

/// An event leased by a claim, with the fencing token that proves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedEvent {
    /// The event as claimed (`status` is `claimed`).
    pub record: EventRecord,
    /// The fencing token to show to `heartbeat`, `complete` and `fail`.
    pub token: u64,
}
