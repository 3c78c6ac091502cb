//! The single automatic acknowledgement of an interaction on transports that require one
//! (`Capabilities::interactions_require_ack`: Telegram callback queries, Discord).
//!
//! Exactly one ack per interaction: before the handler's first send, when routing ends if the
//! handler sent nothing, or shortly before `respond_by` (a timer), whichever comes first; an
//! explicit `ctx.ack(notice)` counts as that one. Transports that need none get none.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::kernel::context::Ctx;
use crate::metrics::Counters;

/// How long before `respond_by` the timer acks.
const MARGIN: Duration = Duration::from_millis(500);

fn needs_ack(ctx: &Ctx) -> bool {
    ctx.0.interaction.is_some() && ctx.0.bot.kernel.capabilities.interactions_require_ack
}

/// Acks now if not done yet.
pub(crate) async fn ack(ctx: &Ctx, notice: Option<&str>) {
    if !needs_ack(ctx) || ctx.0.acked.swap(true, Ordering::SeqCst) {
        return;
    }
    let Some(interaction) = &ctx.0.interaction else {
        return;
    };
    let k = &ctx.0.bot.kernel;
    match k.provider.ack_interaction(interaction, notice).await {
        Ok(()) => Counters::inc(&k.counters.interactions_acked),
        Err(e) => k.events.error("interaction_ack", Some(&ctx.0.chat), e),
    }
}

pub(crate) async fn before_send(ctx: &Ctx) {
    ack(ctx, None).await;
}

pub(crate) async fn routing_ended(ctx: &Ctx) {
    ack(ctx, None).await;
}

/// Arms the `respond_by` timer of an interaction context.
pub(crate) fn arm_deadline(ctx: &Ctx) {
    if !needs_ack(ctx) {
        return;
    }
    let Some(respond_by) = ctx.0.interaction.as_ref().and_then(|i| i.respond_by_ms) else {
        return;
    };
    let now = ctx.0.bot.kernel.clock.now_ms();
    let wait =
        Duration::from_millis(u64::try_from(respond_by - now).unwrap_or(0)).saturating_sub(MARGIN);
    let weak = std::sync::Arc::downgrade(&ctx.0);
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        if let Some(inner) = weak.upgrade() {
            ack(&Ctx(inner), None).await;
        }
    });
}
