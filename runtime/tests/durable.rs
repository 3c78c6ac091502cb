//! Durable processing through `MockProvider` on `MemoryDurability`: every option of
//! `DurabilityConfig` that the runtime applies, the outbox rules, retries, deferral, the DLQ,
//! parts, fencing across two bots, fail-closed and fail-open, `inbox.max_age`, media refs and
//! bad records.
//!
//! The tests run on tokio's paused clock (waits between events advance virtual time), except
//! those whose retries wait for due times on the wall clock.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh::durability::inbox::NewInbound;
use botmesh::durability::retries::Backoff;
use botmesh::durability::{
    DurabilityConfig, DurabilityEvent, DurableKv, InboxState, MemoryKv, MemoryStore, OnAmbiguous,
    OutboxState,
};
use botmesh::durable::{DurabilityOptions, StalePolicy};
use botmesh::message::{Content, InboundMedia, Interaction, MediaKind, MediaRef, Message, UserId};
use botmesh::prelude::*;
use botmesh::provider::{
    Accepted, Capabilities, MediaUnavailableReason, ProviderError, ProviderEvent, Rejected,
};
use botmesh::testing::{MockProvider, crashable};

fn fast_config() -> DurabilityConfig {
    let mut c = DurabilityConfig::default();
    c.poll = Duration::from_millis(20);
    c.inbox.backoff = Backoff::fixed(Duration::from_millis(10), Duration::from_millis(10));
    c.outbox.backoff = Backoff::fixed(Duration::from_millis(10), Duration::from_millis(10));
    c.outbox.inline_max = Duration::from_secs(2);
    c
}

struct Harness {
    bot: Bot,
    mock: MockProvider,
    events: Arc<Mutex<Vec<BotEvent>>>,
}

fn harness(kv: Arc<dyn DurableKv>, store: MemoryStore, config: DurabilityConfig) -> Harness {
    harness_with(kv, store, config, MockProvider::new(), |b| b)
}

/// A harness whose wall clock follows tokio's (paused) clock: the journals take retry due
/// times from the bot's clock, so retries come due as virtual time passes.
fn harness_on_tokio_time(config: DurabilityConfig) -> Harness {
    let clock = botmesh::clock::TokioClock::new(1_767_225_600_000);
    let (kv, store) = (Arc::new(MemoryKv::new()), MemoryStore::new());
    harness_with(kv, store, config, MockProvider::new(), |b| b.clock(clock))
}

fn harness_with(
    kv: Arc<dyn DurableKv>,
    store: MemoryStore,
    config: DurabilityConfig,
    mock: MockProvider,
    f: impl FnOnce(BotBuilder) -> BotBuilder,
) -> Harness {
    let bot = f(Bot::builder(mock.clone()).store(store).durability(
        DurabilityOptions::shared(kv)
            .config(config)
            .instance_id("test-1"),
    ))
    .build()
    .expect("valid durability config");
    let events = crate::common::events_picked(&bot, |e| Some(e.clone()));
    Harness { bot, mock, events }
}

/// A fast config whose sweeper passes once an hour (its first pass an hour after the start),
/// a new journal and a new store: only recovery delivers what a bot left.
fn hourly_sweeper() -> (DurabilityConfig, Arc<dyn DurableKv>, MemoryStore) {
    let mut config = fast_config();
    config.poll = Duration::from_secs(3600);
    let (kv, store) = memory_backends();
    (config, kv, store)
}

/// [`hourly_sweeper`]'s backends, on which a first bot left `texts` to chat `a` unsent
/// ([`leave_unsent`]).
async fn left_unsent_to_a(texts: &[&str]) -> (DurabilityConfig, Arc<dyn DurableKv>, MemoryStore) {
    let (config, kv, store) = hourly_sweeper();
    let first = harness(kv.clone(), store.clone(), config.clone());
    leave_unsent(&first, "a", texts).await;
    (config, kv, store)
}

/// Enqueues `texts` to `chat` (keys `key:<text>`) on `h`'s bot, started if it is not, and
/// stops it: with the sweeper's next pass far away (`poll`), they are left unsent, as a flow
/// step's sends are when the process dies right after the step's commit.
async fn leave_unsent(h: &Harness, chat: &str, texts: &[&str]) {
    match h.bot.start().await {
        Ok(()) | Err(BotError::AlreadyStarted) => {}
        Err(e) => panic!("the bot does not start: {e}"),
    }
    let before = h.mock.texts(chat).len();
    for text in texts {
        h.bot
            .enqueue(chat, Outgoing::from(*text).key(format!("key:{text}")))
            .await
            .unwrap();
    }
    h.bot.stop().await.unwrap();
    assert_eq!(
        h.mock.texts(chat).len(),
        before,
        "nothing of {texts:?} was sent"
    );
}

/// Starts `bot`, then stops it with a drain: what recovery queued runs to its end.
async fn start_and_drain(bot: &Bot) {
    bot.start().await.unwrap();
    bot.stop_with(StopOptions {
        drain: true,
        ..StopOptions::default()
    })
    .await
    .unwrap();
}

