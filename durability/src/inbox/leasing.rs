//! Claiming, heartbeating, completing and failing inbound records.
//!
//! | record found by `claim` | lease on it | outcome |
//! | --- | --- | --- |
//! | `pending` (due, for `claim_due`) | — | leased under a new token, attempt charged |
//! | `processing` | live, another holder or this incarnation | `Busy` |
//! | `processing` | expired, or this instance id's earlier incarnation | leased under a new token (a replay) |
//! | `processing` / `pending`, `attempts >= max_attempts` | abandoned | dead-lettered (`Dead` event) |
//! | `done` / `dead` | — | `Settled` |
//!
//! `complete`, `fail`, `heartbeat` and `release` check the fencing token: a holder whose lease
//! was taken over gets `StaleLease` (counted in `stale_leases`) and changes nothing.

use std::time::Duration;

use super::{InboundRecord, Inbox, InboxState};
use crate::error::DurabilityError;
use crate::journal::attempts;
use crate::journal::{Step, index};
use crate::kv::{DurableKv, WritePoint};
use crate::leases::InboxLease;
use crate::metrics::{Counter, RecordKind};
use crate::retries::{ErrorClass, FailOutcome, duration_ms};

/// A record leased to this process, with its lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The lease to heartbeat and complete with.
    pub lease: InboxLease,
    /// The record as leased.
    pub record: InboundRecord,
}

/// The outcome of [`Inbox::claim`].
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Leased to this process: run the handler.
    Leased(Claimed),
    /// Leased by a live holder (another replica, or this process itself).
    Busy {
        /// The holder's instance id.
        owner: String,
        /// When its lease expires (Unix ms).
        expires_ms: i64,
    },
    /// Pending but not due before `at_ms` (only from `claim_due`).
    NotDue {
        /// When it becomes due (Unix ms).
        at_ms: i64,
    },
    /// Already `done` or `dead`: nothing to run.
    Settled(InboundRecord),
    /// Out of attempts: dead-lettered now instead of run again.
    DeadLettered(InboundRecord),
}

enum Decision {
    Lease,
    Busy { owner: String, expires_ms: i64 },
    NotDue { at_ms: i64 },
    Settled,
    DeadLetter { reason: String },
}

/// The methods of a journal (`$journal`) whose records (`$record`) are held under a lease
/// (`$lease`, naming its record by its field `$id`): the fencing check, the lease extended by the
/// journal's `$config.lease` (at the write point `$heartbeat`), and a failed attempt charged
/// to the held record (at `$fail`, as the operation `$operation`).
macro_rules! lease_holder {
    (
        $journal:ident: $record:ty,
        $lease:ident { $id:ident },
        $config:ident,
        heartbeat: $heartbeat:ident,
        fail: $fail:ident($operation:literal)
    ) => {
        impl<K: $crate::kv::DurableKv + ?Sized> $journal<'_, K> {
            /// Refused with `StaleLease` unless `lease` still holds `r`.
            pub(crate) fn check_fence(
                r: &$record,
                lease: &$lease,
            ) -> Result<(), $crate::error::DurabilityError> {
                $crate::journal::attempts::check_fence(r, lease.token)
            }

            /// `lease`, extended by the journal's lease from now.
            async fn extended(
                &self,
                lease: &$lease,
            ) -> Result<$lease, $crate::error::DurabilityError> {
                let expires_ms = self
                    .d
                    .heartbeat::<$record>(
                        $crate::kv::WritePoint::$heartbeat,
                        &lease.$id,
                        lease.token,
                        self.d.config().$config.lease,
                    )
                    .await?;
                Ok($lease {
                    expires_ms,
                    ..lease.clone()
                })
            }

            /// Charges a failed attempt to the record `lease` holds: retried after the backoff
            /// while the budget (calls at most, backoff) lasts and `class` allows, dead-lettered
            /// otherwise.
            async fn failed(
                &self,
                lease: &$lease,
                error: &str,
                class: $crate::retries::ErrorClass,
                budget: (u32, &$crate::config::Backoff),
            ) -> Result<($crate::retries::FailOutcome, $record), $crate::error::DurabilityError>
            {
                self.d
                    .fail_attempt::<$record>(
                        $crate::kv::WritePoint::$fail,
                        $operation,
                        &lease.$id,
                        lease.token,
                        error,
                        class,
                        budget,
                    )
                    .await
            }
        }
    };
}

