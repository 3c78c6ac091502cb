//! One provider call: `begin_attempt` ("about to call the provider"), then `mark_sent`,
//! `mark_failed` or `mark_ambiguous`; `heartbeat` while the call runs.
//!
//! | record found by `begin_attempt` | outcome |
//! | --- | --- |
//! | `sent` | `AlreadySent`: answer from the record, call nothing |
//! | `dead`, `unknown` | `Settled`: only an operator's `retry` sends it again |
//! | `sending`, live lease | `Busy` |
//! | `sending`, abandoned lease | ambiguity resolved first (`on_ambiguous`), then decided again |
//! | `pending` / `failed`, not due | `NotDue { at_ms }` |
//! | previous part not settled, or an earlier send of the chat still open | `Waiting { behind }` (no attempt charged) |
//! | previous part dead | the part dies with it (`Settled`) |
//! | otherwise | `Leased`: `sending`, new fencing token, attempt charged |
//!
//! The `mark_*` calls check the fencing token: a holder whose lease was taken over gets
//! `StaleLease` (counted in `stale_leases`) and the record is left as the new holder made it.

use super::sweep::PartGate;
use super::{Created, NewSend, Outbox, OutboxRecord, OutboxState, SendJournal};
use crate::config::{Backoff, OnAmbiguous};
use crate::error::DurabilityError;
use crate::inbox::lease_holder;
use crate::journal::{Step, attempts, index};
use crate::kv::{DurableKv, WritePoint};
use crate::leases::{Incarnation, OutboxLease};
use crate::metrics::{Counter, DurabilityEvent, RecordKind};
use crate::retries::{self, FailOutcome, SendFailure, duration_ms};

/// The outcome of [`Outbox::begin_attempt`].
#[derive(Debug, Clone, PartialEq)]
pub enum BeginAttempt {
    /// Leased to this process: call the provider now, then `mark_sent` / `mark_failed`.
    Leased {
        /// The lease (carries the fencing token).
        lease: OutboxLease,
        /// The record as leased.
        record: OutboxRecord,
    },
    /// Already sent: answer from the record.
    AlreadySent(OutboxRecord),
    /// Dead or unknown: nothing to send until an operator retries it.
    Settled(OutboxRecord),
    /// Another holder (or this process) has a call in flight.
    Busy {
        /// The holder's instance id.
        owner: String,
        /// When its lease expires (Unix ms).
        expires_ms: i64,
    },
    /// Not due before `at_ms` (a scheduled retry).
    NotDue {
        /// When it becomes due (Unix ms).
        at_ms: i64,
    },
    /// Waits behind an earlier send of the chat or its previous part (not an attempt).
    Waiting {
        /// The key it waits behind.
        behind: String,
    },
}

/// The outcome of [`Outbox::journal_and_begin`].
#[derive(Debug, Clone, PartialEq)]
pub enum JournalBegun {
    /// Journaled and leased to this process in one write: call the provider now, then
    /// `mark_sent` / `mark_failed`, exactly as after [`BeginAttempt::Leased`].
    Leased {
        /// The lease (carries the fencing token).
        lease: OutboxLease,
        /// The record as written (`sending`, first attempt charged).
        record: OutboxRecord,
    },
    /// Not leased by the journal write: what [`Outbox::journal`] answers (a key already
    /// recorded, a diverged replay, a bypass, or a send journaled `pending` because an earlier
    /// send of the chat is still open); carry on with [`Outbox::begin_attempt`].
    Journal(SendJournal),
}

/// The outcome of [`Outbox::journal_and_lease`].
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // returned and matched at once, never stored
pub enum JournalLeased {
    /// Journaled and leased to this process in one write: call the provider now with the
    /// content journaled, then `mark_sent` / `mark_failed`.
    Leased(OutboxLease),
    /// Not leased by the journal write: what [`Outbox::journal`] answers (see
    /// [`JournalBegun::Journal`]).
    Journal(SendJournal),
}

