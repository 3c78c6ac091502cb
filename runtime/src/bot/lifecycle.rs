//! `start()` and `stop()` as an ordered list of steps, with rollback and drain.
//!
//! Steps, in start order: `storage` (open the store) → with durability, `journal` (open its
//! backend) → `restore` (handoffs and persistent conversations) → feature steps (durability
//! recovery and sweeper, …) → `transport` (the provider) →
//! custom steps (jobs, a plugin's own). If a step fails, the steps already started are stopped
//! in reverse order and the error is returned. `stop()` closes inbound and cancels broadcasts,
//! emits `stopping`, stops the steps that produce work, then either drains the queued and
//! running work (up to the drain's timeout) or drops the queued work and gives the running jobs
//! up to `stop_timeout` to end (a send in flight lands and is recorded), aborts what is still
//! running (handlers included), aborts in-memory conversations (checkpoints are kept), then
//! stops the remaining steps in reverse.
//! An opt-in feature adds a step; it does not add branches here.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use botmesh_durability::StoreError;

use crate::bot::inbound::Pipeline;
use crate::error::BotError;
use crate::events::BotEvent;
use crate::kernel::Bot;
use crate::kernel::RunState;
use crate::kernel::lifecycle::LifecycleStep;
use crate::provider::{EventSink, TransportStatus};

/// Options of [`Bot::stop_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopOptions {
    /// Wait for queued and running work (handlers, sends) before stopping the transport.
    pub drain: bool,
    /// The longest wait for the drain.
    pub timeout: Duration,
}

impl Default for StopOptions {
    fn default() -> Self {
        Self {
            drain: false,
            timeout: Duration::from_secs(30),
        }
    }
}

pub(crate) struct StorageStep;

#[async_trait]
impl LifecycleStep for StorageStep {
    fn name(&self) -> &str {
        "storage"
    }
    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        if bot.kernel.journals_off {
            tracing::warn!(
                bot = %bot.kernel.config.bot_id,
                "durable processing is off (DurabilityOptions::off): a crash can lose the \
                 messages in hand or send a reply twice, and a failed send is not retried"
            );
        }
        Ok(bot.kernel.store.open().await?)
    }
    async fn stop(&self, bot: &Bot) -> Result<(), BotError> {
        match bot.kernel.store.close().await {
            Ok(()) | Err(StoreError::Closed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

pub(crate) struct RestoreStep;

#[async_trait]
impl LifecycleStep for RestoreStep {
    fn name(&self) -> &str {
        "restore"
    }
    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        let k = &bot.kernel;
        for h in k.store.handoffs().await? {
            k.gates.set_handoff(h);
        }
        crate::flow::restore(k).await
    }
    async fn stop(&self, _bot: &Bot) -> Result<(), BotError> {
        Ok(())
    }
}

pub(crate) struct TransportStep;

#[async_trait]
impl LifecycleStep for TransportStep {
    fn name(&self) -> &str {
        "transport"
    }
    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        let k = &bot.kernel;
        let sink = EventSink::new(Arc::new(Pipeline(Arc::downgrade(k))));
        k.provider.start(sink).await?;
        if k.transport_status() == TransportStatus::Starting {
            k.set_transport_status(TransportStatus::Ready);
        }
        Ok(())
    }
    async fn stop(&self, bot: &Bot) -> Result<(), BotError> {
        bot.kernel.set_transport_status(TransportStatus::Stopped);
        Ok(bot.kernel.provider.stop().await?)
    }
}

pub(crate) async fn start(bot: &Bot) -> Result<(), BotError> {
    let k = &bot.kernel;
    {
        let mut s = k.run_state.lock().unwrap_or_else(|e| e.into_inner());
        match *s {
            RunState::Idle | RunState::Stopped => *s = RunState::Starting,
            _ => return Err(BotError::AlreadyStarted),
        }
    }
    let _ = k.input_ended.send_replace(false);
    let _ = k.cancel_background.send_replace(false);
    k.queues.reopen();
    k.set_transport_status(TransportStatus::Starting);
    k.accepting.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut steps: Vec<Arc<dyn LifecycleStep>> = k.steps.clone();
    steps.extend(
        k.custom_steps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned(),
    );
    let mut started: Vec<Arc<dyn LifecycleStep>> = Vec::new();
    for step in steps {
        tracing::debug!(step = step.name(), "starting");
        if let Err(e) = step.start(bot).await {
            tracing::error!(step = step.name(), error = %e, "start failed: rolling back");
            k.accepting
                .store(false, std::sync::atomic::Ordering::SeqCst);
            // The work recovery and `restore` queued (replays, left-over sends, restored
            // flows) must not run on while the steps below close the journal and the store.
            k.queues.close();
            k.queues.abort_all();
            for done in started.iter().rev() {
                if let Err(err) = done.stop(bot).await {
                    k.events
                        .error(format!("rollback:{}", done.name()), None, err);
                }
            }
            k.set_run_state(RunState::Stopped);
            return Err(BotError::StartFailed {
                step: step.name().to_owned(),
                source: Box::new(e),
            });
        }
        started.push(step);
    }
    *k.started_steps.lock().unwrap_or_else(|e| e.into_inner()) = started;
    k.set_run_state(RunState::Running);
    k.events.emit(BotEvent::Started);
    tracing::info!(bot = %k.config.bot_id, provider = k.provider.name(), "bot started");
    Ok(())
}

pub(crate) async fn stop(bot: &Bot, opts: StopOptions) -> Result<(), BotError> {
    let k = &bot.kernel;
    {
        let mut s = k.run_state.lock().unwrap_or_else(|e| e.into_inner());
        if *s != RunState::Running {
            return Ok(());
        }
        *s = RunState::Stopping;
    }
    k.accepting
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let _ = k.cancel_background.send_replace(true);
    k.events.emit(BotEvent::Stopping);

    let started = std::mem::take(&mut *k.started_steps.lock().unwrap_or_else(|e| e.into_inner()));
    let (producers, rest): (Vec<_>, Vec<_>) = started.into_iter().partition(|s| s.produces_work());
    for step in producers.iter().rev() {
        if let Err(e) = step.stop(bot).await {
            k.events.error(format!("stop:{}", step.name()), None, e);
        }
    }
    // Without a drain, the jobs not started are dropped, and the running ones get up to
    // `stop_timeout` to end (a send in flight lands and is recorded) before they are aborted.
    let grace = if opts.drain {
        opts.timeout
    } else {
        k.queues.close();
        k.config.stop_timeout
    };
    if tokio::time::timeout(grace, k.queues.tracker.wait_idle())
        .await
        .is_err()
    {
        tracing::warn!(
            in_flight = k.queues.tracker.in_flight(),
            drain = opts.drain,
            "running work did not end in time: aborted"
        );
    }
    k.queues.abort_all();
    crate::flow::abort_all(k).await;
    for step in rest.iter().rev() {
        if let Err(e) = step.stop(bot).await {
            k.events.error(format!("stop:{}", step.name()), None, e);
        }
    }
    k.set_run_state(RunState::Stopped);
    k.events.emit(BotEvent::Stopped);
    k.stopped.notify_waiters();
    tracing::info!(bot = %k.config.bot_id, "bot stopped");
    Ok(())
}