impl Harness {
    fn durability_events(&self, name: &str) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, BotEvent::Durability(event) if event.name() == name))
            .count()
    }
    fn errors(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                BotEvent::Error { context, error, .. } => Some(format!("{context}: {error}")),
                _ => None,
            })
            .collect()
    }
}

async fn settle(bot: &Bot) {
    bot.idle().await;
    // Lets the sweeper pass a few times (virtual time: every test using it is paused).
    tokio::time::sleep(Duration::from_millis(80)).await;
    bot.idle().await;
}

fn two_replies(bot: &Bot) {
    bot.catch_all(|ctx: Ctx| async move {
        ctx.reply("one").await?;
        ctx.reply("two").await?;
        Ok(())
    });
}

/// A memory journal and a memory store, which a restarted bot finds as the first left them.
fn memory_backends() -> (Arc<dyn DurableKv>, MemoryStore) {
    (Arc::new(MemoryKv::new()), MemoryStore::new())
}

/// `h`, answering every message twice ([`two_replies`]), started.
async fn started_replying_twice(h: Harness) -> Harness {
    two_replies(&h.bot);
    h.bot.start().await.unwrap();
    h
}

#[tokio::test(start_paused = true)]
async fn a_redelivery_is_a_duplicate_even_after_a_restart() {
    let (kv, store) = memory_backends();
    let h = started_replying_twice(harness(kv.clone(), store.clone(), fast_config())).await;
    assert_eq!(h.mock.say("a", "m1", "hi").await, Ok(Accepted::Queued));
    settle(&h.bot).await;
    h.bot.stop().await.unwrap();

    let h2 = started_replying_twice(harness(kv, store, fast_config())).await;
    assert_eq!(h2.mock.say("a", "m1", "hi").await, Ok(Accepted::Duplicate));
    settle(&h2.bot).await;
    assert!(
        h2.mock.sent().is_empty(),
        "the redelivered message is not processed again"
    );
    assert_eq!(h.mock.texts("a"), ["one", "two"]);
    let m = h2.bot.durability().unwrap().metrics();
    assert_eq!(m.inbound_duplicates, 1);
}

/// A text the provider read as a press (an SMS `2` picking the second option) is journaled as
/// that message: its redelivery read as a plain text, by a restarted provider that forgot the
/// options, is a duplicate, not an answer processed twice.
#[tokio::test(start_paused = true)]
async fn a_text_read_as_a_press_and_redelivered_as_a_text_is_a_duplicate() {
    let (kv, store) = memory_backends();
    let h = started_replying_twice(harness(kv.clone(), store.clone(), fast_config())).await;
    let press = Interaction {
        id: "SM1".to_owned(),
        chat: ChatId::from("a"),
        sender: UserId::from("a"),
        sender_name: None,
        data: "coffee".to_owned(),
        title: Some("Coffee".to_owned()),
        message_id: None,
        is_group: false,
        timestamp_ms: botmesh::clock::now_ms(),
        respond_by_ms: None,
        from_text: true,
    };
    assert_eq!(press.dedupe_id(), "SM1");
    assert_eq!(
        h.mock.deliver(ProviderEvent::Interaction(press)).await,
        Ok(Accepted::Queued)
    );
    settle(&h.bot).await;
    h.bot.stop().await.unwrap();

    let h2 = started_replying_twice(harness(kv, store, fast_config())).await;
    assert_eq!(h2.mock.say("a", "SM1", "2").await, Ok(Accepted::Duplicate));
    settle(&h2.bot).await;
    assert!(h2.mock.sent().is_empty(), "{:?}", h2.mock.sent());
    assert_eq!(h.mock.texts("a"), ["one", "two"]);
}

#[tokio::test(start_paused = true)]
async fn sends_are_journaled_and_answered_from_the_outbox_on_replay() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let h = started_replying_twice(harness(kv, MemoryStore::new(), fast_config())).await;
    h.mock.say("a", "m1", "hi").await.unwrap();
    settle(&h.bot).await;
    let d = h.bot.durability().unwrap();
    let sent = d.outbox().list(OutboxState::Sent, 10).await.unwrap();
    let mut keys: Vec<_> = sent.iter().map(|r| r.key.clone()).collect();
    keys.sort();
    assert_eq!(keys, ["a/m1:1", "a/m1:2"]);
    assert!(
        h.mock.keys_seen().is_empty(),
        "the key never reaches the provider"
    );
    // An operator replays the inbound: its handler runs again, every reply is answered
    // from the outbox.
    let inbound = d.inbox().list(InboxState::Done, 10).await.unwrap();
    assert_eq!(inbound.len(), 1);
    d.replay_inbound(&inbound[0].id).await.unwrap();
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), ["one", "two"], "no reply twice");
    assert_eq!(h.bot.metrics().send_deduped, 2);
    assert_eq!(d.metrics().inbound_replayed, 1);
}

