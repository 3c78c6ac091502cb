//! Telegram over the shared webhook server: the secret token check, malformed bodies, the
//! 200-only-after-accept rule, and a crash between receiving and acknowledging (webhook and
//! long polling) that ends in a redelivery and exactly one reply.

use crate::fakes;

use std::time::Duration;

use crate::fakes::telegram::{FakeTelegram, updates};
use crate::fakes::{Mode, Recorder, drained, pong_bot};
use botmesh::prelude::*;
use botmesh::provider::ProviderEvent;
use botmesh_providers::http::GuardedClient;
use botmesh_providers::telegram::{TelegramConfig, TelegramProvider};
use botmesh_providers::webhook::WebhookServer;
use serde_json::json;

const TOKEN: &str = "123456:ABC-fake_token";
const SECRET: &str = "s3cr3t-token_1";
const ANA: i64 = 1111;

fn webhook_config(fake: &FakeTelegram) -> TelegramConfig {
    fake.config()
        .webhook("/telegram", SECRET)
        .expect("webhook")
        .media_client(GuardedClient::allowing_localhost().expect("client"))
}

#[tokio::test]
async fn the_secret_token_is_checked_and_bad_bodies_get_400() {
    let fake = FakeTelegram::start(TOKEN).await;
    let tg = TelegramProvider::new(webhook_config(&fake)).expect("provider");
    let server = WebhookServer::new()
        .mount(tg.webhook_routes())
        .bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/telegram", server.local_addr());
    let update = json!({ "update_id": 1, "message": { "message_id": 7, "date": 1, "chat": {"id": ANA, "type": "private"}, "from": updates::from(ANA), "text": "hi" }});

    // Not started yet: 503, so Telegram keeps it.
    assert_eq!(
        FakeTelegram::post_webhook(&url, Some(SECRET), &update).await,
        503
    );

    let rec = Recorder::new();
    tg.start(rec.sink()).await.expect("start");
    assert_eq!(FakeTelegram::post_webhook(&url, None, &update).await, 401);
    assert_eq!(
        FakeTelegram::post_webhook(&url, Some("s3cr3t-token_2"), &update).await,
        403
    );
    assert_eq!(
        FakeTelegram::post_webhook(&url, Some(""), &update).await,
        403
    );
    let bad = fakes::client()
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", SECRET)
        .header("content-type", "application/json")
        .body("{\"update_id\": ")
        .send()
        .await
        .expect("post");
    assert_eq!(bad.status().as_u16(), 400);
    // Over the body limit: 413, before the body is read.
    let huge = fakes::client()
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", SECRET)
        .header("content-type", "application/json")
        .body(vec![b' '; botmesh_providers::webhook::BODY_LIMIT + 1])
        .send()
        .await
        .expect("post");
    assert_eq!(huge.status().as_u16(), 413);
    // A GET on a route without a handshake.
    let get = fakes::client().get(&url).send().await.expect("get");
    assert_eq!(get.status().as_u16(), 405);
    // JSON, but not an Update (a message without a chat).
    assert_eq!(
        FakeTelegram::post_webhook(
            &url,
            Some(SECRET),
            &json!({ "update_id": 2, "message": { "message_id": 1, "text": "x" }})
        )
        .await,
        400
    );
    assert!(
        rec.events().is_empty(),
        "nothing may enter the pipeline: {:?}",
        rec.events()
    );

    // The pipeline refuses (journal down): 503, nothing lost.
    rec.set_mode(Mode::Reject);
    assert_eq!(
        FakeTelegram::post_webhook(&url, Some(SECRET), &update).await,
        503
    );
    rec.set_mode(Mode::Accept);
    assert_eq!(
        FakeTelegram::post_webhook(&url, Some(SECRET), &update).await,
        200
    );
    let events = rec.events();
    assert_eq!(events.len(), 1);
    assert!(matches!(&events[0], ProviderEvent::Message(m) if m.text_content() == "hi"));

    // An update kind the bot does not take is acknowledged.
    let other = json!({ "update_id": 3, "inline_query": { "id": "1", "from": updates::from(ANA), "query": "", "offset": "" }});
    assert_eq!(
        FakeTelegram::post_webhook(&url, Some(SECRET), &other).await,
        200
    );

    // Unknown paths of the shared server are 404.
    let other_path = format!("http://{}/nope", server.local_addr());
    assert_eq!(
        FakeTelegram::post_webhook(&other_path, Some(SECRET), &update).await,
        404
    );

    tg.stop().await.expect("stop");
    assert_eq!(
        FakeTelegram::post_webhook(&url, Some(SECRET), &update).await,
        503
    );
    server.shutdown().await;
}

#[tokio::test]
async fn start_registers_the_webhook_when_a_url_is_given() {
    let fake = FakeTelegram::start(TOKEN).await;
    let tg = TelegramProvider::new(
        webhook_config(&fake).set_webhook_url("https://bot.example/telegram"),
    )
    .expect("provider");
    tg.start(Recorder::new().sink()).await.expect("start");
    let set = fake.calls("setWebhook");
    assert_eq!(set.len(), 1);
    assert_eq!(set[0]["url"], "https://bot.example/telegram");
    assert_eq!(set[0]["secret_token"], SECRET);
}

