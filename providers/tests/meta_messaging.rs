//! Messenger and Instagram against the fake Send API, each test on both channels: the
//! verification handshake and `X-Hub-Signature-256`, every inbound kind (echoes dropped),
//! every content kind sent, error classes, the 24-hour window and message tags, media refs and
//! downloads, duplicates and a crash before the 200 answered once, and the shop's order.

use crate::fakes;

use crate::fakes::contents;
use crate::fakes::meta::{handshake, sign};
use crate::fakes::meta_messaging::{FakeSendApi, hooks};
use botmesh::message::{
    Button, ChatId, Content, ListSection, MediaKind, MediaRef, MessageId, Outgoing, OutgoingContent,
};
use botmesh::prelude::*;
use botmesh::provider::{ErrorClass, Provider, ProviderError, ProviderEvent};
use botmesh_examples::shop;
use botmesh_providers::http::GuardedClient;
use botmesh_providers::instagram::Instagram;
use botmesh_providers::messenger::Messenger;
use botmesh_providers::meta::MetaConfigError;
use botmesh_providers::meta::messaging::{
    Channel, MessageTag, MessagingConfig, MessagingProvider, TextLimit,
};
use serde_json::{Value, json};

const TOKEN: &str = "EAAG-page-token";
const SECRET: &str = "app-secret-2";
const VERIFY: &str = "verify-me";
const HOUR: i64 = 60 * 60 * 1000;

async fn fake<C: Channel>() -> FakeSendApi {
    match C::TEXT_LIMIT {
        TextLimit::Chars(n) => FakeSendApi::start(TOKEN, n, false).await,
        TextLimit::Bytes(n) => FakeSendApi::start(TOKEN, n, true).await,
    }
}

fn config<C: Channel>(fake: &FakeSendApi) -> MessagingConfig<C> {
    MessagingConfig::new(TOKEN, SECRET, VERIFY)
        .api_base(&fake.base_url())
        .expect("base")
        .media_client(GuardedClient::allowing_localhost().expect("client"))
}

fn provider<C: Channel>(fake: &FakeSendApi) -> MessagingProvider<C> {
    MessagingProvider::new(config(fake)).expect("provider")
}

fn user() -> ChatId {
    ChatId::from(hooks::USER)
}

fn body<C: Channel>(items: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&hooks::envelope(C::OBJECT, items)).expect("json")
}

/// POSTs `items` signed to the route at `base`; the status.
async fn post<C: Channel>(base: &str, items: Vec<Value>) -> u16 {
    let bytes = body::<C>(items);
    post_raw::<C>(base, Some(&sign(SECRET, &bytes)), &bytes).await
}

async fn post_raw<C: Channel>(base: &str, signature: Option<&str>, bytes: &[u8]) -> u16 {
    let url = format!("{base}{}", C::DEFAULT_PATH);
    let header = signature.map(|s| ("X-Hub-Signature-256", s.to_owned()));
    fakes::post_signed(&url, header, bytes).await
}

/// Runs `test` on Messenger, then on Instagram.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn messenger() {
                super::$name::<super::Messenger>().await;
            }
            #[tokio::test]
            async fn instagram() {
                super::$name::<super::Instagram>().await;
            }
        }
    )*};
}

on_both!(
    handshake_and_signatures,
    inbound_events,
    sends_each_content,
    graph_errors_are_classified,
    the_window_and_message_tags,
    media_refs_and_downloads,
    duplicates_and_echoes_are_answered_once,
    a_crash_before_the_200_is_answered_once,
    the_shop_takes_an_order,
);