/// What [`Outbox::mark_ambiguous`] did with a send of unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmbiguousOutcome {
    /// Marked `unknown` (`on_ambiguous: skip`): never sent again by itself.
    Unknown,
    /// Due again at `at_ms` (`on_ambiguous: resend`), after `outbox.backoff` as a failed
    /// attempt.
    Resend {
        /// When the send is due again (Unix ms).
        at_ms: i64,
    },
    /// `on_ambiguous: resend`, but out of retries: dead-lettered (with its later parts).
    DeadLettered,
}

lease_holder!(
    Outbox: OutboxRecord,
    OutboxLease { key },
    outbox,
    heartbeat: OutboxHeartbeat,
    fail: OutboxMarkFailed("mark_failed")
);

impl<'a, K: DurableKv + ?Sized> Outbox<'a, K> {
    /// "About to call the provider": leases the send to this process and charges an attempt,
    /// unless the table in the module documentation says otherwise.
    pub async fn begin_attempt(&self, key: &str) -> Result<BeginAttempt, DurabilityError> {
        for _ in 0..8 {
            let now = self.d.now_ms();
            // This incarnation's snapshot of a send it has just journaled (or failed) saves the
            // read when it is due: the lease below is written on the snapshot's version, so it
            // only lands if the snapshot is still the stored record. Any other state is
            // decided on a fresh read.
            let snapshot = self.d.take_snapshot::<OutboxRecord>(key).filter(|s| {
                matches!(s.record.state, OutboxState::Pending | OutboxState::Failed)
                    && s.record.next_attempt_ms <= now
            });
            let fresh;
            let r: &OutboxRecord = match &snapshot {
                Some(s) => &s.record,
                None => {
                    fresh = self
                        .lookup(key)
                        .await?
                        .ok_or_else(|| DurabilityError::NotFound {
                            kind: RecordKind::Outbound,
                            id: key.to_owned(),
                        })?;
                    &fresh
                }
            };
            match r.state {
                OutboxState::Sent => return Ok(BeginAttempt::AlreadySent(r.clone())),
                OutboxState::Dead | OutboxState::Unknown => {
                    return Ok(BeginAttempt::Settled(r.clone()));
                }
                OutboxState::Sending => {
                    if let Some((owner, expires_ms)) =
                        attempts::live_holder(r, self.d.incarnation(), now)
                    {
                        return Ok(BeginAttempt::Busy { owner, expires_ms });
                    }
                    // Rare paths are boxed, keeping this (hot) future small.
                    Box::pin(self.resolve_ambiguous(key)).await?;
                    continue;
                }
                OutboxState::Pending | OutboxState::Failed => {}
            }
            if r.next_attempt_ms > now {
                return Ok(BeginAttempt::NotDue {
                    at_ms: r.next_attempt_ms,
                });
            }
            let gate = if r.previous_part.is_some() {
                Box::pin(self.gate(r)).await?
            } else {
                PartGate::Go
            };
            match gate {
                PartGate::Wait => {
                    return Ok(BeginAttempt::Waiting {
                        behind: r.previous_part.clone().unwrap_or_default(),
                    });
                }
                PartGate::DieWith => {
                    Box::pin(self.die_with_previous(&r.key)).await?;
                    continue;
                }
                PartGate::Go => {}
            }
            if let Some(behind) = self.earlier_open(r).await? {
                return Ok(BeginAttempt::Waiting { behind });
            }
            let lease_ms = duration_ms(self.d.config().outbox.lease);
            let me = self.d.incarnation();
            let (leased, record) = self
                .view()
                .modify_record(
                    WritePoint::OutboxBeginAttempt,
                    "begin_attempt",
                    key,
                    snapshot,
                    |r, now| {
                        if !matches!(r.state, OutboxState::Pending | OutboxState::Failed)
                            || r.next_attempt_ms > now
                        {
                            return Ok(Step::Keep(None));
                        }
                        Ok(Step::Write(Some(Self::take_lease(r, me, now, lease_ms))))
                    },
                )
                .await?;
            if let Some(lease) = leased {
                return Ok(BeginAttempt::Leased { lease, record });
            }
        }
        Err(DurabilityError::Contention {
            kind: RecordKind::Outbound,
            id: key.to_owned(),
            operation: "begin_attempt",
        })
    }