/// `outbox.max_payload_bytes` holds for the JSON of a send: a reply whose JSON fits is
/// journaled, one whose JSON does not fit goes out without the outbox, and a replay of the
/// journaled one is answered from it.
#[tokio::test(start_paused = true)]
async fn the_payload_limit_holds_for_payloads_encoded_later() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let mut config = fast_config();
    config.outbox.max_payload_bytes = 120;
    let h = harness(kv, MemoryStore::new(), config);
    let fits = "a".repeat(30);
    let over = "x".repeat(200);
    let (f, o) = (fits.clone(), over.clone());
    h.bot.catch_all(move |ctx: Ctx| {
        let (f, o) = (f.clone(), o.clone());
        async move {
            ctx.reply(f.as_str()).await?;
            ctx.reply(o.as_str()).await?;
            Ok(())
        }
    });
    h.bot.start().await.unwrap();
    h.mock.say("a", "m1", "hi").await.unwrap();
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), [fits.clone(), over.clone()]);
    let d = h.bot.durability().unwrap();
    let sent = d.outbox().list(OutboxState::Sent, 10).await.unwrap();
    assert_eq!(sent.len(), 1, "only the reply that fits is journaled");
    let journaled: Outgoing = sent[0].payload.decode().unwrap();
    assert_eq!(journaled, Outgoing::from(fits.as_str()));
    assert!(sent[0].payload.len() <= 120, "{}", sent[0].payload);
    assert_eq!(d.metrics().outbox_bypassed, 1);
    // A replay: the journaled reply is answered from the outbox, the other one sent again
    // (it never was in the outbox).
    let inbound = d.inbox().list(InboxState::Done, 10).await.unwrap();
    d.replay_inbound(&inbound[0].id).await.unwrap();
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), [fits.clone(), over.clone(), over]);
    assert_eq!(h.bot.metrics().send_deduped, 1);
    assert_eq!(
        d.metrics().outbox_diverged,
        0,
        "same content, same fingerprint"
    );
}

#[tokio::test(start_paused = true)]
async fn retryable_failures_are_retried_with_backoff() {
    let h = harness_on_tokio_time(fast_config());
    two_replies(&h.bot);
    h.bot.start().await.unwrap();
    for _ in 0..2 {
        h.mock.fail_next_send(ProviderError::Network {
            provider: "mock".into(),
            message: "reset".into(),
        });
    }
    h.mock.say("a", "m1", "hi").await.unwrap();
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), ["one", "two"]);
    assert_eq!(h.bot.durability().unwrap().metrics().outbox_retried, 2);
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_waits_at_least_its_retry_after() {
    let h = harness_on_tokio_time(fast_config());
    let t = Arc::new(Mutex::new(None));
    let t2 = t.clone();
    h.bot.catch_all(move |ctx: Ctx| {
        let t2 = t2.clone();
        async move {
            let t0 = tokio::time::Instant::now();
            ctx.reply("after the wait").await?;
            *t2.lock().unwrap() = Some(t0.elapsed());
            Ok(())
        }
    });
    h.bot.start().await.unwrap();
    h.mock
        .rate_limit_next_send(Some(Duration::from_millis(300)));
    h.mock.say("a", "m1", "hi").await.unwrap();
    h.bot.idle().await;
    assert_eq!(h.mock.texts("a"), ["after the wait"]);
    let waited = t.lock().unwrap().expect("handler ran");
    assert!(waited >= Duration::from_millis(300), "waited {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn final_errors_go_straight_to_the_dead_letter_queue() {
    let h = harness(Arc::new(MemoryKv::new()), MemoryStore::new(), fast_config());
    let results = Arc::new(Mutex::new(Vec::new()));
    let r = results.clone();
    h.bot.catch_all(move |ctx: Ctx| {
        let r = r.clone();
        async move {
            let res = ctx.reply("unsendable").await;
            r.lock().unwrap().push(res.map_err(|e| e.to_string()));
            Ok(())
        }
    });
    h.bot.start().await.unwrap();
    for err in [
        ProviderError::UnsupportedContent {
            provider: "mock".into(),
            what: "sticker".into(),
        },
        ProviderError::PayloadTooLarge {
            provider: "mock".into(),
            size: 10,
            limit: 5,
        },
        ProviderError::OutsideSessionWindow {
            provider: "mock".into(),
            chat: "a".into(),
        },
        ProviderError::RecipientUnreachable {
            provider: "mock".into(),
            chat: "a".into(),
            reason: "gone".into(),
        },
        ProviderError::Api {
            provider: "mock".into(),
            status: Some(400),
            code: None,
            message: "bad".into(),
            retryable: false,
        },
    ] {
        h.mock.fail_next_send(err);
    }
    for i in 0..5 {
        h.mock.say("a", &format!("m{i}"), "hi").await.unwrap();
    }
    settle(&h.bot).await;
    assert!(h.mock.sent().is_empty());
    let d = h.bot.durability().unwrap();
    assert_eq!(
        d.outbox().list(OutboxState::Dead, 10).await.unwrap().len(),
        5
    );
    assert_eq!(d.metrics().outbox_dead, 5);
    assert_eq!(
        d.metrics().outbox_retried,
        0,
        "final errors are never retried"
    );
    assert_eq!(h.durability_events("dead"), 5);
    assert!(results.lock().unwrap().iter().all(|r| r.is_err()));
    // An operator retries one: it goes out.
    d.retry_send("a/m0:1").await.unwrap();
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), ["unsendable"]);
}

