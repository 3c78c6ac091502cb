//! The inbox: every admitted inbound event is journaled before any handler runs, and marked
//! done only once its effects settled.
//!
//! A record moves through these states (`attempts` is charged when a run is leased):
//!
//! ```text
//!  journal ──► pending ──claim──► processing ──complete──► done ──(retention)──► purged
//!                ▲                  │   │
//!                └──fail(retryable)─┘   └──fail(final) / out of attempts──► dead
//!  replay(id): dead | done ──► pending (whole attempt budget again)
//! ```
//!
//! What a crash leaves behind and what the next start does (the inbox side of the table
//! "What is guaranteed" in `docs/durability-and-backends.md`):
//!
//! | the process dies… | record found | on restart |
//! | --- | --- | --- |
//! | before `journal` | none | nothing recorded; processed if the channel redelivers it |
//! | after `journal`, before or while the handler runs | `pending`, or `processing` under the dead incarnation's lease | claimed again at once by the same instance id (after lease expiry by any other) and replayed; `inbound_replayed` counts it |
//! | after `complete` | `done` | a redelivery is a `Duplicate` until retention purges the record |
//! | on every run of the same message | `processing`, attempts = `max_attempts` | dead-lettered instead of claimed (`Dead` event), so it stops crashing each start |
//!
//! Handlers are at least once: a replay runs the handler again. The inbox does not know what a
//! payload means, does not run handlers and does not sleep: the runtime calls
//! [`Inbox::claim_due`] from its sweeper every `poll`.

mod leasing;

pub(crate) use leasing::lease_holder;
pub use leasing::{Claim, Claimed};

use serde::{Deserialize, Serialize};

use crate::error::DurabilityError;
pub use crate::journal::Payload;
use crate::journal::attempts::{self, attempted_record};
use crate::journal::{Creation, JournalRecord, KvDurability, View, index};
use crate::keys;
use crate::kv::{DurableKv, WritePoint};
use crate::leases::{InboxLease, LeaseRecord};
use crate::media_refs::StoredMediaRef;
use crate::metrics::{Counter, RecordKind};

/// The state of an inbound record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InboxState {
    /// Journaled, waiting to be (re)processed at `next_attempt_ms`.
    Pending,
    /// Leased to a running handler.
    Processing,
    /// Its effects settled.
    Done,
    /// Dead-lettered.
    Dead,
}

impl InboxState {
    /// Every state.
    pub const ALL: [InboxState; 4] = [
        InboxState::Pending,
        InboxState::Processing,
        InboxState::Done,
        InboxState::Dead,
    ];

    /// The stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            InboxState::Pending => "pending",
            InboxState::Processing => "processing",
            InboxState::Done => "done",
            InboxState::Dead => "dead",
        }
    }
}

/// An inbound event as the inbox keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundRecord {
    /// The scope-stable id ([`keys::inbound_id`] of chat + channel message id).
    pub id: String,
    /// The chat it belongs to.
    pub chat: String,
    /// The event itself (opaque JSON).
    pub payload: Payload,
    /// A serializable media reference, when the provider gave one.
    #[serde(default)]
    pub media_ref: Option<StoredMediaRef>,
    /// Where it stands.
    pub state: InboxState,
    /// Runs charged so far.
    pub attempts: u32,
    /// The current processing lease, while `processing`.
    #[serde(default)]
    pub lease: Option<LeaseRecord>,
    /// The last fencing token issued.
    #[serde(default)]
    pub fence: u64,
    /// When it is due (pending) (Unix ms).
    pub next_attempt_ms: i64,
    /// The last failure.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Arrival order (per-chat ordering).
    pub seq: u64,
    /// When it was journaled (Unix ms).
    pub created_ms: i64,
    /// When it last changed (Unix ms).
    pub updated_ms: i64,
    /// Its ledger row, chat and contact were written in the same transaction as the record
    /// ([`StepJournal::journal_inbound`](crate::StepJournal::journal_inbound)): a replay does
    /// not record the message again. `false` (and absent from the stored JSON) otherwise,
    /// and in records written before the field existed, which a replay records.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rows_recorded: bool,
}

impl JournalRecord for InboundRecord {
    const KIND: RecordKind = RecordKind::Inbound;

    fn id(&self) -> &str {
        &self.id
    }

