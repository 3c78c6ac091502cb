//! `stop()` without a drain: the work not started is dropped (and its journaled messages are
//! replayed at the next start, at once), the running handlers get up to `stop_timeout` to end
//! (a send in flight lands and is recorded), and once `stop()` returns no handler runs or sends.
//!
//! | case | expected |
//! | --- | --- |
//! | a handler that ends within `stop_timeout` | its reply is sent before `stop()` returns |
//! | a handler longer than `stop_timeout` | aborted: it never sends, also later |
//! | `stop()` while a send is at the provider | the send is recorded `sent`, the message `done`; a restart resends nothing and reports nothing ambiguous |
//! | a message queued behind a running one | dropped unstarted, its lease given back: a restart replays it at once, answered once |
//! | a FileDurability | closed by `stop()` (log folded, lock released), opened again by `start()` before `restore` |
//! | a FileDurability shared by two bots | the first bot's `stop()` leaves it open for the other |
//!
//! The tests on `MemoryKv` run on tokio's paused clock: the handlers' and the provider's delays
//! and the waits between events advance virtual time, so the order of events does not depend
//! on the machine's load. The tests on a `FileDurability` wait on events (`idle`, sends seen by
//! the provider), since a paused clock would run ahead of the file's real I/O.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use botmesh::config::BotConfig;
use botmesh::durability::{
    DurabilityConfig, DurabilityEvent, DurableKv, InboxState, MemoryKv, OnAmbiguous, OutboxState,
};
use botmesh::durability::{FileDurability, FileOptions};
use botmesh::durable::DurabilityOptions;
use botmesh::message::{ChatId, Outgoing, SentMessage};
use botmesh::prelude::*;
use botmesh::provider::{EventSink, Provider, ProviderError};
use botmesh::testing::MockProvider;

fn fast() -> DurabilityConfig {
    let mut c = DurabilityConfig::default();
    c.poll = Duration::from_millis(20);
    c
}

/// Durability on `file`, with the fast config, as instance `i1`.
fn on_file(file: &FileDurability) -> DurabilityOptions {
    DurabilityOptions::backend(file.clone())
        .config(fast())
        .instance_id("i1")
}

fn config(stop_timeout: Duration) -> BotConfig {
    BotConfig {
        stop_timeout,
        ..BotConfig::default()
    }
}

/// A started bot (stop timeout `grace`) whose handler works `work`, then replies `reply`;
/// message `x` has been delivered and the handler has been running for `after`.
async fn mid_handler(
    grace: Duration,
    work: Duration,
    reply: &'static str,
    after: Duration,
) -> (Bot, MockProvider) {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .config(config(grace))
        .build()
        .unwrap();
    bot.catch_all(move |ctx: Ctx| async move {
        tokio::time::sleep(work).await;
        ctx.reply(reply).await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "x").await.unwrap();
    tokio::time::sleep(after).await;
    (bot, mock)
}

#[tokio::test(start_paused = true)]
async fn a_running_handler_ends_within_the_grace_and_nothing_runs_after_stop() {
    let ms = Duration::from_millis;
    let grace = BotConfig::default().stop_timeout;
    let (bot, mock) = mid_handler(grace, ms(200), "answered", ms(50)).await;
    bot.stop().await.unwrap();
    assert_eq!(
        mock.texts("a"),
        vec!["answered"],
        "the running handler ended before stop() returned"
    );
    tokio::time::sleep(ms(300)).await;
    assert_eq!(mock.texts("a"), vec!["answered"], "nothing after stop()");
}

#[tokio::test(start_paused = true)]
async fn a_handler_longer_than_the_grace_is_aborted_and_never_sends() {
    let ms = Duration::from_millis;
    let (bot, mock) = mid_handler(ms(100), ms(400), "too late", ms(30)).await;
    let t0 = Instant::now();
    bot.stop().await.unwrap();
    assert!(
        t0.elapsed() < ms(350),
        "stop() waited {:?}, not the handler",
        t0.elapsed()
    );
    tokio::time::sleep(ms(600)).await;
    assert!(
        mock.texts("a").is_empty(),
        "an aborted handler sent after stop(): {:?}",
        mock.texts("a")
    );
}

/// Accepts every message at once (it reaches the channel) but answers only 300 ms later.
#[derive(Clone)]
struct SlowAck {
    inner: MockProvider,
    accepted: Arc<Mutex<Vec<String>>>,
}

/// A durable bot on `kv` whose provider records its sends in `accepted`, slowly; and the mock
/// behind it, to say messages.
fn slow_bot(
    kv: &Arc<dyn DurableKv>,
    accepted: &Arc<Mutex<Vec<String>>>,
    cfg: &DurabilityConfig,
) -> (Bot, MockProvider) {
    let provider = SlowAck {
        inner: MockProvider::new(),
        accepted: accepted.clone(),
    };
    let mock = provider.inner.clone();
    (durable_bot(kv, provider, cfg), mock)
}

#[async_trait]
impl Provider for SlowAck {
    fn name(&self) -> &str {
        "mock"
    }
    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        self.inner.start(sink).await
    }
    async fn stop(&self) -> Result<(), ProviderError> {
        self.inner.stop().await
    }
    async fn send(&self, chat: &ChatId, o: &Outgoing) -> Result<SentMessage, ProviderError> {
        self.accepted
            .lock()
            .unwrap()
            .push(o.content.text().to_owned());
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.inner.send(chat, o).await
    }
}

