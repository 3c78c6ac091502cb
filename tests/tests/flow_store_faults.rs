//! A persistent flow whose checkpoint write fails (the store away for a moment) while its
//! journals live elsewhere (memory here; also file and Redis, which do not share the store's
//! transactions): the message is charged as failed and replayed from the stored checkpoint.
//! Each question is asked once, the answer is taken for the question it answers, the step's
//! effect runs once, and a flow that ended is not brought back by a checkpoint that could not
//! be deleted. A step no message fed (an idle timeout) is not replayed: a failed save leaves
//! the flow going on from memory, and a failed commit on SQLite (one transaction with its
//! send) takes the stored checkpoint back so that the timeout fires and the step runs again.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use botmesh::durability::InboxState;
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use botmesh_tests::FlakyStore;
use botmesh_tests::settle;

/// Charges made by the orders' effect, one counter per test (they run in parallel).
static CHARGES: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

#[flow(start = command("order"))]
#[persistent]
async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx.ask("What would you like?").await?.text().to_owned();
    let quantity: String = cx.ask("How many?").await?.text().to_owned();
    let charge: usize = cx.chat().as_str().len() % 2;
    let receipt: String = cx
        .effect(async move {
            CHARGES[charge].fetch_add(1, Ordering::SeqCst);
            "r1".to_owned()
        })
        .await?;
    cx.send(format!("Ordered {quantity} x {item} ({receipt})"))
        .await?;
    Ok(())
}

/// Starts the shop on a [`FlakyStore`] (returned, to arm its faults).
async fn shop() -> (FlakyStore, Bot, MockProvider) {
    let store = FlakyStore::default();
    let (bot, mock) = botmesh_tests::shop_on(Arc::new(store.clone()), |bot| {
        bot.flow(order);
    })
    .await;
    (store, bot, mock)
}

/// Says `text` as message `id` and waits until the bot has sent `replies` replies in all (one
/// chat per test; the replay of a failed step comes from the sweeper), then lets it settle,
/// which leaves time for a wrong extra reply to show.
async fn say(bot: &Bot, mock: &MockProvider, chat: &str, id: &str, text: &str, replies: usize) {
    mock.say(chat, id, text).await.unwrap();
    mock.wait_for_sends(replies, Duration::from_secs(2)).await;
    settle(bot).await;
}

async fn assert_all_done(bot: &Bot, messages: usize) {
    let d = bot.durability().unwrap();
    let done = d.inbox().list(InboxState::Done, 100).await.unwrap().len();
    assert_eq!(done, messages, "every message done");
    for state in [
        InboxState::Pending,
        InboxState::Processing,
        InboxState::Dead,
    ] {
        assert!(
            d.inbox().list(state, 10).await.unwrap().is_empty(),
            "{state:?}"
        );
    }
}

/// What the shop says to an order of 2 pears.
const ORDERED: &[&str] = &[
    "What would you like?",
    "How many?",
    "Ordered 2 x pears (r1)",
];