#[tokio::test(start_paused = true)]
async fn inline_retries_defer_after_inline_max_and_the_sweeper_delivers() {
    let mut config = fast_config();
    config.outbox.inline_max = Duration::from_millis(30);
    config.outbox.backoff = Backoff::fixed(Duration::from_millis(60), Duration::from_millis(60));
    let h = harness_on_tokio_time(config);
    let outcome = Arc::new(Mutex::new(None));
    let o = outcome.clone();
    h.bot.catch_all(move |ctx: Ctx| {
        let o = o.clone();
        async move {
            let r = ctx.reply("eventually").await;
            *o.lock().unwrap() = Some(r);
            Ok(())
        }
    });
    h.bot.start().await.unwrap();
    h.mock.fail_next_send(ProviderError::Network {
        provider: "mock".into(),
        message: "down".into(),
    });
    h.mock.say("a", "m1", "hi").await.unwrap();
    h.bot.idle().await;
    match outcome.lock().unwrap().take() {
        Some(Err(BotError::SendDeferred { key })) => assert_eq!(key, "a/m1:1"),
        other => panic!("expected SendDeferred, got {other:?}"),
    }
    assert_eq!(h.mock.wait_for_sends(1, Duration::from_secs(3)).await, 1);
    assert_eq!(h.mock.texts("a"), ["eventually"]);
    assert_eq!(h.bot.durability().unwrap().metrics().outbox_deferred, 1);
}

#[tokio::test(start_paused = true)]
async fn enqueue_with_an_explicit_key_sends_once() {
    let h = harness(Arc::new(MemoryKv::new()), MemoryStore::new(), fast_config());
    let before = Arc::new(AtomicUsize::new(0));
    let b = before.clone();
    h.bot.before_send(move |draft| {
        b.fetch_add(1, Ordering::SeqCst);
        async move { SendDecision::Proceed(draft) }
    });
    let after = Arc::new(AtomicUsize::new(0));
    let a = after.clone();
    h.bot.after_send(move |_| {
        let a = a.clone();
        async move {
            a.fetch_add(1, Ordering::SeqCst);
        }
    });
    h.bot.start().await.unwrap();
    let remind = || {
        h.bot
            .enqueue("a", Outgoing::from("Tomorrow at 9").key("reminder:1"))
    };
    let (first, second) = (remind().await.unwrap(), remind().await.unwrap());
    assert!(!first.deduped && second.deduped);
    assert_eq!(
        before.load(Ordering::SeqCst),
        1,
        "the before hooks run once per key: the second enqueue is a no-op"
    );
    assert_eq!(h.mock.wait_for_sends(1, Duration::from_secs(2)).await, 1);
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), ["Tomorrow at 9"]);
    assert_eq!(
        after.load(Ordering::SeqCst),
        1,
        "after hooks run once the sweeper delivered"
    );
    let ledger = h.bot.store().ledger("a", 5).await.unwrap();
    assert_eq!(ledger.len(), 1);
    // bot.send with the same explicit key is answered from the outbox.
    let again = h
        .bot
        .send("a", Outgoing::from("Tomorrow at 9").key("reminder:1"))
        .await
        .unwrap();
    assert!(again.deduped);
    assert_eq!(h.mock.sent().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_restart_that_stops_at_once_still_delivers_the_sends_left_unsent() {
    // The sweeper polls once an hour (its first pass an hour after the start): only
    // recovery can deliver what the first bot left.
    // Journaled for the sweeper, whose next pass is an hour away: left unsent at the stop,
    // as a flow step's sends are when the process dies right after the step's commit.
    let (config, kv, store) = left_unsent_to_a(&["left 1", "left 2"]).await;

    let second = harness(kv, store, config);
    // A draining stop right after the start waits for the recovered work, the left sends
    // among it.
    start_and_drain(&second.bot).await;
    assert_eq!(second.mock.texts("a"), ["left 1", "left 2"]);
    assert!(second.errors().is_empty(), "{:?}", second.errors());
}

flow_builds! {
    /// Two layouts of one persistent flow: the second restarts a checkpoint of the first.
    mod layout_v1: #[flow(start = command("order"))] fn order(cx) {
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        cx.send(format!("1 x {item}")).await?;
        Ok(())
    }

    mod layout_v2: #[flow(start = command("order"), on_version_mismatch = restart)] fn order(cx) {
        let shop: String = "main".to_owned();
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        cx.send(format!("1 x {item} from {shop}")).await?;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_flow_restarted_at_start_sends_after_the_chats_left_over_sends() {
    let (mut config, kv, store) = hourly_sweeper();
    let first = harness(kv.clone(), store.clone(), config.clone());
    first.bot.flow(layout_v1::order);
    first.bot.start().await.unwrap();
    first.mock.say("ann", "m1", "/order").await.unwrap();
    settle(&first.bot).await;
    assert_eq!(first.mock.texts("ann"), ["What would you like?"]);
    leave_unsent(&first, "ann", &["left"]).await;

    // The new layout restarts the checkpoint on the chat's next message: the notice and the
    // first question go after the send the first bot left, at once. (Queued behind it, they
    // would wait for it until `inline_max`, a minute here, ran out, and then be deferred.)
    config.outbox.inline_max = Duration::from_secs(60);
    let second = harness(kv, store, config);
    second.bot.flow(layout_v2::order);
    let restart = async {
        second.bot.start().await.unwrap();
        second.mock.say("ann", "m2", "tea").await.unwrap();
        second
            .bot
            .stop_with(StopOptions {
                drain: true,
                ..StopOptions::default()
            })
            .await
            .unwrap();
    };
    tokio::time::timeout(Duration::from_secs(20), restart)
        .await
        .expect("the restarted flow's question waited for the send left behind it");
    assert_eq!(
        second.mock.texts("ann"),
        [
            "left",
            botmesh::flow::DEFAULT_RESTART_NOTICE,
            "What would you like?"
        ]
    );
    assert!(second.errors().is_empty(), "{:?}", second.errors());
}

#[tokio::test(start_paused = true)]
async fn a_failed_start_runs_none_of_the_work_its_recovery_queued() {
    let (config, kv, store) = left_unsent_to_a(&["left"]).await;

    // Recovery queues the left send, then the transport fails to start: the rollback closes
    // the journal and the store, and the queued delivery must not run on over them.
    let broken = MockProvider::new();
    broken.fail_start(ProviderError::NotConnected {
        provider: "mock".into(),
    });
    let second = harness_with(kv.clone(), store.clone(), config.clone(), broken, |b| b);
    crate::common::assert_start_fails_at(&second.bot, "transport").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        second.mock.sent().is_empty(),
        "a send went out after the failed start: {:?}",
        second.mock.texts("a")
    );

    // The send is still in the outbox: the next start delivers it, once.
    let third = harness(kv, store, config);
    start_and_drain(&third.bot).await;
    assert_eq!(third.mock.texts("a"), ["left"]);
}

