//! Hand-over of a conversation step cut short (`Coordination::handover`), with two replicas of
//! one bot on one shared backend (memory here; Postgres and Redis when their variables are
//! set, with the `postgres` / `redis` features). Replica A runs in a Tokio runtime of its own,
//! which the test shuts down in the middle of a flow's step: its tasks stop at their next
//! await, as a SIGKILLed process would (nothing is released, the turn and leases expire).
//!
//! | test | what it proves |
//! | --- | --- |
//! | `a_non_persistent_flow_is_forwarded_to_its_replica_*` | a non-persistent flow started on replica A, whose next message reaches replica B while A lives, goes on on A: B forwards the message (counted, emitted, on `/metrics`), A takes it as the answer and replies exactly once; B replies nothing |
//! | `a_non_persistent_flow_of_a_dead_replica_is_lost_*` | with A killed (its replica lease expired), the message reaching B takes the lost-flow path: `lost:replica`, no forward, the message routed as a fresh one |
//! | `a_message_forwarded_twice_is_answered_once_*` | the same message put twice on A's forward queue (its receiver replayed and forwarded it again) is journaled on A once and answered once; both entries leave the queue |
//! | `a_timeout_claimed_by_another_replica_fires_on_the_holder_*` | the ask timeout of a non-persistent flow held by A, claimed by B's scheduler, is forwarded to A and fires there once |
//! | `a_cut_step_is_finished_by_the_next_replica_*` | a step killed after its first send (made, or collected for the step's commit on a store that commits steps atomically), on replica A, is finished by replica B with the answer the checkpoint carries when the chat's next message reaches B; that message then answers the question the finished step asked; the send made before the cut is not repeated; the cut message's later replay is not taken as an answer; the hand-over is counted and emitted |
#![allow(clippy::unwrap_used)]

use crate::servers;

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::eventually::eventually;
use botmesh::coordination::{Coordination, CoordinationConfig, CoordinationEvent};
use botmesh::durability::coordination::{CoordinationMetrics, Coordinator};
use botmesh::durability::{
    DurabilityConfig, DurableKv, InboxState, MemoryKv, MemoryStore, OutboxState, Store,
};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::schedule::SchedulerOptions;
use botmesh::testing::MockProvider;
use tokio::sync::Notify;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

/// The chats whose `greet` step stalls after its greeting (replica A's, until it is killed).
static STALLED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn stall(chat: &str, on: bool) {
    let mut set = STALLED.lock().unwrap();
    let set = set.get_or_insert_with(HashSet::new);
    if on {
        set.insert(chat.to_owned());
    } else {
        set.remove(chat);
    }
}

/// The chats whose `greet` step reached its stall.
static REACHED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Notified when a chat's `greet` step reaches its stall.
static STALL_REACHED: Notify = Notify::const_new();

fn stalls(chat: &str) -> bool {
    let stalls = STALLED
        .lock()
        .unwrap()
        .as_ref()
        .is_some_and(|s| s.contains(chat));
    if stalls {
        REACHED
            .lock()
            .unwrap()
            .get_or_insert_with(HashSet::new)
            .insert(chat.to_owned());
        STALL_REACHED.notify_waiters();
    }
    stalls
}

fn reached(chat: &str) -> bool {
    REACHED
        .lock()
        .unwrap()
        .as_ref()
        .is_some_and(|s| s.contains(chat))
}

/// Waits (15 s at most) until `chat`'s `greet` step reached its stall.
async fn wait_for_stall(chat: &str) {
    let reach = async {
        loop {
            let notified = STALL_REACHED.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if reached(chat) {
                return;
            }
            notified.await;
        }
    };
    let within = tokio::time::timeout(Duration::from_secs(15), reach).await;
    assert!(within.is_ok(), "A's step never reached its stall");
}

/// Two questions, with a greeting between them.
#[flow(start = command("hi"))]
#[persistent]
async fn greet(cx: &mut FlowCx) -> FlowResult {
    let name: String = cx
        .ask("What is your name?")
        .id("name")
        .await?
        .text()
        .to_owned();
    cx.send(format!("Hello {name}")).await?;
    if stalls(cx.chat().as_str()) {
        // Killed here: the greeting went out (or, when the store commits a step with its
        // sends in one transaction, was collected), the next question did not.
        std::future::pending::<()>().await;
    }
    let age: u32 = cx
        .ask("How old are you?")
        .id("age")
        .parse::<u32>("A number, please.")
        .await?;
    cx.send(format!("{name} is {age}")).await?;
    Ok(())
}

