//! The Discord provider against a local fake Discord (`fakes/discord.rs`: the REST API and a
//! gateway WebSocket): signatures, the gateway's Identify and Resume, dedupe, retries that
//! honour `retry_after`, nonces that make a resend after a crash harmless, and the ack of an
//! interaction within its 3 seconds while its handler is slow.
#![allow(clippy::expect_used)]

use crate::fakes;

use std::sync::Arc;
use std::time::Duration;

use crate::fakes::discord::{APP_ID, FakeDiscord, public_key_hex, sign};
use botmesh::durability::{DurabilityConfig, MemoryKv, OnAmbiguous, OutboxState};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::provider::{Provider, ProviderEvent, TransportStatus};
use botmesh_providers::discord::{DiscordConfig, DiscordProvider};
use serde_json::{Value, json};

const TOKEN: &str = "discord-test-token";
const CHANNEL: &str = "111111111111111111";
const USER: &str = "333333333333333333";

fn provider(fake: &FakeDiscord) -> DiscordProvider {
    let config = DiscordConfig::new(TOKEN)
        .api_base(&fake.api_base())
        .and_then(|c| c.gateway_url(&fake.gateway_url()))
        .and_then(|c| c.public_key(&public_key_hex()))
        .expect("config")
        .request_timeout(Duration::from_secs(5));
    DiscordProvider::new(config).expect("provider")
}

/// A durable bot (memory journals on `kv`, short backoff) answering `pong: <text>`, started.
async fn durable_pong(provider: DiscordProvider, kv: Arc<MemoryKv>) -> Bot {
    let mut config = DurabilityConfig::default();
    config.outbox.backoff.base = Duration::from_millis(10);
    config.outbox.backoff.cap = Duration::from_millis(20);
    let bot = Bot::builder(provider)
        .durability(
            DurabilityOptions::shared(kv)
                .instance_id("i1")
                .config(config),
        )
        .build()
        .expect("bot");
    bot.on_message(|ctx: Ctx| async move {
        ctx.reply(format!("pong: {}", ctx.text())).await?;
        Ok(())
    });
    bot.start().await.expect("start");
    bot
}

/// A fresh fake and a [`durable_pong`] bot on it, its own journals, once the gateway is ready.
async fn durable_pong_on_a_fresh_fake() -> (FakeDiscord, Bot) {
    let fake = FakeDiscord::start(TOKEN).await;
    let bot = durable_pong(provider(&fake), Arc::new(MemoryKv::new())).await;
    fake.wait("READY", |f| f.seq() >= 1).await;
    (fake, bot)
}

/// POSTs an interaction body to the endpoint at `base`, signed with `signature` (`None`: the
/// application's key); returns the status, the JSON answer and how long it took.
async fn post_interaction(
    base: &str,
    body: &Value,
    signature: Option<(String, String)>,
) -> (u16, Value, Duration) {
    let raw = body.to_string();
    let (sig, ts) = signature.unwrap_or_else(|| sign(raw.as_bytes(), "1765000000"));
    let started = tokio::time::Instant::now();
    let resp = fakes::client()
        .post(format!("{base}/discord/interactions"))
        .header("content-type", "application/json")
        .header("X-Signature-Ed25519", sig)
        .header("X-Signature-Timestamp", ts)
        .body(raw)
        .send()
        .await
        .expect("the endpoint answers");
    let status = resp.status().as_u16();
    let answer = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, answer, started.elapsed())
}

/// POSTs the raw `body` to the endpoint at `base`, signed with the application's key; the
/// status.
async fn post_raw(base: &str, body: &[u8]) -> u16 {
    let (sig, ts) = sign(body, "1765000000");
    let headers = [("X-Signature-Ed25519", sig), ("X-Signature-Timestamp", ts)];
    fakes::post_signed(&format!("{base}/discord/interactions"), headers, body).await
}