#[tokio::test(start_paused = true)]
async fn enqueue_without_durability_is_refused() {
    let bot = Bot::builder(MockProvider::new()).build().unwrap();
    assert!(matches!(
        bot.enqueue("a", "x").await,
        Err(BotError::Config { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn two_bots_sharing_a_backend_each_send_their_own_explicit_key() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let mk = |bot_id: &'static str| {
        harness_with(
            kv.clone(),
            MemoryStore::new(),
            fast_config(),
            MockProvider::new(),
            |b| b.bot_id(bot_id),
        )
    };
    let (a, b) = (mk("clinic"), mk("shop"));
    a.bot.start().await.unwrap();
    b.bot.start().await.unwrap();
    a.bot
        .send("x", Outgoing::from("from clinic").key("reminder:1"))
        .await
        .unwrap();
    let r = b
        .bot
        .send("x", Outgoing::from("from shop").key("reminder:1"))
        .await
        .unwrap();
    assert!(!r.deduped, "explicit keys are per bot");
    assert_eq!(a.mock.texts("x"), ["from clinic"]);
    assert_eq!(b.mock.texts("x"), ["from shop"]);
}

#[tokio::test(start_paused = true)]
async fn long_texts_become_parts_delivered_in_order() {
    let caps = Capabilities {
        text_limit: 10,
        ..Capabilities::default()
    };
    let h = harness_with(
        Arc::new(MemoryKv::new()),
        MemoryStore::new(),
        fast_config(),
        MockProvider::with_capabilities(caps),
        |b| b,
    );
    crate::common::answer_all(&h.bot, "aaaa bbbb cccc dddd eeee");
    h.bot.start().await.unwrap();
    h.mock.fail_next_send(ProviderError::Network {
        provider: "mock".into(),
        message: "x".into(),
    });
    h.mock.say("a", "m1", "hi").await.unwrap();
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), ["aaaa bbbb ", "cccc dddd ", "eeee"]);
    let d = h.bot.durability().unwrap();
    let mut keys: Vec<_> = d
        .outbox()
        .list(OutboxState::Sent, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.key)
        .collect();
    keys.sort();
    assert_eq!(keys, ["a/m1:1", "a/m1:1#2", "a/m1:1#3"]);
}

#[tokio::test(start_paused = true)]
async fn fail_closed_refuses_and_a_redelivery_is_processed() {
    // A backend that can be taken down.
    let flaky = crashable(Arc::new(MemoryKv::new()));
    let h = started_replying_twice(harness(
        Arc::new(flaky.clone()),
        MemoryStore::new(),
        fast_config(),
    ))
    .await;
    flaky.set_down(true);
    let r = h.mock.say("a", "m1", "hi").await;
    assert!(
        matches!(r, Err(Rejected::JournalUnavailable { .. })),
        "{r:?}"
    );
    settle(&h.bot).await;
    assert!(
        h.mock.sent().is_empty(),
        "not dispatched without the journal"
    );
    assert!(h.errors().iter().any(|e| e.contains("inbox.journal")));
    flaky.set_down(false);
    assert_eq!(
        h.mock.say("a", "m1", "hi").await,
        Ok(Accepted::Queued),
        "the redelivery is processed"
    );
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), ["one", "two"]);
}

