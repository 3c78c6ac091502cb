//! The dispatcher: routes one message or interaction, through these stages in this order:
//!
//! language (resolved in the context) → `before` message hooks → handoff gate → command →
//! active conversation → dormant resume → matchers (first match wins, in registration order)
//! → catch-all → interaction ack (if still owed) → `after` message hooks + `message` event.
//! Handlers run in their own task, so a panic is reported as an error instead of killing the
//! chat's queue. A handler error goes to the `error` event; it is not retried.

use std::sync::Arc;

use crate::bot::inbound::drop_event;
use crate::durable;
use crate::events::{BotEvent, DropReason};
use crate::kernel::context::Ctx;
use crate::kernel::isolated::run_isolated;
use crate::kernel::routes::{Acts, Handler, HookFlow, Route};
use crate::metrics::Counters;
use crate::outbound::interaction_ack;
use tracing::Instrument;

/// Runs a handler in its own task; reports errors and panics. The task is aborted if this
/// future is dropped before it ends.
pub(crate) async fn run_handler(ctx: &Ctx, handler: Arc<dyn Handler>, context: &'static str) {
    let k = ctx.0.bot.kernel.clone();
    let span = crate::telemetry::handler_span(ctx.chat().as_str(), context);
    let Err(err) = run_isolated(handler.call(ctx.clone()).instrument(span)).await else {
        return;
    };
    Counters::inc(&k.counters.handler_errors);
    k.events.error(context, Some(ctx.chat()), err);
}

/// Routes a context through the stages; see the module docs.
pub(crate) async fn dispatch(ctx: Ctx) {
    let k = ctx.0.bot.kernel.clone();
    Counters::inc(&k.counters.dispatched);

    let before: Vec<_> = {
        let r = k.routes.read().unwrap_or_else(|e| e.into_inner());
        r.before_message.iter().map(|r| r.item.clone()).collect()
    };
    if !before.is_empty() && !durable::inbound::acting(&ctx).await {
        return;
    }
    for hook in before {
        match hook(ctx.clone()).await {
            Ok(HookFlow::Continue) => {}
            Ok(HookFlow::Stop) => {
                drop_event(&k, ctx.chat(), DropReason::Hook);
                interaction_ack::routing_ended(&ctx).await;
                return;
            }
            Err(e) => {
                k.events.error("hook:before_message", Some(ctx.chat()), e);
                interaction_ack::routing_ended(&ctx).await;
                return;
            }
        }
    }

    if k.gates.is_handed_off(ctx.chat()) {
        drop_event(&k, ctx.chat(), DropReason::Handoff);
        interaction_ack::routing_ended(&ctx).await;
        return;
    }

    let Some(route) = route(&ctx).await else {
        return;
    };
    tracing::Span::current().record("route", route);

    interaction_ack::routing_ended(&ctx).await;
    let after: Vec<_> = {
        let r = k.routes.read().unwrap_or_else(|e| e.into_inner());
        r.after_message.iter().map(|r| r.item.clone()).collect()
    };
    // The record of a message no handler or step took is written now (done when nothing runs
    // after): a redelivery neither runs the hooks nor counts as a message.
    if !durable::inbound::routed(&ctx, after.is_empty()).await {
        return;
    }
    for hook in after {
        hook(ctx.clone()).await;
    }
    if let Some(m) = ctx.message() {
        k.events.emit(BotEvent::Message {
            chat: ctx.chat().clone(),
            message_id: m.id.clone(),
            route,
        });
    }
}

/// The route the context took; `None` when its message turned out a redelivery (or its
/// record could not be written) before a handler ran.
async fn route(ctx: &Ctx) -> Option<&'static str> {
    let k = ctx.0.bot.kernel.clone();

    if let Some(name) = ctx.command() {
        let handler = {
            let r = k.routes.read().unwrap_or_else(|e| e.into_inner());
            r.commands
                .iter()
                .find(|c| c.item.0 == name)
                .map(|c| c.item.1.clone())
        };
        if let Some(r) = handler {
            return route_to(ctx, r, "handler:command", "command").await;
        }
    }

    if crate::flow::active_conversation(ctx).await {
        return Some("conversation");
    }
    if crate::flow::dormant_resume(ctx).await {
        return Some("dormant_resume");
    }

    let matched = {
        let r = k.routes.read().unwrap_or_else(|e| e.into_inner());
        r.matchers
            .iter()
            .find(|m| m.item.0.matches(ctx))
            .map(|m| m.item.1.clone())
    };
    if let Some(r) = matched {
        return route_to(ctx, r, "handler:matcher", "matcher").await;
    }

    let catch_all = {
        let r = k.routes.read().unwrap_or_else(|e| e.into_inner());
        r.catch_all.last().map(|c| c.item.clone())
    };
    if let Some(handler) = catch_all {
        let r = Route {
            handler,
            acts: Acts::Freely,
        };
        return route_to(ctx, r, "handler:catch_all", "catch_all").await;
    }
    Some("none")
}

/// Runs a route's handler, the message's record written first unless the handler only starts
/// a flow (see [`Acts`]).
async fn route_to(
    ctx: &Ctx,
    r: Route,
    context: &'static str,
    route: &'static str,
) -> Option<&'static str> {
    if r.acts == Acts::Freely && !durable::inbound::acting(ctx).await {
        return None;
    }
    run_handler(ctx, r.handler, context).await;
    Some(route)
}
