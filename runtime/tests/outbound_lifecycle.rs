//! The outbound path and the lifecycle through `MockProvider`: per-chat ordering under
//! concurrency, broadcast concurrency, pacing, presence while not ready, the rate-limit
//! retry, parts, stream previews, the interaction ack, rollback and drain.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::message::{ChatId, Interaction, UserId};
use botmesh::prelude::*;
use botmesh::provider::{Capabilities, ProviderError, TransportStatus};
use botmesh::testing::MockProvider;
use botmesh::{LifecycleStep, Pacing, RateLimitRetry};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_chat_keeps_its_order_while_chats_run_concurrently() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone()).build().unwrap();
    let running = Arc::new(Concurrency::default());
    let r = running.clone();
    bot.catch_all(move |ctx: Ctx| {
        let r = r.clone();
        async move {
            r.enter();
            // Jitter so that chats interleave on the workers (yields, not time).
            for _ in 0..jitter_yields() {
                tokio::task::yield_now().await;
            }
            ctx.reply(format!("echo {}", ctx.text())).await?;
            r.leave();
            Ok(())
        }
    });
    bot.start().await.unwrap();
    let chats: Vec<String> = (0..20).map(|c| format!("chat{c}")).collect();
    let mut tasks = Vec::new();
    for chat in chats.clone() {
        let mock = mock.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..15 {
                mock.say(&chat, &i.to_string(), &i.to_string())
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    bot.idle().await;
    for chat in &chats {
        let expected: Vec<String> = (0..15).map(|i| format!("echo {i}")).collect();
        assert_eq!(mock.texts(chat), expected, "{chat} replies out of order");
    }
    assert!(running.peak() > 1, "different chats ran concurrently");
}

/// A bot on a mock channel with `caps`.
fn bot_with(caps: Capabilities) -> (Bot, MockProvider) {
    let mock = MockProvider::with_capabilities(caps);
    (Bot::builder(mock.clone()).build().unwrap(), mock)
}

/// How many are inside a section at once, and the most there were.
#[derive(Default)]
struct Concurrency {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Concurrency {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// 0 to 7 yields, from the clock's nanoseconds.
fn jitter_yields() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    u64::from(n % 8)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broadcast_respects_its_concurrency_limit() {
    let mock = MockProvider::new();
    mock.set_send_delay(Some(Duration::from_millis(20)));
    let bot = Bot::builder(mock.clone()).build().unwrap();
    let in_flight = Arc::new(Concurrency::default());
    let i = in_flight.clone();
    bot.before_send(move |d: SendDraft| {
        let i = i.clone();
        async move {
            i.enter();
            SendDecision::Proceed(d)
        }
    });
    let i = in_flight.clone();
    bot.after_send(move |_| {
        let i = i.clone();
        async move { i.leave() }
    });
    bot.start().await.unwrap();
    let chats: Vec<String> = (0..24).map(|c| format!("c{c}")).collect();
    let report = bot
        .broadcast(
            chats.clone(),
            "sale!",
            BroadcastOptions {
                concurrency: Some(3),
                key_prefix: Some("sale-1".into()),
            },
        )
        .await;
    assert_eq!(report.sent.len(), 24);
    assert!(report.failed.is_empty() && report.cancelled.is_empty());
    assert_eq!(
        in_flight.peak(),
        3,
        "never more than 3 sends at once, and 3 used"
    );
    let ledger = bot.store().ledger("c5", 5).await.unwrap();
    assert_eq!(ledger[0].key.as_deref(), Some("sale-1:c5"));
}

#[tokio::test(start_paused = true)]
async fn broadcast_is_cancelled_by_stop() {
    let mock = MockProvider::new();
    mock.set_send_delay(Some(Duration::from_millis(30)));
    let bot = Bot::builder(mock.clone()).build().unwrap();
    bot.start().await.unwrap();
    let b = bot.clone();
    let job = tokio::spawn(async move {
        b.broadcast(
            (0..50).map(|c| format!("c{c}")),
            "hi",
            BroadcastOptions {
                concurrency: Some(1),
                key_prefix: None,
            },
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    bot.stop().await.unwrap();
    let report = job.await.unwrap();
    assert!(
        !report.cancelled.is_empty(),
        "stop() cancels what is not yet sent"
    );
    assert!(report.sent.len() < 50);
    assert_eq!(
        report.sent.len() + report.cancelled.len() + report.failed.len(),
        50
    );
}

#[tokio::test(start_paused = true)]
async fn pacer_delays_text_replies_with_typing() {
    let mock = MockProvider::new();
    let pacing = Pacing {
        per_char: Duration::from_millis(100),
        min: Duration::from_millis(200),
        max: Duration::from_secs(2),
        typing: true,
    };
    let bot = Bot::builder(mock.clone()).pacing(pacing).build().unwrap();
    let elapsed = Arc::new(Mutex::new(Vec::new()));
    let e = elapsed.clone();
    bot.catch_all(move |ctx: Ctx| {
        let e = e.clone();
        async move {
            let t0 = tokio::time::Instant::now();
            ctx.reply("hello").await?; // 5 chars → 500 ms
            e.lock().unwrap().push(t0.elapsed());
            let t1 = tokio::time::Instant::now();
            ctx.reply("a".repeat(100)).await?; // capped at 2 s
            e.lock().unwrap().push(t1.elapsed());
            Ok(())
        }
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "hi").await.unwrap();
    bot.idle().await;
    let elapsed = elapsed.lock().unwrap().clone();
    assert_eq!(
        elapsed,
        [Duration::from_millis(500), Duration::from_secs(2)]
    );
    assert_eq!(mock.typing().len(), 2, "typing before each paced reply");
    assert_eq!(mock.texts("a").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn invalid_pacing_is_refused_at_build_time() {
    let bad = Pacing {
        min: Duration::from_secs(5),
        max: Duration::from_secs(1),
        ..Pacing::default()
    };
    let err = Bot::builder(MockProvider::new())
        .pacing(bad)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("pacing.min"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn presence_is_skipped_and_counted_while_the_transport_is_not_ready() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone()).build().unwrap();
    bot.catch_all(|ctx: Ctx| async move {
        ctx.typing().await;
        ctx.mark_read().await;
        ctx.reply("ok").await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.typing().len(), 1);
    assert_eq!(mock.reads().len(), 1);
    mock.set_status(TransportStatus::Disconnected);
    assert_eq!(bot.transport_status(), TransportStatus::Disconnected);
    mock.say("a", "2", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.typing().len(), 1, "no typing while disconnected");
    assert_eq!(mock.reads().len(), 1);
    assert_eq!(bot.metrics().presence_skipped, 2);
    assert_eq!(mock.texts("a"), ["ok", "ok"], "sends still go out");
}

#[tokio::test(start_paused = true)]
async fn rate_limited_replies_are_retried_in_place() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .rate_limit_retry(RateLimitRetry {
            retries: 2,
            max_wait: Duration::from_secs(5),
            default_wait: Duration::from_millis(500),
        })
        .build()
        .unwrap();
    let errors = Arc::new(AtomicUsize::new(0));
    let e = errors.clone();
    bot.on_event(move |ev| {
        if matches!(ev, BotEvent::Error { .. }) {
            e.fetch_add(1, Ordering::SeqCst);
        }
    });
    crate::common::answer_all(&bot, "answer");
    bot.start().await.unwrap();

    mock.rate_limit_next_send(Some(Duration::from_secs(1)));
    mock.rate_limit_next_send(None);
    let t0 = tokio::time::Instant::now();
    mock.say("a", "1", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(
        t0.elapsed(),
        Duration::from_millis(1500),
        "waited retry_after, then the default"
    );
    assert_eq!(mock.texts("a"), ["answer"]);
    assert_eq!(bot.metrics().rate_limit_retries, 2);

    mock.rate_limit_next_send(Some(Duration::from_secs(60)));
    mock.say("a", "2", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(
        mock.texts("a"),
        ["answer"],
        "a wait over max_wait is not retried inline"
    );
    assert_eq!(errors.load(Ordering::SeqCst), 1);
    assert_eq!(bot.metrics().send_failed, 1);

    mock.fail_next_send(ProviderError::RecipientUnreachable {
        provider: "mock".into(),
        chat: "a".into(),
        reason: "blocked".into(),
    });
    mock.say("a", "3", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(
        bot.metrics().rate_limit_retries,
        2,
        "final errors are not retried"
    );
}

#[tokio::test(start_paused = true)]
async fn long_texts_are_split_into_parts_with_derived_part_keys() {
    let (bot, mock) = bot_with(Capabilities {
        text_limit: 10,
        ..Capabilities::default()
    });
    bot.catch_all(|ctx: Ctx| async move {
        let o = ctx.reply("aaaa bbbb cccc dddd eeee").await?;
        assert_eq!(o.parts, 3);
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["aaaa bbbb ", "cccc dddd ", "eeee"]);
    let keys: Vec<_> = bot
        .store()
        .ledger("a", 10)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| e.key)
        .collect();
    assert_eq!(keys, ["a/1:1", "a/1:1#2", "a/1:1#3"]);
    assert_eq!(bot.metrics().split_messages, 1);
}

/// A channel that carries less text with buttons than without (WhatsApp: 1024 against 4096):
/// a text with buttons over that limit is split so that its last part, the one with the
/// buttons, fits; a text without buttons of the same length is not split.
#[tokio::test(start_paused = true)]
async fn a_text_with_buttons_is_split_to_the_channels_buttons_limit() {
    let (bot, mock) = bot_with(Capabilities {
        text_limit: 40,
        buttons_text_limit: Some(10),
        ..Capabilities::default()
    });
    bot.catch_all(|ctx: Ctx| async move {
        let o = ctx
            .reply_buttons("aaaa bbbb cccc dddd eeee", [("y", "Yes"), ("n", "No")])
            .await?;
        assert_eq!(o.parts, 2);
        ctx.reply("aaaa bbbb cccc dddd eeee").await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(
        mock.texts("a"),
        ["aaaa bbbb cccc dddd ", "eeee", "aaaa bbbb cccc dddd eeee"]
    );
    let sent = mock.sent();
    let buttons: Vec<usize> = sent
        .iter()
        .map(|s| match &s.outgoing.content {
            OutgoingContent::Text { buttons, .. } => buttons.len(),
            _ => 0,
        })
        .collect();
    assert_eq!(buttons, [0, 2, 0], "the buttons ride on the last part");
    assert!(sent[1].text().chars().count() <= 10);
}

#[tokio::test(start_paused = true)]
async fn stream_previews_by_edits_and_finishes_through_the_full_path() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .stream_interval(Duration::ZERO)
        .build()
        .unwrap();
    let hook_calls = Arc::new(Mutex::new(Vec::new()));
    let h = hook_calls.clone();
    bot.before_send(move |d: SendDraft| {
        let h = h.clone();
        async move {
            h.lock().unwrap().push((d.preview, d.edit_of.is_some()));
            SendDecision::Proceed(d)
        }
    });
    bot.catch_all(|ctx: Ctx| async move {
        let mut s = ctx.stream();
        for word in ["Hello", ", ", "world", "!"] {
            s.push(word).await?;
        }
        assert_eq!(s.previews(), 4);
        s.finish().await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["Hello"], "one preview message");
    let edits: Vec<String> = mock
        .edits()
        .iter()
        .map(|(_, _, c)| c.text().to_owned())
        .collect();
    assert_eq!(
        edits,
        ["Hello, ", "Hello, world", "Hello, world!", "Hello, world!"]
    );
    let calls = hook_calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().filter(|(p, _)| *p).count(),
        4,
        "previews run the before hooks"
    );
    assert_eq!(
        calls.last(),
        Some(&(false, true)),
        "the final edit takes the full path"
    );
    let ledger = bot.store().ledger("a", 10).await.unwrap();
    assert_eq!(
        ledger.last().and_then(|e| e.text.clone()).as_deref(),
        Some("Hello, world!")
    );
}

#[tokio::test(start_paused = true)]
async fn stream_without_edits_sends_the_final_text_once() {
    let (bot, mock) = bot_with(Capabilities {
        edits: false,
        ..Capabilities::default()
    });
    bot.catch_all(|ctx: Ctx| async move {
        let mut s = ctx.stream();
        s.push("a").await?;
        s.push("b").await?;
        s.finish().await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["ab"]);
}

fn interaction(id: &str, respond_by_ms: Option<i64>) -> botmesh::provider::ProviderEvent {
    botmesh::provider::ProviderEvent::Interaction(Interaction {
        id: id.into(),
        chat: ChatId::from("a"),
        sender: UserId::from("a"),
        sender_name: None,
        data: id.into(),
        title: None,
        message_id: None,
        is_group: false,
        timestamp_ms: botmesh::clock::now_ms(),
        respond_by_ms,
        from_text: false,
    })
}

#[tokio::test(start_paused = true)]
async fn interactions_are_acked_exactly_once_where_required() {
    let (bot, mock) = bot_with(Capabilities {
        interactions_require_ack: true,
        ..Capabilities::default()
    });
    bot.when(matcher::button("two-sends"), |ctx: Ctx| async move {
        ctx.reply("one").await?;
        ctx.reply("two").await?;
        Ok(())
    });
    bot.when(matcher::button("silent"), |_ctx: Ctx| async move { Ok(()) });
    bot.when(matcher::button("explicit"), |ctx: Ctx| async move {
        ctx.ack(Some("Saved")).await;
        ctx.reply("done").await?;
        Ok(())
    });
    bot.start().await.unwrap();
    for id in ["two-sends", "silent", "explicit", "unrouted"] {
        mock.deliver(interaction(id, None)).await.unwrap();
    }
    bot.idle().await;
    let acks = mock.acks();
    assert_eq!(
        acks,
        [
            ("two-sends".to_owned(), None),
            ("silent".to_owned(), None),
            ("explicit".to_owned(), Some("Saved".to_owned())),
            ("unrouted".to_owned(), None),
        ]
    );
    assert_eq!(bot.metrics().interactions_acked, 4);
}

#[tokio::test(start_paused = true)]
async fn a_slow_handler_is_acked_before_respond_by() {
    let (bot, mock) = bot_with(Capabilities {
        interactions_require_ack: true,
        ..Capabilities::default()
    });
    let m = mock.clone();
    bot.when(matcher::interaction(), move |ctx: Ctx| {
        let m = m.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            assert_eq!(
                m.acks().len(),
                1,
                "acked by the deadline timer while the handler ran"
            );
            ctx.reply("late answer").await?;
            Ok(())
        }
    });
    bot.start().await.unwrap();
    let respond_by = botmesh::clock::now_ms() + 3_000;
    mock.deliver(interaction("slow", Some(respond_by)))
        .await
        .unwrap();
    bot.idle().await;
    assert_eq!(mock.acks().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn transports_without_acks_get_none() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone()).build().unwrap();
    bot.catch_all(|_ctx: Ctx| async move { Ok(()) });
    bot.start().await.unwrap();
    mock.deliver(interaction("x", None)).await.unwrap();
    bot.idle().await;
    assert!(mock.acks().is_empty());
}

struct Recorder {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
    fail: bool,
}

#[async_trait]
impl LifecycleStep for Recorder {
    fn name(&self) -> &str {
        self.name
    }
    async fn start(&self, _bot: &Bot) -> Result<(), BotError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("start {}", self.name));
        if self.fail {
            return Err(BotError::Step {
                step: self.name.into(),
                message: "no jobs today".into(),
            });
        }
        Ok(())
    }
    async fn stop(&self, _bot: &Bot) -> Result<(), BotError> {
        self.log.lock().unwrap().push(format!("stop {}", self.name));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_start_rolls_back_the_started_steps_in_reverse() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .step(Recorder {
            name: "jobs",
            log: log.clone(),
            fail: false,
        })
        .step(Recorder {
            name: "webhooks",
            log: log.clone(),
            fail: false,
        })
        .step(Recorder {
            name: "broken",
            log: log.clone(),
            fail: true,
        })
        .build()
        .unwrap();
    crate::common::assert_start_fails_at(&bot, "broken").await;
    assert_eq!(
        *log.lock().unwrap(),
        [
            "start jobs",
            "start webhooks",
            "start broken",
            "stop webhooks",
            "stop jobs"
        ]
    );
    assert_eq!(
        mock.start_stop_counts(),
        (1, 1),
        "the transport was rolled back too"
    );
    assert!(
        mock.say("a", "1", "x").await.is_err(),
        "nothing is accepted after a failed start"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_transport_rolls_back_storage() {
    let mock = MockProvider::new();
    mock.fail_start(ProviderError::NotConnected {
        provider: "mock".into(),
    });
    let store = botmesh::durability::MemoryStore::new();
    let bot = Bot::builder(mock.clone())
        .store(store.clone())
        .build()
        .unwrap();
    crate::common::assert_start_fails_at(&bot, "transport").await;
    use botmesh::durability::Store;
    assert!(store.chat("x").await.is_err(), "the store was closed again");
    bot.start().await.expect("a later start succeeds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_with_drain_finishes_accepted_work() {
    let mock = MockProvider::new();
    mock.set_send_delay(Some(Duration::from_millis(10)));
    let bot = Bot::builder(mock.clone()).build().unwrap();
    let stopping_seen = Arc::new(AtomicUsize::new(0));
    let s = stopping_seen.clone();
    bot.on_event(move |e| {
        if matches!(e, BotEvent::Stopping) {
            s.fetch_add(1, Ordering::SeqCst);
        }
    });
    crate::common::answer_all(&bot, "done");
    bot.start().await.unwrap();
    for i in 0..10 {
        mock.say("a", &i.to_string(), "x").await.unwrap();
    }
    bot.stop_with(StopOptions {
        drain: true,
        timeout: Duration::from_secs(10),
    })
    .await
    .unwrap();
    assert_eq!(
        mock.texts("a").len(),
        10,
        "every accepted message was answered"
    );
    assert_eq!(stopping_seen.load(Ordering::SeqCst), 1);
    assert_eq!(bot.run_state(), botmesh::RunState::Stopped);
    assert!(mock.say("a", "99", "x").await.is_err(), "inbound is closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_without_drain_drops_queued_work() {
    let mock = MockProvider::new();
    mock.set_send_delay(Some(Duration::from_millis(20)));
    let bot = Bot::builder(mock.clone()).build().unwrap();
    crate::common::answer_all(&bot, "done");
    bot.start().await.unwrap();
    for i in 0..10 {
        mock.say("a", &i.to_string(), "x").await.unwrap();
    }
    bot.stop().await.unwrap();
    assert!(mock.texts("a").len() < 10);
}

#[tokio::test(start_paused = true)]
async fn run_stops_with_a_drain_at_end_of_input() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone()).build().unwrap();
    bot.catch_all(|ctx: Ctx| async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        ctx.reply("late but sent").await?;
        Ok(())
    });
    let b = bot.clone();
    let run = tokio::spawn(async move { b.run().await });
    while mock.say("a", "1", "x").await.is_err() {
        tokio::task::yield_now().await;
    }
    mock.end_input();
    run.await.unwrap().unwrap();
    assert_eq!(mock.texts("a"), ["late but sent"]);
    assert_eq!(bot.run_state(), botmesh::RunState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn start_twice_is_refused_and_restart_after_stop_works() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone()).build().unwrap();
    bot.start().await.unwrap();
    assert!(matches!(bot.start().await, Err(BotError::AlreadyStarted)));
    bot.stop().await.unwrap();
    bot.start().await.unwrap();
    assert_eq!(mock.start_stop_counts(), (2, 1));
}

/// A provider whose input is already over when it starts (an empty stdin).
struct EmptyInput;

#[async_trait]
impl botmesh::provider::Provider for EmptyInput {
    fn name(&self) -> &str {
        "empty"
    }
    async fn start(&self, sink: botmesh::provider::EventSink) -> Result<(), ProviderError> {
        sink.end_of_input();
        Ok(())
    }
    async fn stop(&self) -> Result<(), ProviderError> {
        Ok(())
    }
    async fn send(
        &self,
        _chat: &ChatId,
        _outgoing: &botmesh::message::Outgoing,
    ) -> Result<botmesh::message::SentMessage, ProviderError> {
        Ok(botmesh::message::SentMessage { message_id: None })
    }
}

#[tokio::test(start_paused = true)]
async fn run_returns_when_the_input_ended_during_start() {
    let bot = Bot::builder(EmptyInput).build().unwrap();
    tokio::time::timeout(Duration::from_secs(5), bot.run())
        .await
        .expect("run() noticed the end of input signalled before it waited")
        .unwrap();
}

/// `MockProvider::on_send` sees each send as the provider accepts it: before the bot's
/// `after` send hooks, already listed in `sent()` (the observer may read the mock), and a
/// second observer replaces the first.
#[tokio::test(start_paused = true)]
async fn the_mock_reports_each_send_as_it_accepts_it() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone()).build().unwrap();
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let (o, m) = (order.clone(), mock.clone());
    mock.on_send(move |sent| {
        let listed = m.sent().iter().any(|s| s.message_id == sent.message_id);
        o.lock()
            .unwrap()
            .push(format!("provider {} listed={listed}", sent.text()));
    });
    let o = order.clone();
    bot.after_send(move |info| {
        let o = o.clone();
        async move {
            o.lock()
                .unwrap()
                .push(format!("after {}", info.outgoing.content.text()));
        }
    });
    bot.catch_all(|ctx: Ctx| async move {
        ctx.reply(format!("echo {}", ctx.text())).await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("chat", "m1", "one").await.unwrap();
    assert_eq!(mock.wait_for_sends(1, Duration::from_secs(5)).await, 1);
    bot.idle().await;
    assert_eq!(
        *order.lock().unwrap(),
        ["provider echo one listed=true", "after echo one"]
    );

    let second = Arc::new(AtomicUsize::new(0));
    let s = second.clone();
    mock.on_send(move |_| {
        s.fetch_add(1, Ordering::SeqCst);
    });
    mock.say("chat", "m2", "two").await.unwrap();
    assert_eq!(mock.wait_for_sends(2, Duration::from_secs(5)).await, 2);
    bot.idle().await;
    assert_eq!(second.load(Ordering::SeqCst), 1);
    assert_eq!(
        order.lock().unwrap().len(),
        3,
        "the first observer is replaced: only the after hook added a line"
    );
    bot.stop().await.unwrap();
}
