//! The outbox: every send is written down under an idempotency key before the provider is
//! called, and the provider's message id is recorded right after.
//!
//! ```text
//!  journal ──► pending ──begin_attempt──► sending ──mark_sent──► sent ──(retention)──► purged
//!               ▲  ▲                        │  │
//!               │  └── failed ◄─retryable───┘  └──final / out of retries──► dead ──┐
//!               │                              (its later parts die with it)       │
//!               └────────────── retry(key): dead | failed | unknown ◄──────────────┘
//!  sending under a dead incarnation's lease ──recovery──► unknown (skip) | pending (resend)
//! ```
//!
//! What a crash leaves behind and what the next start does (the outbox side of the table
//! "What is guaranteed" in `docs/durability-and-backends.md`):
//!
//! | the process dies… | record found | on restart |
//! | --- | --- | --- |
//! | before `journal` | none | the replayed handler journals and sends it |
//! | after `journal`, before `begin_attempt` | `pending` | the replay's `journal` finds it (`Recorded`), then sends it (a send journaled and leased in one write, [`Outbox::journal_and_begin`] or a flow step's [`StepJournal::send_and_begin`](crate::StepJournal::send_and_begin), has no such moment) |
//! | between `begin_attempt` ("about to call the provider") and `mark_sent` | `sending` under the dead incarnation's lease | ambiguous: `on_ambiguous: skip` → `unknown` (never a duplicate); `resend` → pending again (never lost); `Ambiguous` either way |
//! | after `mark_sent` | `sent` | the replay's `journal` finds it: answered from the outbox, nothing sent |
//!
//! Ordering: a later send to a chat never overtakes an earlier one that is still pending,
//! failed (waiting for its retry) or in flight; a part (`key#2`, …) waits behind its previous
//! part (waiting is not an attempt) and dies with it. Derived keys are compared by fingerprint
//! on replay (`on_diverged`); explicit keys never are. The outbox does not call providers, run
//! hooks or sleep: the runtime does, around these calls.

mod attempts;
mod operator;
mod parts;
mod sweep;

pub use attempts::{AmbiguousOutcome, BeginAttempt, JournalBegun, JournalLeased};

use serde::{Deserialize, Serialize};

use crate::config::{OnAmbiguous, OnDiverged};
use crate::error::DurabilityError;
pub use crate::journal::Payload;
use crate::journal::attempts::attempted_record;
use crate::journal::{Creation, JournalRecord, KvDurability, View, index};
use crate::keys::{self, Fingerprint, KeyKind, SendKey};
use crate::kv::{CasOutcome, DurableKv, WritePoint};
use crate::leases::LeaseRecord;
use crate::metrics::{Counter, RecordKind};

/// The state of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutboxState {
    /// Journaled, waiting to be sent at `next_attempt_ms`.
    Pending,
    /// A provider call is in flight (leased).
    Sending,
    /// The provider accepted it; `provider_message_id` is recorded.
    Sent,
    /// The last attempt failed; retried at `next_attempt_ms`.
    Failed,
    /// Dead-lettered.
    Dead,
    /// Its outcome is unknown after a crash (`on_ambiguous: skip`).
    Unknown,
}

impl OutboxState {
    /// Every state.
    pub const ALL: [OutboxState; 6] = [
        OutboxState::Pending,
        OutboxState::Sending,
        OutboxState::Sent,
        OutboxState::Failed,
        OutboxState::Dead,
        OutboxState::Unknown,
    ];

    /// The stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Sending => "sending",
            OutboxState::Sent => "sent",
            OutboxState::Failed => "failed",
            OutboxState::Dead => "dead",
            OutboxState::Unknown => "unknown",
        }
    }

    /// Whether a later send of the same chat must wait behind a send in this state.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            OutboxState::Pending | OutboxState::Sending | OutboxState::Failed
        )
    }
}

fn one() -> u32 {
    1
}