/// One question, in memory.
#[flow(start = command("color"))]
async fn color(cx: &mut FlowCx) -> FlowResult {
    let color: String = cx.ask("Which color?").id("color").await?.text().to_owned();
    cx.send(format!("You like {color}")).await?;
    Ok(())
}

/// One question, in memory, that gives up after a second of silence.
#[flow(start = command("nap"))]
async fn nap(cx: &mut FlowCx) -> FlowResult {
    match cx
        .ask("Still there?")
        .id("nap")
        .idle(Duration::from_secs(1))
        .await
    {
        Ok(answer) => cx.send(format!("Yes: {}", answer.text())).await?,
        Err(Interrupt::Timeout) => cx.send("Nobody there.").await?,
        Err(Interrupt::Cancelled) => return cx.cancel(),
    }
    Ok(())
}

/// The shared store and journals of the replicas.
type Shared = (Arc<dyn Store>, Arc<dyn DurableKv>);

/// A replica on `store` and `kv` under instance id `name`, with short leases.
async fn replica(shared: Shared, name: &str) -> (Bot, MockProvider) {
    replica_polling(shared, name, Duration::from_millis(100)).await
}

/// A replica whose scheduler looks for due jobs every `poll`.
async fn replica_polling((store, kv): Shared, name: &str, poll: Duration) -> (Bot, MockProvider) {
    let mut config = DurabilityConfig::default();
    config.instance_id = Some(name.to_owned());
    config.inbox.lease = Duration::from_millis(1500);
    config.poll = Duration::from_millis(100);
    let channel = MockProvider::new();
    let bot = Bot::builder(channel.clone())
        .bot_id("handover")
        .store_arc(store)
        .durability(DurabilityOptions::shared(kv).config(config))
        .coordination(
            Coordination::replicas()
                .handover()
                .turn_lease(Duration::from_millis(1000))
                .leader_lease(Duration::from_millis(900))
                .safety_margin(Duration::from_millis(200)),
        )
        .scheduler(SchedulerOptions {
            poll,
            ..SchedulerOptions::default()
        })
        .build()
        .unwrap();
    bot.flow(greet);
    bot.flow(color);
    bot.flow(nap);
    bot.start().await.unwrap();
    (bot, channel)
}

/// Waits (15 s at most) until `channel` sent `text` to `chat`.
async fn wait_for(channel: &MockProvider, chat: &str, text: &str) {
    let sent = channel
        .wait_until(Duration::from_secs(15), |sent| {
            sent.iter()
                .any(|s| s.chat.as_str() == chat && s.text() == text)
        })
        .await;
    assert!(
        sent,
        "{text:?} never reached {chat}: {:?}",
        channel.texts(chat)
    );
}

/// Waits (15 s at most) for an event of `events` that `is` matches; `what` names it.
async fn event(events: &mut Receiver<BotEvent>, what: &str, is: impl Fn(&BotEvent) -> bool) {
    let seen = async {
        loop {
            match events.recv().await {
                Ok(event) if is(&event) => return,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(e) => panic!("the bot's events ended: {e}"),
            }
        }
    };
    let within = tokio::time::timeout(Duration::from_secs(15), seen).await;
    assert!(within.is_ok(), "never: {what}");
}

/// Waits (15 s at most) until the shared journals and `forwards` (a replica's forward queue)
/// hold nothing open: every message journaled was handled to its end, every send made, every
/// forwarded entry taken. A message dispatched twice would have answered twice by then.
async fn settled(bot: &Bot, store: &Arc<dyn Store>, forwards: &str) {
    let d = bot.durability().unwrap();
    let open = async || {
        let inbox = [InboxState::Pending, InboxState::Processing];
        let outbox = [
            OutboxState::Pending,
            OutboxState::Sending,
            OutboxState::Failed,
        ];
        for state in inbox {
            if !d.inbox().list(state, 1).await.unwrap().is_empty() {
                return true;
            }
        }
        for state in outbox {
            if !d.outbox().list(state, 1).await.unwrap().is_empty() {
                return true;
            }
        }
        !store.values(forwards).await.unwrap().is_empty()
    };
    let settled = eventually(Duration::from_secs(15), async || !open().await).await;
    assert!(settled, "the journals and {forwards} still hold open work");
    bot.idle().await;
}