    /// [`journal`](Self::journal) and [`begin_attempt`](Self::begin_attempt) in one write,
    /// for a send about to be made inline: the record is written `sending`, leased to this
    /// process with its first attempt charged, so the provider can be called at once. Both
    /// write points' hooks run around that one write (`outbox.journal` and
    /// `outbox.beginAttempt`).
    ///
    /// A crash loses nothing to this: before the write lands, nothing is recorded and the
    /// replayed handler journals the send again; once it has landed, the provider may be
    /// called, which is the ambiguous window `begin_attempt` opens anyway. There is no moment
    /// between two writes where a crash would leave a `pending` record.
    ///
    /// Leases only a new single record whose chat has no earlier open send (per-chat order):
    /// the write is a guarded create ([`KvOp::CreateIfNoneIn`](crate::kv::KvOp::CreateIfNoneIn))
    /// that checks that itself, with no read before it. Anything else is
    /// [`JournalBegun::Journal`], written as `journal` writes it.
    pub async fn journal_and_begin(&self, new: NewSend) -> Result<JournalBegun, DurabilityError> {
        if let Some((size, limit)) = self.oversize(&new) {
            return Ok(JournalBegun::Journal(SendJournal::Bypassed { size, limit }));
        }
        let kind = new.key.kind();
        let mut record = self.record_of(new);
        let (now, lease_ms) = (record.created_ms, duration_ms(self.d.config().outbox.lease));
        let lease = Self::take_lease(&mut record, self.d.incarnation(), now, lease_ms);
        let points = [WritePoint::OutboxJournal, WritePoint::OutboxBeginAttempt];
        let created = match self.create_first_at(&points, record).await? {
            Ok(created) => created,
            Err(mut ours) => {
                // Waits behind the chat's earlier send: journaled pending, as `journal` does.
                Self::unlease(&mut ours);
                return Ok(JournalBegun::Journal(
                    Box::pin(self.journal_record(kind, *ours)).await?,
                ));
            }
        };
        match created {
            Created::New(record) => Ok(JournalBegun::Leased { lease, record }),
            Created::Existing { found, mut ours } => {
                // Not written: the record found decides, as for `journal`.
                ours.state = OutboxState::Pending;
                ours.lease = None;
                Ok(JournalBegun::Journal(
                    Box::pin(self.found_recorded(kind, found, *ours)).await?,
                ))
            }
        }
    }

    /// [`journal_and_begin`](Self::journal_and_begin) for a caller that needs only the lease
    /// (the bot's own path, which has the content it journaled).
    pub async fn journal_and_lease(&self, new: NewSend) -> Result<JournalLeased, DurabilityError> {
        Ok(match self.journal_and_begin(new).await? {
            JournalBegun::Leased { lease, .. } => JournalLeased::Leased(lease),
            JournalBegun::Journal(journaled) => JournalLeased::Journal(journaled),
        })
    }

    /// Leases `r` to incarnation `me` for its next attempt: `sending`, a new fencing token,
    /// the attempt charged.
    pub(crate) fn take_lease(
        r: &mut OutboxRecord,
        me: &Incarnation,
        now: i64,
        lease_ms: i64,
    ) -> OutboxLease {
        let stored = attempts::take_lease(r, me, now, lease_ms);
        OutboxLease {
            key: r.key.clone(),
            chat: r.chat.clone(),
            token: stored.token,
            owner: stored.owner,
            expires_ms: stored.expires_ms,
            attempt: r.attempts,
        }
    }

