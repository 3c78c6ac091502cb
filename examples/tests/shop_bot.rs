//! The shop bot in process, on the mock provider and the memory store.

use std::time::Duration;

use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use botmesh_examples::shop::{self, hand_written, order_flow, orders};

type Build = fn(BotBuilder) -> Result<Bot, BotError>;

async fn shop_on_mock() -> (MockProvider, Bot) {
    on_mock(shop::shop_bot).await
}

async fn on_mock(build: Build) -> (MockProvider, Bot) {
    let provider = MockProvider::new();
    let bot = build(Bot::builder(provider.clone()).bot_id(shop::BOT_ID)).expect("builds");
    bot.start().await.expect("starts");
    (provider, bot)
}

#[tokio::test]
async fn cancel_bad_item_no_and_hints() {
    // The flow's state is the runtime's checkpoint, so `/status` says that an order is in
    // progress, not which question it waits at (as the hand-written version does).
    script(shop::shop_bot, "an order, waiting for your answer").await;
}

#[tokio::test]
async fn the_hand_written_baseline_answers_the_same_script() {
    script(shop::hand_written_bot, "choosing how many Tea").await;
}

/// `chat` writes each of `steps` in turn, as the messages numbered from `first`; `[data]`
/// presses the button `data`.
async fn writes(mock: &MockProvider, chat: &str, first: usize, steps: &[&str]) {
    for (n, step) in (first..).zip(steps) {
        let id = n.to_string();
        let written = match step.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            Some(data) => mock.press(chat, &id, data).await,
            None => mock.say(chat, &id, step).await,
        };
        written.expect("accepted");
    }
}

/// Cancel, a bad item, a bad confirmation, `no` and hints; `in_progress` is what `/status`
/// says of the order in progress.
async fn script(build: Build, in_progress: &str) {
    let (mock, bot) = on_mock(build).await;
    let chat = ChatId::from("c");
    writes(
        &mock,
        "c",
        1,
        &["hello", "/order", "pizza", "[tea]", "/status", "/cancel"],
    )
    .await;
    // With the `#[flow]` version, `/cancel` ends the flow through `bot.cancel_flow`, which
    // queues the cancellation on the chat's queue after the messages already queued there:
    // wait for it before the next message (the hand-written version drops its state inline).
    bot.idle().await;
    writes(
        &mock,
        "c",
        7,
        &["/cancel", "what?", "/order", "cake", "1", "maybe", "[no]"],
    )
    .await;
    bot.idle().await;
    mock.wait_for_sends(15, Duration::from_secs(5)).await;
    let texts = mock.texts("c");
    let status =
        format!("You have no orders yet. Send /order to place one.\nIn progress: {in_progress}.");
    let expected = [
        "Welcome to the botmesh shop!",
        "What would you like?",
        "Sorry, we don't sell that.",
        "What would you like?",
        "How many Tea? (1-99)",
        status.as_str(),
        "Order cancelled.",
        "There is no order in progress.",
        "Sorry, I didn't get that.",
        "What would you like?",
        "How many Cake? (1-99)",
        "1 × Cake for 4.00. Place the order?",
        "Please answer Yes or No.",
        "1 × Cake for 4.00. Place the order?",
        "Order dropped.",
    ];
    assert_eq!(texts.len(), expected.len(), "{texts:#?}");
    for (text, start) in texts.iter().zip(expected) {
        assert!(
            text.starts_with(start),
            "{text:?} does not start with {start:?}"
        );
    }
    let store = bot.store();
    assert!(
        orders::list(store.as_ref(), &chat)
            .await
            .expect("list")
            .is_empty()
    );
    assert!(
        !order_flow::in_progress(store.as_ref(), &chat)
            .await
            .expect("store")
    );
    assert_eq!(
        hand_written::load(store.as_ref(), &chat)
            .await
            .expect("load"),
        None
    );
    bot.stop().await.expect("stops");
}

/// Placing an order reads the chat's `last` summary, writes the order, then `last`. A replay
/// that crashed between the two writes (the order in, `last` still naming the one before)
/// computes the same number and rewrites the same order; a scope without `last` (written
/// before it existed) is counted once.
#[tokio::test]
async fn an_order_replayed_between_its_two_writes_is_stored_once() {
    let store: std::sync::Arc<dyn botmesh::durability::Store> =
        std::sync::Arc::new(botmesh::durability::MemoryStore::new());
    let chat = ChatId::from("e");
    let tea = shop::catalogue::find("tea").expect("tea");
    // Places an order of `quantity` tea, confirmed by the inbound record `inbound`.
    let place = async |quantity, inbound| {
        let placed = orders::place(store.as_ref(), &chat, tea, quantity, Some(inbound)).await;
        placed.expect("place")
    };
    let first = place(1, "in/1").await;
    let second = place(2, "in/2").await;
    assert_eq!((first.number, second.number), (1, 2));
    let scope = orders::scope(&chat);
    // The crash: order 2 is stored, `last` still names order 1.
    store
        .set_value(
            &scope,
            "last",
            &serde_json::json!({"number": 1, "inbound": "in/1"}),
        )
        .await
        .expect("set");
    let replayed = place(2, "in/2").await;
    assert_eq!(replayed.number, 2);
    let listed = orders::list(store.as_ref(), &chat).await.expect("list");
    assert_eq!(listed.len(), 2);
    // Now `last` names order 2: the same confirmation again returns it unchanged.
    let again = place(2, "in/2").await;
    assert_eq!(again, replayed);
    // A scope without `last`: counted from its orders.
    store.delete_value(&scope, "last").await.expect("delete");
    let third = place(3, "in/3").await;
    assert_eq!(third.number, 3);
    let listed = orders::list(store.as_ref(), &chat).await.expect("list");
    assert_eq!(
        listed.iter().map(|o| o.number).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    // A damaged `last`: counted from the orders too, order 1 is not overwritten.
    store
        .set_value(&scope, "last", &serde_json::json!({"number": "two"}))
        .await
        .expect("set");
    let fourth = place(4, "in/4").await;
    assert_eq!(fourth.number, 4);
    let listed = orders::list(store.as_ref(), &chat).await.expect("list");
    assert_eq!(listed[0].quantity, 1, "order 1 kept");
    assert_eq!(listed.len(), 4);
}

#[tokio::test]
async fn a_redelivered_confirmation_stores_the_order_once() {
    let (mock, bot) = shop_on_mock().await;
    let chat = ChatId::from("d");
    writes(&mock, "d", 1, &["/order", "tea", "4", "yes"]).await;
    bot.idle().await;
    let store = bot.store();
    let placed = orders::list(store.as_ref(), &chat).await.expect("list");
    assert_eq!(placed.len(), 1);
    assert_eq!((placed[0].quantity, placed[0].total_cents), (4, 1200));
    // The same confirming record again (as after a crash before the state was cleared).
    let tea = shop::catalogue::find("tea").expect("tea");
    let again = orders::place(store.as_ref(), &chat, tea, 4, placed[0].inbound.as_deref())
        .await
        .expect("place");
    assert_eq!(again, placed[0]);
    assert_eq!(
        orders::list(store.as_ref(), &chat)
            .await
            .expect("list")
            .len(),
        1
    );
    bot.stop().await.expect("stops");
}
