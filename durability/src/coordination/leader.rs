//! Leader leases: one replica runs an exclusive transport (Telegram long polling, a WhatsApp
//! Web session).
//!
//! Every replica campaigns ([`Coordinator::campaign`]) every third of the leader lease: the
//! leader's campaign renews its lease, a standby's finds it held. When the leader dies, its
//! lease expires and the next standby's campaign takes it under a higher token, so a standby
//! takes over within one lease (plus one campaign period). A standby asked to use the
//! transport refuses with [`CoordinationError::NotLeader`] ([`Coordinator::check_leader`]);
//! a leader whose lease was taken over refuses with [`CoordinationError::Fenced`].

use std::sync::atomic::Ordering;

use super::record::Acquired;
use super::{CoordinationError, CoordinationEvent, Coordinator, Fence, FenceKind};

/// Where this replica stands for one leader lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// This replica leads under this fence.
    Leader(Fence),
    /// Another replica leads (or nobody does yet).
    Standby {
        /// The leader's instance id, if one holds the lease.
        leader: Option<String>,
        /// When its lease expires unless renewed (Unix ms).
        expires_ms: Option<i64>,
    },
}

impl Leadership {
    /// The fence, when this replica leads.
    pub fn fence(&self) -> Option<&Fence> {
        match self {
            Leadership::Leader(fence) => Some(fence),
            Leadership::Standby { .. } => None,
        }
    }
}

impl Coordinator {
    /// Takes or renews the leader lease `name`. `previous` is what this replica's last
    /// campaign returned: a change between the two is counted and emitted as
    /// [`CoordinationEvent::LeaderChanged`].
    pub async fn campaign(
        &self,
        name: &str,
        previous: Option<&Fence>,
    ) -> Result<Leadership, CoordinationError> {
        let found = self.acquire(FenceKind::Leader, name, None).await?;
        let now = match found {
            Acquired::Taken { fence, .. } => Leadership::Leader(fence),
            Acquired::Wait {
                holder, expires_ms, ..
            } => Leadership::Standby {
                leader: holder,
                expires_ms,
            },
        };
        match (previous, now.fence()) {
            (Some(old), Some(new)) if old.token == new.token => {}
            (_, Some(new)) => self.leader_changed(name, Some(new.owner.to_string()), new.token),
            (Some(old), None) => self.leader_changed(name, None, old.token),
            (None, None) => {}
        }
        Ok(now)
    }

    fn leader_changed(&self, name: &str, leader: Option<String>, token: u64) {
        self.inner
            .counters
            .leader_changes
            .fetch_add(1, Ordering::Relaxed);
        match &leader {
            Some(_) => tracing::info!(lease = name, token, "this replica is now the leader"),
            None => tracing::warn!(lease = name, token, "this replica lost the leader lease"),
        }
        self.emit(CoordinationEvent::LeaderChanged {
            name: name.to_owned(),
            leader,
            token,
        });
    }

    /// Gives the leader lease back (on stop), so a standby takes over at its next campaign.
    pub async fn resign(&self, fence: &Fence) -> Result<(), CoordinationError> {
        let result = self.release(FenceKind::Leader, fence).await;
        if result.is_ok() {
            self.leader_changed(&fence.name, None, fence.token);
        }
        self.counted(result)
    }

    /// The fence of a call to an exclusive transport: `Ok` when `fence` (this replica's last
    /// campaign result for `name`) still leads with the safety margin left;
    /// [`CoordinationError::NotLeader`] for a standby, [`CoordinationError::Fenced`] for a
    /// leader whose lease was taken over.
    pub async fn check_leader(
        &self,
        name: &str,
        fence: Option<&Fence>,
    ) -> Result<(), CoordinationError> {
        let Some(fence) = fence else {
            self.inner
                .counters
                .not_leader_refusals
                .fetch_add(1, Ordering::Relaxed);
            let leader = self.leader(name).await?.map(|f| f.owner.to_string());
            return Err(CoordinationError::NotLeader {
                name: name.to_owned(),
                leader,
            });
        };
        self.check(FenceKind::Leader, name, fence).await
    }

    /// The live holder of the leader lease `name`, if any.
    pub async fn leader(&self, name: &str) -> Result<Option<Fence>, CoordinationError> {
        self.holder(FenceKind::Leader, name).await
    }
}