fn command(id: &str, token: &str, name: &str) -> Value {
    json!({"id": id, "application_id": APP_ID, "type": 2, "token": token, "version": 1,
           "channel_id": CHANNEL, "guild_id": "222222222222222222",
           "member": {"user": {"id": USER, "username": "ana"}},
           "data": {"id": "1", "name": name, "type": 1}})
}

#[tokio::test]
async fn forged_signatures_are_refused_and_a_ping_gets_a_pong() {
    let fake = FakeDiscord::start(TOKEN).await;
    let discord = provider(&fake);
    let (rec, server, base) = fakes::started(&discord, discord.interactions_routes()).await;
    let ping = json!({"id": "1", "application_id": APP_ID, "type": 1, "token": "t", "version": 1});
    let raw = command("555", "tok", "order").to_string();
    let (good_sig, ts) = sign(raw.as_bytes(), "1765000000");
    // The signature of this body, under another timestamp; another body's; another key's.
    let forged = [
        (good_sig.clone(), "1765000001".to_owned()),
        sign(b"{}", "1765000000"),
        (hex::encode([7u8; 64]), ts.clone()),
        ("not hex".to_owned(), ts.clone()),
    ];
    for signature in forged {
        let (status, _, _) =
            post_interaction(&base, &command("555", "tok", "order"), Some(signature)).await;
        assert_eq!(status, 401, "a forged signature is refused");
    }
    let unsigned = fakes::client()
        .post(format!("{base}/discord/interactions"))
        .body(raw)
        .send()
        .await
        .expect("answer");
    assert_eq!(unsigned.status().as_u16(), 401, "no signature headers");
    assert!(
        rec.events().is_empty(),
        "nothing forged entered the pipeline"
    );
    let (status, answer, _) = post_interaction(&base, &ping, None).await;
    assert_eq!((status, answer), (200, json!({"type": 1})), "PING → PONG");
    discord.stop().await.expect("stop");
    server.shutdown().await;
    fake.check();
}

#[tokio::test]
async fn the_gateway_identifies_once_and_resumes_with_the_last_seq_after_a_drop() {
    let fake = FakeDiscord::start(TOKEN).await;
    let discord = provider(&fake);
    let rec = fakes::Recorder::new();
    discord.start(rec.sink()).await.expect("start");
    fake.wait("READY", |f| f.connections() == 1 && f.seq() >= 1)
        .await;
    fake.user_message(CHANNEL, USER, "1000000000000000001", "hello");
    fake.user_message(CHANNEL, USER, "1000000000000000002", "again");
    rec.wait_for(2).await;
    let last = fake.seq();
    // The network cuts the connection (no close frame); a message comes meanwhile.
    fake.drop_gateway();
    fake.user_message(CHANNEL, USER, "1000000000000000003", "while away");
    let events = rec.wait_for(3).await;
    let ids: Vec<String> = events
        .iter()
        .map(|e| match e {
            ProviderEvent::Message(m) => m.id.0.clone(),
            other => panic!("a message, not {other:?}"),
        })
        .collect();
    assert_eq!(
        ids,
        [
            "1000000000000000001",
            "1000000000000000002",
            "1000000000000000003"
        ],
        "the missed message was replayed, once, in order"
    );
    let greetings = fake.greetings();
    assert_eq!(greetings.len(), 2, "{greetings:?}");
    assert_eq!(greetings[0]["op"], 2, "Identify first");
    assert_eq!(
        greetings[0]["d"]["intents"], 37377,
        "guilds, messages, DMs, message content"
    );
    assert_eq!(greetings[1]["op"], 6, "then Resume, not a second Identify");
    assert_eq!(greetings[1]["d"]["session_id"], "session-1");
    assert_eq!(
        greetings[1]["d"]["seq"], last,
        "with the last sequence number"
    );
    // RESUMED follows the replayed events.
    let ready_again = |statuses: &[TransportStatus]| {
        statuses
            .iter()
            .position(|s| *s == TransportStatus::Disconnected)
            .is_some_and(|away| statuses[away..].contains(&TransportStatus::Ready))
    };
    fakes::eventually(|| ready_again(&rec.statuses())).await;
    assert!(ready_again(&rec.statuses()), "{:?}", rec.statuses());
    discord.stop().await.expect("stop");
    fake.check();
}