async fn handshake_and_signatures<C: Channel>() {
    let fake = fake::<C>().await;
    let p = provider::<C>(&fake);
    let (rec, server, base) = fakes::started(&p, p.webhook_routes()).await;
    let url = format!("{base}{}", C::DEFAULT_PATH);
    assert_eq!(
        handshake(&url, "subscribe", VERIFY, Some("42")).await,
        (200, "42".to_owned())
    );
    assert_eq!(handshake(&url, "subscribe", "no", Some("1")).await.0, 403);

    let bytes = body::<C>(vec![hooks::text("m_1", "hi")]);
    assert_eq!(post_raw::<C>(&base, None, &bytes).await, 401);
    assert_eq!(
        post_raw::<C>(&base, Some(&sign("forged", &bytes)), &bytes).await,
        403
    );
    let mut tampered = bytes.clone();
    tampered.push(b' ');
    assert_eq!(
        post_raw::<C>(&base, Some(&sign(SECRET, &bytes)), &tampered).await,
        403
    );
    assert!(rec.events().is_empty(), "nothing forged was delivered");
    // The other channel's envelope, well signed: not this channel's webhook.
    let other = if C::OBJECT == "page" {
        "instagram"
    } else {
        "page"
    };
    let foreign =
        serde_json::to_vec(&hooks::envelope(other, vec![hooks::text("m_2", "x")])).expect("json");
    assert_eq!(
        post_raw::<C>(&base, Some(&sign(SECRET, &foreign)), &foreign).await,
        400
    );
    assert_eq!(
        post_raw::<C>(&base, Some(&sign(SECRET, &bytes)), &bytes).await,
        200
    );
    assert_eq!(rec.events().len(), 1);
    server.shutdown().await;
}

async fn inbound_events<C: Channel>() {
    let fake = fake::<C>().await;
    let p = MessagingProvider::<C>::new(config(&fake).account_id(hooks::ACCOUNT).expect("id"))
        .expect("provider");
    let (rec, server, base) = fakes::started(&p, p.webhook_routes()).await;
    let cdn = "https://scontent.xx.fbcdn.net/v/t1/a.jpg?oh=1&oe=6700AAAA";
    let mut for_other_page = hooks::text("m_other", "hello other page");
    for_other_page["recipient"]["id"] = json!("999");
    let items = vec![
        hooks::text("m_T", "hi"),
        hooks::item(
            "message",
            json!({"mid": "m_Q", "text": "Red", "quick_reply": {"payload": "COLOR_RED"}}),
        ),
        hooks::item(
            "message",
            json!({"mid": "m_A", "text": "look", "reply_to": {"mid": "m_OUT1"},
            "attachments": [{"type": "image", "payload": {"url": cdn}},
                            {"type": "file", "payload": {"url": "https://lookaside.fbsbx.com/file/a.pdf?asset_id=1"}}]}),
        ),
        hooks::item(
            "message",
            json!({"mid": "m_S", "attachments": [{"type": "image", "payload": {"url": cdn, "sticker_id": 369239263222822u64}}]}),
        ),
        hooks::item(
            "message",
            json!({"mid": "m_SH", "attachments": [{"type": "share", "payload": {"url": "https://www.instagram.com/p/x"}}]}),
        ),
        hooks::postback("m_P", "START", "Get Started"),
        hooks::item("postback", json!({"title": "Old", "payload": "OLD"})),
        hooks::item(
            "reaction",
            json!({"mid": "m_OUT1", "action": "react", "reaction": "love", "emoji": "❤"}),
        ),
        hooks::item("delivery", json!({"mids": ["m_OUT1"], "watermark": 1})),
        hooks::item("read", json!({"watermark": 1})),
        hooks::echo("m_ECHO", "the bot's own message"),
        for_other_page,
    ];
    assert_eq!(post::<C>(&base, items).await, 200);
    let ev = rec.exactly(10);
    let msg = |i: usize| fakes::message_at(&ev, i);
    let t = msg(0);
    assert_eq!(
        (t.id.as_str(), t.chat.as_str(), t.content.clone()),
        ("m_T", hooks::USER, Content::Text("hi".into()))
    );
    assert!(
        matches!(&ev[1], ProviderEvent::Interaction(i) if i.data == "COLOR_RED" && i.from_text && i.id == "m_Q")
    );
    let image = msg(2);
    assert_eq!(image.reply_to, Some(MessageId::from("m_OUT1")));
    assert!(
        matches!(&image.content, Content::Media(m) if m.kind == MediaKind::Image && m.media_ref.token == cdn && m.caption.as_deref() == Some("look"))
    );
    let file = msg(3);
    assert_eq!(file.id.as_str(), "m_A#2");
    assert!(
        matches!(&file.content, Content::Media(m) if m.kind == MediaKind::Document && m.caption.is_none())
    );
    assert!(matches!(&msg(4).content, Content::Media(m) if m.kind == MediaKind::Sticker));
    assert!(matches!(&msg(5).content, Content::Other(a) if a["type"] == "share"));
    assert!(
        matches!(&ev[6], ProviderEvent::Interaction(i) if i.data == "START" && i.id == "m_P" && !i.from_text && i.title.as_deref() == Some("Get Started"))
    );
    assert!(
        matches!(&ev[7], ProviderEvent::Interaction(i) if i.data == "OLD" && i.id.starts_with(&format!("{}:", hooks::USER)))
    );
    assert!(
        matches!(&ev[8], ProviderEvent::Reaction { reaction, .. } if reaction.emoji == "❤" && reaction.message_id.as_str() == "m_OUT1")
    );
    assert!(
        matches!(&ev[9], ProviderEvent::Status(s) if s.status == "delivered" && s.message_id.as_str() == "m_OUT1")
    );

    // A body with nothing the bot handles (an echo, a read) is acknowledged.
    assert_eq!(post::<C>(&base, vec![hooks::echo("m_E2", "x")]).await, 200);
    // A batch with one broken event delivers nothing.
    let broken = hooks::item("message", json!({"text": "no mid"}));
    assert_eq!(
        post::<C>(&base, vec![hooks::text("m_OK", "fine"), broken]).await,
        400
    );
    assert_eq!(rec.events().len(), 10);
    server.shutdown().await;
}

