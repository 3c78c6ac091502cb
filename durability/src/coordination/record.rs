//! The fenced lease record and the one machine that changes it, for chat turns and leader
//! leases alike.
//!
//! A record is stored in the bot's own [`Scope`] of the [`DurableKv`] under `c/<kind>/<name>`.
//! It carries the newest fencing token ever issued, the lease of the holder (a
//! [`LeaseRecord`], the very lease the inbox and outbox put on their records, decided by
//! [`LeaseRecord::status`]) and the replicas waiting for it, each with the ticket it waits
//! under. Releasing clears the lease and keeps the token.
//!
//! Every write also sets the record's `idx1` to `c/idle/<16-digit ms>/<kind>/<name>`, the
//! time from which nobody holds or waits for it unless it is written again (the latest of the
//! lease's expiry, the waiters' expiries and the write itself). [`purge_idle`] deletes the
//! records idle for long enough (the turns of chats that finished, the lease of a replica set
//! that went away), so the records do not grow with every chat ever seen. A token is still
//! never issued twice for a name: before deleting, the purge raises the scope's token floor
//! (`c/floor`) to the deleted records' tokens, and a record created anew starts from the
//! floor.
//!
//! | call | what it writes |
//! | --- | --- |
//! | [`acquire`](Machine::acquire) | free (no lease, an expired one, or an abandoned one of this instance id) and no waiter with an older ticket: token + 1, a lease of this incarnation; otherwise this replica's ticket joins the waiters |
//! | [`renew`](Machine::renew) | the lease's expiry, if the caller's token still holds it |
//! | [`release`](Machine::release) | the lease removed, if the caller's token still holds it |
//! | [`check`](Machine::check) | nothing: refuses a token that no longer holds, or whose lease has less than the safety margin left |
//! | [`purge_idle`] | the token floor raised, then the idle records deleted (each at the version it was read) |
//!
//! Every change is a compare-and-set on the record's version, re-read and re-decided on a
//! conflict, the way the journals change their records. This module decides and writes; the
//! counting and events are the [`Coordinator`](super::Coordinator)'s.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{CoordinationError, Fence, FenceKind};
use crate::kv::{CasOutcome, DurableKv, Entry, Index, KvOp, Scope};
use crate::leases::{Incarnation, LeaseRecord, LeaseStatus};

/// How many times a change re-reads the record after a conflict before giving up.
const MAX_CAS_RETRIES: usize = 64;

/// The key of the token floor: no record created anew issues a token at or below it.
const FLOOR_KEY: &str = "c/floor";
/// The `idx1` prefix of every lease record (see the module docs).
const IDLE_PREFIX: &str = "c/idle/";

/// The stored token floor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Floor {
    fence: u64,
}

/// A replica waiting for a lease, under a ticket (a smaller ticket goes first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiter {
    /// The waiting instance id.
    pub(crate) owner: Arc<str>,
    /// The waiting incarnation's boot id.
    pub(crate) incarnation: Arc<str>,
    /// The ticket (for a chat turn, the arrival sequence of the chat's oldest event it holds).
    pub(crate) ticket: u64,
    /// When the wait is forgotten unless repeated (Unix ms): a dead waiter blocks nobody.
    pub(crate) expires_ms: i64,
}

/// The stored lease record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FencedRecord {
    /// The newest token issued.
    pub(crate) fence: u64,
    /// The holder's lease, if held.
    pub(crate) lease: Option<LeaseRecord>,
    /// Replicas waiting, in no particular order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) waiting: Vec<Waiter>,
}

/// What [`Machine::acquire`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Taken, with `previous` the holder whose live-but-expired lease was taken over (a steal)
    /// and `renewed` when this incarnation already held it.
    Taken {
        fence: Fence,
        previous: Option<String>,
        renewed: bool,
    },
    /// Held by another replica, or another waiter goes first.
    Wait {
        holder: Option<String>,
        expires_ms: Option<i64>,
        ahead: usize,
    },
}

/// One lease record, seen by one incarnation.
pub(crate) struct Machine<'a> {
    pub(crate) kv: &'a dyn DurableKv,
    pub(crate) scope: &'a Scope,
    pub(crate) me: &'a Incarnation,
    pub(crate) kind: FenceKind,
    pub(crate) name: &'a str,
}

enum Step<T> {
    Write(T),
    Keep(T),
}