#[tokio::test(start_paused = true)]
async fn fail_open_dispatches_without_the_journal() {
    // A backend that can be taken down.
    let flaky = crashable(Arc::new(MemoryKv::new()));
    let mut config = fast_config();
    config.fail_open = true;
    let h = harness(Arc::new(flaky.clone()), MemoryStore::new(), config);
    h.bot.catch_all(|ctx: Ctx| async move {
        ctx.reply("still answered").await.map(|_| ()).or_else(|e| {
            // The outbox is down too: the send fails, the inbound was still dispatched.
            assert!(matches!(e, BotError::Durability(_)), "{e}");
            Ok::<(), BotError>(())
        })?;
        Ok(())
    });
    h.bot.start().await.unwrap();
    flaky.set_down(true);
    assert_eq!(h.mock.say("a", "m1", "hi").await, Ok(Accepted::Queued));
    settle(&h.bot).await;
    assert_eq!(h.bot.metrics().dispatched, 1);
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_errors_is_not_retried() {
    let h = harness(Arc::new(MemoryKv::new()), MemoryStore::new(), fast_config());
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    h.bot.catch_all(move |_ctx: Ctx| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Err("card declined".into())
        }
    });
    h.bot.start().await.unwrap();
    h.mock.say("a", "m1", "hi").await.unwrap();
    settle(&h.bot).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let d = h.bot.durability().unwrap();
    assert_eq!(d.inbox().list(InboxState::Done, 10).await.unwrap().len(), 1);
}

fn old_message(id: &str, age: Duration) -> ProviderEvent {
    let mut m = Message::text(id, "a", "hello from yesterday");
    m.timestamp_ms -= i64::try_from(age.as_millis()).unwrap();
    ProviderEvent::Message(m)
}

/// A started bot with `options` (and [`fast_config`]) that answers "stale" or "fresh".
async fn staleness_bot(options: DurabilityOptions) -> (Bot, MockProvider) {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .durability(options.config(fast_config()))
        .build()
        .unwrap();
    bot.catch_all(|ctx: Ctx| async move {
        ctx.reply(if ctx.is_stale() { "stale" } else { "fresh" })
            .await?;
        Ok(())
    });
    bot.start().await.unwrap();
    (bot, mock)
}

#[tokio::test(start_paused = true)]
async fn max_age_skips_or_marks_stale_messages() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let hour = Duration::from_secs(3600);
    let skipping = DurabilityOptions::shared(kv.clone()).max_age(hour, StalePolicy::Skip);
    let (bot, mock) = staleness_bot(skipping).await;
    for (id, age) in [("old", 86_400), ("new", 5)] {
        mock.deliver(old_message(id, Duration::from_secs(age)))
            .await
            .unwrap();
    }
    settle(&bot).await;
    assert_eq!(mock.texts("a"), ["fresh"]);
    let m = bot.metrics();
    assert_eq!(
        (m.dropped_stale, m.dropped_hook),
        (1, 0),
        "counted as stale, not as a hook"
    );

    let marking = DurabilityOptions::memory().max_age(hour, StalePolicy::MarkStale);
    let (bot, mock) = staleness_bot(marking).await;
    mock.deliver(old_message("old", Duration::from_secs(86_400)))
        .await
        .unwrap();
    settle(&bot).await;
    assert_eq!(mock.texts("a"), ["stale"]);
}

#[tokio::test(start_paused = true)]
async fn invalid_durability_options_are_refused_at_build_time() {
    let mut config = DurabilityConfig::default();
    config.outbox.lease = Duration::from_millis(10);
    let err = Bot::builder(MockProvider::new())
        .durability(DurabilityOptions::memory().config(config))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("lease"), "{err}");
}

fn media_message(id: &str) -> ProviderEvent {
    let mut m = Message::text(id, "a", "");
    m.content = Content::Media(InboundMedia {
        kind: MediaKind::Image,
        media_ref: MediaRef {
            provider: "mock".into(),
            token: "file-123".into(),
        },
        mime: Some("image/png".into()),
        caption: None,
        file_name: None,
        size: None,
    });
    ProviderEvent::Message(m)
}