#[tokio::test]
async fn a_redelivered_message_is_answered_once_and_the_bots_own_are_ignored() {
    let fake = FakeDiscord::start(TOKEN).await;
    let bot = fakes::pong_bot(provider(&fake));
    bot.start().await.expect("start");
    fake.wait("READY", |f| f.seq() >= 1).await;
    fake.user_message(CHANNEL, USER, "1000000000000000001", "hi");
    fake.user_message(CHANNEL, USER, "1000000000000000001", "hi");
    fake.wait("the pong", |f| !f.delivered_to(CHANNEL).is_empty())
        .await;
    // The bot's own "pong: hi" came back over the gateway: no reply to it.
    fake.user_message(CHANNEL, USER, "1000000000000000002", "bye");
    fake.wait("the second pong", |f| f.delivered_to(CHANNEL).len() >= 2)
        .await;
    bot.stop_with(fakes::drained()).await.expect("stop");
    assert_eq!(fake.delivered_to(CHANNEL), ["pong: hi", "pong: bye"]);
    fake.check();
}

#[tokio::test]
async fn sends_are_retried_after_5xx_and_after_a_429_s_retry_after() {
    let (fake, bot) = durable_pong_on_a_fresh_fake().await;
    fake.fail_next(502, json!({"message": "Bad Gateway", "code": 0}));
    fake.fail_next(
        429,
        json!({"message": "You are being rate limited.", "retry_after": 1.25, "global": false}),
    );
    fake.user_message(CHANNEL, USER, "1000000000000000001", "hi");
    fake.wait("the pong", |f| !f.delivered_to(CHANNEL).is_empty())
        .await;
    bot.stop().await.expect("stop");
    assert_eq!(
        fake.delivered_to(CHANNEL),
        ["pong: hi"],
        "once, after the failures"
    );
    let creates = fake.creates();
    assert_eq!(creates.len(), 3, "502, 429, then the message");
    let nonce = creates[0]["nonce"].as_str().expect("a nonce");
    assert!(
        creates.iter().all(|c| c["nonce"] == nonce),
        "every attempt carries the same nonce"
    );
    let times = fake.create_times();
    assert!(
        times[2].duration_since(times[1]) >= Duration::from_millis(1250),
        "the retry came {:?} after the 429 asked for 1.25 s",
        times[2].duration_since(times[1])
    );
    fake.check();
}

#[tokio::test]
async fn an_ambiguous_send_is_sent_again_and_its_nonce_makes_it_one_message() {
    let (fake, bot) = durable_pong_on_a_fresh_fake().await;
    // Discord creates the message and the answer is lost.
    fake.drop_next();
    let sent = bot
        .send(CHANNEL, Outgoing::from("Your order is on its way"))
        .await
        .expect("sent");
    assert_eq!(
        fake.delivered_to(CHANNEL),
        ["Your order is on its way"],
        "one message"
    );
    assert_eq!(
        fake.creates().len(),
        2,
        "sent again, not skipped as unknown"
    );
    let record = bot
        .durability()
        .expect("durable")
        .outbox()
        .lookup(sent.key.as_deref().expect("a key"))
        .await
        .expect("lookup")
        .expect("a record");
    assert_eq!(record.state, OutboxState::Sent, "{record:?}");
    assert_eq!(record.on_ambiguous, Some(OnAmbiguous::Resend));
    bot.stop().await.expect("stop");
    fake.check();
}

