//! A message the channel delivers again after a restart, on a store that shares its
//! transactions with the journal (SQLite): its record is not looked up before its dispatch
//! starts, yet nothing a redelivery must not do runs again. A plain handler, a flow's effect,
//! the end of the flow a start trigger replaces, a flow step's sends and the message hooks
//! each run once in total; every redelivery is answered `Duplicate`, emits no `message`
//! event, and the flow waiting at the restart goes on where it stood.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use botmesh::durability::{DurableKv, SqliteStore};
use botmesh::durable::DurabilityOptions;
use botmesh::events::{BotEvent, DropReason};
use botmesh::prelude::*;
use botmesh::provider::Accepted;
use botmesh::testing::MockProvider;

/// How many times each piece of the bot's code ran, across both bots of a test.
#[derive(Default)]
struct Runs {
    pings: AtomicU32,
    before: AtomicU32,
    after: AtomicU32,
}

static CHARGES: AtomicU32 = AtomicU32::new(0);

/// Asks an amount, then to confirm; a yes charges it once (`cx.effect`).
#[flow(start = command("charge"))]
#[persistent]
async fn charge(cx: &mut FlowCx) -> FlowResult {
    let amount: String = cx.ask("Amount?").await?.text().to_owned();
    if cx.ask(format!("Charge {amount}?")).await?.is_yes() {
        cx.effect(async { CHARGES.fetch_add(1, Ordering::SeqCst) })
            .await?;
        cx.send(format!("charged {amount}")).await?;
    } else {
        cx.send("not charged").await?;
    }
    Ok(())
}

/// A bot on `store` answering `/ping` and running [`charge`]; with `hooks`, `before` and
/// `after` message hooks count the messages they see.
fn bot(mock: &MockProvider, store: &SqliteStore, runs: &Arc<Runs>, hooks: bool) -> Bot {
    let kv: Arc<dyn DurableKv> = Arc::new(store.durability_kv());
    let bot = Bot::builder(mock.clone())
        .store(store.clone())
        .durability(DurabilityOptions::shared(kv).instance_id("i1"))
        .build()
        .unwrap();
    let r = Arc::clone(runs);
    bot.command("ping", move |ctx: Ctx| {
        let r = Arc::clone(&r);
        async move {
            r.pings.fetch_add(1, Ordering::SeqCst);
            ctx.reply("pong").await?;
            Ok(())
        }
    });
    bot.flow(charge);
    if hooks {
        let r = Arc::clone(runs);
        bot.before_message(move |_| {
            let r = Arc::clone(&r);
            async move {
                r.before.fetch_add(1, Ordering::SeqCst);
                Ok(HookFlow::Continue)
            }
        });
        let r = Arc::clone(runs);
        bot.after_message(move |_| {
            let r = Arc::clone(&r);
            async move {
                r.after.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    bot
}

/// The `message` events and the duplicates dropped, counted as `bot` emits them.
fn count_events(bot: &Bot) -> Arc<(AtomicU32, AtomicU32)> {
    let counts = Arc::new((AtomicU32::new(0), AtomicU32::new(0)));
    let mut events = bot.subscribe();
    let c = Arc::clone(&counts);
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            match e {
                BotEvent::Message { .. } => c.0.fetch_add(1, Ordering::SeqCst),
                BotEvent::Dropped {
                    reason: DropReason::Duplicate,
                    ..
                } => c.1.fetch_add(1, Ordering::SeqCst),
                _ => 0,
            };
        }
    });
    counts
}

/// Says `(id, text)` from alice and waits for the bot to be idle; the admission's answer.
async fn say(bot: &Bot, mock: &MockProvider, (id, text): (&str, &str)) -> Accepted {
    let accepted = mock.say("alice", id, text).await.unwrap();
    botmesh_tests::settle(bot).await;
    accepted
}

/// Bot A takes `first` and stops; bot B, on the same store, is delivered `again` (ids and
/// texts of `first`): each is a duplicate, sends nothing, and emits no `message` event.
/// Returns bot B (started) and its provider.
async fn redelivered(
    store: &SqliteStore,
    runs: &Arc<Runs>,
    hooks: bool,
    first: &[(&str, &str)],
    again: &[(&str, &str)],
) -> (Bot, MockProvider) {
    let mock_a = MockProvider::new();
    let a = bot(&mock_a, store, runs, hooks);
    a.start().await.unwrap();
    for said in first {
        assert_eq!(say(&a, &mock_a, *said).await, Accepted::Queued, "{said:?}");
    }
    a.stop().await.unwrap();

    let mock_b = MockProvider::new();
    let b = bot(&mock_b, store, runs, hooks);
    let events = count_events(&b);
    b.start().await.unwrap();
    for said in again {
        assert_eq!(
            say(&b, &mock_b, *said).await,
            Accepted::Duplicate,
            "{said:?} was taken by bot A"
        );
    }
    assert!(
        mock_b.texts("alice").is_empty(),
        "{:?}",
        mock_b.texts("alice")
    );
    assert_eq!(events.0.load(Ordering::SeqCst), 0, "no message event");
    assert_eq!(events.1.load(Ordering::SeqCst) as usize, again.len());
    (b, mock_b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_message_runs_no_handler_effect_or_step_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let runs = Arc::new(Runs::default());
    let first = [
        ("m1", "/ping"),
        ("m2", "/charge"),
        ("m3", "10"),
        ("m4", "yes"),
        ("m5", "/charge"),
        ("m6", "20"),
    ];
    let charged = CHARGES.load(Ordering::SeqCst);
    // Bot B's flow waits at "Charge 20?": the confirming `yes` of the first run would run the
    // effect, the `/charge` would end the waiting flow, `10` would answer it, `/ping` would
    // answer again.
    let again = [
        ("m4", "yes"),
        ("m5", "/charge"),
        ("m2", "/charge"),
        ("m3", "10"),
        ("m1", "/ping"),
    ];
    let (b, mock_b) = redelivered(&store, &runs, false, &first, &again).await;
    assert_eq!(runs.pings.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(
        CHARGES.load(Ordering::SeqCst) - charged,
        1,
        "the effect ran once"
    );
    // The flow goes on where it stood.
    assert_eq!(say(&b, &mock_b, ("m7", "yes")).await, Accepted::Queued);
    assert_eq!(mock_b.texts("alice"), ["charged 20"]);
    assert_eq!(CHARGES.load(Ordering::SeqCst) - charged, 2);
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_message_runs_no_message_hook_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let runs = Arc::new(Runs::default());
    let first = [("m1", "/ping"), ("m2", "/charge"), ("m3", "hello")];
    let (b, mock_b) = redelivered(&store, &runs, true, &first, &first).await;
    assert_eq!(runs.before.load(Ordering::SeqCst), 3);
    assert_eq!(runs.after.load(Ordering::SeqCst), 3);
    assert_eq!(runs.pings.load(Ordering::SeqCst), 1);
    assert_eq!(say(&b, &mock_b, ("m4", "no")).await, Accepted::Queued);
    assert_eq!(mock_b.texts("alice"), ["not charged"]);
    assert_eq!(runs.before.load(Ordering::SeqCst), 4);
    b.stop().await.unwrap();
}