impl Machine<'_> {
    fn key(&self) -> String {
        format!("c/{}/{}", self.kind.key_tag(), self.name)
    }

    fn fenced(&self, r: &FencedRecord, token: u64) -> CoordinationError {
        CoordinationError::Fenced {
            kind: self.kind,
            name: self.name.to_owned(),
            token,
            current: r.fence,
            holder: r.lease.as_ref().map(|l| l.owner.to_string()),
        }
    }

    fn is_mine(&self, l: &LeaseRecord) -> bool {
        l.owner == self.me.instance_id && l.incarnation == self.me.boot_id
    }

    fn fence_of(&self, l: &LeaseRecord) -> Fence {
        Fence {
            kind: self.kind,
            name: self.name.to_owned(),
            token: l.token,
            owner: Arc::clone(&l.owner),
            expires_ms: l.expires_ms,
        }
    }

    fn backend(&self, operation: &'static str, source: crate::kv::KvError) -> CoordinationError {
        CoordinationError::Backend {
            kind: self.kind,
            name: self.name.to_owned(),
            operation,
            source,
        }
    }

    /// Reads the record (a default one when there is none yet).
    pub(crate) async fn read(
        &self,
        operation: &'static str,
    ) -> Result<(Option<u64>, FencedRecord), CoordinationError> {
        let found = self
            .kv
            .get(self.scope, &self.key())
            .await
            .map_err(|source| CoordinationError::Backend {
                kind: self.kind,
                name: self.name.to_owned(),
                operation,
                source,
            })?;
        match found {
            None => Ok((None, FencedRecord::default())),
            Some(entry) => serde_json::from_slice(&entry.value)
                .map(|r| (Some(entry.version), r))
                .map_err(|e| CoordinationError::Corrupt {
                    kind: self.kind,
                    name: self.name.to_owned(),
                    reason: e.to_string(),
                }),
        }
    }

    /// The `idx1` of `r` written at `now`: from when it is idle unless written again.
    fn idle_index(&self, r: &FencedRecord, now: i64) -> String {
        let lease = r.lease.as_ref().map_or(now, |l| l.expires_ms);
        let waiters = r.waiting.iter().map(|w| w.expires_ms).max().unwrap_or(now);
        let ms = now.max(lease).max(waiters);
        format!(
            "{IDLE_PREFIX}{:016}/{}/{}",
            u64::try_from(ms).unwrap_or(0),
            self.kind.key_tag(),
            self.name
        )
    }

    /// Reads, decides with `f` and writes when `f` says so, until the write lands. A record
    /// created anew starts from the token floor.
    async fn modify<T>(
        &self,
        operation: &'static str,
        now: impl Fn() -> i64,
        mut f: impl FnMut(&mut FencedRecord, i64) -> Result<Step<T>, CoordinationError>,
    ) -> Result<T, CoordinationError> {
        let key = self.key();
        for _ in 0..MAX_CAS_RETRIES {
            let (version, mut record) = self.read(operation).await?;
            if version.is_none() {
                record.fence = read_floor(self.kv, self.scope)
                    .await
                    .map_err(|source| self.backend(operation, source))?
                    .fence;
            }
            let at = now();
            let out = match f(&mut record, at)? {
                Step::Keep(out) => return Ok(out),
                Step::Write(out) => out,
            };
            let value = serde_json::to_vec(&record).map_err(|e| CoordinationError::Corrupt {
                kind: self.kind,
                name: self.name.to_owned(),
                reason: e.to_string(),
            })?;
            let entry = Entry {
                value,
                idx1: Some(self.idle_index(&record, at)),
                idx2: None,
            };
            match self.kv.cas(self.scope, &key, version, entry).await {
                Ok(CasOutcome::Ok { .. }) => return Ok(out),
                Ok(CasOutcome::Conflict { .. }) => {}
                Err(source) => return Err(self.backend(operation, source)),
            }
        }
        Err(CoordinationError::Contention {
            kind: self.kind,
            name: self.name.to_owned(),
            operation,
        })
    }

    /// Takes the lease for `lease_ms`, or joins the waiters under `ticket` (see the module
    /// table). Without a ticket the caller does not queue and goes first whenever it is free.
    pub(crate) async fn acquire(
        &self,
        now: impl Fn() -> i64,
        ticket: Option<u64>,
        lease_ms: i64,
    ) -> Result<Acquired, CoordinationError> {
        self.modify("take", now, |r, now| {
            r.waiting.retain(|w| w.expires_ms > now);
            let mut previous = None;
            if let Some(mut l) = r.lease.clone() {
                match l.status(self.me, now) {
                    LeaseStatus::Mine => {
                        l.expires_ms = now.saturating_add(lease_ms);
                        let fence = self.fence_of(&l);
                        r.lease = Some(l);
                        return Ok(Step::Write(Acquired::Taken {
                            fence,
                            previous: None,
                            renewed: true,
                        }));
                    }
                    LeaseStatus::Live => {
                        let holder = Some(l.owner.to_string());
                        let expires_ms = Some(l.expires_ms);
                        let ahead = self.join(r, ticket, now, lease_ms);
                        return Ok(Step::Write(Acquired::Wait {
                            holder,
                            expires_ms,
                            ahead,
                        }));
                    }
                    LeaseStatus::Expired | LeaseStatus::Abandoned => {
                        if !self.is_mine(&l) {
                            previous = Some(l.owner.to_string());
                        }
                    }
                }
            }
            // Free: the oldest live ticket goes first.
            if let Some(mine) = ticket {
                let ahead = r
                    .waiting
                    .iter()
                    .filter(|w| w.incarnation != self.me.boot_id && w.ticket < mine)
                    .count();
                if ahead > 0 {
                    let holder = r
                        .waiting
                        .iter()
                        .filter(|w| w.incarnation != self.me.boot_id)
                        .min_by_key(|w| w.ticket)
                        .map(|w| w.owner.to_string());
                    let ahead = self.join(r, ticket, now, lease_ms).max(ahead);
                    return Ok(Step::Write(Acquired::Wait {
                        holder,
                        expires_ms: None,
                        ahead,
                    }));
                }
            }
            r.waiting.retain(|w| w.incarnation != self.me.boot_id);
            r.fence = r.fence.saturating_add(1);
            let lease = LeaseRecord {
                owner: Arc::clone(&self.me.instance_id),
                incarnation: Arc::clone(&self.me.boot_id),
                token: r.fence,
                taken_ms: now,
                expires_ms: now.saturating_add(lease_ms),
            };
            let fence = self.fence_of(&lease);
            r.lease = Some(lease);
            Ok(Step::Write(Acquired::Taken {
                fence,
                previous,
                renewed: false,
            }))
        })
        .await
    }

    /// Puts this incarnation among the waiters under `ticket` (keeping its smallest ticket);
    /// returns how many live waiters go before it.
    fn join(&self, r: &mut FencedRecord, ticket: Option<u64>, now: i64, lease_ms: i64) -> usize {
        let Some(ticket) = ticket else {
            return r.waiting.len();
        };
        let expires_ms = now.saturating_add(lease_ms);
        match r
            .waiting
            .iter_mut()
            .find(|w| w.incarnation == self.me.boot_id)
        {
            Some(w) => {
                w.ticket = w.ticket.min(ticket);
                w.expires_ms = expires_ms;
            }
            None => r.waiting.push(Waiter {
                owner: Arc::clone(&self.me.instance_id),
                incarnation: Arc::clone(&self.me.boot_id),
                ticket,
                expires_ms,
            }),
        }
        let mine = r
            .waiting
            .iter()
            .find(|w| w.incarnation == self.me.boot_id)
            .map_or(ticket, |w| w.ticket);
        r.waiting
            .iter()
            .filter(|w| w.incarnation != self.me.boot_id && w.ticket < mine)
            .count()
    }

    /// Extends the lease of `fence` to now + `lease_ms`.
    pub(crate) async fn renew(
        &self,
        now: impl Fn() -> i64,
        fence: &Fence,
        lease_ms: i64,
    ) -> Result<Fence, CoordinationError> {
        self.modify("renew", now, |r, now| match r.lease.as_mut() {
            Some(l) if l.token == fence.token && r.fence == fence.token => {
                l.expires_ms = now.saturating_add(lease_ms);
                let l = l.clone();
                Ok(Step::Write(self.fence_of(&l)))
            }
            _ => Err(self.fenced(r, fence.token)),
        })
        .await
    }

    /// Gives the lease of `fence` back (the token stays issued). Releasing a lease already
    /// released by this token is a no-op.
    pub(crate) async fn release(
        &self,
        now: impl Fn() -> i64,
        fence: &Fence,
    ) -> Result<(), CoordinationError> {
        self.modify("release", now, |r, _| match &r.lease {
            Some(l) if l.token == fence.token => {
                r.lease = None;
                Ok(Step::Write(()))
            }
            None if r.fence == fence.token => Ok(Step::Keep(())),
            _ => Err(self.fenced(r, fence.token)),
        })
        .await
    }

    /// `Ok` when `fence` still holds the lease with at least `margin_ms` left.
    pub(crate) async fn check(
        &self,
        now: i64,
        fence: &Fence,
        margin_ms: i64,
    ) -> Result<(), CoordinationError> {
        let (_, r) = self.read("check").await?;
        match &r.lease {
            Some(l)
                if l.token == fence.token
                    && r.fence == fence.token
                    && l.expires_ms.saturating_sub(now) >= margin_ms =>
            {
                Ok(())
            }
            _ => Err(self.fenced(&r, fence.token)),
        }
    }

    /// The live holder's instance id and lease, if any.
    pub(crate) async fn holder(&self, now: i64) -> Result<Option<Fence>, CoordinationError> {
        let (_, r) = self.read("read").await?;
        Ok(r.lease
            .filter(|l| l.expires_ms > now)
            .map(|l| self.fence_of(&l)))
    }
}

