//! Replica leases: whether a replica is alive, for the forwarding of non-persistent flows.
//!
//! A replica that holds conversations in memory (non-persistent flows) keeps a lease of its
//! own, `replica:<instance id>` ([`Coordinator::keep_alive`], renewed every third of the
//! leader lease), on the same fenced lease record as the leader leases. Another replica that
//! gets a message of such a chat asks [`Coordinator::is_alive`]: a live holder gets the
//! message forwarded ([`Coordinator::forwarded`]); a holder whose lease expired died with its
//! conversations. This module does not move messages (the runtime's forward queues do).

use std::sync::atomic::Ordering;

use super::record::Acquired;
use super::{CoordinationError, CoordinationEvent, Coordinator, Fence, FenceKind};

/// The lease name of replica `instance`.
fn lease_name(instance: &str) -> String {
    format!("replica:{instance}")
}

impl Coordinator {
    /// Takes or renews this replica's own lease (see the module documentation); its fence.
    /// Not a leader change: nothing is counted or emitted.
    pub async fn keep_alive(&self) -> Result<Fence, CoordinationError> {
        let name = lease_name(self.instance_id());
        match self.acquire(FenceKind::Leader, &name, None).await? {
            Acquired::Taken { fence, .. } => Ok(fence),
            Acquired::Wait { holder, .. } => Err(CoordinationError::NotLeader {
                name,
                leader: holder,
            }),
        }
    }

    /// Gives this replica's lease back (on stop): its conversations in memory are gone.
    pub async fn retire(&self, fence: &Fence) -> Result<(), CoordinationError> {
        self.release(FenceKind::Leader, fence).await
    }

    /// Whether replica `instance` holds its lease now.
    pub async fn is_alive(&self, instance: &str) -> Result<bool, CoordinationError> {
        let name = lease_name(instance);
        Ok(self.holder(FenceKind::Leader, &name).await?.is_some())
    }

    /// Counts and emits a forward: a message of `chat`, whose non-persistent flow replica
    /// `to` holds in memory, was handed to `to`.
    pub fn forwarded(&self, chat: &str, to: &str) {
        self.inner.counters.forwards.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            chat,
            to,
            "message forwarded to the replica holding the chat's flow"
        );
        self.emit(CoordinationEvent::Forwarded {
            chat: chat.to_owned(),
            to: to.to_owned(),
        });
    }
}
