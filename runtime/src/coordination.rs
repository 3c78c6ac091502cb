//! The `coordination` opt-in: several replicas of one bot on one shared backend (Postgres,
//! Redis, Redis Cluster).
//!
//! ```no_run
//! # use botmesh::prelude::*;
//! # use botmesh::coordination::Coordination;
//! # async fn demo(provider: botmesh::testing::MockProvider, kv: std::sync::Arc<dyn botmesh::durability::DurableKv>) -> Result<(), BotError> {
//! let bot = Bot::builder(provider)
//!     .durability(botmesh::durable::DurabilityOptions::shared(kv))
//!     .coordination(Coordination::replicas().leader_only_transport())
//!     .build()?;
//! # Ok(()) }
//! ```
//!
//! | layer | what coordination adds |
//! | --- | --- |
//! | inbound | each chat's work runs under the chat's cross-replica turn (`bot/turns.rs`), taken in ingress order |
//! | outbound | the send fence (`outbound/fence.rs`): a send from a replica that lost the chat's turn is refused before it is journaled or reaches the provider ([`CoordinationError::Fenced`] in [`BotError::Coordination`]); with a leader-only transport, a standby journals its sends for the leader and never calls the provider |
//! | lifecycle | with [`Coordination::leader_only_transport`], the `transport` step becomes a leader election (`bot/leader.rs`): only the leader runs the provider's transport (Telegram long polling); a standby takes over within the leader lease when the leader dies |
//! | flows | with [`Coordination::handover`], a persistent flow's checkpoint carries the answer of the step it is taking (`flow/handover.rs`): a step cut short on one replica is finished on the next one that gets the chat, before that chat's next message |
//! | flows (in memory) | with [`Coordination::handover`], a non-persistent flow's note names the replica holding it, each replica keeps a lease of its own, and a message of the chat reaching another replica is forwarded to the holder through the holder's forward queue in the store (`flow/forward.rs`, [`CoordinationEvent::Forwarded`], `forwards`); when the holder died, the flow is reported lost (`lost:replica`) |
//!
//! The turns and leases themselves are [`botmesh_durability::coordination`]'s, kept in the
//! bot's own journal scope. Without the opt-in nothing of this runs: a single process needs
//! none of it.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_durability::KvDurability;
use botmesh_durability::coordination::Coordinator;
pub use botmesh_durability::coordination::{
    CoordinationConfig, CoordinationError, CoordinationEvent, CoordinationMetrics, Fence, FenceKind,
};

#[cfg(doc)]
use crate::error::BotError;
use crate::error::BotError as Error;
use crate::message::ChatId;

/// The name of the leader lease of the bot's transport.
pub(crate) const TRANSPORT_LEASE: &str = "transport";

/// The coordination options (see the module documentation). Off unless given to
/// [`BotBuilder::coordination`](crate::BotBuilder::coordination).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Coordination {
    config: CoordinationConfig,
    leader_only_transport: bool,
    handover: bool,
}

impl Coordination {
    /// Several replicas: chat turns and the send fence, with the default leases (turn 30 s,
    /// leader 15 s, safety margin 2 s).
    pub fn replicas() -> Self {
        Coordination::default()
    }

    /// How long a chat turn lasts unless renewed (the holder renews it every third).
    pub fn turn_lease(mut self, lease: Duration) -> Self {
        self.config.turn_lease = lease;
        self
    }

    /// How long the leader lease lasts unless renewed: a standby takes over within it.
    pub fn leader_lease(mut self, lease: Duration) -> Self {
        self.config.leader_lease = lease;
        self
    }

    /// A fence check passes only with at least this much of the lease left.
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.config.safety_margin = margin;
        self
    }

    /// The provider's transport is exclusive (Telegram long polling, a WhatsApp Web session):
    /// only the elected leader runs it and calls it; a standby journals its sends for the
    /// leader. Webhook channels accept on every replica and do not need this.
    pub fn leader_only_transport(mut self) -> Self {
        self.leader_only_transport = true;
        self
    }

    /// Hand-over of conversation steps (`coordination.handover`): before a persistent flow
    /// takes a message as its answer, the chat's checkpoint records that answer, so a step
    /// cut short (its replica lost the chat's turn, stopped, or died mid-step) is finished by
    /// whichever replica gets the chat next, with that answer, before the chat's next message
    /// is taken as the answer to the following question ([`CoordinationEvent::HandedOver`],
    /// `handovers`). It costs one more checkpoint write per answered step.
    ///
    /// Non-persistent flows are forwarded: a message of a chat whose flow another live
    /// replica holds in memory is handed to that replica, which takes it as the flow's answer
    /// ([`CoordinationEvent::Forwarded`], `forwards`); a dead holder's flow is reported lost
    /// (the flow event `lost:replica`) and the message routed as a fresh one. It costs a
    /// lease renewal per leader-lease third and a read of the replica's forward queue per
    /// `poll`. See the module documentation.
    pub fn handover(mut self) -> Self {
        self.handover = true;
        self
    }

    /// Whether conversation steps are handed over (see [`handover`](Self::handover)).
    pub fn is_handover(&self) -> bool {
        self.handover
    }

    /// The lease configuration.
    pub fn config(&self) -> &CoordinationConfig {
        &self.config
    }

    /// Whether the transport runs on the leader only.
    pub fn is_leader_only_transport(&self) -> bool {
        self.leader_only_transport
    }
}

/// The coordination of one running bot.
pub(crate) struct Coord {
    pub(crate) c: Coordinator,
    pub(crate) options: Coordination,
    /// This replica's leadership of the transport, from its last campaign.
    pub(crate) leader: Mutex<Option<Fence>>,
}

impl Coord {
    /// Builds the coordination over the bot's journals; refuses a bot without them.
    pub(crate) fn build(
        options: Coordination,
        durability: Option<&KvDurability>,
    ) -> Result<Self, Error> {
        let Some(d) = durability else {
            return Err(Error::config(
                "coordination",
                "several replicas coordinate through the durable journals: give the bot a shared durable backend (Postgres, Redis)",
            ));
        };
        let c = Coordinator::new(d, options.config.clone())
            .map_err(|e| Error::config("coordination", e.to_string()))?;
        Ok(Coord {
            c,
            options,
            leader: Mutex::new(None),
        })
    }

    /// How often a lease this replica keeps (its own, the transport's) is renewed: every
    /// third of the leader lease.
    pub(crate) fn renew_every(&self) -> Duration {
        (self.options.config.leader_lease / 3).max(Duration::from_millis(5))
    }

    /// The fence this replica leads under, if it leads.
    pub(crate) fn leading(&self) -> Option<Fence> {
        self.leader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The turn a piece of work runs under (see `bot/turns.rs`).
#[derive(Debug)]
pub(crate) struct TurnCell {
    pub(crate) chat: ChatId,
    pub(crate) fence: Mutex<Fence>,
    pub(crate) lost: AtomicBool,
}

impl TurnCell {
    pub(crate) fn fence(&self) -> Fence {
        self.fence.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

tokio::task_local! {
    /// The turn of the work running on this task.
    pub(crate) static TURN: Arc<TurnCell>;
}

/// The turn of the work running on this task, if any. Work spawned onto another task (a
/// detached `tokio::spawn`) runs outside the turn and is not fenced.
pub(crate) fn current_turn() -> Option<Arc<TurnCell>> {
    TURN.try_with(Arc::clone).ok()
}