pub(crate) use lease_holder;

lease_holder!(
    Inbox: InboundRecord,
    InboxLease { id },
    inbox,
    heartbeat: InboxHeartbeat,
    fail: InboxFail("fail")
);

impl<K: DurableKv + ?Sized> Inbox<'_, K> {
    /// Takes a lease on `record` for this incarnation (new token, attempt charged).
    pub(crate) fn take_lease(&self, record: &mut InboundRecord, now: i64) -> InboxLease {
        let stored = self.d.lease(record, now, self.d.config().inbox.lease);
        InboxLease {
            id: record.id.clone(),
            token: stored.token,
            owner: stored.owner,
            expires_ms: stored.expires_ms,
            attempt: record.attempts,
        }
    }

    fn decide(&self, r: &InboundRecord, now: i64, honour_due: bool) -> Decision {
        let max = self.d.config().inbox.max_attempts;
        match r.state {
            InboxState::Done | InboxState::Dead => Decision::Settled,
            InboxState::Pending if honour_due && r.next_attempt_ms > now => Decision::NotDue {
                at_ms: r.next_attempt_ms,
            },
            InboxState::Pending if r.attempts >= max => Decision::DeadLetter {
                reason: format!("out of attempts ({} of {max})", r.attempts),
            },
            InboxState::Pending => Decision::Lease,
            InboxState::Processing => match attempts::live_holder(r, self.d.incarnation(), now) {
                Some((owner, expires_ms)) => Decision::Busy { owner, expires_ms },
                None if r.attempts >= max => Decision::DeadLetter {
                    reason: format!(
                        "abandoned {} times without completing (the process died or froze while handling it)",
                        r.attempts
                    ),
                },
                _ => Decision::Lease,
            },
        }
    }

    /// Leases a record to this process for `inbox.lease`, whatever its due time. See the
    /// module table for every outcome.
    pub async fn claim(&self, id: &str) -> Result<Claim, DurabilityError> {
        self.claim_inner(id, false).await
    }

    async fn claim_inner(&self, id: &str, honour_due: bool) -> Result<Claim, DurabilityError> {
        let claim = self
            .view()
            .modify(WritePoint::InboxClaim, "claim", id, |r, now| {
                Ok(match self.decide(r, now, honour_due) {
                    Decision::Settled => Step::Keep(Claim::Settled(r.clone())),
                    Decision::NotDue { at_ms } => Step::Keep(Claim::NotDue { at_ms }),
                    Decision::Busy { owner, expires_ms } => {
                        Step::Keep(Claim::Busy { owner, expires_ms })
                    }
                    Decision::DeadLetter { reason } => {
                        r.state = InboxState::Dead;
                        r.lease = None;
                        r.last_error = Some(reason);
                        r.updated_ms = now;
                        Step::WriteAt(WritePoint::InboxDeadLetter, Claim::DeadLettered(r.clone()))
                    }
                    Decision::Lease => {
                        let lease = self.take_lease(r, now);
                        Step::Write(Claim::Leased(Claimed {
                            lease,
                            record: r.clone(),
                        }))
                    }
                })
            })
            .await?;
        match &claim {
            Claim::Leased(c) if c.record.attempts > 1 => {
                self.d.count(Counter::InboundReplayed);
                tracing::info!(id = %id, attempt = c.record.attempts, "inbound record replayed");
            }
            Claim::DeadLettered(r) => {
                self.d
                    .dead_lettered(RecordKind::Inbound, &r.id, r.last_error.as_deref());
            }
            _ => {}
        }
        Ok(claim)
    }

    /// The sweeper's call: leases up to `limit` records that are due (pending and due, or
    /// processing under an expired lease or one of this instance id's earlier incarnations),
    /// returned in arrival order so each chat's events replay in order. Records out of attempts
    /// are dead-lettered instead. Undecodable records are quarantined and skipped.
    pub async fn claim_due(&self, limit: usize) -> Result<Vec<Claimed>, DurabilityError> {
        let now = self.d.now_ms();
        let mut candidates: Vec<(u64, String)> = Vec::new();
        let (from, to) = index::state_until(RecordKind::Inbound, "pending", now);
        for l in self.d.scan::<InboundRecord>(&from, &to, limit).await? {
            candidates.push((l.record.seq, l.record.id));
        }
        let (mut cursor, to) = index::state_range(RecordKind::Inbound, "processing");
        loop {
            let (page, next) = self.d.scan_page::<InboundRecord>(&cursor, &to, 128).await?;
            for l in page {
                if matches!(
                    self.decide(&l.record, now, true),
                    Decision::Lease | Decision::DeadLetter { .. }
                ) {
                    candidates.push((l.record.seq, l.record.id));
                }
            }
            match next {
                Some(next) if candidates.len() < limit.saturating_mul(2) => cursor = next,
                _ => break,
            }
        }
        candidates.sort();
        let mut claimed = Vec::new();
        for (_, id) in candidates {
            if claimed.len() >= limit {
                break;
            }
            match self.claim_inner(&id, true).await {
                Ok(Claim::Leased(c)) => claimed.push(c),
                Ok(_) => {}
                Err(DurabilityError::NotFound { .. } | DurabilityError::Corrupt { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(claimed)
    }

    /// Extends a processing lease by `inbox.lease` from now.
    pub async fn heartbeat(&self, lease: &InboxLease) -> Result<InboxLease, DurabilityError> {
        self.extended(lease).await
    }

    /// Marks the record done: its effects settled. Refused with `StaleLease` when the lease
    /// was taken over.
    pub async fn complete(&self, lease: &InboxLease) -> Result<InboundRecord, DurabilityError> {
        let result = self
            .view()
            .modify_record(
                WritePoint::InboxComplete,
                "complete",
                &lease.id,
                self.d.take_snapshot(&lease.id),
                Self::done(lease),
            )
            .await;
        self.d
            .counted(RecordKind::Inbound, result)
            .map(|((), record)| record)
    }

    /// The decision of `complete`: the record is done, if `lease` still holds it.
    fn done(
        lease: &InboxLease,
    ) -> impl FnMut(&mut InboundRecord, i64) -> Result<Step<()>, DurabilityError> + Send {
        move |r, now| {
            Self::check_fence(r, lease)?;
            r.state = InboxState::Done;
            r.lease = None;
            r.updated_ms = now;
            Ok(Step::Write(()))
        }
    }

    /// Records a failed run before the handlers ran (the store is down, …): retried with
    /// `inbox.backoff` while attempts remain and `retryable`, dead-lettered otherwise.
    pub async fn fail(
        &self,
        lease: &InboxLease,
        error: &str,
        retryable: bool,
    ) -> Result<FailOutcome, DurabilityError> {
        let config = &self.d.config().inbox;
        let class = if retryable {
            ErrorClass::Retryable
        } else {
            ErrorClass::Final
        };
        let budget = (config.max_attempts, &config.backoff);
        let (outcome, _) = self.failed(lease, error, class, budget).await?;
        Ok(outcome)
    }

    /// Gives a lease back without charging its attempt: the record is pending again, due after
    /// `delay` (a suspended step whose checkpoint write failed, a shutdown).
    pub async fn release(
        &self,
        lease: &InboxLease,
        delay: Duration,
    ) -> Result<(), DurabilityError> {
        let delay_ms = duration_ms(delay);
        let result = self
            .view()
            .modify(WritePoint::InboxRelease, "release", &lease.id, |r, now| {
                Self::check_fence(r, lease)?;
                r.state = InboxState::Pending;
                r.lease = None;
                r.attempts = r.attempts.saturating_sub(1);
                r.next_attempt_ms = now.saturating_add(delay_ms);
                r.updated_ms = now;
                Ok(Step::Write(()))
            })
            .await;
        self.d.counted(RecordKind::Inbound, result)
    }
}