/// Replicas A, in a runtime of its own that the test shuts down to kill it, and B; `kv` opens
/// the shared store and journals (A's in A's runtime).
async fn killable_a_and_b<F, Fut>(
    kv: &F,
) -> (
    tokio::runtime::Runtime,
    (Bot, MockProvider),
    (Bot, MockProvider),
)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Shared> + Send + 'static,
{
    let killable = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let kv_a = kv();
    let a = killable
        .spawn(async move { replica(kv_a.await, "a").await })
        .await
        .unwrap();
    let b = replica(kv().await, "b").await;
    (killable, a, b)
}

/// The scenario of the module table; `kv` opens the shared store and journals (called once
/// per replica, A's in A's own runtime).
async fn a_cut_step_is_finished_by_the_next_replica(kv: impl OpenShared, chat: &str) {
    let (killable, (bot_a, chan_a), (bot_b, chan_b)) = killable_a_and_b(&kv).await;
    let mut events = bot_b.subscribe_coordination().unwrap();
    let (store, _) = kv().await;
    let say = |channel: &MockProvider, id: &'static str, text: &'static str| {
        let (channel, chat) = (channel.clone(), chat.to_owned());
        async move { channel.say(&chat, id, text).await.is_ok() }
    };
    assert!(killable.spawn(say(&chan_a, "m1", "/hi")).await.unwrap());
    wait_for(&chan_a, chat, "What is your name?").await;
    stall(chat, true);
    assert!(killable.spawn(say(&chan_a, "m2", "Alice")).await.unwrap());
    // The step sent its greeting (its send returned once recorded `sent`) or collected it for
    // its commit: kill A in the middle of the step.
    wait_for_stall(chat).await;
    killable.shutdown_background();
    std::mem::forget(bot_a);
    stall(chat, false);
    // The user writes again, and the load balancer picks B: B waits for A's turn to expire,
    // finishes the cut step with "Alice", and takes "42" as the age.
    assert!(say(&chan_b, "m3", "42").await);
    wait_for(&chan_b, chat, "Alice is 42").await;
    let texts = || [chan_a.texts(chat), chan_b.texts(chat)].concat();
    let want = [
        "What is your name?",
        "Hello Alice",
        "How old are you?",
        "Alice is 42",
    ];
    assert_eq!(
        texts(),
        want,
        "B finished the cut step (a greeting A sent is not sent again) and then took 42 as the age"
    );
    assert_counted_once(&bot_b, |m| m.handovers, "handovers");
    let handed = last_event(&mut events, |event| match event {
        CoordinationEvent::HandedOver { chat, flow, .. } => Some((chat, flow)),
        _ => None,
    });
    let (c, flow) = handed.expect("a HandedOver event");
    assert_eq!(c, chat);
    assert!(flow.ends_with("greet"), "{flow}");
    // A's lease on "Alice" expires and B replays it (unless the step's commit on B completed
    // it): it already fed the finished step.
    settled(&bot_b, &store, "botmesh:forwards:b").await;
    assert_eq!(
        texts(),
        want,
        "the replay of the cut message was not taken as an answer"
    );
    bot_b.stop().await.unwrap();
}

/// The shared store and journals in memory, as an opener.
fn memory() -> impl Fn() -> std::future::Ready<Shared> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    move || std::future::ready((Arc::clone(&store), Arc::clone(&kv)))
}

/// Whether `events` saw the flow event `what` in `chat`.
fn saw_flow_event(
    events: &mut tokio::sync::broadcast::Receiver<BotEvent>,
    chat: &str,
    what: &str,
) -> bool {
    let mut seen = false;
    while let Ok(event) = events.try_recv() {
        if let BotEvent::Flow {
            chat: c, what: w, ..
        } = event
        {
            seen |= c.as_str() == chat && w == what;
        }
    }
    seen
}

/// What opens a replica's shared backend (the same one at each call).
trait OpenShared: Fn() -> Self::Opened {
    type Opened: Future<Output = Shared> + Send + 'static;
}

impl<F, Fut> OpenShared for F
where
    F: Fn() -> Fut,
    Fut: Future<Output = Shared> + Send + 'static,
{
    type Opened = Fut;
}

/// Checks that `bot` counted one of a coordination metric: in its metrics (`count`) and in
/// what Prometheus scrapes (`botmesh_coordination_<name>_total`).
fn assert_counted_once(bot: &Bot, count: fn(&CoordinationMetrics) -> u64, name: &str) {
    let metrics = bot.coordination_metrics().unwrap();
    assert_eq!(count(&metrics), 1, "{name}: {metrics:?}");
    let scraped = botmesh::operating::prometheus::render(bot);
    assert!(
        scraped.contains(&format!("\nbotmesh_coordination_{name}_total 1\n")),
        "{scraped}"
    );
}

