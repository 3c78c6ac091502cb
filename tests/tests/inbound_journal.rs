//! On a store that shares its transactions with the journal (a SQLite store and its own
//! durability), an inbound message is journaled with its ledger row, chat and contact in one
//! write, and that write is the one of the first flow step the message feeds (or, for a
//! handler, the message's completion; for a step that runs an effect, a write right before
//! the effect): the live path does not record it a second time, a
//! crash right before that write leaves none of it, right after it all of it, and the replay
//! after the crash does not record it again; a message journaled alone (the ledger off then)
//! is recorded by its replay.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use botmesh::durability::kv::WritePhase;
use botmesh::durability::kv::WritePoint;
use botmesh::durability::store::Direction;
use botmesh::durability::{DurableKv, InboxState, SqliteStore, Store};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::{CrashableProvider, MockProvider, crashable};

/// A bot on `store` and `kv` that answers every message.
fn bot(provider: impl Provider, store: &SqliteStore, kv: Arc<dyn DurableKv>) -> Bot {
    bot_with_ledger(provider, store, kv, true, None)
}

/// As [`bot`], with the message ledger on or off; with a `gate`, each handler waits for it to
/// open before it answers.
fn bot_with_ledger(
    provider: impl Provider,
    store: &SqliteStore,
    kv: Arc<dyn DurableKv>,
    ledger: bool,
    gate: Option<Arc<tokio::sync::Notify>>,
) -> Bot {
    let config = botmesh::config::BotConfig {
        ledger,
        ..Default::default()
    };
    let bot = Bot::builder(provider)
        .config(config)
        .store(store.clone())
        .durability(DurabilityOptions::shared(kv).instance_id("i1"))
        .build()
        .unwrap();
    bot.catch_all(move |ctx: Ctx| {
        let gate = gate.clone();
        async move {
            if let Some(gate) = gate {
                gate.notified().await;
            }
            ctx.reply("noted").await?;
            Ok(())
        }
    });
    bot
}

/// The inbound ledger rows of alice's chat, by message id.
async fn inbound_rows(store: &SqliteStore) -> Vec<String> {
    store
        .ledger("alice", 50)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.direction == Direction::Inbound)
        .filter_map(|e| e.message_id)
        .collect()
}

/// Says each `(id, text)` from alice and waits for the bot to be idle; returns the write
/// requests each message cost the store's writer.
async fn writes_of(
    store: &SqliteStore,
    bot: &Bot,
    mock: &MockProvider,
    messages: &[(&str, &str)],
) -> Vec<u64> {
    let mut writes = Vec::new();
    for (id, text) in messages {
        let before = store.write_stats().requests;
        mock.say("alice", id, text).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), bot.idle())
            .await
            .unwrap();
        writes.push(store.write_stats().requests - before);
    }
    writes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_journaled_with_its_ledger_row_chat_and_contact_in_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let mock = MockProvider::new();
    let bot_on_mock = bot(mock.clone(), &store, Arc::new(store.durability_kv()));
    bot_on_mock.start().await.unwrap();
    let said = [("m1", "hello"), ("m2", "hello"), ("m3", "hello")];
    // The reply's outbox record leased for its first attempt (one write), its "sent" with its
    // ledger row, then the inbound journaled completed with its rows as the handler ends:
    // three writes (four when the inbound was journaled before the handler and completed
    // after it). The first message's first write is preceded by one more: the journal's scope
    // registered in the file (once per store and scope).
    assert_eq!(
        writes_of(&store, &bot_on_mock, &mock, &said).await,
        [4, 3, 3]
    );
    assert_eq!(
        inbound_rows(&store).await,
        ["m1", "m2", "m3"],
        "one row each"
    );
    let chat = store.chat("alice").await.unwrap().unwrap();
    assert!(!chat.is_group);
    assert!(store.contact("alice").await.unwrap().is_some());
    assert_eq!(mock.texts("alice"), ["noted", "noted", "noted"]);
    bot_on_mock.stop().await.unwrap();
}

/// Bot A crashes at the inbound journal write (`phase`) of alice's message; returns what the
/// store holds then, and what it holds once bot B took over and the channel redelivered.
async fn crash_at_journal(phase: WritePhase) -> (Vec<String>, Vec<String>, Vec<String>) {
    crash_at_journal_with(phase, true, false).await
}