/// The order of `chat` ended as it should despite the fault: the bot sent `texts`, charged
/// (`charges`) once, finished its `messages` messages and kept no checkpoint; then stops it.
async fn assert_ordered_once(
    bot: Bot,
    mock: &MockProvider,
    chat: &str,
    texts: &[&str],
    charges: &AtomicUsize,
    messages: usize,
) {
    assert_eq!(mock.texts(chat), texts);
    assert_eq!(charges.load(Ordering::SeqCst), 1, "charged once");
    assert_all_done(&bot, messages).await;
    assert_eq!(bot.store().checkpoint(chat).await.unwrap(), None);
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_save_that_fails_replays_the_answer_from_the_stored_step() {
    let (store, bot, mock) = shop().await;
    // Chat ids of odd length charge counter 1.
    let chat = "ann";
    say(&bot, &mock, chat, "m1", "/order", 1).await;
    store.fail_save.store(true, Ordering::SeqCst);
    say(&bot, &mock, chat, "m2", "pears", 2).await;
    say(&bot, &mock, chat, "m3", "2", 3).await;
    assert_ordered_once(bot, &mock, chat, ORDERED, &CHARGES[1], 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_delete_that_fails_does_not_bring_the_flow_back() {
    let (store, bot, mock) = shop().await;
    // Chat ids of even length charge counter 0.
    let chat = "bert";
    say(&bot, &mock, chat, "m1", "/order", 1).await;
    say(&bot, &mock, chat, "m2", "pears", 2).await;
    store.fail_delete.store(true, Ordering::SeqCst);
    say(&bot, &mock, chat, "m3", "2", 3).await;
    say(&bot, &mock, chat, "m4", "hello", 4).await;
    let texts = [ORDERED, &["Send /order to order."]].concat();
    assert_ordered_once(bot, &mock, chat, &texts, &CHARGES[0], 4).await;
}

#[flow(start = command("pay"))]
#[persistent]
async fn pay(cx: &mut FlowCx) -> FlowResult {
    match cx.ask("Pay?").idle(Duration::from_secs(60)).await {
        Ok(a) => cx.send(format!("Paid: {}", a.text())).await?,
        Err(_) => {
            let again: String = cx.ask("Still there?").await?.text().to_owned();
            cx.send(format!("Back: {again}")).await?;
        }
    }
    Ok(())
}

/// A step no message fed (an idle timeout) whose checkpoint save fails: nothing replays it, so
/// the flow goes on from memory, and the next answer is taken for the question the timeout
/// asked, not for the expired one the store still holds.
#[tokio::test]
async fn a_timeout_step_whose_save_fails_goes_on_from_memory() {
    let store = FlakyStore::default();
    let mut t = botmesh::testing::Transcript::with_store(Arc::new(store.clone()), |b| {
        let bot = b.build()?;
        bot.flow(pay);
        Ok(bot)
    })
    .await
    .unwrap();
    t.says("ann", "/pay").await;
    store.fail_save.store(true, Ordering::SeqCst);
    t.advance(Duration::from_secs(61)).await;
    t.bot().idle().await;
    assert!(
        !store.fail_save.load(Ordering::SeqCst),
        "the timeout step tried to save"
    );
    assert!(
        t.render()
            .contains("flow `pay` in chat ann: the checkpoint was not written"),
        "the error names the flow and the chat: {}",
        t.render()
    );
    t.says("ann", "yes").await;
    let last = botmesh_tests::last_reply(&t);
    assert!(last.ends_with("Back: yes"), "{}", t.render());
}

/// The same on SQLite, where the timeout step commits in one transaction with its send: the
/// commit fails (the journal away for a moment), nothing was sent, and the flow must not be
/// lost: the stored checkpoint is taken back, its timeout fires again, and the step runs
/// again, this time committed and sent.
#[tokio::test]
async fn a_timeout_step_whose_commit_fails_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = botmesh::durability::SqliteStore::open(dir.path().join("bot.db"));
    let kv = botmesh::testing::crashable(Arc::new(store.durability_kv()));
    let journal = kv.clone();
    let mut t = botmesh::testing::Transcript::with_store(Arc::new(store), move |b| {
        let bot = b
            .durability(DurabilityOptions::backend(journal.clone()).instance_id("t"))
            .build()?;
        bot.flow(pay);
        Ok(bot)
    })
    .await
    .unwrap();
    t.says("ann", "/pay").await;
    kv.fail_once(botmesh::durability::kv::WritePoint::OutboxJournal);
    t.advance(Duration::from_secs(61)).await;
    t.bot().idle().await;
    assert_eq!(kv.failed_once(), 1, "the timeout step's commit failed");
    t.advance(Duration::from_secs(1)).await;
    t.bot().idle().await;
    // The timeout is a scheduler job, armed again a second later; the failed occurrence's end
    // is recorded in the background, so the poll may need another try.
    for _ in 0..30 {
        if t.render().contains("Still there?") {
            break;
        }
        // The background end has no event to wait on: the bot's background work settles.
        settle(t.bot()).await;
        t.bot().fire_flow_timeouts().await.unwrap();
        t.bot().idle().await;
    }
    t.says("ann", "yes").await;
    let said: Vec<String> = t
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("bot →"))
        .collect();
    assert_eq!(said.len(), 3, "{}", t.render());
    assert!(said[1].ends_with("Still there?"), "{}", t.render());
    assert!(said[2].ends_with("Back: yes"), "{}", t.render());
}
