//! [`StepJournal`]: the journal half of a flow step that commits in one transaction with its
//! checkpoint (see [`crate::store::StepCommit`]).
//!
//! A step's sends are not journaled one by one while the step runs: the runtime collects
//! them, and at the end of the step this builder turns them into outbox records (pending, due
//! now, parts linked as [`Outbox::split_parts`](crate::outbox::Outbox::split_parts) links them; the
//! first one, through [`send_and_begin`](StepJournal::send_and_begin), leased for the provider
//! call that follows the commit) and
//! the inbound record that fed the step into its `done` version, all as compare-and-set
//! operations. The store commits them with the checkpoint, all or none; then
//! [`committed`](StepJournal::committed) hands back the records to deliver, in order.
//! [`commit`](StepJournal::commit) runs the whole round (hooks, commit, conflicts, tries) for
//! the runtime's three uses: a flow step, a send marked sent with its ledger row, an inbound
//! journaled with its rows.
//!
//! | conflict on… | meaning | [`resolve_conflict`](StepJournal::resolve_conflict) |
//! | --- | --- | --- |
//! | the inbound record | a heartbeat moved its version, or another replica took the lease over | re-read: same lease → try again; lost → `StaleLease` (the step is dropped, the new holder runs it) |
//! | a leased send's guard | an earlier send of the chat is open (no record under the key) | the send is journaled `pending` behind it: try again |
//! | a send's key | the key was journaled before (an older run wrote it outside a step commit) | the send is answered from the recorded one: try again without it; under a derived key with other content, `on_diverged` decides (`send`: try again with the send under a new key) |
//! | an inbound being journaled | it was journaled before: a redelivery | `InboundDuplicate` with the record found (or, purged meanwhile, try again) |
//!
//! The same builder records a send the provider accepted ([`mark_sent`](StepJournal::mark_sent))
//! so that the runtime writes it with its ledger row in one request, and journals an inbound
//! event ([`journal_inbound`](StepJournal::journal_inbound)) with its ledger row, chat and
//! contact, also in one request.
//!
//! The write points are the ones of the separate writes ([`WritePoint::InboxJournal`],
//! [`WritePoint::OutboxJournal`], [`WritePoint::OutboxMarkSent`], [`WritePoint::InboxComplete`]):
//! their `before` hooks run before the commit, their `after` hooks after it, so the crash
//! harness cuts a step before or after its one transaction.

use serde_json::Value;

use crate::config::OnDiverged;
use crate::error::DurabilityError;
use crate::inbox::{InboundRecord, Inbox, InboxState, NewInbound};
use crate::journal::{KvDurability, cas, index};
use crate::keys::{self, Fingerprint};
use crate::kv::{CasOutcome, DurableKv, Entry, Index, KvOp, WritePhase, WritePoint};
use crate::leases::{InboxLease, OutboxLease};
use crate::metrics::{Counter, RecordKind};
use crate::outbox::{NewSend, Outbox, OutboxRecord, OutboxState, Payload};
use crate::store::{StepCommit, StepCommitOutcome, Store, StoreError};

/// What [`StepJournal::send`] did with a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepSend {
    /// It will be journaled with the step, in `parts` records.
    Journaled {
        /// The send's key (its first part's).
        key: String,
        /// How many records (parts) it takes.
        parts: usize,
    },
    /// Over `outbox.max_payload_bytes`: it goes out without the outbox, after the commit.
    Bypassed {
        /// The payload's JSON size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// The outcome of [`StepJournal::resolve_conflict`].
#[derive(Debug, Clone, PartialEq)]
pub enum StepConflict {
    /// The operations were updated: commit again.
    Retry,
    /// The inbound being journaled ([`StepJournal::journal_inbound`]) was journaled before:
    /// a redelivery. Nothing was written; the record found is here.
    InboundDuplicate(Box<InboundRecord>),
}

/// What [`StepJournal::commit`] ended with.
#[derive(Debug, Clone, PartialEq)]
pub enum StepCommitted {
    /// Everything was written: each send's first record, in order (as
    /// [`committed`](StepJournal::committed) returns them).
    Written(Vec<CommittedSend>),
    /// The inbound being journaled was journaled before (a redelivery): nothing was written.
    InboundDuplicate(Box<InboundRecord>),
}

/// A send of a committed step: its first record, and the lease this process holds on it when
/// the step journaled it leased ([`StepJournal::send_and_begin`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedSend {
    /// The send's first record: the one the step wrote, or the one found under its key (a
    /// send recorded before).
    pub record: OutboxRecord,
    /// The lease for its first attempt, taken in the step's transaction: call the provider
    /// with it. `None` when the record was written `pending` or was found.
    pub lease: Option<OutboxLease>,
}

