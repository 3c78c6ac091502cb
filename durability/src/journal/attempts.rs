//! The lease and attempt machine both journals share: an inbound record leased to a handler
//! and a send leased to a provider call go through the same steps.
//!
//! | step | what changes on the record |
//! | --- | --- |
//! | [`lease`](KvDurability::lease) | fencing token + 1, attempt charged, leased state, a [`LeaseRecord`] of this incarnation |
//! | [`heartbeat`](KvDurability::heartbeat) | the lease's expiry moves to now + lease, if the caller's token still holds it |
//! | [`fail_attempt`](KvDurability::fail_attempt) | lease dropped, error kept; retried after the backoff while calls remain and the error is not final, dead-lettered otherwise |
//! | [`check_fence`] | nothing: refuses a holder whose token was superseded (`StaleLease`) |
//!
//! A refused holder is counted in `stale_leases` ([`counted`](KvDurability::counted)). Which
//! states are "leased", "retrying" and "dead" is each journal's own ([`Attempted`]); what a
//! claim decides (due, busy, out of attempts) and what settles a record (done, sent) stays in
//! the journal.

use std::time::Duration;

use super::{JournalRecord, KvDurability, Step};
use crate::error::DurabilityError;
use crate::kv::{DurableKv, WritePoint};
use crate::leases::{Incarnation, LeaseRecord, LeaseStatus};
use crate::metrics::{Counter, DurabilityEvent, RecordKind};
use crate::retries::{self, Backoff, ErrorClass, FailOutcome, duration_ms};

/// Where an attempt leaves a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptState {
    /// Leased to a running attempt (processing, sending).
    Leased,
    /// Due again at `next_attempt_ms` after a failure (pending, failed).
    Retrying,
    /// Dead-lettered.
    Dead,
}

/// The fields of a record the machine changes.
pub(crate) struct AttemptFields<'a> {
    pub(crate) fence: &'a mut u64,
    pub(crate) attempts: &'a mut u32,
    pub(crate) lease: &'a mut Option<LeaseRecord>,
    pub(crate) next_attempt_ms: &'a mut i64,
    pub(crate) last_error: &'a mut Option<String>,
    pub(crate) updated_ms: &'a mut i64,
}

/// A journal record that is leased for attempts.
pub(crate) trait Attempted: JournalRecord {
    /// The fields the machine changes.
    fn fields(&mut self) -> AttemptFields<'_>;
    /// Whether it is in its leased state.
    fn is_leased(&self) -> bool;
    /// Its lease, while leased.
    fn lease(&self) -> Option<&LeaseRecord>;
    /// The last fencing token issued.
    fn fence(&self) -> u64;
    /// Moves it to `state`.
    fn set_state(&mut self, state: AttemptState);
}

/// Implements [`Attempted`] for a journal record that keeps the attempt fields under their
/// names (`fence`, `attempts`, `lease`, `next_attempt_ms`, `last_error`, `updated_ms`) and a
/// `state` of the enum `$state`: `$leased` while leased, `$retrying` when due again, `$dead`
/// when dead-lettered.
macro_rules! attempted_record {
    ($record:ty, $state:ident { leased: $leased:ident, retrying: $retrying:ident, dead: $dead:ident }) => {
        impl $crate::journal::attempts::Attempted for $record {
            fn fields(&mut self) -> $crate::journal::attempts::AttemptFields<'_> {
                $crate::journal::attempts::AttemptFields {
                    fence: &mut self.fence,
                    attempts: &mut self.attempts,
                    lease: &mut self.lease,
                    next_attempt_ms: &mut self.next_attempt_ms,
                    last_error: &mut self.last_error,
                    updated_ms: &mut self.updated_ms,
                }
            }

            fn is_leased(&self) -> bool {
                self.state == $state::$leased
            }

            fn lease(&self) -> Option<&$crate::leases::LeaseRecord> {
                self.lease.as_ref()
            }

            fn fence(&self) -> u64 {
                self.fence
            }

            fn set_state(&mut self, state: $crate::journal::attempts::AttemptState) {
                use $crate::journal::attempts::AttemptState;
                self.state = match state {
                    AttemptState::Leased => $state::$leased,
                    AttemptState::Retrying => $state::$retrying,
                    AttemptState::Dead => $state::$dead,
                };
            }
        }
    };
}
pub(crate) use attempted_record;

/// Leases `r` to incarnation `me` for its next attempt, from `now` for `lease_ms`: a new
/// fencing token, the attempt charged. Returns the lease written on the record.
pub(crate) fn take_lease<R: Attempted>(
    r: &mut R,
    me: &Incarnation,
    now: i64,
    lease_ms: i64,
) -> LeaseRecord {
    r.set_state(AttemptState::Leased);
    let f = r.fields();
    *f.fence += 1;
    *f.attempts += 1;
    *f.updated_ms = now;
    let stored = me.lease(*f.fence, now, lease_ms);
    *f.lease = Some(stored.clone());
    stored
}

/// Gives `r` its whole attempt budget again, due at `now`, without a lease.
pub(crate) fn restart<R: Attempted>(r: &mut R, now: i64) {
    let f = r.fields();
    *f.attempts = 0;
    *f.lease = None;
    *f.next_attempt_ms = now;
    *f.updated_ms = now;
}

/// `Ok` when the lease of token `token` still holds `r`, else `StaleLease`.
pub(crate) fn check_fence<R: Attempted>(r: &R, token: u64) -> Result<(), DurabilityError> {
    if r.is_leased() && r.lease().is_some_and(|l| l.token == token) {
        Ok(())
    } else {
        Err(DurabilityError::StaleLease {
            kind: R::KIND,
            id: r.id().to_owned(),
            token,
            current: r.fence(),
        })
    }
}