async fn sends_each_content<C: Channel>() {
    let fake = fake::<C>().await;
    let p = provider::<C>(&fake);
    let c = user();
    let sent = p.send(&c, &Outgoing::from("Hello")).await.expect("text");
    assert_eq!(sent.message_id, Some(MessageId::from("m_OUT1")));
    assert_eq!(
        fake.sent()[0],
        json!({"recipient": {"id": hooks::USER}, "messaging_type": "RESPONSE", "message": {"text": "Hello"}})
    );

    p.send(&c, &contents::two_buttons())
        .await
        .expect("button template");
    let payload = &fake.sent()[1]["message"]["attachment"]["payload"];
    assert_eq!(payload["template_type"], "button");
    assert_eq!(
        payload["buttons"][0],
        json!({"type": "postback", "title": "Yes", "payload": "yes"})
    );
    assert_eq!(contents::chars(&payload["buttons"][1]["title"]), Some(20));

    p.send(&c, &contents::many_buttons(5))
        .await
        .expect("quick replies");
    let m = &fake.sent()[2]["message"];
    assert_eq!(m["text"], "Many");
    assert_eq!(
        m["quick_replies"][4],
        json!({"content_type": "text", "title": "B5", "payload": "b5"})
    );

    let list = Outgoing::from(OutgoingContent::List {
        text: "Menu".into(),
        button: "Options".into(),
        sections: vec![
            ListSection {
                title: "Drinks".into(),
                rows: vec![Button::with_id("tea", "Tea")],
            },
            ListSection {
                title: "Food".into(),
                rows: vec![Button::with_id("cake", "Cake")],
            },
        ],
    });
    p.send(&c, &list).await.expect("generic template");
    let payload = &fake.sent()[3]["message"]["attachment"]["payload"];
    assert_eq!(payload["template_type"], "generic");
    assert_eq!(
        payload["elements"][1],
        json!({"title": "Food", "subtitle": "Menu", "buttons": [{"type": "postback", "title": "Cake", "payload": "cake"}]})
    );

    let media = |source| {
        contents::media(
            MediaKind::Document,
            source,
            Some("the menu"),
            Some("application/pdf"),
        )
    };
    p.send(&c, &media(contents::url("https://example.com/a.pdf")))
        .await
        .expect("by url");
    assert_eq!(
        fake.sent()[4]["message"],
        json!({"attachment": {"type": "file", "payload": {"url": "https://example.com/a.pdf", "is_reusable": true}}})
    );
    assert_eq!(
        fake.sent()[5]["message"],
        json!({"text": "the menu"}),
        "the caption follows"
    );
    p.send(&c, &media(contents::bytes(b"%PDF".to_vec(), Some("a.pdf"))))
        .await
        .expect("upload");
    assert_eq!(fake.uploads().len(), 1);
    assert!(
        fake.sent()[6]["message"]["attachment"]["payload"]["attachment_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("77"))
    );

    // A long text goes out in parts that fit: 1000 bytes on Instagram, 2000 characters on
    // Messenger; "é" is two bytes.
    let before = fake.sent().len();
    p.send(&c, &Outgoing::from("é ".repeat(700)))
        .await
        .expect("long text");
    let parts: Vec<String> = fake.sent()[before..]
        .iter()
        .filter_map(|b| b["message"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(parts.concat(), "é ".repeat(700));
    match C::TEXT_LIMIT {
        TextLimit::Bytes(n) => assert!(
            parts.len() == 3 && parts.iter().all(|p| p.len() <= n),
            "{:?}",
            parts.iter().map(String::len).collect::<Vec<_>>()
        ),
        TextLimit::Chars(_) => assert_eq!(parts.len(), 1),
    }
    assert!(p.capabilities().text_limit <= C::TEXT_LIMIT.chars());

    p.typing(&c).await.expect("typing");
    p.mark_read(&c, &MessageId::from("m_T"))
        .await
        .expect("seen");
    let n = fake.sent().len();
    assert_eq!(fake.sent()[n - 2]["sender_action"], "typing_on");
    assert_eq!(fake.sent()[n - 1]["sender_action"], "mark_seen");

    // Refused before a call.
    for bad in [
        fakes::contents::location(1.0, 2.0, None),
        fakes::contents::reaction("m_T", "👍"),
        Outgoing::buttons("x".repeat(641), ["ok"]),
        Outgoing::buttons("x", (0..14).map(|i| format!("b{i}")).collect::<Vec<_>>()),
    ] {
        assert!(
            matches!(
                p.send(&c, &bad).await,
                Err(ProviderError::UnsupportedContent { .. })
            ),
            "{bad:?}"
        );
    }
    assert_eq!(fake.sent().len(), n);
    fake.check();
}

async fn graph_errors_are_classified<C: Channel>() {
    let fake = fake::<C>().await;
    let p = provider::<C>(&fake);
    let c = user();
    let hi = Outgoing::from("hi");
    let fail = async |status, code, subcode, message: &str| {
        fake.fail_next(status, code, subcode, message);
        p.send(&c, &hi).await.expect_err("scripted failure")
    };
    assert_eq!(
        fail(500, 2, None, "Service temporarily unavailable")
            .await
            .class(),
        ErrorClass::Retryable
    );
    assert_eq!(
        fail(503, 1, None, "An unknown error occurred")
            .await
            .class(),
        ErrorClass::Retryable
    );
    assert!(matches!(
        fail(
            400,
            613,
            None,
            "Calls to this api have exceeded the rate limit."
        )
        .await
        .class(),
        ErrorClass::RateLimited(_)
    ));
    assert!(matches!(
        fail(429, 4, None, "Application request limit reached")
            .await
            .class(),
        ErrorClass::RateLimited(_)
    ));
    let e = fail(
        400,
        551,
        Some(1545041),
        "This person isn't available right now.",
    )
    .await;
    assert!(
        matches!(&e, ProviderError::RecipientUnreachable { chat, .. } if chat == hooks::USER),
        "{e}"
    );
    assert!(matches!(
        fail(400, 100, Some(2018001), "No matching user found").await,
        ProviderError::RecipientUnreachable { .. }
    ));
    let e = fail(
        400,
        10,
        Some(2018278),
        "(#10) This message is sent outside of allowed window.",
    )
    .await;
    assert!(
        matches!(e, ProviderError::OutsideSessionWindow { .. }),
        "{e}"
    );
    for (code, subcode) in [
        (190, Some(460)),
        (200, None),
        (368, None),
        (100, None),
        (10, Some(2018065)),
    ] {
        let e = fail(400, code, subcode, "refused").await;
        assert_eq!(e.class(), ErrorClass::Final, "{code}: {e}");
    }
    // The answer lost after Meta took the request: ambiguous, it may have gone out.
    fake.drop_next();
    let e = p.send(&c, &hi).await.expect_err("dropped");
    assert_eq!(e.class(), ErrorClass::Ambiguous, "{e}");
    // No connection at all: retryable, and the token is in no message.
    let config = MessagingConfig::new(TOKEN, SECRET, VERIFY).api_base("http://127.0.0.1:9");
    let gone = MessagingProvider::<C>::new(config.expect("base")).expect("provider");
    fakes::assert_network_error(&gone, &c, TOKEN).await;
    fake.check();
}

async fn the_window_and_message_tags<C: Channel>() {
    let fake = fake::<C>().await;
    let c = user();
    let hi = Outgoing::from("Your order shipped");
    let ago = |h: i64| botmesh::clock::now_ms() - h * HOUR;

    // No tag: a chat silent for 25 h gets nothing, and no call is made.
    let plain = provider::<C>(&fake);
    plain.note_inbound(&c, ago(25));
    let e = plain.send(&c, &hi).await.expect_err("outside");
    assert!(
        matches!(&e, ProviderError::OutsideSessionWindow { chat, .. } if chat == hooks::USER),
        "{e}"
    );
    assert_eq!(e.class(), ErrorClass::Final);
    assert!(fake.sent().is_empty());

    // HUMAN_AGENT (both channels take it): up to 7 days, as the window tag or explicitly.
    let agent = MessagingProvider::<C>::new(
        config(&fake)
            .window_tag(MessageTag::HumanAgent)
            .expect("tag"),
    )
    .expect("provider");
    agent.note_inbound(&c, ago(72));
    agent.send(&c, &hi).await.expect("tagged");
    assert_eq!(
        (
            fake.sent()[0]["messaging_type"].clone(),
            fake.sent()[0]["tag"].clone()
        ),
        (json!("MESSAGE_TAG"), json!("HUMAN_AGENT"))
    );
    agent.note_inbound(&c, botmesh::clock::now_ms());
    agent.send(&c, &hi).await.expect("inside");
    assert_eq!(fake.sent()[1]["messaging_type"], "RESPONSE");
    let stale = MessagingProvider::<C>::new(
        config(&fake)
            .window_tag(MessageTag::HumanAgent)
            .expect("tag"),
    )
    .expect("provider");
    stale.note_inbound(&c, ago(8 * 24));
    assert!(matches!(
        stale.send(&c, &hi).await,
        Err(ProviderError::OutsideSessionWindow { .. })
    ));
    assert!(matches!(
        stale.send_tagged(&c, &hi, MessageTag::HumanAgent).await,
        Err(ProviderError::OutsideSessionWindow { .. })
    ));
    assert_eq!(fake.sent().len(), 2, "no call past 7 days");

    // Meta says the window closed (the provider had not seen the chat): sent again with the tag.
    fake.close_window(hooks::USER);
    let fresh = MessagingProvider::<C>::new(
        config(&fake)
            .window_tag(MessageTag::HumanAgent)
            .expect("tag"),
    )
    .expect("provider");
    fresh.send(&c, &hi).await.expect("sent again with the tag");
    let sent = fake.sent();
    assert_eq!(
        (sent[2]["messaging_type"].clone(), sent[3]["tag"].clone()),
        (json!("RESPONSE"), json!("HUMAN_AGENT"))
    );
    assert_eq!(fake.delivered_to(hooks::USER).len(), 3);

    // The other tags: Messenger only.
    let purchase = config::<C>(&fake).window_tag(MessageTag::PostPurchaseUpdate);
    let explicit = fresh
        .send_tagged(&c, &hi, MessageTag::PostPurchaseUpdate)
        .await;
    if C::NAME == "messenger" {
        let p =
            MessagingProvider::<C>::new(purchase.expect("messenger takes it")).expect("provider");
        p.note_inbound(&c, ago(24 * 30));
        p.send(&c, &hi).await.expect("no time limit");
        assert_eq!(
            fake.sent().last().map(|b| b["tag"].clone()),
            Some(json!("POST_PURCHASE_UPDATE"))
        );
        explicit.expect("explicit tag");
    } else {
        assert!(matches!(purchase, Err(MetaConfigError::Invalid { .. })));
        assert!(matches!(
            explicit,
            Err(ProviderError::UnsupportedContent { .. })
        ));
    }
    fake.check();
}

async fn media_refs_and_downloads<C: Channel>() {
    let fake = fake::<C>().await;
    let p = provider::<C>(&fake);
    let r = |token: &str| MediaRef {
        provider: C::NAME.into(),
        token: token.into(),
    };
    // The fake's CDN is on the Graph's origin (allowed as in a proxy setup).
    let url = fake.host("a.jpg", b"jpeg-bytes");
    assert_eq!(
        p.download_media(&r(&url)).await.expect("download"),
        b"jpeg-bytes"
    );
    let expired = fake.host("expired", b"gone");
    let e = p.download_media(&r(&expired)).await.expect_err("expired");
    assert_eq!(e.class(), ErrorClass::Final, "{e}");
    let evil = r("https://evil.example/a.jpg");
    fakes::assert_download_refused(&p, &evil, "not on a Meta CDN host").await;

    let cdn = "https://scontent.xx.fbcdn.net/v/t1/a.jpg?oh=1&oe=6700AAAA";
    let stored = p.serialize_media_ref(&r(cdn)).expect("durable");
    assert_eq!((stored.v, stored.data.clone()), (1, json!({"url": cdn})));
    let back: botmesh::provider::StoredMediaRef =
        serde_json::from_value(serde_json::to_value(&stored).expect("json")).expect("parse");
    assert_eq!(p.rehydrate_media_ref(&back).expect("rehydrate"), r(cdn));
    assert!(
        p.serialize_media_ref(&r("https://evil.example/a.jpg"))
            .is_none()
    );
    assert!(
        p.serialize_media_ref(&r("http://scontent.xx.fbcdn.net/a.jpg"))
            .is_none(),
        "https only"
    );
    fakes::assert_refuses_foreign_refs(
        &p,
        &stored,
        &[
            json!({"url": "https://fbcdn.net.evil.example/x"}),
            json!({"media_id": "1"}),
        ],
    );
    // `media_hosts` replaces the list.
    let own = MessagingProvider::<C>::new(config(&fake).media_hosts(["cdn.example.com"]))
        .expect("provider");
    assert!(
        own.serialize_media_ref(&r("https://img.cdn.example.com/a.jpg"))
            .is_some()
    );
    assert!(own.serialize_media_ref(&r(cdn)).is_none());
}

async fn duplicates_and_echoes_are_answered_once<C: Channel>() {
    let fake = fake::<C>().await;
    let p = provider::<C>(&fake);
    let (server, base) = fakes::mount(p.webhook_routes()).await;
    let bot = fakes::pong_bot(p);
    bot.start().await.expect("start");
    assert_eq!(
        post::<C>(&base, vec![hooks::text("m_DUP", "hi")]).await,
        200
    );
    // Meta redelivers it, batched with the echo of the bot's own reply (Instagram's way).
    assert_eq!(
        post::<C>(
            &base,
            vec![
                hooks::text("m_DUP", "hi"),
                hooks::echo("m_OUT1", "pong: hi")
            ]
        )
        .await,
        200
    );
    assert_eq!(
        post::<C>(&base, vec![hooks::text("m_DUP", "hi")]).await,
        200
    );
    bot.stop_with(fakes::drained()).await.expect("stop");
    server.shutdown().await;
    assert_eq!(fake.delivered_to(hooks::USER), ["pong: hi"]);
    fake.check();
}

async fn a_crash_before_the_200_is_answered_once<C: Channel>() {
    let fake = fake::<C>().await;
    let bytes = body::<C>(vec![hooks::text("m_PING", "ping")]);
    let signature = sign(SECRET, &bytes);
    let make = || provider::<C>(&fake);
    fakes::crash_before_the_200(
        (make, MessagingProvider::<C>::webhook_routes),
        C::DEFAULT_PATH,
        |req| {
            req.header("X-Hub-Signature-256", &signature)
                .body(bytes.clone())
        },
    )
    .await;
    assert_eq!(fake.delivered_to(hooks::USER), ["pong: ping"]);
}

async fn the_shop_takes_an_order<C: Channel>() {
    let fake = fake::<C>().await;
    let p = provider::<C>(&fake);
    let (server, base) = fakes::mount(p.webhook_routes()).await;
    let bot = shop::shop_bot(Bot::builder(p).bot_id(shop::BOT_ID)).expect("shop");
    bot.start().await.expect("start");
    // The n-th reply, once it went out (polled: the bot answers in its own tasks).
    let reply = async |n: usize| -> Value {
        fakes::eventually(|| fake.messages_to(hooks::USER).len() >= n).await;
        let replies = fake.messages_to(hooks::USER);
        let reply = replies.get(n - 1).cloned();
        reply.unwrap_or_else(|| panic!("no reply {n}: {:#?}", fake.sent()))
    };
    let text_of = |m: &Value| {
        m["text"]
            .as_str()
            .or_else(|| m["attachment"]["payload"]["text"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let payloads = |m: &Value| -> Vec<String> {
        m["attachment"]["payload"]["buttons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["payload"].as_str().map(str::to_owned))
            .collect()
    };

    assert_eq!(
        post::<C>(&base, vec![hooks::text("m_1", "/start")]).await,
        200
    );
    let menu = reply(1).await;
    assert!(
        text_of(&menu).starts_with("Welcome to the botmesh shop!"),
        "{menu}"
    );
    assert_eq!(payloads(&menu), ["order", "status"]);

    assert_eq!(
        post::<C>(&base, vec![hooks::postback("m_2", "order", "Order")]).await,
        200
    );
    let items = reply(2).await;
    assert_eq!(payloads(&items), ["tea", "coffee", "cake"]);
    assert_eq!(
        post::<C>(&base, vec![hooks::postback("m_3", "coffee", "Coffee")]).await,
        200
    );
    assert_eq!(text_of(&reply(3).await), "How many Coffee? (1-99)");
    assert_eq!(post::<C>(&base, vec![hooks::text("m_4", "2")]).await, 200);
    let confirm = reply(4).await;
    assert!(text_of(&confirm).contains("2 × Coffee"), "{confirm}");
    assert_eq!(payloads(&confirm), ["yes", "no"]);
    // The confirmation pressed twice (Meta redelivers): one order.
    assert_eq!(
        post::<C>(&base, vec![hooks::postback("m_5", "yes", "Yes")]).await,
        200
    );
    assert_eq!(
        post::<C>(&base, vec![hooks::postback("m_5", "yes", "Yes")]).await,
        200
    );
    assert!(text_of(&reply(5).await).starts_with("Order #1 placed: 2 × Coffee"));
    assert_eq!(
        post::<C>(&base, vec![hooks::text("m_6", "/status")]).await,
        200
    );
    assert!(text_of(&reply(6).await).starts_with("Your orders (1):"));
    bot.stop_with(fakes::drained()).await.expect("stop");
    server.shutdown().await;
    assert_eq!(fake.delivered_to(hooks::USER).len(), 6, "one reply each");
    fake.check();
}

#[test]
fn config_from_env_names_the_variable() {
    let messenger = fakes::env(&[
        ("MESSENGER_ACCESS_TOKEN", "t"),
        ("MESSENGER_APP_SECRET", "s"),
        ("MESSENGER_VERIFY_TOKEN", "v"),
        ("MESSENGER_PAGE_ID", "1234567890"),
        ("MESSENGER_WINDOW_TAG", "post_purchase_update"),
        ("MESSENGER_MEDIA_HOSTS", "fbcdn.net, cdn.example.com"),
    ]);
    let cfg = MessagingConfig::<Messenger>::from_lookup(messenger).expect("complete");
    let shown = format!("{cfg:?}");
    assert!(
        shown.contains("PostPurchaseUpdate")
            && shown.contains("/messenger")
            && !shown.contains("\"t\""),
        "{shown}"
    );
    assert_eq!(
        MessagingConfig::<Instagram>::from_lookup(fakes::env(&[("INSTAGRAM_ACCESS_TOKEN", "t")]))
            .expect_err("missing"),
        MetaConfigError::MissingEnv("INSTAGRAM_APP_SECRET")
    );
    let ig = [
        ("INSTAGRAM_ACCESS_TOKEN", "t"),
        ("INSTAGRAM_APP_SECRET", "s"),
        ("INSTAGRAM_VERIFY_TOKEN", "v"),
    ];
    let with = |extra: (&'static str, &'static str)| {
        move |k: &str| {
            ig.iter()
                .chain([&extra])
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert!(matches!(
        MessagingConfig::<Instagram>::from_lookup(with(("INSTAGRAM_WINDOW_TAG", "ACCOUNT_UPDATE"))),
        Err(MetaConfigError::Invalid {
            setting: "INSTAGRAM_WINDOW_TAG",
            ..
        })
    ));
    assert!(matches!(
        MessagingConfig::<Instagram>::from_lookup(with(("INSTAGRAM_ACCOUNT_ID", "me"))),
        Err(MetaConfigError::Invalid {
            setting: "INSTAGRAM_ACCOUNT_ID",
            ..
        })
    ));
    let login = MessagingConfig::<Instagram>::from_lookup(with((
        "INSTAGRAM_API_BASE",
        "https://graph.instagram.com",
    )))
    .expect("Instagram Login");
    assert!(format!("{login:?}").contains("graph.instagram.com"));
    // An empty secret leaves the webhook open: refused, naming it.
    let err = MessagingProvider::new(MessagingConfig::<Messenger>::new("t", "", "v"))
        .expect_err("empty secret");
    assert!(err.to_string().contains("app secret"), "{err}");
}
