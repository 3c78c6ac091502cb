//! Several replicas of one bot on one shared backend (the `coordination` opt-in), in one test
//! process: every replica is a `Bot` with its own `MockProvider` (the fake channel) and its
//! own instance id, all on one `DurableKv` (memory here; Postgres and Redis when their
//! variables are set, with the `postgres` / `redis` features).
//!
//! | test | what it proves |
//! | --- | --- |
//! | `chats_spread_over_replicas_*` | each chat's messages go to random replicas; every message gets exactly one answer, per-chat order kept, a stopped replica's chats go on elsewhere |
//! | `a_chat_is_handled_by_one_replica_at_a_time` | same-chat messages sent at once to different replicas never run concurrently |
//! | `one_leader_polls_and_a_standby_takes_over` | only the leader runs the transport; when it stops, a standby starts it within the leader lease |
//!
//! The last two run on tokio's paused clock, with each replica's wall clock following it
//! ([`TokioClock`]): turns, leader leases and the handlers' work pass in virtual time.
#![allow(clippy::unwrap_used)]

// The server tests read BOTMESH_TEST_POSTGRES_URL and BOTMESH_TEST_REDIS_URL (the CI's
// full lane runs this file, once the servers are up).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use botmesh::clock::TokioClock;
use botmesh::coordination::Coordination;
use botmesh::durability::{DurabilityConfig, DurableKv, MemoryKv};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;

/// One replica: its bot and its end of the fake channel.
/// 2026-01-01T00:00:00Z: where the paused tests' wall clocks ([`TokioClock`]) start.
const T0: i64 = 1_767_225_600_000;

struct Replica {
    bot: Bot,
    channel: MockProvider,
}

fn config(instance: &str) -> DurabilityConfig {
    let mut c = DurabilityConfig::default();
    c.instance_id = Some(instance.to_owned());
    c
}

/// The answers of all replicas, (chat, text) in the order they were sent; a watch channel, so
/// a test waits for the answer it expects instead of polling on the clock.
type Answers = Arc<watch::Sender<Vec<(String, String)>>>;