/// Why [`StepJournal::commit`] did not commit.
#[derive(Debug, thiserror::Error)]
pub enum StepCommitError {
    /// The store could not run the transaction: nothing of the step was written.
    #[error("the step's transaction failed: {0}")]
    Store(#[from] StoreError),
    /// The journal refused the step (a lease taken over, a hook, a record that could not be
    /// read or encoded).
    #[error(transparent)]
    Journal(#[from] DurabilityError),
    /// The step was committed, but taking note of it failed (an `after` hook: the crash
    /// harness cuts there).
    #[error("the step was committed, then: {0}")]
    AfterCommit(DurabilityError),
    /// The step still conflicted after `tries` commits.
    #[error("the step still conflicted after {tries} commits")]
    Contention {
        /// The commits tried.
        tries: usize,
    },
}

/// One thing the step writes.
enum Item {
    /// An inbound event journaled, already leased to this process, or `done` (written
    /// completed: the step that consumed it commits with it).
    Journal {
        record: InboundRecord,
        entry: Entry,
        done: bool,
    },
    /// A send: its records (first part first) with their encoded entries; `existing` once the
    /// key turned out to be recorded already (the send is then answered from it); `lease` when
    /// its one record is written `sending`, leased to this process.
    Send {
        records: Vec<(OutboxRecord, Entry)>,
        existing: Option<OutboxRecord>,
        lease: Option<OutboxLease>,
    },
    /// A send the provider accepted, marked sent, expected at `version`.
    Sent {
        record: OutboxRecord,
        entry: Entry,
        version: u64,
        lease: OutboxLease,
    },
    /// The inbound record marked done, expected at `version`.
    Inbound {
        record: InboundRecord,
        entry: Entry,
        version: u64,
        lease: InboxLease,
    },
}

/// The journal operations of one flow step, built before the commit (see the module docs).
pub struct StepJournal<'a, K: ?Sized = dyn DurableKv> {
    d: &'a KvDurability<K>,
    items: Vec<Item>,
}

impl<K: ?Sized> std::fmt::Debug for StepJournal<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepJournal")
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

/// An inbound event made into its journal record and leased to this process, in memory only
/// ([`KvDurability::lease_inbound`]): the dispatch can start under the lease while the record
/// waits to be written with the step that consumes it
/// ([`StepJournal::journal_leased`]), or alone.
#[derive(Debug, Clone)]
pub struct LeasedInbound {
    record: InboundRecord,
    lease: InboxLease,
}

impl LeasedInbound {
    /// The lease the record holds once written.
    pub fn lease(&self) -> &InboxLease {
        &self.lease
    }
}

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// Makes `new` into its journal record, leased to this process, without writing it (see
    /// [`LeasedInbound`]). `rows_recorded`: the message's ledger row, chat and contact go in
    /// the [`StepCommit`](crate::store::StepCommit) that writes the record (the record says so,
    /// [`InboundRecord::rows_recorded`], and its replay does not record them again).
    pub fn lease_inbound(&self, new: NewInbound, rows_recorded: bool) -> LeasedInbound {
        let inbox = self.inbox();
        let now = self.now_ms();
        let mut record = inbox.new_record(new, now);
        record.rows_recorded = rows_recorded;
        let lease = inbox.take_lease(&mut record, now);
        LeasedInbound { record, lease }
    }

    /// A builder of one flow step's journal operations.
    pub fn step(&self) -> StepJournal<'_, K> {
        StepJournal {
            d: self,
            items: Vec::new(),
        }
    }
}

