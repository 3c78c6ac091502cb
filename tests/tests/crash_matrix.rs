//! The crash matrix at the bot level: a bot on a crashable journal dies at each journal write
//! point (before and after the write), under both ambiguity policies; a new bot with the same
//! instance id starts on the same backend and store, the channel redelivers what was not
//! acknowledged, and the outcome is checked against the table "What is guaranteed" of
//! `docs/durability-and-backends.md`.
//! Seeded random crash points follow. The table of points × outcomes is printed.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use botmesh::durability::kv::WritePhase;
use botmesh::durability::kv::WritePoint;
use botmesh::durability::{DurabilityConfig, DurabilityEvent, MemoryKv, MemoryStore, OnAmbiguous};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::{CrashableProvider, MockProvider, crashable};
use botmesh_tests::settle;

fn config(policy: OnAmbiguous) -> DurabilityConfig {
    let mut c = botmesh_tests::fast_durability();
    c.outbox.on_ambiguous = policy;
    c.outbox.inline_max = Duration::from_millis(200);
    c
}

fn handler(bot: &Bot) {
    bot.catch_all(|ctx: Ctx| async move {
        let t = ctx.text().to_owned();
        ctx.reply(format!("{t}:one")).await?;
        ctx.reply(format!("{t}:two")).await?;
        Ok(())
    });
}

struct Run {
    delivered: Vec<String>,
    ambiguous: usize,
    /// Bot B's `outbox_deduped`: sends answered from the outbox.
    deduped: u64,
}

/// One crash run: bot A dies as armed by `arm`, bot B recovers; `messages` are sent to A and
/// redelivered to B when A did not acknowledge them.
async fn run(
    policy: OnAmbiguous,
    messages: &[&str],
    arm: impl FnOnce(&botmesh::testing::Crashable<MemoryKv>),
) -> Run {
    let shared = Arc::new(MemoryKv::new());
    let switch = crashable(shared.clone());
    arm(&switch);
    let store = MemoryStore::new();

    let mock_a = MockProvider::new();
    let bot_a = Bot::builder(CrashableProvider::new(mock_a.clone(), &switch))
        .store(store.clone())
        .durability(
            DurabilityOptions::backend(switch.clone())
                .config(config(policy))
                .instance_id("i1"),
        )
        .build()
        .unwrap();
    handler(&bot_a);
    bot_a.start().await.unwrap();
    let mut unacked = Vec::new();
    for (i, text) in messages.iter().enumerate() {
        if mock_a.say("chat", &format!("m{i}"), text).await.is_err() {
            unacked.push((i, *text));
        }
    }
    settle(&bot_a).await;
    bot_a.stop().await.unwrap();

    let mock_b = MockProvider::new();
    let bot_b = Bot::builder(mock_b.clone())
        .store(store.clone())
        .durability(
            DurabilityOptions::shared(shared)
                .config(config(policy))
                .instance_id("i1"),
        )
        .build()
        .unwrap();
    handler(&bot_b);
    let mut events = bot_b.subscribe();
    bot_b.start().await.unwrap();
    // The channel redelivers what was not acknowledged (a webhook got no 200).
    for (i, text) in unacked {
        mock_b.say("chat", &format!("m{i}"), text).await.unwrap();
    }
    settle(&bot_b).await;
    let mut ambiguous = 0;
    while let Ok(e) = events.try_recv() {
        if matches!(e, BotEvent::Durability(DurabilityEvent::Ambiguous { .. })) {
            ambiguous += 1;
        }
    }
    let deduped = bot_b.durability().unwrap().metrics().outbox_deduped;
    bot_b.stop().await.unwrap();
    let mut delivered = mock_a.texts("chat");
    delivered.extend(mock_b.texts("chat"));
    Run {
        delivered,
        ambiguous,
        deduped,
    }
}

fn count(v: &[String], s: &str) -> usize {
    v.iter().filter(|x| x.as_str() == s).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_under_both_policies_meets_the_guarantee_table() {
    let points = botmesh_tests::MESSAGE_WRITE_POINTS;
    let mut table = Vec::new();
    for point in points {
        for phase in [WritePhase::Before, WritePhase::After] {
            for policy in [OnAmbiguous::Skip, OnAmbiguous::Resend] {
                let r = run(policy, &["hi"], |s| s.crash_at(point, phase, 1)).await;
                let one = count(&r.delivered, "hi:one");
                let two = count(&r.delivered, "hi:two");
                // The ambiguous window: "about to call the provider" landed, "sent" did not.
                // An inline send is journaled and leased in one write (`journal_and_begin`):
                // once `outbox.journal` has landed, so has `outbox.beginAttempt`.
                let window = matches!(
                    (point, phase),
                    (
                        WritePoint::OutboxJournal | WritePoint::OutboxBeginAttempt,
                        WritePhase::After
                    ) | (WritePoint::OutboxMarkSent, WritePhase::Before)
                );
                let provider_called = matches!(point, WritePoint::OutboxMarkSent);
                let expected_one = match (window, policy, provider_called) {
                    (false, _, _) => 1,
                    // skip: never a duplicate, possibly lost (lost when the call never happened)
                    (true, OnAmbiguous::Skip, called) => usize::from(called),
                    // resend: never lost, possibly a duplicate
                    (true, OnAmbiguous::Resend, called) => 1 + usize::from(called),
                };
                let outcome = format!(
                    "{:<22} {:<6} {:<6} one×{} two×{} ambiguous×{}",
                    point.as_str(),
                    format!("{phase:?}").to_lowercase(),
                    format!("{policy:?}").to_lowercase(),
                    one,
                    two,
                    r.ambiguous
                );
                assert_eq!(one, expected_one, "{outcome}: delivered {:?}", r.delivered);
                assert_eq!(
                    two, 1,
                    "{outcome}: the second reply, after the crash, exactly once"
                );
                assert_eq!(
                    r.ambiguous > 0,
                    window,
                    "{outcome}: durability:ambiguous fires in the window only"
                );
                // The replay re-makes a send recorded as sent: answered from the outbox, and
                // counted.
                if matches!(
                    (point, phase),
                    (WritePoint::InboxComplete, WritePhase::Before)
                        | (WritePoint::OutboxMarkSent, WritePhase::After)
                ) {
                    assert!(r.deduped >= 1, "{outcome}: outbox_deduped {}", r.deduped);
                }
                table.push(outcome);
            }
        }
    }
    println!("crash point            phase  policy outcome");
    for row in table {
        println!("{row}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_random_crash_points() {
    let messages = ["a", "b", "c"];
    for seed in 0..12u64 {
        for policy in [OnAmbiguous::Skip, OnAmbiguous::Resend] {
            let r = run(policy, &messages, |s| s.crash_randomly(seed, 0.08)).await;
            for m in messages {
                for which in ["one", "two"] {
                    let text = format!("{m}:{which}");
                    let n = count(&r.delivered, &text);
                    match policy {
                        OnAmbiguous::Skip => {
                            assert!(n <= 1, "seed {seed} skip: {text} sent {n} times")
                        }
                        _ => assert!(n >= 1, "seed {seed} resend: {text} lost"),
                    }
                    if r.ambiguous == 0 {
                        assert_eq!(
                            n, 1,
                            "seed {seed} {policy:?}: {text} without ambiguity: {:?}",
                            r.delivered
                        );
                    }
                }
            }
        }
    }
}
