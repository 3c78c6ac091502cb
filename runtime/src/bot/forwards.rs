//! The forwarding step (`Coordination::handover`): keeps this replica's own lease
//! (`replica:<instance id>`, renewed every third of the leader lease, given back on stop) and
//! drains its forward queue every `poll` (the durability sweeper's period, at most that third),
//! in key order (ingress order): each message is journaled in the inbox as this replica's and
//! taken off the queue (one transaction where the store shares the journal's), then
//! dispatched under its inbox lease in its chat's queue and turn like a replayed one, where
//! the non-persistent flow in memory takes it as its answer; a crash from there on leaves it
//! to the inbox's replay, never lost. Each forwarded ask timeout fires in its chat's queue. A
//! replica that died with messages on its queue finds them at its restart and routes them as
//! fresh messages (its flows were lost and reported). This module does not
//! decide what is forwarded (`flow/forward.rs` does).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use botmesh_durability::coordination::Fence;
use serde_json::Value;

use crate::bot::inbound::{process_interaction, process_message};
use crate::durable;
use crate::durable::inbound::Journaled;
use crate::error::BotError;
use crate::flow::conversation;
use crate::flow::{Forwarded, forward_queue};
use crate::kernel::context::CtxExtras;
use crate::kernel::lifecycle::{LifecycleStep, StepTask};
use crate::kernel::{Bot, Kernel};
use crate::message::ChatId;
use crate::provider::ProviderEvent;

/// Takes the entries off this replica's forward queue, in ingress order: messages and
/// interactions are journaled as this replica's and dispatched, timeouts fire.
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
        let entry = serde_json::from_value::<Forwarded>(value);
        let taken = match entry {
            Ok(Forwarded::Event { event, admitted_ms }) => {
                admit(k, *event, admitted_ms, (scope.clone(), key)).await
            }
            Ok(Forwarded::Timeout { chat, data, now_ms }) => {
                fire(k, ChatId::from(chat.as_str()), data, now_ms);
                remove(k, &scope, &key).await
            }
            Err(e) => {
                let error = format!("forwarded entry {key} does not decode: {e}");
                tracing::error!(%error, "undecodable forwarded entry dropped");
                k.events.error("flow:forward", None, error);
                remove(k, &scope, &key).await
            }
        };
        if !taken {
            // The store is away: the rest waits for the next drain, in order.
            return;
        }
    }
}

/// Removes a queue entry; `false` when the store refused.
async fn remove(k: &Kernel, scope: &str, key: &str) -> bool {
    match k.store.delete_value(scope, key).await {
        Ok(_) => true,
        Err(e) => {
            k.events.error("flow:forward", None, e);
            false
        }
    }
}

/// Journals a forwarded event as this replica's (taking it off the queue) and dispatches it
/// under its lease, like a replayed one; `false` when it could not be journaled (it stays
/// queued).
async fn admit(
    k: &Arc<Kernel>,
    event: ProviderEvent,
    admitted_ms: i64,
    queued: (String, String),
) -> bool {
    let lease = match k.durable.as_ref() {
        Some(dur) => {
            match durable::inbound::journal_forwarded(k, dur, &event, queued.clone()).await {
                Journaled::Claimed { lease, .. } => Some(lease),
                // Journaled by an earlier drain, which the crash cut short: the inbox
                // replays it.
                Journaled::Duplicate => return remove(k, &queued.0, &queued.1).await,
                Journaled::Unavailable(e) => {
                    k.events.error("flow:forward", Some(event.chat()), e);
                    return false;
                }
            }
        }
        None => {
            if !remove(k, &queued.0, &queued.1).await {
                return false;
            }
            None
        }
    };
    let extras = CtxExtras {
        admitted_ms: Some(admitted_ms),
        ..CtxExtras::default()
    };
    let lease = lease.map(crate::kernel::journals::LeaseSlot::new);
    match event {
        ProviderEvent::Message(m) => {
            process_message(k, Arc::new(m), lease, extras, true).await;
        }
        ProviderEvent::Interaction(i) => {
            process_interaction(k, i, lease, extras).await;
        }
        _ => {}
    }
    true
}

/// Fires a forwarded ask timeout in the chat's queue, where the flow in memory waits.
fn fire(k: &Arc<Kernel>, chat: ChatId, data: Value, now_ms: i64) {
    let kernel = Arc::clone(k);
    let queued = conversation::queue(k, chat.clone(), move |_| async move {
        let fired = conversation::fire_timeout(&kernel, Some(chat.clone()), &data, now_ms);
        if let Err(e) = fired.await {
            kernel.events.error("flow:timeout", Some(&chat), e);
        }
    });
    if let Err(e) = queued {
        tracing::debug!(error = %e, "forwarded ask timeout not fired: the bot is stopping");
    }
}

/// The lifecycle step of forwarding (coordination with hand-over): keeps this replica's lease
/// and drains its forward queue; on stop, gives the lease back.
#[derive(Default)]
pub(crate) struct ForwardStep {
    task: StepTask,
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
        let renew = coord.renew_every();
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
        self.task.set(task);
        Ok(())
    }

    async fn stop(&self, bot: &Bot) -> Result<(), BotError> {
        self.task.abort().await;
        let fence = self.fence.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let (Some(coord), Some(fence)) = (bot.kernel.coordination.as_deref(), fence) {
            if let Err(e) = coord.c.retire(&fence).await {
                tracing::warn!(error = %e, "giving this replica's lease back failed (it expires on its own)");
            }
        }
        Ok(())
    }
}