    fn state_name(&self) -> &'static str {
        self.state.as_str()
    }

    fn idx1_ms(&self) -> i64 {
        match self.state {
            InboxState::Pending => self.next_attempt_ms,
            InboxState::Processing => self.lease.as_ref().map_or(0, |l| l.expires_ms),
            InboxState::Done | InboxState::Dead => self.updated_ms,
        }
    }

    /// None: an inbound record is found by its id and its state, never by its chat's range
    /// (replays sort by `seq`; [`Inbox::open_for_chat`] scans the open states), so its
    /// writes keep no per-chat index.
    fn idx2(&self) -> Option<String> {
        None
    }

    fn is_open(&self) -> bool {
        matches!(self.state, InboxState::Pending | InboxState::Processing)
    }
}

attempted_record!(
    InboundRecord,
    InboxState {
        leased: Processing,
        retrying: Pending,
        dead: Dead
    }
);

/// An inbound event to journal.
#[derive(Debug, Clone, PartialEq)]
pub struct NewInbound {
    /// The record id (see [`NewInbound::new`]).
    pub id: String,
    /// The chat.
    pub chat: String,
    /// The event (opaque JSON).
    pub payload: Payload,
    /// A serializable media reference, if any.
    pub media_ref: Option<StoredMediaRef>,
}

impl NewInbound {
    /// An event of `chat` with the channel's `message_id`; the id is derived from both.
    /// `payload` is a [`Payload`] (or a `serde_json::Value`).
    pub fn new(chat: impl Into<String>, message_id: &str, payload: impl Into<Payload>) -> Self {
        let chat = chat.into();
        NewInbound {
            id: keys::inbound_id(&chat, message_id),
            chat,
            payload: payload.into(),
            media_ref: None,
        }
    }

    /// Adds a media reference.
    pub fn with_media_ref(mut self, media_ref: StoredMediaRef) -> Self {
        self.media_ref = Some(media_ref);
        self
    }
}

/// The outcome of [`Inbox::journal`].
#[derive(Debug, Clone, PartialEq)]
pub enum InboxJournal {
    /// Newly journaled (pending).
    Journaled(InboundRecord),
    /// Already journaled: a redelivery. Do not dispatch it again.
    Duplicate(InboundRecord),
}

/// The outcome of [`Inbox::journal_and_lease`].
#[derive(Debug, Clone, PartialEq)]
pub enum InboxJournalLease {
    /// Newly journaled and leased to this process: run the handler, then `complete`.
    Leased(InboxLease),
    /// Already journaled: a redelivery. Do not dispatch it again.
    Duplicate,
}

/// The outcome of [`Inbox::journal_and_claim`].
#[derive(Debug, Clone, PartialEq)]
pub enum InboxJournalClaim {
    /// Newly journaled and leased to this process: run the handler, then `complete`.
    Claimed(Claimed),
    /// Already journaled: a redelivery. Do not dispatch it again.
    Duplicate(InboundRecord),
}

/// The inbox of a [`KvDurability`].
pub struct Inbox<'a, K: ?Sized> {
    pub(crate) d: &'a KvDurability<K>,
}

// A view of the journals: copied freely (a future that outlives the call holds its own).
impl<K: ?Sized> Clone for Inbox<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: ?Sized> Copy for Inbox<'_, K> {}

impl<'a, K: DurableKv + ?Sized> Inbox<'a, K> {
    /// The journal's records.
    pub(crate) fn view(&self) -> View<'a, K, InboundRecord> {
        View::new(self.d)
    }
}

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// The inbox journal.
    pub fn inbox(&self) -> Inbox<'_, K> {
        Inbox { d: self }
    }
}

impl<'a, K: DurableKv + ?Sized> Inbox<'a, K> {
    pub(crate) fn new_record(&self, new: NewInbound, now: i64) -> InboundRecord {
        InboundRecord {
            id: new.id,
            chat: new.chat,
            payload: new.payload,
            media_ref: new.media_ref,
            state: InboxState::Pending,
            attempts: 0,
            lease: None,
            fence: 0,
            next_attempt_ms: now,
            last_error: None,
            seq: self.d.next_seq_at(now),
            created_ms: now,
            updated_ms: now,
            rows_recorded: false,
        }
    }

    /// Writes an inbound event down before any handler runs (`pending`, due now). A second
    /// journal of the same id is a [`InboxJournal::Duplicate`] (counted in
    /// `inbound_duplicates`), whatever state the first one is in.
    pub async fn journal(&self, new: NewInbound) -> Result<InboxJournal, DurabilityError> {
        let record = self.new_record(new, self.d.now_ms());
        match self.create(&record).await? {
            None => Ok(InboxJournal::Journaled(record)),
            Some(existing) => Ok(InboxJournal::Duplicate(existing)),
        }
    }