/// The last of the coordination events received so far that `pick` takes.
fn last_event<T>(
    events: &mut Receiver<CoordinationEvent>,
    pick: impl Fn(CoordinationEvent) -> Option<T>,
) -> Option<T> {
    let mut last = None;
    while let Ok(event) = events.try_recv() {
        last = pick(event).or(last);
    }
    last
}

/// Forwarding: A asks, the answer reaches B, A answers (once).
async fn a_non_persistent_flow_is_forwarded_to_its_replica(kv: impl OpenShared, chat: &str) {
    let shared = kv().await;
    let store = Arc::clone(&shared.0);
    let (bot_a, chan_a) = replica(shared, "a").await;
    let (bot_b, chan_b) = replica(kv().await, "b").await;
    let mut coord_events = bot_b.subscribe_coordination().unwrap();
    let mut events = bot_b.subscribe();
    assert!(chan_a.say(chat, "c1", "/color").await.is_ok());
    wait_for(&chan_a, chat, "Which color?").await;
    assert!(chan_b.say(chat, "c2", "blue").await.is_ok());
    wait_for(&chan_a, chat, "You like blue").await;
    // Everything settled on both replicas: a message dispatched twice, or also on B, would
    // have been answered twice.
    settled(&bot_b, &store, "botmesh:forwards:a").await;
    bot_a.idle().await;
    assert_eq!(chan_a.texts(chat), ["Which color?", "You like blue"]);
    assert!(chan_b.texts(chat).is_empty(), "{:?}", chan_b.texts(chat));
    assert_counted_once(&bot_b, |m| m.forwards, "forwards");
    let forwarded = last_event(&mut coord_events, |event| match event {
        CoordinationEvent::Forwarded { chat, to } => Some((chat, to)),
        _ => None,
    });
    assert_eq!(forwarded, Some((chat.to_owned(), "a".to_owned())));
    assert!(saw_flow_event(&mut events, chat, "forwarded"));
    bot_b.stop().await.unwrap();
    bot_a.stop().await.unwrap();
}

/// A dead holder: the lost-flow path on B.
async fn a_non_persistent_flow_of_a_dead_replica_is_lost(kv: impl OpenShared, chat: &str) {
    let (killable, (bot_a, chan_a), (bot_b, chan_b)) = killable_a_and_b(&kv).await;
    let mut events = bot_b.subscribe();
    let (store, _) = kv().await;
    let (chan, c) = (chan_a.clone(), chat.to_owned());
    assert!(
        killable
            .spawn(async move { chan.say(&c, "d1", "/color").await.is_ok() })
            .await
            .unwrap()
    );
    wait_for(&chan_a, chat, "Which color?").await;
    // The step's commit (the note naming A, written after its sends) landed, and the message
    // is done: kill A.
    settled(&bot_b, &store, "botmesh:forwards:a").await;
    killable.shutdown_background();
    std::mem::forget(bot_a);
    // A's replica lease (900 ms) expires, as B sees it.
    let b = Coordinator::new(bot_b.durability().unwrap(), CoordinationConfig::default()).unwrap();
    let dead = eventually(Duration::from_secs(15), async || {
        !b.is_alive("a").await.unwrap()
    })
    .await;
    assert!(dead, "A's replica lease never expired");
    assert!(chan_b.say(chat, "d2", "blue").await.is_ok());
    event(&mut events, "B reported A's flow as lost", |e| {
        matches!(e, BotEvent::Flow { chat: c, what, .. } if c.as_str() == chat && what == "lost:replica")
    })
    .await;
    assert!(!chan_b.texts(chat).iter().any(|t| t == "You like blue"));
    let metrics = bot_b.coordination_metrics().unwrap();
    assert_eq!(metrics.forwards, 0, "{metrics:?}");
    // The note is gone: the chat's next message is fresh, and starts the flow on B.
    assert!(chan_b.say(chat, "d3", "/color").await.is_ok());
    wait_for(&chan_b, chat, "Which color?").await;
    assert!(!chan_b.texts(chat).iter().any(|t| t == "You like blue"));
    bot_b.stop().await.unwrap();
}

