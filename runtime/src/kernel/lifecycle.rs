//! [`LifecycleStep`]: one step of `start()` / `stop()`. The kernel keeps the steps; the
//! `bot` layer's `lifecycle` module runs them in order (and documents the order).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::BotError;
use crate::kernel::Bot;

/// One step of the lifecycle.
#[async_trait]
pub trait LifecycleStep: Send + Sync + 'static {
    /// The step's name (in logs and `StartFailed`).
    fn name(&self) -> &str;
    /// Whether the step produces new work (a scheduler, a sweeper): such steps are stopped
    /// before the drain, the others after it.
    fn produces_work(&self) -> bool {
        false
    }
    /// Starts the step.
    async fn start(&self, bot: &Bot) -> Result<(), BotError>;
    /// Stops the step (best effort; errors are reported, not returned).
    async fn stop(&self, bot: &Bot) -> Result<(), BotError>;
}

/// The background task a step runs between its `start()` and its `stop()`, with the signal
/// that asks it to stop.
pub(crate) struct StepTask {
    task: Mutex<Option<JoinHandle<()>>>,
    stop: watch::Sender<bool>,
}

impl Default for StepTask {
    fn default() -> Self {
        Self {
            task: Mutex::new(None),
            stop: watch::channel(false).0,
        }
    }
}

impl StepTask {
    /// Spawns `run`, given the stop signal, as the step's task.
    pub(crate) fn spawn<F>(&self, run: impl FnOnce(watch::Receiver<bool>) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let _ = self.stop.send_replace(false);
        self.set(tokio::spawn(run(self.stop.subscribe())));
    }

    /// Keeps `task` as the step's task, aborting the one it replaces.
    pub(crate) fn set(&self, task: JoinHandle<()>) {
        if let Some(old) = self.slot().replace(task) {
            old.abort();
        }
    }

    /// Whether the task was asked to stop.
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Asks the task to stop and waits up to `grace` for it to end, then aborts it. Whether
    /// it had to be aborted.
    pub(crate) async fn stop(&self, grace: Duration) -> bool {
        let _ = self.stop.send_replace(true);
        let task = self.slot().take();
        if let Some(mut task) = task
            && tokio::time::timeout(grace, &mut task).await.is_err()
        {
            task.abort();
            return true;
        }
        false
    }

    /// Aborts the task and waits for it to end.
    pub(crate) async fn abort(&self) {
        let task = self.slot().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.task.lock().unwrap_or_else(|e| e.into_inner())
    }
}