/// A send as the outbox keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxRecord {
    /// The idempotency key.
    pub key: String,
    /// The rule that produced the key.
    pub key_kind: KeyKind,
    /// The chat it goes to.
    pub chat: String,
    /// The content to send (opaque JSON, after the `before('send')` hooks).
    pub payload: Payload,
    /// The fingerprint of chat + content before the hooks.
    pub fingerprint: Fingerprint,
    /// The part this one waits behind (`key` for `key#2`), stored, never read from the key.
    #[serde(default)]
    pub previous_part: Option<String>,
    /// The part that waits behind this one.
    #[serde(default)]
    pub next_part: Option<String>,
    /// The part number, from 1.
    #[serde(default = "one")]
    pub part: u32,
    /// Journal order within the chat (parts share their first part's).
    pub seq: u64,
    /// Where it stands.
    pub state: OutboxState,
    /// Provider calls charged so far.
    pub attempts: u32,
    /// The provider's message id, once sent.
    #[serde(default)]
    pub provider_message_id: Option<String>,
    /// The in-flight lease, while `sending`.
    #[serde(default)]
    pub lease: Option<LeaseRecord>,
    /// The last fencing token issued.
    #[serde(default)]
    pub fence: u64,
    /// When it is due (pending, failed) (Unix ms).
    pub next_attempt_ms: i64,
    /// The last failure.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Dead because its previous part was dead-lettered (revived by a retry of that part).
    #[serde(default)]
    pub died_with_previous: bool,
    /// This send's own `on_ambiguous` (the bot's `outbox.on_ambiguous` when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_ambiguous: Option<OnAmbiguous>,
    /// When it was journaled (Unix ms).
    pub created_ms: i64,
    /// When it last changed (Unix ms).
    pub updated_ms: i64,
}

impl OutboxRecord {
    /// A send journaled at `now` and due at once: pending, no attempt yet, a first part with
    /// no other part behind it.
    pub(crate) fn pending(
        key: SendKey,
        chat: String,
        payload: Payload,
        fingerprint: Fingerprint,
        on_ambiguous: Option<OnAmbiguous>,
        seq: u64,
        now: i64,
    ) -> OutboxRecord {
        OutboxRecord {
            key_kind: key.kind(),
            key: key.into_string(),
            chat,
            payload,
            fingerprint,
            previous_part: None,
            next_part: None,
            part: 1,
            seq,
            state: OutboxState::Pending,
            attempts: 0,
            provider_message_id: None,
            lease: None,
            fence: 0,
            next_attempt_ms: now,
            last_error: None,
            died_with_previous: false,
            on_ambiguous,
            created_ms: now,
            updated_ms: now,
        }
    }

    /// Whether a send of key rule `kind` and content `fingerprint`, made under this record's
    /// key, is another send than the one recorded: both keys derived (an explicit key names
    /// its send and is never compared) and the content differs, a replay that took another
    /// path. `on_diverged` decides what happens to it.
    pub fn diverges_from(&self, kind: KeyKind, fingerprint: &Fingerprint) -> bool {
        kind == KeyKind::Derived
            && self.key_kind == KeyKind::Derived
            && self.fingerprint != *fingerprint
    }
}

impl JournalRecord for OutboxRecord {
    const KIND: RecordKind = RecordKind::Outbound;

    fn id(&self) -> &str {
        &self.key
    }

    fn state_name(&self) -> &'static str {
        self.state.as_str()
    }

    fn idx1_ms(&self) -> i64 {
        match self.state {
            OutboxState::Pending | OutboxState::Failed => self.next_attempt_ms,
            OutboxState::Sending => self.lease.as_ref().map_or(0, |l| l.expires_ms),
            OutboxState::Sent | OutboxState::Dead | OutboxState::Unknown => self.updated_ms,
        }
    }

    fn idx2(&self) -> Option<String> {
        self.state
            .is_open()
            .then(|| index::idx2(RecordKind::Outbound, &self.chat, self.seq, self.part))
    }

    fn is_open(&self) -> bool {
        self.state.is_open()
    }
}

attempted_record!(
    OutboxRecord,
    OutboxState {
        leased: Sending,
        retrying: Failed,
        dead: Dead
    }
);