fn durable_bot(kv: &Arc<dyn DurableKv>, provider: SlowAck, cfg: &DurabilityConfig) -> Bot {
    let bot = Bot::builder(provider)
        .durability(
            DurabilityOptions::shared(kv.clone())
                .config(cfg.clone())
                .instance_id("i1"),
        )
        .build()
        .unwrap();
    bot.catch_all(|ctx: Ctx| async move {
        if ctx.text() == "slow" {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        ctx.reply(format!("re: {}", ctx.text())).await?;
        Ok(())
    });
    bot
}

fn ambiguous_counter(bot: &Bot) -> Arc<AtomicUsize> {
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    bot.on_event(move |e| {
        if matches!(e, BotEvent::Durability(DurabilityEvent::Ambiguous { .. })) {
            c.fetch_add(1, Ordering::SeqCst);
        }
    });
    n
}

/// A clean stop is not a crash: a send at the provider when `stop()` is called lands and is
/// recorded, so a restart under `Resend` sends nothing again (cutting the handler mid-send
/// would leave the send ambiguous: resent under `Resend`, reported under `Skip`).
#[tokio::test(start_paused = true)]
async fn a_send_in_flight_at_stop_is_recorded_and_never_sent_again() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let mut cfg = fast();
    cfg.outbox.on_ambiguous = OnAmbiguous::Resend;
    let accepted: Arc<Mutex<Vec<String>>> = Arc::default();
    let (bot, first) = slow_bot(&kv, &accepted, &cfg);
    bot.start().await.unwrap();
    first.say("a", "m1", "hello").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    bot.stop().await.unwrap();
    let d = bot.durability().unwrap();
    let (outbox, inbox) = (d.outbox(), d.inbox());
    let sent = outbox.list(OutboxState::Sent, 10).await.unwrap().len();
    let sending = outbox.list(OutboxState::Sending, 10).await.unwrap().len();
    let done = inbox.list(InboxState::Done, 10).await.unwrap().len();
    let processing = inbox.list(InboxState::Processing, 10).await.unwrap().len();
    assert_eq!(
        (sent, sending, done, processing),
        (1, 0, 1, 0),
        "sends sent and sending, messages done and processing"
    );

    let (again, _) = slow_bot(&kv, &accepted, &cfg);
    let ambiguous = ambiguous_counter(&again);
    again.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    again.idle().await;
    again.stop().await.unwrap();
    assert_eq!(*accepted.lock().unwrap(), vec!["re: hello"], "sent once");
    assert_eq!(ambiguous.load(Ordering::SeqCst), 0);
}

/// A message queued behind a running one of its chat is dropped by `stop()`, and its lease is
/// given back: a restart (same instance) replays it at once, not after the 60 s lease.
#[tokio::test(start_paused = true)]
async fn a_queued_message_dropped_at_stop_is_replayed_at_once_on_restart() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let cfg = fast();
    assert!(cfg.inbox.lease >= Duration::from_secs(30), "a long lease");
    let accepted: Arc<Mutex<Vec<String>>> = Arc::default();
    let (bot, first) = slow_bot(&kv, &accepted, &cfg);
    bot.start().await.unwrap();
    first.say("a", "m1", "slow").await.unwrap();
    first.say("a", "m2", "queued").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    bot.stop().await.unwrap();
    assert_eq!(*accepted.lock().unwrap(), vec!["re: slow"], "m2 never ran");
    let d = bot.durability().unwrap();
    let pending = d.inbox().list(InboxState::Pending, 10).await.unwrap();
    assert_eq!(pending.len(), 1, "m2 is pending again");
    assert_eq!(pending[0].attempts, 0, "its attempt is given back");

    let (again, _) = slow_bot(&kv, &accepted, &cfg);
    again.start().await.unwrap();
    let t0 = Instant::now();
    while accepted.lock().unwrap().len() < 2 && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    again.idle().await;
    again.stop().await.unwrap();
    assert_eq!(
        *accepted.lock().unwrap(),
        vec!["re: slow", "re: queued"],
        "m2 replayed within 5 s, and each answered once"
    );
}