#[tokio::test]
async fn a_webhook_crash_before_the_200_is_redelivered_and_answered_once() {
    let fake = FakeTelegram::start(TOKEN).await;
    let update = json!({ "update_id": 900, "message": { "message_id": 77, "date": 1718000000,
        "chat": {"id": ANA, "type": "private"}, "from": updates::from(ANA), "text": "ping" }});
    let provider = || TelegramProvider::new(webhook_config(&fake)).expect("provider");
    let channel = (provider, TelegramProvider::webhook_routes);
    fakes::crash_before_the_200(channel, "/telegram", |req| {
        req.header("X-Telegram-Bot-Api-Secret-Token", SECRET)
            .json(&update)
    })
    .await;
    assert_eq!(fake.texts_to(ANA), vec!["pong: ping".to_owned()]);
}

#[tokio::test]
async fn a_polling_crash_before_the_offset_is_confirmed_is_refetched_and_answered_once() {
    let fake = FakeTelegram::start(TOKEN).await;
    let polling = || fake.config().polling(Duration::from_secs(1));
    let id = fake.push_update(updates::text(ANA, 78, "ping"));

    // Process A fetches the update and dies while the pipeline is journaling it.
    let a = TelegramProvider::new(polling()).expect("provider");
    let rec = Recorder::new();
    rec.set_mode(Mode::Hang);
    a.start(rec.sink()).await.expect("start a");
    rec.wait_for_deliveries(1).await;
    a.stop().await.expect("a dies");
    assert_eq!(fake.unconfirmed(), vec![id], "A never confirmed the offset");

    // Process B polls again and gets the same update.
    let bot = pong_bot(TelegramProvider::new(polling()).expect("provider"));
    bot.start().await.expect("start b");
    fake.wait_calls("sendMessage", 1).await;
    fake.wait_confirmed().await;
    bot.stop_with(drained()).await.expect("stop");
    assert_eq!(fake.texts_to(ANA), vec!["pong: ping".to_owned()]);
}

/// With durable processing on: process A journals the update and dies inside the handler
/// (before any reply, with Telegram's 200 lost on the way). Process B, on the same journal,
/// replays the record on start and Telegram's redelivery is recognised: one reply in all.
#[tokio::test]
async fn with_durability_a_crash_after_journaling_replays_once_and_dedupes_the_redelivery() {
    use std::sync::Arc;

    use botmesh::durability::{DurableKv, MemoryKv, MemoryStore};
    use botmesh::durable::DurabilityOptions;

    let fake = FakeTelegram::start(TOKEN).await;
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let store = MemoryStore::new();
    let update = json!({ "update_id": 901, "message": { "message_id": 79, "date": 1718000000,
        "chat": {"id": ANA, "type": "private"}, "from": updates::from(ANA), "text": "ping" }});
    let durable_bot = |crash: bool| {
        let tg = TelegramProvider::new(webhook_config(&fake)).expect("provider");
        let routes = tg.webhook_routes();
        let bot = Bot::builder(tg)
            .store(store.clone())
            .durability(DurabilityOptions::shared(kv.clone()).instance_id("tg-1"))
            .build()
            .expect("bot");
        bot.on_message(move |ctx: Ctx| async move {
            if crash {
                // The process dies here: the handler never finishes.
                std::future::pending::<()>().await;
            }
            ctx.reply(format!("pong: {}", ctx.text())).await?;
            Ok(())
        });
        (bot, routes)
    };

    let (a, routes_a) = durable_bot(true);
    a.start().await.expect("start a");
    let server_a = WebhookServer::new()
        .mount(routes_a)
        .bind("127.0.0.1:0")
        .await
        .expect("bind a");
    let url_a = format!("http://{}/telegram", server_a.local_addr());
    // A journaled the update (the 200 went out, and is lost on the way to Telegram).
    assert_eq!(
        FakeTelegram::post_webhook(&url_a, Some(SECRET), &update).await,
        200
    );
    server_a.abort();
    drop(a);
    assert!(fake.texts_to(ANA).is_empty(), "A never replied");

    let (b, routes_b) = durable_bot(false);
    let server_b = WebhookServer::new()
        .mount(routes_b)
        .bind("127.0.0.1:0")
        .await
        .expect("bind b");
    b.start().await.expect("start b");
    let url_b = format!("http://{}/telegram", server_b.local_addr());
    assert_eq!(
        FakeTelegram::post_webhook(&url_b, Some(SECRET), &update).await,
        200
    );
    fake.wait_calls("sendMessage", 1).await;
    b.stop_with(drained()).await.expect("stop");
    assert_eq!(fake.texts_to(ANA), vec!["pong: ping".to_owned()]);
    let metrics = b.durability().expect("durable").metrics();
    // B replayed A's record, and took Telegram's redelivery as a duplicate (not journaled anew).
    assert_eq!(
        (metrics.inbound_replayed, metrics.inbound_journaled),
        (1, 0),
        "{metrics:?}"
    );
    server_b.shutdown().await;
}