    /// Journals an inbound event already leased to this process, in one write (the live path:
    /// journal, then run the handler at once). Charges the first attempt.
    pub async fn journal_and_claim(
        &self,
        new: NewInbound,
    ) -> Result<InboxJournalClaim, DurabilityError> {
        let now = self.d.now_ms();
        let mut record = self.new_record(new, now);
        let lease = self.take_lease(&mut record, now);
        match self.create(&record).await? {
            None => Ok(InboxJournalClaim::Claimed(Claimed { lease, record })),
            Some(existing) => Ok(InboxJournalClaim::Duplicate(existing)),
        }
    }

    /// [`journal_and_claim`](Self::journal_and_claim) for a caller that needs only the lease.
    pub async fn journal_and_lease(
        &self,
        new: NewInbound,
    ) -> Result<InboxJournalLease, DurabilityError> {
        Ok(match self.journal_and_claim(new).await? {
            InboxJournalClaim::Claimed(claimed) => InboxJournalLease::Leased(claimed.lease),
            InboxJournalClaim::Duplicate(_) => InboxJournalLease::Duplicate,
        })
    }

    /// Creates the record; returns the existing one when the id is already journaled.
    async fn create(
        &self,
        record: &InboundRecord,
    ) -> Result<Option<InboundRecord>, DurabilityError> {
        match self
            .view()
            .create(&[WritePoint::InboxJournal], record)
            .await?
        {
            Creation::Written(version) => {
                self.d.count(Counter::InboundJournaled);
                tracing::debug!(id = %record.id, chat = %record.chat, "inbound journaled");
                self.d.note_written(version, record);
                Ok(None)
            }
            Creation::Found(existing) => {
                self.d.count(Counter::InboundDuplicates);
                tracing::debug!(id = %record.id, state = existing.state.as_str(), "inbound duplicate");
                Ok(Some(existing))
            }
        }
    }

    /// Reads a record.
    pub async fn get(&self, id: &str) -> Result<Option<InboundRecord>, DurabilityError> {
        self.view().record(id, "get").await
    }

    /// The records in `state`, oldest (or soonest due) first, at most `limit`. `list(Dead)` is
    /// the inbound dead-letter queue. Undecodable records are quarantined and skipped.
    pub async fn list(
        &self,
        state: InboxState,
        limit: usize,
    ) -> Result<Vec<InboundRecord>, DurabilityError> {
        self.view().list(state.as_str(), limit).await
    }

    /// The open (pending or processing) records of a chat, in arrival order, at most
    /// `limit`. An operator's query: it scans every open record (inbound records keep no
    /// per-chat index, which would cost every message two index writes), so its cost grows
    /// with the backlog, not with the chat.
    pub async fn open_for_chat(
        &self,
        chat: &str,
        limit: usize,
    ) -> Result<Vec<InboundRecord>, DurabilityError> {
        let mut out = Vec::new();
        for state in [InboxState::Pending, InboxState::Processing] {
            let (mut cursor, to) = index::state_range(RecordKind::Inbound, state.as_str());
            loop {
                let (page, next) = self.d.scan_page::<InboundRecord>(&cursor, &to, 256).await?;
                out.extend(
                    page.into_iter()
                        .map(|l| l.record)
                        .filter(|r| r.chat == chat),
                );
                match next {
                    Some(next) => cursor = next,
                    None => break,
                }
            }
        }
        out.sort_by_key(|r| r.seq);
        out.truncate(limit);
        Ok(out)
    }

    /// Processes a dead or done record again (`replayInbound`): it becomes pending, due now,
    /// with its whole attempt budget. Counted in `inbound_replayed`.
    pub async fn replay(&self, id: &str) -> Result<InboundRecord, DurabilityError> {
        let seq = self.d.next_seq();
        let record = self
            .view()
            .modify(WritePoint::InboxReplay, "replay", id, |r, now| {
                match r.state {
                    InboxState::Dead | InboxState::Done => {
                        r.state = InboxState::Pending;
                        attempts::restart(r, now);
                        r.seq = seq;
                        Ok(crate::journal::Step::Write(r.clone()))
                    }
                    other => Err(DurabilityError::InvalidState {
                        kind: RecordKind::Inbound,
                        id: r.id.clone(),
                        state: other.as_str(),
                        operation: "replay",
                    }),
                }
            })
            .await?;
        self.d.count(Counter::InboundReplayed);
        tracing::info!(id = %id, "inbound record replayed by operator");
        Ok(record)
    }

    /// Forgets a record (any state but a live `processing`). Returns whether it existed.
    pub async fn discard(&self, id: &str) -> Result<bool, DurabilityError> {
        self.d
            .discard::<InboundRecord>(WritePoint::InboxDiscard, id)
            .await
    }
}