/// The holder of `r`'s lease and its expiry, when a live lease holds it (another replica, or
/// this incarnation itself).
pub(crate) fn live_holder<R: Attempted>(
    r: &R,
    me: &Incarnation,
    now: i64,
) -> Option<(String, i64)> {
    r.lease()
        .filter(|l| matches!(l.status(me, now), LeaseStatus::Live | LeaseStatus::Mine))
        .map(|l| (l.owner.to_string(), l.expires_ms))
}

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// [`take_lease`] for this incarnation, now, for `lease`.
    pub(crate) fn lease<R: Attempted>(&self, r: &mut R, now: i64, lease: Duration) -> LeaseRecord {
        take_lease(r, self.incarnation(), now, duration_ms(lease))
    }

    /// `result`, counting (and logging) a refused stale lease.
    pub(crate) fn counted<T>(
        &self,
        kind: RecordKind,
        result: Result<T, DurabilityError>,
    ) -> Result<T, DurabilityError> {
        if let Err(e @ DurabilityError::StaleLease { .. }) = &result {
            self.count(Counter::StaleLeases);
            tracing::warn!(%kind, error = %e, "stale lease refused");
        }
        result
    }

    /// Extends the lease of token `token` on record `id` by `lease` from now; the new expiry.
    pub(crate) async fn heartbeat<R: Attempted>(
        &self,
        point: WritePoint,
        id: &str,
        token: u64,
        lease: Duration,
    ) -> Result<i64, DurabilityError> {
        let lease_ms = duration_ms(lease);
        let result = self
            .modify(point, "heartbeat", id, |r: &mut R, now| {
                check_fence(r, token)?;
                let expires_ms = now.saturating_add(lease_ms);
                let f = r.fields();
                if let Some(l) = f.lease.as_mut() {
                    l.expires_ms = expires_ms;
                }
                *f.updated_ms = now;
                Ok(Step::Write(expires_ms))
            })
            .await;
        self.counted(R::KIND, result)
    }

    /// Records a failed attempt of the lease of token `token` on record `id`: retried after
    /// `backoff` while fewer than `max_calls` attempts were charged and `class` is not final,
    /// dead-lettered otherwise (counted, logged and emitted). Returns the outcome and the
    /// record as written.
    #[allow(clippy::too_many_arguments)] // one call per journal, each naming its own policy
    pub(crate) async fn fail_attempt<R: Attempted>(
        &self,
        point: WritePoint,
        operation: &'static str,
        id: &str,
        token: u64,
        error: &str,
        class: ErrorClass,
        (max_calls, backoff): (u32, &Backoff),
    ) -> Result<(FailOutcome, R), DurabilityError> {
        let unit = self.unit();
        let result = self
            .modify(point, operation, id, |r: &mut R, now| {
                check_fence(r, token)?;
                let f = r.fields();
                let outcome = retries::decide(*f.attempts, max_calls, backoff, class, now, unit);
                *f.lease = None;
                *f.last_error = Some(error.to_owned());
                *f.updated_ms = now;
                match outcome {
                    FailOutcome::Retrying { at_ms } => {
                        *f.next_attempt_ms = at_ms;
                        r.set_state(AttemptState::Retrying);
                    }
                    FailOutcome::DeadLettered => r.set_state(AttemptState::Dead),
                }
                Ok(Step::Write((outcome, r.clone())))
            })
            .await;
        let (outcome, record) = self.counted(R::KIND, result)?;
        match outcome {
            FailOutcome::DeadLettered => self.dead_lettered(R::KIND, record.id(), Some(error)),
            FailOutcome::Retrying { at_ms } => {
                tracing::warn!(kind = %R::KIND, id = %record.id(), %error, retry_at_ms = at_ms, "attempt failed; retrying");
            }
        }
        Ok((outcome, record))
    }

    /// Forgets record `id` (any state but leased under a live lease), whatever its content
    /// (also an undecodable one). Returns whether it existed.
    pub(crate) async fn discard<R: Attempted>(
        &self,
        point: WritePoint,
        id: &str,
    ) -> Result<bool, DurabilityError> {
        if let Ok(Some(loaded)) = self.load::<R>(id, "discard").await
            && loaded.record.is_leased()
            && loaded
                .record
                .lease()
                .is_some_and(|l| !l.status(self.incarnation(), self.now_ms()).reclaimable())
        {
            return Err(DurabilityError::InvalidState {
                kind: R::KIND,
                id: id.to_owned(),
                state: loaded.record.state_name(),
                operation: "discard",
            });
        }
        self.delete_any(point, R::KIND, id, "discard").await
    }

    /// Counts, logs and emits the dead-lettering of record `id` of `kind`.
    pub(crate) fn dead_lettered(&self, kind: RecordKind, id: &str, error: Option<&str>) {
        let error = error.unwrap_or_default().to_owned();
        tracing::error!(%kind, id = %id, %error, "record dead-lettered");
        self.dead(kind, id.to_owned(), error);
    }

    /// Counts record `id` of `kind` as dead and emits `Dead`.
    pub(crate) fn dead(&self, kind: RecordKind, id: String, error: String) {
        self.count(match kind {
            RecordKind::Inbound => Counter::InboundDead,
            RecordKind::Outbound => Counter::OutboxDead,
        });
        self.emit(DurabilityEvent::Dead { kind, id, error });
    }
}