/// The stored token floor (zero when none was written).
async fn read_floor(kv: &dyn DurableKv, scope: &Scope) -> Result<Floor, crate::kv::KvError> {
    Ok(kv
        .get(scope, FLOOR_KEY)
        .await?
        .and_then(|e| serde_json::from_slice(&e.value).ok())
        .unwrap_or_default())
}

/// Deletes up to `max` lease records idle since before `cutoff` (Unix ms) and still idle at
/// `now` (no live lease, no live waiter), after raising the token floor to their tokens;
/// returns how many it deleted. A record written meanwhile is left alone (the delete expects
/// the version it read).
pub(crate) async fn purge_idle(
    kv: &dyn DurableKv,
    scope: &Scope,
    now: i64,
    cutoff: i64,
    max: usize,
) -> Result<usize, CoordinationError> {
    let failed = |operation: &'static str| {
        move |source| CoordinationError::Backend {
            kind: FenceKind::Turn,
            name: "*".to_owned(),
            operation,
            source,
        }
    };
    let to = format!(
        "{IDLE_PREFIX}{:016}",
        u64::try_from(cutoff.max(0)).unwrap_or(0)
    );
    let found = kv
        .range(scope, Index::One, IDLE_PREFIX, &to, max)
        .await
        .map_err(failed("purge"))?;
    let mut top = 0;
    let mut ops = Vec::new();
    for r in found {
        let Ok(record) = serde_json::from_slice::<FencedRecord>(&r.entry.value) else {
            continue;
        };
        let idle = record.lease.as_ref().is_none_or(|l| l.expires_ms <= now)
            && record.waiting.iter().all(|w| w.expires_ms <= now);
        if idle {
            top = top.max(record.fence);
            ops.push(KvOp::Delete {
                key: r.key,
                expected: r.entry.version,
            });
        }
    }
    if ops.is_empty() {
        return Ok(0);
    }
    raise_floor(kv, scope, top).await?;
    let outcomes = kv.batch(scope, ops).await.map_err(failed("purge"))?;
    Ok(outcomes.iter().filter(|o| o.is_ok()).count())
}