/// `stop()` closes the durability backend once the work is drained: `FileDurability` folds
/// its log into the snapshot and releases its lock (another handle can open the file at once),
/// and the next `start()` opens it again.
#[tokio::test]
async fn stop_closes_the_file_backend_and_start_opens_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.json");
    let log = dir.path().join("journal.json.log");
    let file = FileDurability::open(&path, FileOptions::new().append_log(true))
        .await
        .unwrap();
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .durability(on_file(&file))
        .build()
        .unwrap();
    crate::common::answer_all(&bot, "hi");
    bot.start().await.unwrap();
    mock.say("a", "m1", "x").await.unwrap();
    bot.idle().await;
    assert!(
        std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) > 100,
        "writes are in the log"
    );
    bot.stop().await.unwrap();
    let folded = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    assert!(
        folded < 100,
        "the log is folded into the snapshot ({folded} bytes left)"
    );
    let other = FileDurability::open(&path, FileOptions::new().append_log(true))
        .await
        .expect("the lock is released: another handle opens the file");
    let other_len = other.len();
    assert!(other_len >= 2, "the snapshot holds the journal");
    other.close().await.unwrap();

    bot.start().await.unwrap();
    mock.say("a", "m2", "y").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["hi", "hi"]);
    bot.stop().await.unwrap();
    let reopened = FileDurability::open(&path, FileOptions::new().append_log(true))
        .await
        .unwrap();
    assert!(
        reopened.len() > other_len,
        "the second run's writes went to the reopened file"
    );
}

fn bot_on(kv: &Arc<dyn DurableKv>, id: &str, mock: &MockProvider) -> Bot {
    let bot = Bot::builder(mock.clone())
        .config(BotConfig {
            bot_id: id.to_owned(),
            ..BotConfig::default()
        })
        .durability(
            DurabilityOptions::shared(kv.clone())
                .config(fast())
                .instance_id(id),
        )
        .build()
        .unwrap();
    crate::common::answer_all(&bot, "hi");
    bot
}

/// A FileDurability with an append log, in a new folder (which must outlive it).
async fn appending_file() -> (tempfile::TempDir, FileDurability) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.json");
    let options = FileOptions::new().append_log(true);
    (dir, FileDurability::open(&path, options).await.unwrap())
}

/// Two bots share one FileDurability (each in its own scope, as `DurabilityOptions::shared`
/// and docs/durability-and-backends.md "Several bots can share one backend" allow). Stopping one of them
/// must not take the journal away from the other.
#[tokio::test]
async fn stopping_one_bot_leaves_a_shared_file_backend_open_for_the_other() {
    let (_dir, file) = appending_file().await;
    let kv: Arc<dyn DurableKv> = Arc::new(file);
    let (ma, mb) = (MockProvider::new(), MockProvider::new());
    let a = bot_on(&kv, "bot-a", &ma);
    let b = bot_on(&kv, "bot-b", &mb);
    a.start().await.unwrap();
    b.start().await.unwrap();
    mb.say("u", "m1", "x").await.unwrap();
    b.idle().await;
    a.stop().await.unwrap();
    let second = mb.say("u", "m2", "y").await;
    b.idle().await;
    let texts = mb.texts("u");
    b.stop().await.unwrap();
    assert!(
        second.is_ok(),
        "bot b refused m2 after bot a stopped: {second:?}"
    );
    assert_eq!(texts, ["hi", "hi"], "bot b still answers");
}

#[flow(start = command("hello"))]
#[persistent]
async fn hello(cx: &mut FlowCx) -> FlowResult {
    cx.send("hello").await?;
    let _a = cx.ask("and?").await?;
    Ok(())
}

/// A flow whose checkpoint is of another layout (`on_version_mismatch = restart`) restarts on
/// the chat's first message after the bot starts again from a `stop()` that closed its
/// FileDurability: the backend is open again, and the restarted flow's sends go out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_restarted_by_restore_after_a_stop_can_send() {
    use botmesh::durability::store::FlowCheckpoint;
    use botmesh::durability::{MemoryStore, Store};
    let (_dir, file) = appending_file().await;
    let store = MemoryStore::new();
    let mock = MockProvider::new();
    let (sent_tx, mut sent) = tokio::sync::mpsc::unbounded_channel::<()>();
    mock.on_send(move |_| {
        let _ = sent_tx.send(());
    });
    let bot = Bot::builder(mock.clone())
        .store(store.clone())
        .durability(on_file(&file))
        .build()
        .unwrap();
    bot.flow(hello);
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let e2 = errors.clone();
    bot.on_event(move |e| {
        e2.lock().unwrap().push(format!("{e:?}"));
    });
    bot.start().await.unwrap();
    bot.stop().await.unwrap();
    store.open().await.unwrap();
    store
        .save_checkpoint(&FlowCheckpoint {
            chat: "ann".into(),
            flow: "hello".into(),
            layout_hash: 1,
            state: serde_json::json!({"run": "r1", "frames": [{"flow": "hello", "hash": 1, "state": {"S1": {}}, "wait": null}]}),
            inbound_id: None,
            step: 1,
            updated_ms: 0,
        })
        .await
        .unwrap();
    bot.start().await.unwrap();
    // The restart waits for the chat's next message (which is then not an answer); the
    // restarted flow sends three times (the notice, "hello", then its question).
    mock.say("ann", "w1", "where were we?").await.unwrap();
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(10), sent.recv())
            .await
            .expect("the restarted flow sends within 10 s");
    }
    bot.idle().await;
    let texts = mock.texts("ann");
    bot.stop().await.unwrap();
    assert_eq!(
        texts,
        [botmesh::flow::DEFAULT_RESTART_NOTICE, "hello", "and?"],
        "errors: {:?}",
        errors.lock().unwrap()
    );
}