    /// Undoes [`take_lease`](Self::take_lease) on a record that was not written: `pending`,
    /// its attempt and fencing token not taken.
    pub(crate) fn unlease(r: &mut OutboxRecord) {
        r.state = OutboxState::Pending;
        r.lease = None;
        r.fence = r.fence.saturating_sub(1);
        r.attempts = r.attempts.saturating_sub(1);
    }

    /// The `idx2` range of the open sends of `r`'s chat journaled before it.
    pub(crate) fn earlier_range(r: &OutboxRecord) -> (String, String) {
        let mine = index::idx2(RecordKind::Outbound, &r.chat, r.seq, r.part);
        let from = index::chat_prefix_of(RecordKind::Outbound, &r.chat, &mine).to_owned();
        (from, mine)
    }

    /// The key of the earliest open send of the same chat journaled before `r`, if any.
    pub(crate) async fn earlier_open(
        &self,
        r: &OutboxRecord,
    ) -> Result<Option<String>, DurabilityError> {
        let (from, mine) = Self::earlier_range(r);
        let found = self
            .d
            .first_idx2_key(RecordKind::Outbound, &from, &mine)
            .await?;
        Ok(found
            .and_then(|key| index::id_of(RecordKind::Outbound, &key).map(str::to_owned))
            .filter(|k| k != &r.key))
    }

    /// Extends a send-in-flight lease by `outbox.lease` from now (a slow upload is never taken
    /// for an abandoned send).
    pub async fn heartbeat(&self, lease: &OutboxLease) -> Result<OutboxLease, DurabilityError> {
        self.extended(lease).await
    }

    /// Records that the provider accepted the send, with its message id.
    pub async fn mark_sent(
        &self,
        lease: &OutboxLease,
        provider_message_id: Option<String>,
    ) -> Result<OutboxRecord, DurabilityError> {
        let result = self
            .view()
            .modify_record(
                WritePoint::OutboxMarkSent,
                "mark_sent",
                &lease.key,
                self.d.take_snapshot(&lease.key),
                Self::sent(lease, provider_message_id.as_deref()),
            )
            .await;
        self.d
            .counted(RecordKind::Outbound, result)
            .map(|((), record)| record)
    }