impl<K: DurableKv + ?Sized> StepJournal<'_, K> {
    /// Adds a send (after the `before` send hooks), split into `parts` when it has more than
    /// one (each part's content, in order; the first replaces the payload). A payload over
    /// `outbox.max_payload_bytes` is not journaled: `Bypassed`.
    pub fn send(&mut self, new: NewSend, parts: Vec<Value>) -> Result<StepSend, DurabilityError> {
        if let Some((size, limit)) = self.d.outbox().oversize(&new) {
            return Ok(StepSend::Bypassed { size, limit });
        }
        let mut first = self.d.outbox().record_of(new);
        let n = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        let mut records = Vec::with_capacity(parts.len().max(1));
        if n > 1 {
            let base = first.key.clone();
            for (i, part) in (2..=n).zip(parts.iter().skip(1)) {
                records.push(OutboxRecord {
                    key: keys::part_key(&base, i),
                    previous_part: Some(keys::part_key(&base, i - 1)),
                    next_part: (i < n).then(|| keys::part_key(&base, i + 1)),
                    part: i,
                    fingerprint: Fingerprint::of(&first.chat, part),
                    payload: Payload::from(part),
                    ..first.clone()
                });
            }
            first.payload = Payload::from(&parts[0]);
            first.next_part = Some(keys::part_key(&base, 2));
        }
        records.insert(0, first);
        self.push_send(records, None)
    }

    /// Adds a send of `records` (first part first), encoded, leased by `lease` if given.
    fn push_send(
        &mut self,
        records: Vec<OutboxRecord>,
        lease: Option<OutboxLease>,
    ) -> Result<StepSend, DurabilityError> {
        let key = records.first().map(|r| r.key.clone()).unwrap_or_default();
        let parts = records.len();
        let records = records
            .into_iter()
            .map(|r| KvDurability::<K>::encode(&r).map(|e| (r, e)))
            .collect::<Result<Vec<_>, _>>()?;
        self.items.push(Item::Send {
            records,
            existing: None,
            lease,
        });
        Ok(StepSend::Journaled { key, parts })
    }

    /// Adds a one-part send leased for its first attempt in the step's own transaction (what
    /// [`Outbox::journal_and_begin`] writes for an inline send): the record is written
    /// `sending`, and [`committed`](Self::committed) hands back the lease, so the provider is
    /// called right after the commit without another write. Use it for the step's first send
    /// only, when it goes out as soon as the step committed (not paced): a later send of the
    /// step waits for the ones before it. A chat with an earlier send still open (waiting, or
    /// failed and due again) gets the send journaled `pending`, as [`send`](Self::send) does,
    /// behind it: the leased record is written as a guarded create
    /// ([`KvOp::CreateIfNoneIn`] over the chat's earlier open sends), so the commit itself
    /// checks that, with no read before it; when it finds one,
    /// [`resolve_conflict`](Self::resolve_conflict) turns the send `pending` and the step
    /// commits again.
    ///
    /// A crash loses nothing to this: before the commit lands, nothing is recorded and the
    /// step runs again; once it has, the provider may be called, the ambiguous window that
    /// leasing the send in a write of its own opens anyway. There is no moment between two
    /// writes where a crash would leave a `pending` send.
    pub async fn send_and_begin(&mut self, new: NewSend) -> Result<StepSend, DurabilityError> {
        if let Some((size, limit)) = self.d.outbox().oversize(&new) {
            return Ok(StepSend::Bypassed { size, limit });
        }
        let mut record = self.d.outbox().record_of(new);
        let queued = self
            .items
            .iter()
            .any(|i| matches!(i, Item::Send { existing: None, .. }));
        if queued {
            return self.push_send(vec![record], None);
        }
        let (now, lease_ms) = (
            record.created_ms,
            crate::retries::duration_ms(self.d.config().outbox.lease),
        );
        let lease = Outbox::<K>::take_lease(&mut record, self.d.incarnation(), now, lease_ms);
        self.push_send(vec![record], Some(lease))
    }

    /// Adds the journaling of an inbound event already leased to this process (what
    /// [`Inbox::journal_and_claim`](crate::inbox::Inbox::journal_and_claim) writes), to commit with
    /// its ledger row and its chat and contact (see [`StepCommit`](crate::store::StepCommit)).
    /// Returns the lease the record will hold once committed. A conflict on it is a
    /// redelivery: [`resolve_conflict`](Self::resolve_conflict) answers
    /// [`StepConflict::InboundDuplicate`]. The record is marked
    /// [`rows_recorded`](InboundRecord::rows_recorded): commit the message's ledger row, chat
    /// and contact in the same [`StepCommit`](crate::store::StepCommit).
    pub fn journal_inbound(&mut self, new: NewInbound) -> Result<InboxLease, DurabilityError> {
        let leased = self.d.lease_inbound(new, true);
        let lease = leased.lease.clone();
        self.journal_leased(leased, false)?;
        Ok(lease)
    }

    /// Adds the journaling of an inbound record leased in memory
    /// ([`KvDurability::lease_inbound`]), as [`journal_inbound`](Self::journal_inbound)
    /// does; `done`: written completed, when this step is the last thing its dispatch
    /// writes (the step that consumed the message commits with its record, one write for
    /// both).
    pub fn journal_leased(
        &mut self,
        leased: LeasedInbound,
        done: bool,
    ) -> Result<(), DurabilityError> {
        let mut record = leased.record;
        if done {
            record.state = InboxState::Done;
            record.lease = None;
        }
        let entry = KvDurability::<K>::encode(&record)?;
        self.items.push(Item::Journal {
            record,
            entry,
            done,
        });
        Ok(())
    }

    /// Adds the completion of the inbound record leased by `lease` (from this incarnation's
    /// snapshot of it, or a read). Refused with `StaleLease` when the lease was taken over.
    pub async fn complete_inbound(&mut self, lease: &InboxLease) -> Result<(), DurabilityError> {
        let loaded = self
            .d
            .snapshot_or_load::<InboundRecord>(&lease.id, "complete")
            .await?;
        let item = self.inbound_item(loaded.record, loaded.version, lease)?;
        self.items.retain(|i| !matches!(i, Item::Inbound { .. }));
        self.items.push(item);
        Ok(())
    }

    fn inbound_item(
        &self,
        mut record: InboundRecord,
        version: u64,
        lease: &InboxLease,
    ) -> Result<Item, DurabilityError> {
        if let Err(e) = Inbox::<K>::check_fence(&record, lease) {
            self.d.count(Counter::StaleLeases);
            tracing::warn!(error = %e, "stale inbound lease refused");
            return Err(e);
        }
        let now = self.d.now_ms();
        record.state = InboxState::Done;
        record.lease = None;
        record.updated_ms = now;
        let entry = KvDurability::<K>::encode(&record)?;
        Ok(Item::Inbound {
            record,
            entry,
            version,
            lease: lease.clone(),
        })
    }

    /// Adds "the provider accepted the send leased by `lease`, with this message id" (what
    /// [`Outbox::mark_sent`](crate::outbox::Outbox::mark_sent) writes), to commit with a ledger row.
    /// Refused with `StaleLease` when the lease was taken over.
    pub async fn mark_sent(
        &mut self,
        lease: &OutboxLease,
        provider_message_id: Option<String>,
    ) -> Result<(), DurabilityError> {
        let loaded = self
            .d
            .snapshot_or_load::<OutboxRecord>(&lease.key, "mark_sent")
            .await?;
        let item = self.sent_item(loaded.record, loaded.version, lease, provider_message_id)?;
        self.items.push(item);
        Ok(())
    }

    fn sent_item(
        &self,
        mut record: OutboxRecord,
        version: u64,
        lease: &OutboxLease,
        provider_message_id: Option<String>,
    ) -> Result<Item, DurabilityError> {
        if let Err(e) = Outbox::<K>::check_fence(&record, lease) {
            self.d.count(Counter::StaleLeases);
            tracing::warn!(error = %e, "stale outbox lease refused");
            return Err(e);
        }
        record.state = OutboxState::Sent;
        record.provider_message_id = provider_message_id;
        record.lease = None;
        record.last_error = None;
        record.updated_ms = self.d.now_ms();
        let entry = KvDurability::<K>::encode(&record)?;
        Ok(Item::Sent {
            record,
            entry,
            version,
            lease: lease.clone(),
        })
    }

    /// Whether the step writes nothing to the journals.
    pub fn is_empty(&self) -> bool {
        self.items.iter().all(|i| match i {
            Item::Send { existing, .. } => existing.is_some(),
            Item::Journal { .. } | Item::Sent { .. } | Item::Inbound { .. } => false,
        })
    }

    /// The operations to commit, in order.
    pub fn ops(&self) -> Vec<KvOp> {
        let mut ops = Vec::new();
        for item in &self.items {
            match item {
                Item::Journal { record, entry, .. } => ops.push(cas(record, None, entry.clone())),
                Item::Send {
                    records,
                    existing: None,
                    lease,
                } => {
                    for (record, entry) in records {
                        let key = index::storage_key(RecordKind::Outbound, &record.key);
                        let entry = entry.clone();
                        // Leased only while no earlier send of the chat is open: checked by
                        // the write itself.
                        ops.push(match lease {
                            Some(_) => {
                                let (from, to) = Outbox::<K>::earlier_range(record);
                                KvOp::CreateIfNoneIn {
                                    key,
                                    entry,
                                    index: Index::Two,
                                    from,
                                    to,
                                }
                            }
                            None => KvOp::Cas {
                                key,
                                expected: None,
                                entry,
                            },
                        });
                    }
                }
                Item::Send { .. } => {}
                Item::Sent {
                    record,
                    entry,
                    version,
                    ..
                } => ops.push(cas(record, Some(*version), entry.clone())),
                Item::Inbound {
                    record,
                    entry,
                    version,
                    ..
                } => ops.push(cas(record, Some(*version), entry.clone())),
            }
        }
        ops
    }

    /// The points this step writes at, in pipeline order.
    fn points(&self) -> Vec<WritePoint> {
        let mut points = Vec::new();
        if self.items.iter().any(|i| matches!(i, Item::Journal { .. })) {
            points.push(WritePoint::InboxJournal);
        }
        if self
            .items
            .iter()
            .any(|i| matches!(i, Item::Send { existing: None, .. }))
        {
            points.push(WritePoint::OutboxJournal);
        }
        if self.items.iter().any(|i| {
            matches!(
                i,
                Item::Send {
                    existing: None,
                    lease: Some(_),
                    ..
                }
            )
        }) {
            points.push(WritePoint::OutboxBeginAttempt);
        }
        if self.items.iter().any(|i| matches!(i, Item::Sent { .. })) {
            points.push(WritePoint::OutboxMarkSent);
        }
        if self
            .items
            .iter()
            .any(|i| matches!(i, Item::Inbound { .. } | Item::Journal { done: true, .. }))
        {
            points.push(WritePoint::InboxComplete);
        }
        points
    }

    fn hooks(&self, phase: WritePhase) -> Result<(), DurabilityError> {
        for point in self.points() {
            self.d
                .hook(point, phase)
                .map_err(KvDurability::<K>::backend_err(
                    RecordKind::Outbound,
                    "flow step",
                    "commit_step",
                ))?;
        }
        Ok(())
    }

    /// Runs the `before` hooks of the step's write points: call it right before the commit.
    pub fn before_commit(&self) -> Result<(), DurabilityError> {
        self.hooks(WritePhase::Before)
    }

    /// Which item operation `op` (an index into [`ops`](Self::ops)) belongs to.
    fn item_of(&self, op: usize) -> Option<usize> {
        let mut at = 0;
        for (i, item) in self.items.iter().enumerate() {
            let n = match item {
                Item::Send {
                    records,
                    existing: None,
                    ..
                } => records.len(),
                Item::Send { .. } => 0,
                Item::Journal { .. } | Item::Sent { .. } | Item::Inbound { .. } => 1,
            };
            if op < at + n {
                return Some(i);
            }
            at += n;
        }
        None
    }

    /// Deals with a conflict the store reported on operation `op` (see the module docs).
    pub async fn resolve_conflict(&mut self, op: usize) -> Result<StepConflict, DurabilityError> {
        let Some(i) = self.item_of(op) else {
            return Err(DurabilityError::Contention {
                kind: RecordKind::Outbound,
                id: format!("flow step operation {op}"),
                operation: "commit_step",
            });
        };
        match &self.items[i] {
            Item::Journal { record, .. } => {
                let id = record.id.clone();
                // Boxed: a redelivery is rare, and this future sits in every journal's.
                match Box::pin(self.d.load::<InboundRecord>(&id, "journal")).await? {
                    Some(existing) => {
                        self.d.count(Counter::InboundDuplicates);
                        tracing::debug!(id = %id, state = existing.record.state.as_str(), "inbound duplicate");
                        Ok(StepConflict::InboundDuplicate(Box::new(existing.record)))
                    }
                    // Purged between the commit and the read: create it again.
                    None => Ok(StepConflict::Retry),
                }
            }
            Item::Inbound { lease, .. } => {
                let lease = lease.clone();
                let loaded = self
                    .d
                    .load_existing::<InboundRecord>(&lease.id, "complete")
                    .await?;
                self.items[i] = self.inbound_item(loaded.record, loaded.version, &lease)?;
                Ok(StepConflict::Retry)
            }
            Item::Sent { lease, record, .. } => {
                let lease = lease.clone();
                let id = record.provider_message_id.clone();
                let loaded = self
                    .d
                    .load_existing::<OutboxRecord>(&lease.key, "mark_sent")
                    .await?;
                self.items[i] = self.sent_item(loaded.record, loaded.version, &lease, id)?;
                Ok(StepConflict::Retry)
            }
            Item::Send { .. } => {
                // Whatever the record found decides, this send is no longer written leased:
                // the found one is answered from, or ours goes under a new key, `pending`.
                let was_leased = self.unlease(i)?;
                let Item::Send { records, .. } = &self.items[i] else {
                    return Ok(StepConflict::Retry);
                };
                let key = records
                    .first()
                    .map(|(r, _)| r.key.clone())
                    .unwrap_or_default();
                let Some(found) = self.d.outbox().lookup(&key).await? else {
                    if was_leased {
                        // No record under the key: the guard found an earlier open send of
                        // the chat. The send waits behind it, `pending`.
                        tracing::debug!(%key, "step send journaled pending behind an earlier open send");
                        return Ok(StepConflict::Retry);
                    }
                    return Err(DurabilityError::Contention {
                        kind: RecordKind::Outbound,
                        id: key,
                        operation: "commit_step",
                    });
                };
                if let Item::Send { records, .. } = &self.items[i] {
                    if let Some(rekeyed) = self.diverged(records, &found)? {
                        // `on_diverged: send`: the new content goes out under a new key.
                        self.items[i] = Item::Send {
                            records: rekeyed,
                            existing: None,
                            lease: None,
                        };
                        return Ok(StepConflict::Retry);
                    }
                }
                self.d.count(Counter::OutboxDeduped);
                tracing::debug!(key = %found.key, state = found.state.as_str(), "step send already recorded");
                if let Item::Send { existing, .. } = &mut self.items[i] {
                    *existing = Some(found);
                }
                Ok(StepConflict::Retry)
            }
        }
    }

    /// Turns send `i`, if it was to be written leased, back into a `pending` record (its
    /// attempt and fencing token not taken); whether it was.
    fn unlease(&mut self, i: usize) -> Result<bool, DurabilityError> {
        if let Some(Item::Send { records, lease, .. }) = self.items.get_mut(i) {
            if lease.take().is_some() {
                for (record, entry) in records.iter_mut() {
                    Outbox::<K>::unlease(record);
                    *entry = KvDurability::<K>::encode(record)?;
                }
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A send of the step whose derived key was recorded before with other content (`found`):
    /// counted in `outbox_diverged` and warned about, as [`Outbox::journal`] does. Under
    /// `on_diverged: send` the send's records under the key [`keys::diverged_key`] gives (its
    /// parts relinked); under `skip`, or when the send is the one recorded, `None` (it is
    /// answered from `found`).
    fn diverged(
        &self,
        records: &[(OutboxRecord, Entry)],
        found: &OutboxRecord,
    ) -> Result<Option<Vec<(OutboxRecord, Entry)>>, DurabilityError> {
        let Some((ours, _)) = records.first() else {
            return Ok(None);
        };
        if !found.diverges_from(ours.key_kind, &ours.fingerprint) {
            return Ok(None);
        }
        let policy = self.d.config().outbox.on_diverged;
        self.d.count(Counter::OutboxDiverged);
        tracing::warn!(
            key = %found.key,
            ?policy,
            "replay produced different content under the same derived key"
        );
        if policy == OnDiverged::Skip {
            return Ok(None);
        }
        let base = keys::diverged_key(&found.key, &ours.fingerprint);
        let n = u32::try_from(records.len()).unwrap_or(u32::MAX);
        let key_of = |part: u32| keys::part_key(&base, part);
        records
            .iter()
            .map(|(record, _)| {
                let part = record.part.max(1);
                let rekeyed = OutboxRecord {
                    key: key_of(part),
                    previous_part: (part > 1).then(|| key_of(part - 1)),
                    next_part: (part < n).then(|| key_of(part + 1)),
                    ..record.clone()
                };
                KvDurability::<K>::encode(&rekeyed).map(|e| (rekeyed, e))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Commits the step with the rest of `step` (its checkpoint change, values, ledger rows,
    /// chat and contact) through `store`, at most `tries` times: before each commit its
    /// journal operations are set and the `before` hooks run; a conflict is resolved (see
    /// [`resolve_conflict`](Self::resolve_conflict)) and the step committed again.
    pub async fn commit(
        mut self,
        store: &dyn Store,
        step: &mut StepCommit,
        tries: usize,
    ) -> Result<StepCommitted, StepCommitError> {
        for _ in 0..tries {
            step.journal = self.ops();
            self.before_commit()?;
            match store.commit_step(step).await? {
                StepCommitOutcome::Committed(outcomes) => {
                    return self
                        .committed(&outcomes)
                        .map(StepCommitted::Written)
                        .map_err(StepCommitError::AfterCommit);
                }
                StepCommitOutcome::Conflict { op, .. } => match self.resolve_conflict(op).await? {
                    StepConflict::Retry => {}
                    StepConflict::InboundDuplicate(found) => {
                        return Ok(StepCommitted::InboundDuplicate(found));
                    }
                },
            }
        }
        Err(StepCommitError::Contention { tries })
    }

    /// Takes note of the commit (`outcomes`: one per operation of [`ops`](Self::ops)): counts,
    /// keeps snapshots for the writes that follow, runs the `after` hooks, and returns each
    /// send's first record, in order (a send recorded before: the record found), with the
    /// lease of a send journaled leased.
    pub fn committed(self, outcomes: &[CasOutcome]) -> Result<Vec<CommittedSend>, DurabilityError> {
        let mut versions = outcomes.iter();
        let mut sends = Vec::new();
        self.hooks(WritePhase::After)?;
        for item in self.items {
            match item {
                Item::Journal { record, done, .. } => {
                    if let Some(CasOutcome::Ok { version }) = versions.next() {
                        self.d.note_written(*version, &record);
                    }
                    self.d.count(Counter::InboundJournaled);
                    tracing::debug!(id = %record.id, chat = %record.chat, done, "inbound journaled with its ledger row");
                }
                Item::Send {
                    existing: Some(found),
                    ..
                } => sends.push(CommittedSend {
                    record: found,
                    lease: None,
                }),
                Item::Send {
                    records,
                    existing: None,
                    lease,
                } => {
                    let mut first = None;
                    for (record, _) in records {
                        if let Some(CasOutcome::Ok { version }) = versions.next() {
                            self.d.note_written(*version, &record);
                        }
                        self.d.count(Counter::OutboxJournaled);
                        tracing::debug!(key = %record.key, chat = %record.chat, leased = lease.is_some(), "send journaled with its flow step");
                        first.get_or_insert(record);
                    }
                    sends.extend(first.map(|record| CommittedSend {
                        record,
                        lease: lease.clone(),
                    }));
                }
                Item::Sent { record, .. } => {
                    if let Some(CasOutcome::Ok { version }) = versions.next() {
                        self.d.note_written(*version, &record);
                    }
                }
                Item::Inbound { record, .. } => {
                    versions.next();
                    self.d.note_written(0, &record);
                }
            }
        }
        Ok(sends)
    }
}