/// A send to journal.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSend {
    /// The idempotency key.
    pub key: SendKey,
    /// The chat.
    pub chat: String,
    /// The content (after the `before('send')` hooks).
    pub payload: Payload,
    /// The fingerprint of chat + content before the hooks; computed from `payload` if `None`.
    pub fingerprint: Option<Fingerprint>,
    /// This send's own `on_ambiguous`, over the bot's `outbox.on_ambiguous` (`None`: the bot's).
    pub on_ambiguous: Option<OnAmbiguous>,
}

impl NewSend {
    /// A send of `payload` (a [`Payload`] or a `serde_json::Value`) to `chat` under `key`.
    pub fn new(key: SendKey, chat: impl Into<String>, payload: impl Into<Payload>) -> Self {
        NewSend {
            key,
            chat: chat.into(),
            payload: payload.into(),
            fingerprint: None,
            on_ambiguous: None,
        }
    }

    /// Sets this send's own `on_ambiguous` (`None`: the bot's `outbox.on_ambiguous`).
    pub fn with_on_ambiguous(mut self, policy: Option<OnAmbiguous>) -> Self {
        self.on_ambiguous = policy;
        self
    }

    /// Sets the fingerprint (of the content before the hooks).
    pub fn with_fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = Some(fingerprint);
        self
    }
}

/// The outcome of [`Outbox::journal`].
#[derive(Debug, Clone, PartialEq)]
pub enum SendJournal {
    /// Newly journaled (pending): send it.
    Journaled(OutboxRecord),
    /// The key is already recorded (same content, or an explicit key): answer from this record
    /// (sent: its provider id; otherwise carry on with it). Counted in `outbox_deduped`.
    Recorded(OutboxRecord),
    /// A derived key recorded with other content (counted in `outbox_diverged`). `resend` is
    /// the journal of the new content under [`keys::diverged_key`] (`on_diverged: send`), or
    /// `None` (`skip`: answer from `recorded`).
    Diverged {
        /// The record found under the key.
        recorded: OutboxRecord,
        /// The new content's journal, under its own key.
        resend: Option<Box<SendJournal>>,
    },
    /// The payload is over `outbox.max_payload_bytes`: send it without the outbox.
    Bypassed {
        /// The payload's JSON size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

impl SendJournal {
    /// The record the runtime carries on with (`None` when bypassed).
    pub fn record(&self) -> Option<&OutboxRecord> {
        match self {
            SendJournal::Journaled(r) | SendJournal::Recorded(r) => Some(r),
            SendJournal::Diverged {
                resend: Some(next), ..
            } => next.record(),
            SendJournal::Diverged { recorded, .. } => Some(recorded),
            SendJournal::Bypassed { .. } => None,
        }
    }

    /// The record the runtime carries on with, by value (`None` when bypassed).
    pub fn into_record(self) -> Option<OutboxRecord> {
        match self {
            SendJournal::Journaled(r) | SendJournal::Recorded(r) => Some(r),
            SendJournal::Diverged {
                resend: Some(next), ..
            } => next.into_record(),
            SendJournal::Diverged { recorded, .. } => Some(recorded),
            SendJournal::Bypassed { .. } => None,
        }
    }
}

/// The outbox of a [`KvDurability`].
pub struct Outbox<'a, K: ?Sized> {
    pub(crate) d: &'a KvDurability<K>,
}

// A view of the journals: copied freely (a future that outlives the call holds its own).
impl<K: ?Sized> Clone for Outbox<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: ?Sized> Copy for Outbox<'_, K> {}

impl<'a, K: DurableKv + ?Sized> Outbox<'a, K> {
    /// The journal's records.
    pub(crate) fn view(&self) -> View<'a, K, OutboxRecord> {
        View::new(self.d)
    }
}

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// The outbox journal.
    pub fn outbox(&self) -> Outbox<'_, K> {
        Outbox { d: self }
    }
}

pub(crate) enum Created {
    /// Written: the new record.
    New(OutboxRecord),
    /// The key was taken: the record found, and the one that was not written.
    Existing {
        found: OutboxRecord,
        ours: Box<OutboxRecord>,
    },
}

