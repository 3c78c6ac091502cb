//! The forwarding step (`Coordination::handover`): keeps this replica's own lease
//! (`replica:<instance id>`, renewed every third of the leader lease, given back on stop) and
//! drains its forward queue every `poll` (the durability sweeper's period, at most that third),
//! in key order (ingress order): each message is taken off the queue, then dispatched in its
//! chat's queue and turn like a replayed one, where the non-persistent flow in memory takes it
//! as its answer. A replica that died with messages on its queue finds them at its restart and
//! routes them as fresh messages (its flows were lost and reported). This module does not
//! decide what is forwarded (`flow/forward.rs` does).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh_durability::coordination::Fence;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::bot::inbound::{process_interaction, process_message};
use crate::error::BotError;
use crate::flow::forward_queue;
use crate::kernel::context::CtxExtras;
use crate::kernel::lifecycle::LifecycleStep;
use crate::kernel::{Bot, Kernel};
use crate::provider::ProviderEvent;

/// Takes the messages off this replica's forward queue, in ingress order, and dispatches them.
async fn drain(k: &Arc<Kernel>, instance: &str) {
    let scope = forward_queue(instance);
    let mut queued = match k.store.values(&scope).await {
        Ok(queued) => queued,
        Err(e) => {
            k.events.error("flow:forward", None, e);
            return;
        }
    };
    queued.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, value) in queued {
        // Off the queue first: a forwarded message is dispatched at most once.
        if let Err(e) = k.store.delete_value(&scope, &key).await {
            k.events.error("flow:forward", None, e);
            return;
        }
        let event = value
            .get("event")
            .cloned()
            .map(serde_json::from_value::<ProviderEvent>);
        let extras = CtxExtras {
            admitted_ms: value.get("admitted_ms").and_then(Value::as_i64),
            ..CtxExtras::default()
        };
        match event {
            Some(Ok(ProviderEvent::Message(m))) => {
                process_message(k, Arc::new(m), None, extras, true).await;
            }
            Some(Ok(ProviderEvent::Interaction(i))) => {
                process_interaction(k, i, None, extras).await;
            }
            other => {
                let error = format!("forwarded message {key} does not decode: {other:?}");
                tracing::error!(%error, "undecodable forwarded message dropped");
                k.events.error("flow:forward", None, error);
            }
        }
    }
}

/// The lifecycle step of forwarding (coordination with hand-over): keeps this replica's lease
/// and drains its forward queue; on stop, gives the lease back.
#[derive(Default)]
pub(crate) struct ForwardStep {
    task: Mutex<Option<JoinHandle<()>>>,
    fence: Arc<Mutex<Option<Fence>>>,
}

#[async_trait]
impl LifecycleStep for ForwardStep {
    fn name(&self) -> &str {
        "forwarding"
    }

    fn produces_work(&self) -> bool {
        true
    }

    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        let k = Arc::clone(&bot.kernel);
        let Some(coord) = k.coordination.as_ref().map(Arc::clone) else {
            return Ok(());
        };
        let lease = coord.options.config().leader_lease;
        let renew = (lease / 3).max(Duration::from_millis(5));
        let poll = k
            .durable
            .as_ref()
            .map_or(renew, |d| d.d.config().poll)
            .min(renew);
        let keep = |fence: &Mutex<Option<Fence>>, got| match got {
            Ok(f) => *fence.lock().unwrap_or_else(|e| e.into_inner()) = Some(f),
            Err(e) => {
                tracing::warn!(error = %e, "renewing this replica's lease failed; trying again")
            }
        };
        keep(&self.fence, coord.c.keep_alive().await);
        let fence = Arc::clone(&self.fence);
        let weak = Arc::downgrade(&k);
        drop(k);
        let task = tokio::spawn(async move {
            let mut renewed = tokio::time::Instant::now();
            loop {
                let Some(k) = weak.upgrade() else { return };
                drain(&k, coord.c.instance_id()).await;
                if renewed.elapsed() >= renew {
                    keep(&fence, coord.c.keep_alive().await);
                    renewed = tokio::time::Instant::now();
                }
                drop(k);
                tokio::time::sleep(poll).await;
            }
        });
        if let Some(old) = self
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(task)
        {
            old.abort();
        }
        Ok(())
    }

    async fn stop(&self, bot: &Bot) -> Result<(), BotError> {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        let fence = self.fence.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let (Some(coord), Some(fence)) = (bot.kernel.coordination.as_deref(), fence) {
            if let Err(e) = coord.c.retire(&fence).await {
                tracing::warn!(error = %e, "giving this replica's lease back failed (it expires on its own)");
            }
        }
        Ok(())
    }
}