// Two runtimes: the first one is the process that dies (its tasks end with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_after_a_crash_inside_the_nonce_window_creates_no_second_message() {
    let fake = FakeDiscord::start(TOKEN).await;
    let kv = Arc::new(MemoryKv::new());
    // The process before the crash: its reply is created by Discord, whose answer never
    // comes back before the process is killed.
    fake.hang_next();
    let (die, died) = tokio::sync::oneshot::channel::<()>();
    let before = {
        let (fake, kv) = (fake.clone(), kv.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let _bot = durable_pong(provider(&fake), kv).await;
                let _ = died.await;
            });
            rt.shutdown_background();
        })
    };
    fake.wait("READY", |f| f.seq() >= 1).await;
    fake.user_message(CHANNEL, USER, "1000000000000000001", "hi");
    fake.wait("the reply created", |f| !f.delivered_to(CHANNEL).is_empty())
        .await;
    let _ = die.send(());
    before.join().expect("the first process ends");
    // The restart, on the same journals: the send of unknown outcome is sent again, with
    // the same nonce, inside Discord's window.
    let bot = durable_pong(provider(&fake), kv).await;
    fake.wait("the resend", |f| f.creates().len() >= 2).await;
    let creates = fake.creates();
    assert_eq!(
        creates[0]["nonce"], creates[1]["nonce"],
        "the resend carries the same nonce"
    );
    // The reply's journal settles: recorded `sent`, no attempt left to make a third create.
    assert_eq!(fakes::poll::outbox_settled(&bot).await, Some(1));
    bot.idle().await;
    bot.stop().await.expect("stop");
    assert_eq!(
        fake.delivered_to(CHANNEL),
        ["pong: hi"],
        "no second message"
    );
    fake.check();
}

#[tokio::test]
async fn an_interaction_is_acked_within_its_deadline_while_its_handler_is_slow() {
    let fake = FakeDiscord::start(TOKEN).await;
    let discord = provider(&fake);
    let routes = discord.interactions_routes();
    let bot = Bot::builder(discord).build().expect("bot");
    // The report is ready once the interaction was answered: slower than the 3 seconds
    // Discord gives the first answer.
    let ready = Arc::new(tokio::sync::Notify::new());
    let report = Arc::clone(&ready);
    bot.command("report", move |ctx: Ctx| {
        let report = Arc::clone(&report);
        async move {
            report.notified().await;
            ctx.reply("Your report is ready").await?;
            Ok(())
        }
    });
    bot.when(matcher::button("vote:yes"), |ctx: Ctx| async move {
        ctx.reply("Thanks for voting").await?;
        Ok(())
    });
    bot.command("status", |ctx: Ctx| async move {
        ctx.ack(Some("All systems go")).await;
        Ok(())
    });
    bot.start().await.expect("start");
    let (server, base) = fakes::mount(routes).await;
    fake.token_for("tok-report", CHANNEL);
    let (status, answer, took) =
        post_interaction(&base, &command("555", "tok-report", "report"), None).await;
    assert_eq!(
        (status, &answer),
        (200, &json!({"type": 5})),
        "deferred: \"thinking…\""
    );
    assert!(took < Duration::from_secs(3), "acked after {took:?}");
    assert!(
        took >= Duration::from_secs(2),
        "the ack waited for the handler until near the deadline: {took:?}"
    );
    ready.notify_one();
    fake.wait("the report", |f| !f.delivered_to(CHANNEL).is_empty())
        .await;
    assert_eq!(
        fake.delivered_to(CHANNEL),
        ["Your report is ready"],
        "it completed the deferred message"
    );
    assert!(
        fake.creates().is_empty(),
        "through the interaction token, not a channel message"
    );
    // A button whose handler replies at once: acked before its first send, as a deferred
    // update, and the reply is a channel message.
    let press = json!({"id": "556", "application_id": APP_ID, "type": 3, "token": "tok-vote",
        "version": 1, "channel_id": CHANNEL, "user": {"id": USER, "username": "ana"},
        "message": {"id": "777"}, "data": {"component_type": 2, "custom_id": "vote:yes"}});
    let (status, answer, took) = post_interaction(&base, &press, None).await;
    assert_eq!((status, answer), (200, json!({"type": 6})));
    assert!(
        took < Duration::from_secs(1),
        "acked before the first send: {took:?}"
    );
    fake.wait("the thanks", |f| f.delivered_to(CHANNEL).len() >= 2)
        .await;
    // An ack with a notice: the answer is the ephemeral notice.
    let (status, answer, _) =
        post_interaction(&base, &command("557", "tok-status", "status"), None).await;
    let notice = json!({"type": 4, "data": {"content": "All systems go", "flags": 64,
        "allowed_mentions": {"parse": []}}});
    assert_eq!((status, answer), (200, notice));
    bot.stop_with(fakes::drained()).await.expect("stop");
    server.shutdown().await;
    assert_eq!(
        fake.delivered_to(CHANNEL),
        ["Your report is ready", "Thanks for voting"]
    );
    fake.check();
}

