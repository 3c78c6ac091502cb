//! Tracing through OpenTelemetry (feature `otel`): the order flow's messages arrive in an
//! in-memory exporter as a tree of spans (`bot.inbound` → `bot.persist`, `bot.dispatch` →
//! `bot.turn` → `bot.send`), with chat and flow fields, and the first turn after a restart
//! links to the turn that wrote the checkpoint it resumed from; a paced reply of a plain
//! handler is `bot.handler` → `bot.pace`, then `bot.send`.
//!
//! A test binary of its own (`--test tracing_spans`, with `otel`): tracing decides which
//! callsites a recorder sees across every thread of the process, and a test of another file
//! registering a callsite while the recorder is set up could leave it unrecorded here.

#![allow(clippy::unwrap_used)]

#[macro_use]
#[allow(dead_code, unused_macros)]
mod common;

use std::time::Duration;

use botmesh::prelude::*;
use botmesh::telemetry;
use botmesh::testing::{MockProvider, Transcript};
use common::order;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt;

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

fn parent<'a>(spans: &'a [SpanData], span: &SpanData) -> Option<&'a SpanData> {
    spans
        .iter()
        .find(|p| p.span_context.span_id() == span.parent_span_id)
}

/// The names from `span` up to its root.
fn ancestry(spans: &[SpanData], span: &SpanData) -> Vec<String> {
    let mut names = vec![span.name.to_string()];
    let mut at = span;
    while let Some(p) = parent(spans, at) {
        names.push(p.name.to_string());
        at = p;
    }
    names
}

/// Held by each test that records spans: two recorders set up at once (or one dropped while
/// the other records) make tracing recompute which callsites are enabled while the other
/// test's spans are being made, and a span can go unrecorded.
static RECORDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An in-memory exporter recording the spans of this thread (the test's runtime has one:
/// every task the bot spawns records here) until the guard drops. Callsites other tests
/// registered meanwhile have their interest computed again with this recorder in place.
fn recorder() -> (
    InMemorySpanExporter,
    SdkTracerProvider,
    tracing::subscriber::DefaultGuard,
) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(telemetry::otel::layer(&provider));
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    (exporter, provider, guard)
}

#[tokio::test(start_paused = true)]
async fn a_paced_reply_is_a_pace_then_a_send_in_its_handler() {
    let _serial = RECORDING.lock().await;
    let (exporter, provider, _default) = recorder();
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .pacing(Pacing::default())
        .build()
        .unwrap();
    common::hello_on_hi(&bot);
    bot.start().await.unwrap();
    mock.say("bob", "m1", "/hi").await.unwrap();
    assert_eq!(mock.wait_for_sends(1, Duration::from_secs(10)).await, 1);
    bot.idle().await;
    bot.stop().await.unwrap();
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    let one = |name: &str| {
        let found: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "one {name}: {spans:#?}");
        found[0]
    };
    let (pace, send, handler) = (
        one(telemetry::PACE),
        one(telemetry::SEND),
        one(telemetry::HANDLER),
    );
    let above = [telemetry::HANDLER, telemetry::DISPATCH, telemetry::INBOUND];
    assert_eq!(ancestry(&spans, pace)[1..], above);
    assert_eq!(ancestry(&spans, send)[1..], above);
    assert!(
        pace.end_time <= send.start_time,
        "the pacer's delay comes first"
    );
    assert_eq!(attr(handler, "handler").as_deref(), Some("handler:command"));
    assert_eq!(attr(send, "chat").as_deref(), Some("bob"));
}

#[tokio::test]
async fn the_order_flow_is_a_span_tree_and_its_resumed_turn_links_to_the_checkpoint() {
    let _serial = RECORDING.lock().await;
    let (exporter, provider, _default) = recorder();
    let mut t = Transcript::durable(|b| {
        let bot = b.build()?;
        bot.flow(order);
        Ok(bot)
    })
    .await
    .unwrap();
    t.says_all("alice", &["/order", "pears"]).await;
    t.restart().await.unwrap();
    t.says("alice", "2").await;
    drop(t);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    // Every message is a root `bot.inbound` with its chat, persisted under it.
    let inbound: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == telemetry::INBOUND)
        .collect();
    assert_eq!(inbound.len(), 3, "one root per message");
    for root in &inbound {
        assert!(parent(&spans, root).is_none(), "bot.inbound is a root");
        assert_eq!(attr(root, "chat").as_deref(), Some("alice"));
        let persisted = spans
            .iter()
            .filter(|s| s.name == telemetry::PERSIST)
            .any(|s| s.parent_span_id == root.span_context.span_id());
        assert!(
            persisted,
            "the message's persistence is under its bot.inbound"
        );
    }

    // Each message's turn runs in its dispatch (the first one in the `/order` command's
    // handler, which starts the flow; the answers as the chat's conversation), and every
    // send in a turn.
    let step = |s: &SpanData| attr(s, "step").unwrap();
    let turns: Vec<&SpanData> = spans.iter().filter(|s| s.name == telemetry::TURN).collect();
    assert_eq!(
        turns.len(),
        3,
        "one turn per message: start, item, quantity"
    );
    for turn in &turns {
        let expected: &[&str] = if step(turn) == "1" {
            &[
                telemetry::TURN,
                telemetry::HANDLER,
                telemetry::DISPATCH,
                telemetry::INBOUND,
            ]
        } else {
            &[telemetry::TURN, telemetry::DISPATCH, telemetry::INBOUND]
        };
        assert_eq!(ancestry(&spans, turn), expected, "turn {}", step(turn));
        assert_eq!(attr(turn, "chat").as_deref(), Some("alice"));
        assert!(attr(turn, "flow").unwrap().ends_with("order"), "{turn:?}");
        let dispatch = spans
            .iter()
            .find(|s| {
                s.name == telemetry::DISPATCH
                    && ancestry(&spans, turn).len() > 2
                    && turn.span_context.trace_id() == s.span_context.trace_id()
            })
            .unwrap();
        let route = if step(turn) == "1" {
            "command"
        } else {
            "conversation"
        };
        assert_eq!(attr(dispatch, "route").as_deref(), Some(route));
    }
    let sends: Vec<&SpanData> = spans.iter().filter(|s| s.name == telemetry::SEND).collect();
    assert_eq!(sends.len(), 3, "the two questions and the confirmation");
    for send in &sends {
        let above = ancestry(&spans, send);
        assert_eq!(above[..2], [telemetry::SEND, telemetry::TURN], "{above:?}");
        assert_eq!(attr(send, "chat").as_deref(), Some("alice"));
        assert!(attr(send, "key").is_some(), "a send names its key");
    }

    // The turn after the restart links to the turn that wrote the checkpoint ("pears"), in
    // another trace; no other turn links.
    let wrote = turns.iter().find(|s| step(s) == "2").unwrap();
    let resumed = turns.iter().find(|s| step(s) == "3").unwrap();
    assert_eq!(resumed.links.links.len(), 1, "{resumed:?}");
    let link = &resumed.links.links[0].span_context;
    assert_eq!(link.span_id(), wrote.span_context.span_id());
    assert_eq!(link.trace_id(), wrote.span_context.trace_id());
    assert_ne!(
        resumed.span_context.trace_id(),
        wrote.span_context.trace_id()
    );
    for turn in turns.iter().filter(|s| step(s) != "3") {
        assert!(turn.links.links.is_empty(), "{turn:?}");
    }
}