#[tokio::test(start_paused = true)]
async fn media_refs_are_journaled_and_rehydrated_on_replay() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let h = harness(kv, MemoryStore::new(), fast_config());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    h.bot.when(
        botmesh::matcher::media(MediaKind::Image),
        move |ctx: Ctx| {
            let s = s.clone();
            async move {
                let r = ctx.load_media(true).await;
                let expired = matches!(
                    &r,
                    Err(BotError::Provider(ProviderError::MediaUnavailable {
                        reason: MediaUnavailableReason::Expired,
                        ..
                    }))
                );
                s.lock()
                    .unwrap()
                    .push((ctx.is_replay(), r.map_err(|e| e.to_string()), expired));
                Ok(())
            }
        },
    );
    h.bot.start().await.unwrap();
    h.mock.deliver(media_message("m1")).await.unwrap();
    settle(&h.bot).await;
    let d = h.bot.durability().unwrap();
    let done = d.inbox().list(InboxState::Done, 10).await.unwrap();
    let stored = done[0]
        .media_ref
        .clone()
        .expect("the media ref is journaled");
    assert_eq!(stored.provider, "mock");
    assert_eq!(stored.data, serde_json::json!("file-123"));
    d.replay_inbound(&done[0].id).await.unwrap();
    settle(&h.bot).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    // MockProvider refuses every download (a final error): live, the handler gets the
    // provider's error; on the replay (the reference was rebuilt), `MediaUnavailable`
    // (`Expired`, as for a hosted URL that expired meanwhile) carrying that error.
    assert!(!seen[0].0 && seen[1].0);
    let live = seen[0].1.as_ref().unwrap_err();
    assert!(live.contains("download_media is not supported"), "{live}");
    assert!(!live.contains("after a replay"), "{live}");
    let replayed = seen[1].1.as_ref().unwrap_err();
    assert!(
        !seen[0].2 && seen[1].2,
        "MediaUnavailable(Expired) on the replay only"
    );
    assert!(replayed.contains("after a replay"), "{replayed}");
    assert!(
        replayed.contains("download_media is not supported"),
        "{replayed}"
    );
}

#[tokio::test(start_paused = true)]
async fn media_unavailable_reasons_on_replay() {
    use botmesh::durability::media_refs::StoredMediaRef;
    let cases = [
        (None, MediaUnavailableReason::NotDurable),
        (
            Some(StoredMediaRef::new("telegram", 1, serde_json::json!("x"))),
            MediaUnavailableReason::ProviderMismatch,
        ),
        (
            Some(StoredMediaRef::new(
                "mock",
                99,
                serde_json::json!({"bad": true}),
            )),
            MediaUnavailableReason::RehydrateFailed,
        ),
    ];
    for (i, (stored, expected)) in cases.into_iter().enumerate() {
        let h = harness(Arc::new(MemoryKv::new()), MemoryStore::new(), fast_config());
        let got = Arc::new(Mutex::new(None));
        let g = got.clone();
        h.bot.catch_all(move |ctx: Ctx| {
            let g = g.clone();
            async move {
                let quiet = ctx.load_media(false).await?;
                assert!(quiet.is_none(), "without throw_on_error: None");
                match ctx.load_media(true).await {
                    Err(BotError::Provider(ProviderError::MediaUnavailable { reason, .. })) => {
                        *g.lock().unwrap() = Some(reason)
                    }
                    other => panic!("expected MediaUnavailable, got {other:?}"),
                }
                Ok(())
            }
        });
        h.bot.start().await.unwrap();
        let d = h.bot.durability().unwrap();
        let payload = serde_json::to_value(media_message(&format!("m{i}"))).unwrap();
        let mut new = NewInbound::new("a", &format!("m{i}"), payload);
        new.media_ref = stored;
        d.inbox().journal(new).await.unwrap();
        settle(&h.bot).await;
        assert_eq!(*got.lock().unwrap(), Some(expected), "case {i}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_inbound_record_is_dead_lettered_and_reported() {
    let h = started_replying_twice(harness(
        Arc::new(MemoryKv::new()),
        MemoryStore::new(),
        fast_config(),
    ))
    .await;
    let d = h.bot.durability().unwrap();
    let junk = NewInbound::new("a", "junk", serde_json::json!({"not": "an event"}));
    d.inbox().journal(junk).await.unwrap();
    settle(&h.bot).await;
    let dead_records = d.inbox().list(InboxState::Dead, 10).await.unwrap();
    assert_eq!(dead_records.len(), 1);
    let dead_id = dead_records[0].id.clone();
    assert!(
        h.errors().iter().any(|e| e.contains("does not decode")),
        "{:?}",
        h.errors()
    );
    assert_eq!(h.durability_events("dead"), 1);
    // The event is typed, and serializes with its name beside its fields.
    let dead = h
        .events
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            BotEvent::Durability(event @ DurabilityEvent::Dead { .. }) => Some(event.clone()),
            _ => None,
        })
        .expect("a dead event");
    let DurabilityEvent::Dead { kind, id, .. } = &dead else {
        unreachable!("matched above")
    };
    assert_eq!((kind.as_str(), id), ("inbound", &dead_id));
    let json = serde_json::to_value(BotEvent::Durability(dead.clone())).unwrap();
    assert_eq!(json["type"], "durability");
    assert_eq!(json["name"], "dead");
    assert_eq!(json["id"], dead_id.as_str());
    assert!(
        dead.to_string()
            .starts_with(&format!("durability:dead inbound record {dead_id}: ")),
        "{dead}"
    );
    // The sweeper goes on.
    h.mock.say("a", "m1", "hi").await.unwrap();
    settle(&h.bot).await;
    assert_eq!(h.mock.texts("a"), ["one", "two"]);
}