impl Created {
    /// The answer of a create of `ours` that found `found` under its key.
    fn existing(found: OutboxRecord, ours: OutboxRecord) -> Created {
        Created::Existing {
            found,
            ours: Box::new(ours),
        }
    }
}

impl<K: DurableKv + ?Sized> Outbox<'_, K> {
    /// The record under `key` (the idempotency lookup before the hooks run).
    pub async fn lookup(&self, key: &str) -> Result<Option<OutboxRecord>, DurabilityError> {
        self.view().record(key, "lookup").await
    }

    /// The idempotency lookup of a send about to be made: the record under `key` when it is
    /// already sent and is this same send (the key is explicit, or not derived, or derived
    /// with the same `fingerprint`). Counted in `outbox_deduped`; a record in another state,
    /// or of other content under a derived key, is `None` (the send goes on to
    /// [`journal`](Self::journal), which sorts those out).
    pub async fn sent_before(
        &self,
        key: &str,
        explicit: bool,
        fingerprint: &Fingerprint,
    ) -> Result<Option<OutboxRecord>, DurabilityError> {
        let kind = if explicit {
            KeyKind::Explicit
        } else {
            KeyKind::Derived
        };
        match self.lookup(key).await? {
            Some(r) if r.state == OutboxState::Sent && !r.diverges_from(kind, fingerprint) => {
                self.d.count(Counter::OutboxDeduped);
                Ok(Some(r))
            }
            _ => Ok(None),
        }
    }

    fn new_record(
        &self,
        key: SendKey,
        chat: String,
        payload: Payload,
        fp: Fingerprint,
        on_ambiguous: Option<OnAmbiguous>,
    ) -> OutboxRecord {
        let now = self.d.now_ms();
        let seq = self.d.next_seq_at(now);
        OutboxRecord::pending(key, chat, payload, fp, on_ambiguous, seq, now)
    }

    pub(crate) async fn create(&self, record: OutboxRecord) -> Result<Created, DurabilityError> {
        self.create_at(&[WritePoint::OutboxJournal], record).await
    }

    /// Creates `record` under the hooks of `points` (the journal write, or the journal write
    /// that also begins the first attempt).
    pub(crate) async fn create_at(
        &self,
        points: &[WritePoint],
        record: OutboxRecord,
    ) -> Result<Created, DurabilityError> {
        Ok(match self.view().create(points, &record).await? {
            Creation::Written(version) => {
                self.journaled(&record, version);
                Created::New(record)
            }
            Creation::Found(found) => Created::existing(found, record),
        })
    }

    /// [`create_at`](Self::create_at) only while no earlier send of the record's chat is open,
    /// checked by the write itself (a [`KvOp::CreateIfNoneIn`](crate::kv::KvOp::CreateIfNoneIn)):
    /// `Err` with the record, not written, when one is.
    pub(crate) async fn create_first_at(
        &self,
        points: &[WritePoint],
        record: OutboxRecord,
    ) -> Result<Result<Created, Box<OutboxRecord>>, DurabilityError> {
        for _ in 0..8 {
            let range = Self::earlier_range(&record);
            match self
                .d
                .create_unless_idx2(points, "journal", &record, range)
                .await?
            {
                CasOutcome::Ok { version } => {
                    self.journaled(&record, version);
                    return Ok(Ok(Created::New(record)));
                }
                CasOutcome::Conflict { current: None } => return Ok(Err(Box::new(record))),
                CasOutcome::Conflict { .. } => {
                    if let Some(found) = self.view().found(&record.key).await? {
                        return Ok(Ok(Created::existing(found, record)));
                    }
                }
            }
        }
        Err(self.view().contention(&record))
    }

    /// What follows the write of a new record at `version`: counted, logged, remembered.
    pub(crate) fn journaled(&self, record: &OutboxRecord, version: u64) {
        self.d.count(Counter::OutboxJournaled);
        tracing::debug!(key = %record.key, chat = %record.chat, "send journaled");
        self.d.note_written(version, record);
    }

    /// `Some((size, limit))` when the send's payload is over `outbox.max_payload_bytes`: it is
    /// then counted and logged as bypassing the outbox.
    pub(crate) fn oversize(&self, new: &NewSend) -> Option<(usize, usize)> {
        let limit = self.d.config().outbox.max_payload_bytes;
        let size = new.payload.len();
        (size > limit).then(|| {
            self.bypass(
                new.key.as_str(),
                &format!("payload of {size} bytes is over the {limit} bytes limit"),
            );
            (size, limit)
        })
    }

    /// The pending record of a new send (its fingerprint computed when not given).
    pub(crate) fn record_of(&self, new: NewSend) -> OutboxRecord {
        let NewSend {
            key,
            chat,
            payload,
            fingerprint,
            on_ambiguous,
        } = new;
        let fp = fingerprint.unwrap_or_else(|| Fingerprint::of(&chat, &payload.to_value()));
        self.new_record(key, chat, payload, fp, on_ambiguous)
    }

    /// Writes a send down under its key before the provider is called. A key already recorded
    /// is `Recorded` (or `Diverged` for a derived key whose fingerprint differs); a payload over
    /// `outbox.max_payload_bytes` is `Bypassed` with a warning.
    pub async fn journal(&self, new: NewSend) -> Result<SendJournal, DurabilityError> {
        if let Some((size, limit)) = self.oversize(&new) {
            return Ok(SendJournal::Bypassed { size, limit });
        }
        let kind = new.key.kind();
        let record = self.record_of(new);
        self.journal_record(kind, record).await
    }

    /// Journals `record` (pending), or answers from the record found under its key.
    pub(crate) async fn journal_record(
        &self,
        kind: KeyKind,
        record: OutboxRecord,
    ) -> Result<SendJournal, DurabilityError> {
        match self.create(record).await? {
            Created::New(r) => Ok(SendJournal::Journaled(r)),
            Created::Existing { found, ours } => {
                Box::pin(self.found_recorded(kind, found, *ours)).await
            }
        }
    }

    /// What a journal write that found its key taken answers: the record found (same send),
    /// or, for a derived key recorded with other content, `Diverged` (with the journal of the
    /// new content under its own key when `on_diverged: send`). `ours` is the record that was
    /// not written.
    pub(crate) async fn found_recorded(
        &self,
        kind: KeyKind,
        existing: OutboxRecord,
        ours: OutboxRecord,
    ) -> Result<SendJournal, DurabilityError> {
        let config = &self.d.config().outbox;
        if !existing.diverges_from(kind, &ours.fingerprint) {
            self.d.count(Counter::OutboxDeduped);
            tracing::debug!(key = %existing.key, state = existing.state.as_str(), "send already recorded");
            return Ok(SendJournal::Recorded(existing));
        }
        self.d.count(Counter::OutboxDiverged);
        tracing::warn!(
            key = %existing.key,
            policy = ?config.on_diverged,
            "replay produced different content under the same derived key"
        );
        let resend = match config.on_diverged {
            OnDiverged::Skip => None,
            OnDiverged::Send => {
                let key = keys::diverged_key(&existing.key, &ours.fingerprint);
                let key = SendKey::with_kind(key, KeyKind::Derived);
                let record = self.new_record(
                    key,
                    ours.chat,
                    ours.payload,
                    ours.fingerprint,
                    ours.on_ambiguous,
                );
                Some(Box::new(match Box::pin(self.create(record)).await? {
                    Created::New(r) => SendJournal::Journaled(r),
                    Created::Existing { found: r, .. } => {
                        self.d.count(Counter::OutboxDeduped);
                        SendJournal::Recorded(r)
                    }
                }))
            }
        };
        Ok(SendJournal::Diverged {
            recorded: existing,
            resend,
        })
    }

    /// The sends in `state`, soonest due (or oldest) first, at most `limit`. `list(Dead)` is
    /// the outbound dead-letter queue. Undecodable records are quarantined and skipped.
    pub async fn list(
        &self,
        state: OutboxState,
        limit: usize,
    ) -> Result<Vec<OutboxRecord>, DurabilityError> {
        self.view().list(state.as_str(), limit).await
    }
}