/// Waits up to 10 s until `done` holds of the answers; returns whether it does.
async fn answered(answers: &Answers, done: impl FnMut(&Vec<(String, String)>) -> bool) -> bool {
    let mut rx = answers.subscribe();
    tokio::time::timeout(Duration::from_secs(10), rx.wait_for(done))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// Starts replica `name` on `kv`; each answer is recorded as (chat, text) in `answers`.
async fn replica(
    kv: Arc<dyn DurableKv>,
    name: &str,
    coordination: Coordination,
    answers: Answers,
) -> Replica {
    let channel = MockProvider::new();
    let bot = Bot::builder(channel.clone())
        .bot_id("replicas")
        .durability(DurabilityOptions::shared(kv).config(config(name)))
        .coordination(coordination)
        .build()
        .unwrap();
    bot.on_message(move |ctx: Ctx| {
        let answers = Arc::clone(&answers);
        async move {
            let text = format!("re: {}", ctx.text());
            ctx.reply(text.clone()).await?;
            answers.send_modify(|a| a.push((ctx.chat().as_str().to_owned(), text)));
            Ok(())
        }
    });
    bot.start().await.unwrap();
    Replica { bot, channel }
}

/// Sends each chat's messages one by one (a user waits for the answer) to random replicas,
/// stopping replica 0 halfway; then checks every answer, once, in order.
async fn chats_spread_over_replicas(kv: Arc<dyn DurableKv>) {
    let answers: Answers = Arc::new(watch::Sender::new(Vec::new()));
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(Arc::new(
            replica(
                Arc::clone(&kv),
                &format!("r{i}"),
                Coordination::replicas(),
                Arc::clone(&answers),
            )
            .await,
        ));
    }
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (chats, per_chat) = (6usize, 8usize);
    let mut users = Vec::new();
    for c in 0..chats {
        let replicas = replicas.clone();
        let answers = Arc::clone(&answers);
        let stopped = Arc::clone(&stopped);
        users.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(c as u64);
            let chat = format!("chat{c}");
            for n in 0..per_chat {
                let text = format!("m{n}");
                // A replica that is stopping refuses (`NotRunning`): the load balancer sends
                // the message to another one.
                loop {
                    let live = if stopped.load(Ordering::SeqCst) {
                        1..3
                    } else {
                        0..3
                    };
                    let to = &replicas[rng.usize(live)];
                    if to
                        .channel
                        .say(&chat, &format!("{chat}-{n}"), &text)
                        .await
                        .is_ok()
                    {
                        break;
                    }
                }
                let want = format!("re: {text}");
                // Missing answers fail the checks below.
                answered(&answers, |a| {
                    a.iter().any(|(ch, t)| ch == &chat && t == &want)
                })
                .await;
            }
        }));
    }
    // Halfway: replica 0 stops once half of the messages are answered.
    let half = chats * per_chat / 2;
    assert!(
        answered(&answers, |a| a.len() >= half).await,
        "half answered"
    );
    stopped.store(true, Ordering::SeqCst);
    replicas[0].bot.stop().await.unwrap();
    for u in users {
        u.await.unwrap();
    }
    let answers = answers.borrow().clone();
    let mut by_chat: HashMap<String, Vec<String>> = HashMap::new();
    for (chat, text) in answers {
        by_chat.entry(chat).or_default().push(text);
    }
    for c in 0..chats {
        let want: Vec<String> = (0..per_chat).map(|n| format!("re: m{n}")).collect();
        assert_eq!(
            by_chat.get(&format!("chat{c}")),
            Some(&want),
            "chat{c}: every message answered once, in order"
        );
    }
    let sent: usize = replicas.iter().map(|r| r.channel.sent().len()).sum();
    assert_eq!(sent, chats * per_chat, "no duplicate reached the channel");
    let taken: u64 = replicas
        .iter()
        .map(|r| r.bot.coordination_metrics().unwrap().turns_taken)
        .sum();
    assert!(
        taken >= (chats * per_chat) as u64,
        "every message ran under a turn"
    );
    for r in &replicas[1..] {
        r.bot.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_spread_over_replicas_on_memory() {
    chats_spread_over_replicas(Arc::new(MemoryKv::new())).await;
}

on_server_kvs!(
    chats_spread_over_replicas("replicas"):
    chats_spread_over_replicas_on_postgres,
    chats_spread_over_replicas_on_redis
);

/// Replica `name` of the bot `replicas` on the shared `kv`, under `coordination`: built, not
/// started, and its channel.
fn replica_of(
    kv: &Arc<dyn DurableKv>,
    name: &str,
    coordination: Coordination,
) -> (Bot, MockProvider) {
    let channel = MockProvider::new();
    let bot = Bot::builder(channel.clone())
        .bot_id("replicas")
        .clock(TokioClock::new(T0))
        .durability(DurabilityOptions::shared(Arc::clone(kv)).config(config(name)))
        .coordination(coordination)
        .build()
        .unwrap();
    (bot, channel)
}

#[tokio::test(start_paused = true)]
async fn a_chat_is_handled_by_one_replica_at_a_time() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let in_handler = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(watch::Sender::new(0usize));
    let mut replicas = Vec::new();
    for i in 0..3 {
        let (bot, channel) = replica_of(&kv, &format!("r{i}"), Coordination::replicas());
        let (in_handler, overlaps, handled) = (
            Arc::clone(&in_handler),
            Arc::clone(&overlaps),
            Arc::clone(&handled),
        );
        bot.on_message(move |_ctx: Ctx| {
            let (in_handler, overlaps, handled) = (
                Arc::clone(&in_handler),
                Arc::clone(&overlaps),
                Arc::clone(&handled),
            );
            async move {
                if in_handler.fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                // The handler's work holds the chat's turn while the other replicas' messages
                // of the chat must wait.
                tokio::time::sleep(Duration::from_millis(20)).await;
                in_handler.fetch_sub(1, Ordering::SeqCst);
                handled.send_modify(|n| *n += 1);
                Ok(())
            }
        });
        bot.start().await.unwrap();
        replicas.push((bot, channel));
    }
    for n in 0..9 {
        replicas[n % 3]
            .1
            .say("one", &format!("m{n}"), "hi")
            .await
            .unwrap();
    }
    let mut all = handled.subscribe();
    let _ = tokio::time::timeout(Duration::from_secs(10), all.wait_for(|n| *n == 9)).await;
    assert_eq!(*handled.borrow(), 9);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two replicas ran the chat at once"
    );
    let waits: u64 = replicas
        .iter()
        .map(|(b, _)| b.coordination_metrics().unwrap().turn_waits)
        .sum();
    assert!(waits > 0, "replicas waited for each other's turn");
    for (bot, _) in replicas {
        bot.stop().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn one_leader_polls_and_a_standby_takes_over() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let coordination = Coordination::replicas()
        .leader_only_transport()
        .leader_lease(Duration::from_millis(300))
        .safety_margin(Duration::from_millis(50));
    let mut replicas = Vec::new();
    for i in 0..3 {
        let (bot, channel) = replica_of(&kv, &format!("p{i}"), coordination.clone());
        bot.start().await.unwrap();
        replicas.push((bot, channel));
    }
    let polling = |replicas: &[(Bot, MockProvider)]| {
        replicas
            .iter()
            .filter(|(_, c)| {
                let (starts, stops) = c.start_stop_counts();
                starts > stops
            })
            .count()
    };
    assert_eq!(
        polling(&replicas),
        1,
        "exactly one replica runs the transport"
    );
    let leader = replicas
        .iter()
        .position(|(b, _)| b.is_transport_leader())
        .unwrap();
    assert_eq!(leader, 0, "the first replica to start leads");
    replicas[leader].0.stop().await.unwrap();
    let rest = &replicas[1..];
    let mut took_over = false;
    for _ in 0..200 {
        if polling(rest) == 1 {
            took_over = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(took_over, "a standby took the transport over");
    assert_eq!(
        polling(&replicas),
        1,
        "still exactly one replica runs the transport"
    );
    for (bot, _) in &replicas[1..] {
        bot.stop().await.unwrap();
    }
}
