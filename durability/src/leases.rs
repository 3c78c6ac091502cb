//! Leases, fencing tokens and instance ids.
//!
//! A record being processed (inbox) or sent (outbox) is leased to one running incarnation of an
//! instance. The lease is stored on the record ([`LeaseRecord`]); the holder keeps a handle
//! ([`InboxLease`], [`OutboxLease`]) carrying the record's fencing token. Every claim raises the
//! token, and every completion checks it, so a holder whose lease was taken over is refused
//! (`DurabilityError::StaleLease`, counted in `stale_leases`) instead of overwriting the new
//! holder's work.
//!
//! Who may take a leased record ([`LeaseRecord::status`]):
//!
//! | lease found on the record | taken by another instance | taken by this instance id |
//! | --- | --- | --- |
//! | expired (`expires_ms <= now`) | yes, new token | yes, new token |
//! | live, taken by another incarnation before this one started recovering (the dead process's, including a write that landed late) | no, wait for expiry | yes at once, new token |
//! | live, taken by another incarnation after this one started (a second live process with the same id) | no | no, wait for expiry |
//! | live, taken by this incarnation | no | no: it is a send or a handler this process is running |
//!
//! An incarnation is one [`KvDurability`](crate::KvDurability) (one process boot): a random
//! boot id is written into every lease it takes. This module decides; it does not write.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A lease as stored on a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The instance id of the holder (shared with the holder's [`Incarnation`]: a lease
    /// copies a pointer, not the text).
    pub owner: Arc<str>,
    /// The boot id of the holder's incarnation.
    pub incarnation: Arc<str>,
    /// The fencing token of this lease.
    pub token: u64,
    /// When it was taken (Unix ms).
    pub taken_ms: i64,
    /// When it expires unless extended by a heartbeat (Unix ms).
    pub expires_ms: i64,
}

/// Where a stored lease stands, seen from one incarnation at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Held by a live holder: nobody else may take it.
    Live,
    /// Held by this very incarnation.
    Mine,
    /// Expired: anyone may take it over.
    Expired,
    /// Taken by another incarnation of this instance id before this one started recovering:
    /// this instance takes it at once.
    Abandoned,
}

impl LeaseStatus {
    /// Whether the record may be taken over.
    pub fn reclaimable(self) -> bool {
        matches!(self, LeaseStatus::Expired | LeaseStatus::Abandoned)
    }
}

impl LeaseRecord {
    /// The status of this lease for `me` at `now_ms`.
    pub fn status(&self, me: &Incarnation, now_ms: i64) -> LeaseStatus {
        if self.owner == me.instance_id && self.incarnation == me.boot_id {
            if self.expires_ms <= now_ms {
                LeaseStatus::Expired
            } else {
                LeaseStatus::Mine
            }
        } else if self.expires_ms <= now_ms {
            LeaseStatus::Expired
        } else if self.owner == me.instance_id && self.taken_ms <= me.recovery_started_ms {
            LeaseStatus::Abandoned
        } else {
            LeaseStatus::Live
        }
    }
}

/// One running incarnation of an instance: the instance id plus a per-boot id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incarnation {
    /// The configured (or default) instance id.
    pub instance_id: Arc<str>,
    /// A random id of this boot.
    pub boot_id: Arc<str>,
    /// When this incarnation started recovering (Unix ms).
    pub recovery_started_ms: i64,
}

impl Incarnation {
    /// A new incarnation of `instance_id`, started at `now_ms`.
    pub fn new(instance_id: impl Into<String>, now_ms: i64) -> Self {
        Incarnation {
            instance_id: Arc::from(instance_id.into()),
            boot_id: Arc::from(format!("{:016x}", fastrand::u64(..))),
            recovery_started_ms: now_ms,
        }
    }

    /// A lease record for this incarnation.
    pub(crate) fn lease(&self, token: u64, now_ms: i64, lease_ms: i64) -> LeaseRecord {
        LeaseRecord {
            owner: Arc::clone(&self.instance_id),
            incarnation: Arc::clone(&self.boot_id),
            token,
            taken_ms: now_ms,
            expires_ms: now_ms.saturating_add(lease_ms),
        }
    }
}

/// Instance id helpers.
#[derive(Debug, Clone, Copy)]
pub struct InstanceId;

impl InstanceId {
    /// The default instance id: `<hostname>/<bot>/<connection>`, plus a per-boot suffix on a
    /// backend shared between processes (two processes on one host then never share an id; a
    /// restart waits for the old leases to expire — set the id explicitly to skip that wait).
    pub fn default_for(bot: &str, connection: &str, shared_backend: bool) -> String {
        let host = hostname();
        let mut id = format!("{host}/{bot}/{connection}");
        if shared_backend {
            id.push_str(&format!("/{:08x}", fastrand::u32(..)));
        }
        id
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The handle of a processing lease on an inbound record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxLease {
    /// The inbound record id.
    pub id: String,
    /// The fencing token.
    pub token: u64,
    /// The holder's instance id.
    pub owner: Arc<str>,
    /// When the lease expires unless extended (Unix ms).
    pub expires_ms: i64,
    /// The attempt this lease runs (1 for the first run).
    pub attempt: u32,
}

/// The handle of a send-in-flight lease on an outbox record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxLease {
    /// The outbox key.
    pub key: String,
    /// The chat the send goes to.
    pub chat: String,
    /// The fencing token.
    pub token: u64,
    /// The holder's instance id.
    pub owner: Arc<str>,
    /// When the lease expires unless extended (Unix ms).
    pub expires_ms: i64,
    /// The attempt (provider call) number, from 1.
    pub attempt: u32,
}

impl fmt::Display for InboxLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inbound `{}` token {}", self.id, self.token)
    }
}

impl fmt::Display for OutboxLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "send `{}` token {}", self.key, self.token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_may_take_a_lease() {
        let me = Incarnation::new("i1", 1_000);
        let lease = |owner: &str, boot: &str, taken_ms: i64, expires_ms: i64| LeaseRecord {
            owner: owner.into(),
            incarnation: boot.into(),
            token: 1,
            taken_ms,
            expires_ms,
        };
        let mine = me.boot_id.clone();
        use LeaseStatus::{Abandoned, Expired, Live, Mine};
        // (owner, incarnation, taken, expires; read at; status)
        let cases = [
            ("i1", &*mine, 900, 2_000, 1_000, Mine),
            ("i1", &*mine, 900, 999, 1_000, Expired),
            ("other", "b", 900, 2_000, 1_000, Live),
            ("other", "b", 900, 1_000, 1_000, Expired),
            ("i1", "old", 900, 2_000, 1_000, Abandoned),
            // Taken after this incarnation started: not an abandoned one.
            ("i1", "twin", 1_001, 2_000, 1_500, Live),
        ];
        for (owner, boot, taken, expires, now, status) in cases {
            assert_eq!(
                lease(owner, boot, taken, expires).status(&me, now),
                status,
                "{owner}/{boot}, taken at {taken}, expiring at {expires}, read at {now}"
            );
        }
    }
}
