//! The README's shop, end to end over the Telegram provider and the fake Bot API: the menu,
//! an order taken with inline-keyboard presses and a typed quantity, the confirmation, and
//! `/status`, each press answered with `answerCallbackQuery`.

use std::time::Duration;

use crate::fakes::telegram::{FakeTelegram, updates};
use botmesh::prelude::*;
use botmesh_examples::shop;
use botmesh_providers::telegram::TelegramProvider;
use serde_json::{Value, json};

const TOKEN: &str = "777:shop-token";
const ANA: i64 = 2222;

/// The last `sendMessage` to Ana, once `n` were sent.
async fn nth_reply(fake: &FakeTelegram, n: usize) -> Value {
    let calls = fake.wait_calls("sendMessage", n).await;
    assert!(calls.len() >= n, "expected {n} replies, got {calls:#?}");
    calls[n - 1].clone()
}

/// Pushes `update` and waits for the `n`-th reply: its text and its buttons' ids.
async fn reply(fake: &FakeTelegram, update: Value, n: usize) -> (String, Vec<String>) {
    fake.push_update(update);
    let msg = nth_reply(fake, n).await;
    let ids = msg["reply_markup"]["inline_keyboard"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| row[0]["callback_data"].as_str().map(str::to_owned))
        .collect();
    (msg["text"].as_str().unwrap_or_default().to_owned(), ids)
}

/// The message id the fake gave the `n`-th reply (ids start at 501).
fn sent_id(n: usize) -> i64 {
    500 + n as i64
}

#[tokio::test]
async fn the_shop_takes_an_order_over_telegram() {
    let fake = FakeTelegram::start(TOKEN).await;
    let config = fake.config().polling(Duration::from_secs(1));
    let telegram = TelegramProvider::new(config).expect("provider");
    let bot = shop::shop_bot(Bot::builder(telegram).bot_id(shop::BOT_ID)).expect("shop");
    bot.start().await.expect("start");

    let menu = reply(&fake, updates::text(ANA, 1, "/start"), 1).await;
    assert!(
        menu.0.starts_with("Welcome to the botmesh shop!"),
        "{menu:?}"
    );
    assert_eq!(menu.1, ["order", "status"]);
    let items = reply(
        &fake,
        updates::callback(ANA, "cq-1", sent_id(1), "order"),
        2,
    )
    .await;
    assert!(items.0.starts_with("What would you like?"), "{items:?}");
    assert_eq!(items.1, ["tea", "coffee", "cake"]);
    let how_many = reply(
        &fake,
        updates::callback(ANA, "cq-2", sent_id(2), "coffee"),
        3,
    )
    .await;
    assert_eq!(how_many.0, "How many Coffee? (1-99)");
    let confirm = reply(&fake, updates::text(ANA, 2, "2"), 4).await;
    assert!(confirm.0.contains("2 × Coffee"), "{confirm:?}");
    assert_eq!(confirm.1, ["yes", "no"]);
    let placed = reply(&fake, updates::callback(ANA, "cq-3", sent_id(4), "yes"), 5).await;
    assert!(
        placed.0.starts_with("Order #1 placed: 2 × Coffee"),
        "{placed:?}"
    );
    let status = reply(&fake, updates::text(ANA, 3, "/status"), 6).await;
    assert!(status.0.starts_with("Your orders (1):"), "{status:?}");

    // Every press was answered exactly once, and every reply went to Ana.
    bot.idle().await;
    let answered: Vec<Value> = fake
        .calls("answerCallbackQuery")
        .into_iter()
        .map(|c| c["callback_query_id"].clone())
        .collect();
    assert_eq!(answered, [json!("cq-1"), json!("cq-2"), json!("cq-3")]);
    assert_eq!(fake.texts_to(ANA).len(), 6);
    bot.stop().await.expect("stop");
    assert!(
        fake.unconfirmed().is_empty(),
        "stop confirms the last offset"
    );
}