/// As [`crash_at_journal`], bot A with the ledger on or off (bot B always has it on). With
/// `held`, bot A's handler waits until the crash: the admission writes the record alone,
/// leased (not done), before the handler answers.
async fn crash_at_journal_with(
    phase: WritePhase,
    ledger_a: bool,
    held: bool,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let shared: Arc<dyn DurableKv> = Arc::new(store.durability_kv());
    let switch = crashable(shared.clone());
    switch.crash_at(WritePoint::InboxJournal, phase, 1);
    let mock_a = MockProvider::new();
    let gate = held.then(|| Arc::new(tokio::sync::Notify::new()));
    let bot_a = bot_with_ledger(
        CrashableProvider::new(mock_a.clone(), &switch),
        &store,
        Arc::new(switch.clone()),
        ledger_a,
        gate.clone(),
    );
    bot_a.start().await.unwrap();
    // Not acknowledged either way: the crash is inside the admission.
    assert!(mock_a.say("alice", "m1", "hello").await.is_err());
    assert!(switch.is_crashed());
    if let Some(gate) = gate {
        gate.notify_one();
    }
    bot_a.stop().await.unwrap();
    // Stopping the bot closed the store: open it again to look.
    store.open().await.unwrap();
    let after_crash = inbound_rows(&store).await;

    let mock_b = MockProvider::new();
    let bot_b = bot(mock_b.clone(), &store, shared);
    bot_b.start().await.unwrap();
    // The channel redelivers what was not acknowledged: a duplicate if it was journaled.
    let _ = mock_b.say("alice", "m1", "hello").await.unwrap();
    botmesh_tests::settle(&bot_b).await;
    let finally = inbound_rows(&store).await;
    let mut sent = mock_a.texts("alice");
    sent.extend(mock_b.texts("alice"));
    bot_b.stop().await.unwrap();
    (after_crash, finally, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_journal_write_leaves_nothing_of_the_message() {
    let (after_crash, finally, sent) = crash_at_journal(WritePhase::Before).await;
    assert!(
        after_crash.is_empty(),
        "no ledger row without its journal record"
    );
    assert_eq!(finally, ["m1"], "the redelivery records it once");
    assert_eq!(sent, ["noted"], "and it is answered once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_journal_write_leaves_all_of_the_message() {
    let (after_crash, finally, sent) = crash_at_journal(WritePhase::After).await;
    assert_eq!(
        after_crash,
        ["m1"],
        "the ledger row landed with the journal record"
    );
    assert_eq!(finally, ["m1"], "the replay does not record it again");
    assert_eq!(sent, ["noted"], "and it is answered once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_journaled_without_its_rows_is_recorded_by_its_replay() {
    // Bot A ran with the ledger off: the record was journaled alone, leased, while its
    // handler waited. Bot B has the ledger on, and the replay must write the ledger row (a
    // rule taken from the store, not the record, would skip it).
    let (after_crash, finally, sent) = crash_at_journal_with(WritePhase::After, false, true).await;
    assert!(after_crash.is_empty(), "journaled without a ledger row");
    assert_eq!(finally, ["m1"], "the replay records it, once");
    assert_eq!(sent, ["noted"], "and it is answered once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_a_flow_step_answers_is_journaled_in_the_steps_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let mock = MockProvider::new();
    let bot = bot(mock.clone(), &store, Arc::new(store.durability_kv()));
    bot.flow(botmesh_tests::flows::order);
    bot.start().await.unwrap();
    let said = [("m1", "/order"), ("m2", "tea"), ("m3", "2")];
    // The step's one write: the inbound record (done) with its ledger row, chat and contact,
    // the checkpoint and the reply's outbox record leased; then the reply's "sent" with its
    // ledger row. The first message: the journal's scope registered first.
    assert_eq!(writes_of(&store, &bot, &mock, &said).await, [3, 2, 2]);
    assert_eq!(
        inbound_rows(&store).await,
        ["m1", "m2", "m3"],
        "one row each"
    );
    assert_eq!(
        mock.texts("alice"),
        ["What would you like?", "How many?", "Ordered 2 x tea"]
    );
    let done = bot
        .durability()
        .unwrap()
        .inbox()
        .list(InboxState::Done, 10)
        .await
        .unwrap();
    assert_eq!(
        done.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["alice/m1", "alice/m2", "alice/m3"],
        "each written done"
    );
    bot.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handlers_message_is_accepted_before_the_handler_ends() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let mock = MockProvider::new();
    let release = Arc::new(tokio::sync::Notify::new());
    let bot = bot_with_ledger(
        mock.clone(),
        &store,
        Arc::new(store.durability_kv()),
        true,
        Some(Arc::clone(&release)),
    );
    bot.start().await.unwrap();
    // Accepted while the handler waits: the record was written alone, leased.
    tokio::time::timeout(Duration::from_secs(5), mock.say("alice", "m1", "hello"))
        .await
        .expect("accepted without waiting for the handler")
        .unwrap();
    let d = bot.durability().unwrap();
    let leased = d.inbox().list(InboxState::Processing, 10).await.unwrap();
    assert_eq!(leased.len(), 1, "{leased:?}");
    assert_eq!(inbound_rows(&store).await, ["m1"], "with its ledger row");
    release.notify_one();
    tokio::time::timeout(Duration::from_secs(5), bot.idle())
        .await
        .unwrap();
    assert_eq!(mock.texts("alice"), ["noted"]);
    let done = d.inbox().list(InboxState::Done, 10).await.unwrap();
    assert_eq!(done.len(), 1, "completed as the handler ended");
    bot.stop().await.unwrap();
}

/// Answers `/pay` with the inbound records being processed when its effect ran.
#[flow(start = command("pay"))]
#[persistent]
async fn pay(cx: &mut FlowCx) -> FlowResult {
    let bot = cx.ctx().bot().clone();
    let processing: Vec<String> = cx
        .effect(async move {
            let d = bot.durability().unwrap();
            let records = d.inbox().list(InboxState::Processing, 10).await.unwrap();
            records.into_iter().map(|r| r.id).collect()
        })
        .await?;
    cx.send(format!("recorded: {}", processing.join(",")))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_step_runs_an_effect_is_recorded_before_the_effect() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let mock = MockProvider::new();
    let bot = bot(mock.clone(), &store, Arc::new(store.durability_kv()));
    bot.flow(pay);
    bot.start().await.unwrap();
    let writes = writes_of(&store, &bot, &mock, &[("m1", "/pay")]).await;
    // Leased (written) while the effect ran, not left for the step's commit after it.
    assert_eq!(mock.texts("alice"), ["recorded: alice/m1"]);
    assert_eq!(inbound_rows(&store).await, ["m1"], "one ledger row");
    let d = bot.durability().unwrap();
    let done = d.inbox().list(InboxState::Done, 10).await.unwrap();
    assert_eq!(done.len(), 1, "completed by the step's write: {done:?}");
    // The journal's scope registered (the first message), the record with its rows, the
    // effect's record, the step (its end, the reply's outbox record leased, the inbound
    // completed, the effect's record deleted), the reply's "sent" with its ledger row.
    assert_eq!(writes, [5]);
    bot.stop().await.unwrap();
}