/// Raises the token floor to at least `to`.
async fn raise_floor(kv: &dyn DurableKv, scope: &Scope, to: u64) -> Result<(), CoordinationError> {
    let failed = |source| CoordinationError::Backend {
        kind: FenceKind::Turn,
        name: "*".to_owned(),
        operation: "raise the token floor",
        source,
    };
    for _ in 0..MAX_CAS_RETRIES {
        let found = kv.get(scope, FLOOR_KEY).await.map_err(failed)?;
        let floor: Floor = found
            .as_ref()
            .and_then(|e| serde_json::from_slice(&e.value).ok())
            .unwrap_or_default();
        if floor.fence >= to {
            return Ok(());
        }
        let value =
            serde_json::to_vec(&Floor { fence: to }).map_err(|e| CoordinationError::Corrupt {
                kind: FenceKind::Turn,
                name: FLOOR_KEY.to_owned(),
                reason: e.to_string(),
            })?;
        let entry = Entry {
            value,
            idx1: None,
            idx2: None,
        };
        let expected = found.map(|e| e.version);
        if kv
            .cas(scope, FLOOR_KEY, expected, entry)
            .await
            .map_err(failed)?
            .is_ok()
        {
            return Ok(());
        }
    }
    Err(CoordinationError::Contention {
        kind: FenceKind::Turn,
        name: FLOOR_KEY.to_owned(),
        operation: "raise the token floor",
    })
}
