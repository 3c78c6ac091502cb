//! Metrics and durability events: what every journal operation reports.
//!
//! - [`DurabilityMetrics`]: a snapshot of every counter of the journals, read with
//!   [`KvDurability::metrics`](crate::KvDurability::metrics). Counters are per process (a
//!   restart starts from zero).
//! - [`DurabilityEvent`]: `Dead` (a record reached the dead-letter queue, or was quarantined
//!   because it cannot be decoded) and `Ambiguous` (a send's outcome is unknown after a crash),
//!   broadcast to every [`KvDurability::subscribe`](crate::KvDurability::subscribe) receiver.
//!   Nobody listening is fine; a slow receiver misses old events (`RecvError::Lagged`) rather
//!   than slowing the journals.
//!
//! | counter | incremented when |
//! | --- | --- |
//! | `inbound_journaled` | an inbound event is written to the inbox |
//! | `inbound_duplicates` | a redelivered inbound event is found already journaled |
//! | `inbound_replayed` | an inbound record is run again (crash recovery, retry, operator replay) |
//! | `inbound_dead` | an inbound record is dead-lettered or quarantined |
//! | `outbox_journaled` | a send is written to the outbox |
//! | `outbox_deduped` | a send's key is found already recorded (answered from the outbox) |
//! | `outbox_retried` | a failed send is scheduled for another attempt |
//! | `outbox_deferred` | an inline send gave up waiting and left the send to the sweeper |
//! | `outbox_dead` | a send is dead-lettered (also a part dying with its previous part) or quarantined |
//! | `outbox_ambiguous` | a send's outcome is found unknown (either `on_ambiguous` policy) |
//! | `outbox_bypassed` | a payload too large (or not encodable) bypasses the outbox |
//! | `stale_leases` | a holder whose lease was taken over is refused |
//! | `outbox_diverged` | a replay produces different content under a derived key |
//!
//! The operator API that reads and acts on the journals is [`crate::operating`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Which journal a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    /// The inbox (an inbound message or interaction).
    Inbound,
    /// The outbox (a send).
    Outbound,
}

impl RecordKind {
    /// `inbound` or `outbound`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Inbound => "inbound",
            RecordKind::Outbound => "outbound",
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event of the journals (`durability:dead`, `durability:ambiguous` where the bot's events
/// are printed, as on the jsonl interface).
///
/// Serialized with its [`name`](Self::name) beside its fields:
/// `{"name":"ambiguous","key":"alice/m1:1","chat":"alice","text":"How many?"}`.
///
/// ```
/// use botmesh_durability::DurabilityEvent;
///
/// let e = DurabilityEvent::Ambiguous {
///     key: "alice/m1:1".into(),
///     chat: "alice".into(),
///     text: "How many?".into(),
/// };
/// assert_eq!(e.name(), "ambiguous");
/// assert_eq!(e.chat(), Some("alice"));
/// assert_eq!(
///     serde_json::to_value(&e).unwrap(),
///     serde_json::json!({ "name": "ambiguous", "key": "alice/m1:1", "chat": "alice", "text": "How many?" })
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "name", rename_all = "lowercase")]
#[non_exhaustive]
pub enum DurabilityEvent {
    /// A record was dead-lettered (or quarantined as undecodable).
    Dead {
        /// Inbound or outbound.
        kind: RecordKind,
        /// The inbound record id or outbox key.
        id: String,
        /// The last error.
        error: String,
    },
    /// A send's outcome is unknown (the process died while the channel was called, or the
    /// call's request may have reached the channel and no answer came back); `on_ambiguous`
    /// decided what follows.
    Ambiguous {
        /// The outbox key.
        key: String,
        /// The chat it was sent to.
        chat: String,
        /// The send's text (its caption for media; empty when it has none, or when the
        /// journals were built without [`payload_text`](crate::KvDurabilityBuilder::payload_text)),
        /// so that whoever reads the event knows what the user may have missed or got twice.
        text: String,
    },
}

impl DurabilityEvent {
    /// The event's name, without its `durability:` prefix: `dead` or `ambiguous`.
    pub fn name(&self) -> &'static str {
        match self {
            DurabilityEvent::Dead { .. } => "dead",
            DurabilityEvent::Ambiguous { .. } => "ambiguous",
        }
    }

    /// The chat the event concerns, when the event names one.
    pub fn chat(&self) -> Option<&str> {
        match self {
            DurabilityEvent::Ambiguous { chat, .. } => Some(chat),
            DurabilityEvent::Dead { .. } => None,
        }
    }
}

impl fmt::Display for DurabilityEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurabilityEvent::Dead { kind, id, error } => {
                write!(f, "durability:dead {kind} record {id}: {error}")
            }
            DurabilityEvent::Ambiguous { key, chat, .. } => {
                write!(f, "durability:ambiguous send {key} to chat {chat}")
            }
        }
    }
}

/// A snapshot of the durability counters, read with
/// [`KvDurability::metrics`](crate::KvDurability::metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurabilityMetrics {
    /// Inbound events written to the inbox.
    pub inbound_journaled: u64,
    /// Redelivered inbound events found already journaled.
    pub inbound_duplicates: u64,
    /// Inbound records run again.
    pub inbound_replayed: u64,
    /// Inbound records dead-lettered or quarantined.
    pub inbound_dead: u64,
    /// Sends written to the outbox.
    pub outbox_journaled: u64,
    /// Sends answered from the outbox.
    pub outbox_deduped: u64,
    /// Failed sends scheduled for another attempt.
    pub outbox_retried: u64,
    /// Inline sends left to the sweeper.
    pub outbox_deferred: u64,
    /// Sends dead-lettered or quarantined.
    pub outbox_dead: u64,
    /// Sends whose outcome was found unknown.
    pub outbox_ambiguous: u64,
    /// Payloads that bypassed the outbox.
    pub outbox_bypassed: u64,
    /// Completions refused because the lease was taken over.
    pub stale_leases: u64,
    /// Replays that produced different content under a derived key.
    pub outbox_diverged: u64,
}

/// One counter of [`DurabilityMetrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    InboundJournaled,
    InboundDuplicates,
    InboundReplayed,
    InboundDead,
    OutboxJournaled,
    OutboxDeduped,
    OutboxRetried,
    OutboxDeferred,
    OutboxDead,
    OutboxAmbiguous,
    OutboxBypassed,
    StaleLeases,
    OutboxDiverged,
}

/// The live counters behind [`DurabilityMetrics`].
#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; 13]);

impl Counters {
    pub(crate) fn add(&self, counter: Counter) {
        self.0[counter as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> DurabilityMetrics {
        let get = |c: Counter| self.0[c as usize].load(Ordering::Relaxed);
        DurabilityMetrics {
            inbound_journaled: get(Counter::InboundJournaled),
            inbound_duplicates: get(Counter::InboundDuplicates),
            inbound_replayed: get(Counter::InboundReplayed),
            inbound_dead: get(Counter::InboundDead),
            outbox_journaled: get(Counter::OutboxJournaled),
            outbox_deduped: get(Counter::OutboxDeduped),
            outbox_retried: get(Counter::OutboxRetried),
            outbox_deferred: get(Counter::OutboxDeferred),
            outbox_dead: get(Counter::OutboxDead),
            outbox_ambiguous: get(Counter::OutboxAmbiguous),
            outbox_bypassed: get(Counter::OutboxBypassed),
            stale_leases: get(Counter::StaleLeases),
            outbox_diverged: get(Counter::OutboxDiverged),
        }
    }
}
