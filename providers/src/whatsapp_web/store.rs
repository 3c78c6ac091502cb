//! The session's durable state and its lock, in the bot's [`DurableKv`] (SQLite, Postgres,
//! Redis, … the store the bot already has).
//!
//! - [`SessionStore`]: a byte map in the session's own scope (`whatsapp-web/<session>`):
//!   the client's credentials and Signal keys, and the provider's LID ↔ phone-number
//!   identities. A restart on the same store reconnects without pairing again.
//! - [`SessionLock`]: the session is single-writer. Before connecting, the provider takes the
//!   session's leader lease (the coordination module's fenced lease, the one replicas elect
//!   their transport leader with) under an instance id unique to the process, and renews it
//!   while connected. A second process finds it held, waits up to one lease for a dead
//!   holder's lease to run out, and is then refused ([`WhatsAppWebError::SessionHeld`]).
//!
//! It does not interpret what it stores (the client's keys are opaque bytes).

use std::sync::Arc;
use std::time::Duration;

use botmesh::durability::coordination::{
    CoordinationConfig, CoordinationError, Coordinator, Fence, Leadership,
};
use botmesh::durability::kv::{CasOutcome, DurableKv, Index, KvOp, RangeQuery, Scope};
use botmesh::durability::{DurabilityConfig, KvDurability};

use super::error::WhatsAppWebError;
use super::session::WaError;

/// The name of the session's lease.
const LOCK: &str = "whatsapp-web-session";

/// The session's durable byte map (see the module documentation). Cheap to clone.
#[derive(Clone)]
pub struct SessionStore {
    kv: Arc<dyn DurableKv>,
    scope: Scope,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("scope", &self.scope.id())
            .finish_non_exhaustive()
    }
}

impl SessionStore {
    /// The store of session `session` in `kv`.
    pub fn new(kv: Arc<dyn DurableKv>, session: &str) -> Self {
        Self {
            kv,
            scope: Scope::new("whatsapp-web", "session", "whatsapp-web", session),
        }
    }

    /// The session's scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The value under `key`.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, WaError> {
        let found = self.kv.get(&self.scope, key).await.map_err(store_error)?;
        Ok(found.map(|v| v.value))
    }

    /// Writes `value` under `key` (created or replaced).
    pub async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), WaError> {
        crate::kv_write::overwrite(self.kv.as_ref(), &self.scope, key, value)
            .await
            .map_err(WaError::Store)
    }

    /// Removes `key` (nothing when absent).
    pub async fn delete(&self, key: &str) -> Result<(), WaError> {
        for _ in 0..5 {
            let Some(found) = self.kv.get(&self.scope, key).await.map_err(store_error)? else {
                return Ok(());
            };
            let op = KvOp::Delete {
                key: key.to_owned(),
                expected: found.version,
            };
            if let CasOutcome::Ok { .. } =
                self.kv.apply(&self.scope, op).await.map_err(store_error)?
            {
                return Ok(());
            }
        }
        Err(WaError::Store(format!(
            "`{key}` kept changing under the delete"
        )))
    }

    /// The entries whose keys start with `prefix`, sorted by key.
    pub async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, WaError> {
        let to = format!("{prefix}\u{10FFFF}");
        let found = self
            .kv
            .scan(
                &self.scope,
                RangeQuery {
                    index: Index::One,
                    from: prefix,
                    to: &to,
                    limit: 1_000_000,
                },
            )
            .await
            .map_err(store_error)?;
        Ok(found.into_iter().map(|r| (r.key, r.entry.value)).collect())
    }

    /// Removes every entry of the session (after a logout: the next start pairs again).
    pub async fn clear(&self, prefix: &str) -> Result<(), WaError> {
        for (key, _) in self.list(prefix).await? {
            self.delete(&key).await?;
        }
        Ok(())
    }
}

fn store_error(e: impl std::fmt::Display) -> WaError {
    WaError::Store(e.to_string())
}

/// The session's single-writer lock (see the module documentation).
pub(crate) struct SessionLock {
    coordinator: Coordinator,
    session: String,
    lease: Duration,
}

impl SessionLock {
    /// The lock of `store`'s session, held under leases of `lease`.
    pub(crate) fn new(
        store: &SessionStore,
        session: &str,
        lease: Duration,
    ) -> Result<Self, WhatsAppWebError> {
        let mut config = DurabilityConfig::default();
        // Unique per process: a second process is another holder, never "this one restarted".
        config.instance_id = Some(format!("{}/{:08x}", std::process::id(), fastrand::u32(..)));
        let durability = KvDurability::new(Arc::clone(&store.kv), store.scope.clone(), config)
            .map_err(|e| WhatsAppWebError::Store {
                session: session.to_owned(),
                reason: e.to_string(),
            })?;
        let margin = (lease / 5).max(Duration::from_millis(1));
        let coordinator = Coordinator::new(
            &durability,
            CoordinationConfig {
                turn_lease: lease,
                leader_lease: lease,
                safety_margin: margin,
            },
        )
        .map_err(|e| WhatsAppWebError::Config {
            option: "session_lease",
            reason: e.to_string(),
        })?;
        Ok(Self {
            coordinator,
            session: session.to_owned(),
            lease,
        })
    }

    /// How often the holder renews.
    pub(crate) fn renew_every(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(5))
    }

    /// Takes the lock, waiting up to `wait` for another holder's lease to run out.
    pub(crate) async fn acquire(&self, wait: Duration) -> Result<Fence, WhatsAppWebError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self.campaign(None).await? {
                Leadership::Leader(fence) => return Ok(fence),
                Leadership::Standby { leader, .. } => {
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        return Err(WhatsAppWebError::SessionHeld {
                            session: self.session.clone(),
                            holder: leader,
                        });
                    }
                    tracing::info!(
                        session = %self.session,
                        holder = leader.as_deref().unwrap_or("?"),
                        "the WhatsApp Web session is held by another process; waiting for its lease"
                    );
                    tokio::time::sleep(self.renew_every().min(deadline - now)).await;
                }
            }
        }
    }

    /// Renews `fence`; `Ok(None)` when another process took the session over.
    pub(crate) async fn renew(&self, fence: &Fence) -> Result<Option<Fence>, WhatsAppWebError> {
        Ok(self.campaign(Some(fence)).await?.fence().cloned())
    }

    /// Gives the lock back (on stop).
    pub(crate) async fn release(&self, fence: &Fence) {
        if let Err(e) = self.coordinator.resign(fence).await {
            tracing::warn!(session = %self.session, error = %e, "giving the session lock back failed (it expires on its own)");
        }
    }

    async fn campaign(&self, previous: Option<&Fence>) -> Result<Leadership, WhatsAppWebError> {
        self.coordinator
            .campaign(LOCK, previous)
            .await
            .map_err(|e: CoordinationError| WhatsAppWebError::Store {
                session: self.session.clone(),
                reason: e.to_string(),
            })
    }
}