#[tokio::test]
async fn an_interaction_not_accepted_is_answered_503_and_what_carries_no_event_needs_no_start() {
    let fake = FakeDiscord::start(TOKEN).await;
    let discord = provider(&fake);
    let (server, base) = fakes::mount(discord.interactions_routes()).await;
    let ping = json!({"id": "1", "application_id": APP_ID, "type": 1, "token": "t", "version": 1});
    let autocomplete = json!({"id": "2", "application_id": APP_ID, "type": 4, "token": "t",
        "version": 1, "channel_id": CHANNEL, "user": {"id": USER}, "data": {"name": "order"}});
    let press = json!({"id": "556", "application_id": APP_ID, "type": 3, "token": "tok-vote",
        "version": 1, "channel_id": CHANNEL, "user": {"id": USER, "username": "ana"},
        "message": {"id": "777"}, "data": {"component_type": 2, "custom_id": "vote:yes"}});
    let order = command("555", "tok-order", "order");
    // Not started: PING and autocomplete are answered (nothing to deliver), an interaction
    // is not.
    let (status, answer, _) = post_interaction(&base, &ping, None).await;
    assert_eq!((status, answer), (200, json!({"type": 1})), "PING → PONG");
    let (status, answer, _) = post_interaction(&base, &autocomplete, None).await;
    assert_eq!(
        (status, answer),
        (200, json!({"type": 8, "data": {"choices": []}}))
    );
    assert_eq!(post_interaction(&base, &order, None).await.0, 503);
    // Started, the pipeline rejecting: 503, nothing accepted.
    let rec = fakes::Recorder::new();
    discord.start(rec.sink()).await.expect("start");
    rec.set_mode(fakes::Mode::Reject);
    assert_eq!(post_interaction(&base, &order, None).await.0, 503);
    assert!(rec.events().is_empty());
    // Accepted, and never acked (no bot here): the deferred answers at the floor.
    rec.set_mode(fakes::Mode::Accept);
    let ((status, answer, took), (press_status, press_answer, _)) = tokio::join!(
        post_interaction(&base, &order, None),
        post_interaction(&base, &press, None)
    );
    assert_eq!((status, answer), (200, json!({"type": 5})));
    assert_eq!((press_status, press_answer), (200, json!({"type": 6})));
    assert!(
        took >= Duration::from_millis(2_500) && took < Duration::from_secs(3),
        "the floor, before Discord's 3 seconds: {took:?}"
    );
    assert_eq!(rec.exactly(2).len(), 2);
    // Bodies that are not interactions the bot takes; a GET.
    assert_eq!(post_raw(&base, b"not json").await, 400);
    assert_eq!(post_raw(&base, br#"{"type": 9, "id": "3"}"#).await, 400);
    let get = fakes::client()
        .get(format!("{base}/discord/interactions"))
        .send()
        .await
        .expect("answer");
    assert_eq!(get.status().as_u16(), 405);
    assert_eq!(rec.events().len(), 2, "nothing more delivered");
    // Without the application's public key there is no endpoint.
    let config = DiscordConfig::new(TOKEN)
        .api_base(&fake.api_base())
        .expect("config");
    let keyless = DiscordProvider::new(config).expect("provider");
    let (keyless_server, keyless_base) = fakes::mount(keyless.interactions_routes()).await;
    assert_eq!(post_interaction(&keyless_base, &ping, None).await.0, 404);
    keyless_server.shutdown().await;
    discord.stop().await.expect("stop");
    server.shutdown().await;
    fake.check();
}
