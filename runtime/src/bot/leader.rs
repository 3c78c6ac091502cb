//! The leader election of a leader-only transport: the lifecycle's `transport` step when
//! [`Coordination::leader_only_transport`](crate::coordination::Coordination::leader_only_transport) is on.
//!
//! Starting it starts a campaign task: every third of the leader lease it campaigns for the
//! `transport` lease. On becoming the leader it starts the provider's transport (Telegram
//! long polling); on losing the lease (a stall past the lease, the backend away) it stops the
//! transport at once. A standby keeps campaigning and takes over within the leader lease when
//! the leader dies. Stopping the step stops the task, stops the transport if it runs and gives
//! the lease back, so a standby takes over at its next campaign instead of after the lease.

use std::sync::Arc;

use async_trait::async_trait;
use botmesh_durability::coordination::Leadership;

use crate::bot::inbound::Pipeline;
use crate::coordination::{Coord, TRANSPORT_LEASE};
use crate::error::BotError;
use crate::kernel::lifecycle::{LifecycleStep, StepTask};
use crate::kernel::{Bot, Kernel};
use crate::provider::{EventSink, TransportStatus};

/// The `transport` step of a leader-only transport.
#[derive(Default)]
pub(crate) struct LeaderStep {
    task: StepTask,
}

#[async_trait]
impl LifecycleStep for LeaderStep {
    fn name(&self) -> &str {
        "transport"
    }

    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        let k = Arc::clone(&bot.kernel);
        let Some(coord) = k.coordination.as_ref().map(Arc::clone) else {
            return Ok(());
        };
        // The first campaign runs here, so a lone replica leads once `start()` returns.
        campaign_once(&k, &coord).await;
        if k.transport_status() == TransportStatus::Starting {
            k.set_transport_status(TransportStatus::Ready);
        }
        let every = coord.renew_every();
        let weak = Arc::downgrade(&k);
        drop(k);
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(k) = weak.upgrade() else { return };
                campaign_once(&k, &coord).await;
            }
        });
        self.task.set(task);
        Ok(())
    }

    async fn stop(&self, bot: &Bot) -> Result<(), BotError> {
        self.task.abort().await;
        let k = &bot.kernel;
        k.set_transport_status(TransportStatus::Stopped);
        let Some(coord) = k.coordination.as_deref() else {
            return Ok(());
        };
        let led = coord
            .leader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(fence) = led {
            let stopped = k.provider.stop().await;
            if let Err(e) = coord.c.resign(&fence).await {
                tracing::warn!(error = %e, "giving the leader lease back failed (it expires on its own)");
            }
            stopped?;
        }
        Ok(())
    }
}

/// One campaign: starts the transport on becoming the leader, stops it on losing the lease.
async fn campaign_once(k: &Arc<Kernel>, coord: &Coord) {
    let previous = coord.leading();
    let now = match coord.c.campaign(TRANSPORT_LEASE, previous.as_ref()).await {
        Ok(Leadership::Leader(fence)) => Some(fence),
        Ok(Leadership::Standby { .. }) => None,
        Err(e) => {
            tracing::warn!(error = %e, "leader campaign failed");
            // Unsure whether it still leads: a leader stops calling the transport once its
            // lease is too short for the safety margin (the provider-call fence checks it).
            return;
        }
    };
    match (&previous, &now) {
        (None, Some(fence)) => {
            *coord.leader.lock().unwrap_or_else(|e| e.into_inner()) = Some(fence.clone());
            let sink = EventSink::new(Arc::new(Pipeline(Arc::downgrade(k))));
            if let Err(e) = k.provider.start(sink).await {
                tracing::error!(error = %e, "the leader could not start the transport; giving the lease back");
                *coord.leader.lock().unwrap_or_else(|e| e.into_inner()) = None;
                let _ = coord.c.resign(fence).await;
                k.events.error("coordination:transport", None, &e);
            }
        }
        (Some(_), None) => {
            *coord.leader.lock().unwrap_or_else(|e| e.into_inner()) = None;
            if let Err(e) = k.provider.stop().await {
                k.events.error("coordination:transport", None, &e);
            }
        }
        (Some(_), Some(fence)) => {
            *coord.leader.lock().unwrap_or_else(|e| e.into_inner()) = Some(fence.clone());
        }
        (None, None) => {}
    }
}

impl Bot {
    /// The coordination counters of this replica (turns taken, waits, steals, fenced refusals,
    /// leader changes), when [`coordination`](crate::BotBuilder::coordination) is on.
    pub fn coordination_metrics(
        &self,
    ) -> Option<botmesh_durability::coordination::CoordinationMetrics> {
        self.kernel.coordination.as_ref().map(|c| c.c.metrics())
    }

    /// A receiver of this replica's coordination events from now on, when coordination is on.
    pub fn subscribe_coordination(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<botmesh_durability::coordination::CoordinationEvent>>
    {
        self.kernel.coordination.as_ref().map(|c| c.c.subscribe())
    }

    /// Whether this replica leads its leader-only transport (as of its last campaign).
    pub fn is_transport_leader(&self) -> bool {
        self.kernel
            .coordination
            .as_ref()
            .is_some_and(|c| c.leading().is_some())
    }
}