#[tokio::test(start_paused = true)]
async fn without_durability_nothing_is_journaled() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone()).build().unwrap();
    two_replies(&bot);
    bot.start().await.unwrap();
    mock.say("a", "m1", "hi").await.unwrap();
    bot.idle().await;
    assert!(bot.durability().is_none());
    assert_eq!(mock.texts("a"), ["one", "two"]);
}

#[tokio::test(start_paused = true)]
async fn on_ambiguous_resend_is_configurable() {
    let mut config = fast_config();
    config.outbox.on_ambiguous = OnAmbiguous::Resend;
    let h = harness(Arc::new(MemoryKv::new()), MemoryStore::new(), config);
    h.bot.start().await.unwrap();
    assert_eq!(
        h.bot.durability().unwrap().config().outbox.on_ambiguous,
        OnAmbiguous::Resend
    );
}

/// The sweeper purges records past retention at its first pass and goes on until none is
/// left: a backlog of 3000 (three times a purge call's 1000) is gone within a second, not one
/// thousand a minute (which traffic above 17 messages/s would outgrow forever).
#[tokio::test(start_paused = true)]
async fn the_retention_purge_works_off_a_backlog_at_once() {
    let clock = botmesh::clock::ManualClock::new(botmesh::clock::now_ms());
    let mut config = fast_config();
    config.retention = Some(Duration::from_secs(60));
    let bot = Bot::builder(MockProvider::new())
        .clock(clock.clone())
        .durability(DurabilityOptions::memory().config(config))
        .build()
        .unwrap();
    let d = bot.durability().unwrap().clone();
    for i in 0..3000 {
        let new = NewInbound::new("a", &format!("m{i}"), serde_json::json!({}));
        if let botmesh::durability::inbox::InboxJournalClaim::Claimed(c) =
            d.inbox().journal_and_claim(new).await.unwrap()
        {
            d.inbox().complete(&c.lease).await.unwrap();
        }
    }
    // One record young enough to stay.
    clock.advance(Duration::from_secs(120));
    let young = NewInbound::new("a", "young", serde_json::json!({}));
    if let botmesh::durability::inbox::InboxJournalClaim::Claimed(c) =
        d.inbox().journal_and_claim(young).await.unwrap()
    {
        d.inbox().complete(&c.lease).await.unwrap();
    }
    bot.start().await.unwrap();
    let t0 = tokio::time::Instant::now();
    let mut left = usize::MAX;
    while t0.elapsed() < Duration::from_secs(3) {
        left = d
            .inbox()
            .list(InboxState::Done, 10_000)
            .await
            .unwrap()
            .len();
        if left == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        left, 1,
        "every record past retention purged, the young one kept"
    );
    bot.stop().await.unwrap();
}

/// `inbox.max_age` is measured at admission: a message accepted fresh, left unfinished, and
/// replayed after two hours of downtime is handled, not dropped as stale (the channel had its
/// acknowledgement, so nothing would ever handle it).
#[tokio::test(start_paused = true)]
async fn a_message_admitted_fresh_is_not_stale_when_replayed_after_downtime() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let clock = botmesh::clock::ManualClock::new(botmesh::clock::now_ms());
    let block = Arc::new(AtomicBool::new(true));
    let make = |mock: MockProvider| {
        let b = block.clone();
        let bot = Bot::builder(mock)
            .clock(clock.clone())
            .config(botmesh::config::BotConfig {
                stop_timeout: Duration::from_millis(50),
                ..botmesh::config::BotConfig::default()
            })
            .durability(
                DurabilityOptions::shared(kv.clone())
                    .config(fast_config())
                    .instance_id("i1")
                    .max_age(Duration::from_secs(3600), StalePolicy::Skip),
            )
            .build()
            .unwrap();
        bot.catch_all(move |ctx: Ctx| {
            let b = b.clone();
            async move {
                if b.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                ctx.reply("answered").await?;
                Ok(())
            }
        });
        bot
    };
    let first = MockProvider::new();
    let bot = make(first.clone());
    bot.start().await.unwrap();
    let mut m = Message::text("m1", "a", "hello");
    m.timestamp_ms = botmesh::clock::Clock::now_ms(&clock);
    first.deliver(ProviderEvent::Message(m)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The handler never ends: stop() aborts it, the record stays unfinished.
    bot.stop().await.unwrap();
    block.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_secs(2 * 3600));
    let second = MockProvider::new();
    let bot = make(second.clone());
    bot.start().await.unwrap();
    assert_eq!(second.wait_for_sends(1, Duration::from_secs(3)).await, 1);
    settle(&bot).await;
    assert_eq!(second.texts("a"), ["answered"]);
    assert_eq!(bot.metrics().dropped_stale, 0);
}