    /// The decision of `mark_sent`: the send is sent with `provider_message_id`, if `lease`
    /// still holds it.
    fn sent<'l>(
        lease: &'l OutboxLease,
        provider_message_id: Option<&'l str>,
    ) -> impl FnMut(&mut OutboxRecord, i64) -> Result<Step<()>, DurabilityError> + Send + 'l {
        move |r, now| {
            Self::check_fence(r, lease)?;
            r.state = OutboxState::Sent;
            r.provider_message_id = provider_message_id.map(str::to_owned);
            r.lease = None;
            r.last_error = None;
            r.updated_ms = now;
            Ok(Step::Write(()))
        }
    }

    /// What a send may take: this many provider calls at most (`outbox.retries` + 1), with
    /// `outbox.backoff` between them.
    fn call_budget(&self) -> (u32, &Backoff) {
        let config = &self.d.config().outbox;
        (config.retries.saturating_add(1), &config.backoff)
    }

    /// Records a failed provider call: retried with `outbox.backoff` (a rate limit waits at
    /// least its `retry_after`) while retries remain, dead-lettered otherwise or when final.
    /// A dead-lettered send takes its later parts with it.
    pub async fn mark_failed(
        &self,
        lease: &OutboxLease,
        failure: &SendFailure,
    ) -> Result<FailOutcome, DurabilityError> {
        let budget = self.call_budget();
        let (outcome, record) = self
            .failed(lease, &failure.error, failure.class, budget)
            .await?;
        match outcome {
            FailOutcome::Retrying { .. } => self.d.count(Counter::OutboxRetried),
            FailOutcome::DeadLettered => Box::pin(self.cascade_dead(&record)).await?,
        }
        Ok(outcome)
    }

    /// Records that the provider call's outcome is unknown (the request may have reached the
    /// channel: a timeout or a connection lost after the request was written): the send's own
    /// `on_ambiguous`, else the configured one, decides, and `Ambiguous` is emitted either
    /// way, before the write that settles the send (as recovery does). `skip` marks it
    /// `unknown`; `resend` schedules it again as a failed attempt would be (`outbox.backoff`,
    /// dead-lettered once out of retries), so a channel that keeps timing out is not called
    /// again and again.
    pub async fn mark_ambiguous(
        &self,
        lease: &OutboxLease,
        error: &str,
    ) -> Result<AmbiguousOutcome, DurabilityError> {
        let policy = self.d.config().outbox.on_ambiguous;
        let (max_calls, backoff) = self.call_budget();
        let unit = self.d.unit();
        let mut reported = false;
        let result = self
            .view()
            .modify(
                WritePoint::OutboxMarkAmbiguous,
                "mark_ambiguous",
                &lease.key,
                |r, now| {
                    Self::check_fence(r, lease)?;
                    let policy = r.on_ambiguous.unwrap_or(policy);
                    if !std::mem::replace(&mut reported, true) {
                        self.ambiguous(r, policy);
                    }
                    let outcome = match policy {
                        OnAmbiguous::Skip => {
                            Self::apply_ambiguity(r, policy, error, now);
                            AmbiguousOutcome::Unknown
                        }
                        OnAmbiguous::Resend => {
                            r.lease = None;
                            r.last_error = Some(format!("outcome unknown: {error}"));
                            r.updated_ms = now;
                            let retry = retries::decide(
                                r.attempts,
                                max_calls,
                                backoff,
                                retries::ErrorClass::Retryable,
                                now,
                                unit,
                            );
                            match retry {
                                FailOutcome::Retrying { at_ms } => {
                                    r.state = OutboxState::Pending;
                                    r.next_attempt_ms = at_ms;
                                    AmbiguousOutcome::Resend { at_ms }
                                }
                                FailOutcome::DeadLettered => {
                                    r.state = OutboxState::Dead;
                                    AmbiguousOutcome::DeadLettered
                                }
                            }
                        }
                    };
                    Ok(Step::Write((outcome, r.clone())))
                },
            )
            .await;
        let (outcome, record) = self.d.counted(RecordKind::Outbound, result)?;
        if outcome == AmbiguousOutcome::DeadLettered {
            self.dead_lettered(&record);
            Box::pin(self.cascade_dead(&record)).await?;
        }
        Ok(outcome)
    }

    pub(crate) fn apply_ambiguity(
        r: &mut OutboxRecord,
        policy: OnAmbiguous,
        error: &str,
        now: i64,
    ) {
        r.lease = None;
        r.last_error = Some(format!("outcome unknown: {error}"));
        r.updated_ms = now;
        match policy {
            OnAmbiguous::Skip => r.state = OutboxState::Unknown,
            OnAmbiguous::Resend => {
                r.state = OutboxState::Pending;
                r.next_attempt_ms = now;
            }
        }
    }

    /// Reports a send of unknown outcome (the `send outcome is ambiguous` line, the count, the
    /// `Ambiguous` event). Called by the decision that settles the send, before its write: a
    /// process killed between that write and a report made after it would leave a send sent
    /// again (`resend`) or skipped (`skip`) that nothing names. A write that does not land
    /// leaves the send `sending`, and the next recovery reports it again: at least once.
    pub(crate) fn ambiguous(&self, r: &OutboxRecord, policy: OnAmbiguous) {
        self.d.count(Counter::OutboxAmbiguous);
        tracing::warn!(key = %r.key, chat = %r.chat, ?policy, "send outcome is ambiguous");
        self.d.emit(DurabilityEvent::Ambiguous {
            key: r.key.clone(),
            chat: r.chat.clone(),
            text: self.d.payload_text(&r.payload),
        });
    }

    pub(crate) fn dead_lettered(&self, r: &OutboxRecord) {
        self.d
            .dead_lettered(RecordKind::Outbound, &r.key, r.last_error.as_deref());
    }
}
