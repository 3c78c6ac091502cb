//! [`LifecycleStep`]: one step of `start()` / `stop()`. The kernel keeps the steps; the
//! `bot` layer's `lifecycle` module runs them in order (and documents the order).

use async_trait::async_trait;

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