/// Forwarding twice: the same message on A's forward queue twice (B forwarded it, and
/// forwarded it again when its own record was replayed) is A's answer once.
async fn a_message_forwarded_twice_is_answered_once(kv: impl OpenShared, chat: &str) {
    let shared = kv().await;
    let store = Arc::clone(&shared.0);
    let (bot_a, chan_a) = replica(shared, "a").await;
    assert!(chan_a.say(chat, "t1", "/color").await.is_ok());
    wait_for(&chan_a, chat, "Which color?").await;
    let message = Message::text("t2", chat, "green");
    let entry = serde_json::json!({
        "event": ProviderEvent::Message(message),
        "admitted_ms": 0,
    });
    for key in ["00000000000000000001", "00000000000000000002"] {
        store
            .set_value("botmesh:forwards:a", key, &entry)
            .await
            .unwrap();
    }
    wait_for(&chan_a, chat, "You like green").await;
    // Everything settled: were the second entry dispatched too, it would have answered.
    settled(&bot_a, &store, "botmesh:forwards:a").await;
    assert_eq!(chan_a.texts(chat), ["Which color?", "You like green"]);
    assert!(
        store.values("botmesh:forwards:a").await.unwrap().is_empty(),
        "both entries were taken off the queue"
    );
    bot_a.stop().await.unwrap();
}

/// A timeout claimed by the replica that does not hold the flow: A (whose scheduler polls
/// once an hour) holds `nap`; B's scheduler claims the due timeout and forwards it to A,
/// where it fires once.
async fn a_timeout_claimed_by_another_replica_fires_on_the_holder(kv: impl OpenShared, chat: &str) {
    let (bot_a, chan_a) = replica_polling(kv().await, "a", Duration::from_secs(3600)).await;
    let (bot_b, chan_b) = replica(kv().await, "b").await;
    assert!(chan_a.say(chat, "n1", "/nap").await.is_ok());
    wait_for(&chan_a, chat, "Nobody there.").await;
    assert_eq!(chan_a.texts(chat), ["Still there?", "Nobody there."]);
    assert!(chan_b.texts(chat).is_empty(), "{:?}", chan_b.texts(chat));
    let metrics = bot_b.coordination_metrics().unwrap();
    assert_eq!(metrics.forwards, 1, "B forwarded the timeout: {metrics:?}");
    bot_b.stop().await.unwrap();
    bot_a.stop().await.unwrap();
}

/// The scenarios above on each shared backend: in memory, and on Postgres and Redis when
/// their features are on (skipped, and saying so, without their server variables).
macro_rules! on_each_backend {
    // A scenario on a server backend: skipped when the suite has no server.
    (@server $feature:literal $open:ident $scenario:ident $test:ident) => {
        #[cfg(feature = $feature)]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let Some(open) = servers::$open("handover") else {
                return;
            };
            $scenario(open, stringify!($test)).await;
        }
    };
    ($($scenario:ident: $memory:ident, $postgres:ident, $redis:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            $scenario(memory(), stringify!($memory)).await;
        }

        on_each_backend!(@server "postgres" postgres_shared $scenario $postgres);
        on_each_backend!(@server "redis" redis_shared $scenario $redis);
    )*};
}

on_each_backend! {
    a_cut_step_is_finished_by_the_next_replica:
        a_cut_step_is_finished_by_the_next_replica_on_memory,
        a_cut_step_is_finished_by_the_next_replica_on_postgres,
        a_cut_step_is_finished_by_the_next_replica_on_redis;
    a_non_persistent_flow_is_forwarded_to_its_replica:
        a_non_persistent_flow_is_forwarded_to_its_replica_on_memory,
        a_non_persistent_flow_is_forwarded_to_its_replica_on_postgres,
        a_non_persistent_flow_is_forwarded_to_its_replica_on_redis;
    a_non_persistent_flow_of_a_dead_replica_is_lost:
        a_non_persistent_flow_of_a_dead_replica_is_lost_on_memory,
        a_non_persistent_flow_of_a_dead_replica_is_lost_on_postgres,
        a_non_persistent_flow_of_a_dead_replica_is_lost_on_redis;
    a_message_forwarded_twice_is_answered_once:
        a_message_forwarded_twice_is_answered_once_on_memory,
        a_message_forwarded_twice_is_answered_once_on_postgres,
        a_message_forwarded_twice_is_answered_once_on_redis;
    a_timeout_claimed_by_another_replica_fires_on_the_holder:
        a_timeout_claimed_by_another_replica_fires_on_the_holder_on_memory,
        a_timeout_claimed_by_another_replica_fires_on_the_holder_on_postgres,
        a_timeout_claimed_by_another_replica_fires_on_the_holder_on_redis;
}
