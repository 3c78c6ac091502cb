//! The Twilio provider against the fake REST API: the `X-Twilio-Signature` check, malformed
//! forms, SMS / MMS / WhatsApp inbound kinds and status callbacks, every content kind sent,
//! error classes, media downloads through the guarded client, media refs restricted to the
//! API origin and twilio.com, and a crash before the 200 ending in one reply.

use crate::fakes;
use crate::fakes::Refusals;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::fakes::twilio::FakeTwilio;
use crate::fakes::{Mode, contents};
use botmesh::message::{Button, ChatId, Content, MediaKind, MediaRef, Outgoing, OutgoingContent};
use botmesh::prelude::*;
use botmesh::provider::{Provider, ProviderError, ProviderEvent, StoredMediaRef};
use botmesh_providers::http::GuardedClient;
use botmesh_providers::twilio::{TwilioConfig, TwilioConfigError, TwilioProvider, TwilioSender};
use botmesh_providers::webhook::RunningWebhookServer;
use serde_json::json;

const SID: &str = "ACXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX";
const TOKEN: &str = "twilio-auth-token";
const PUBLIC: &str = "https://bot.example";
const USER: &str = "+15551234567";

fn config(fake: &FakeTwilio) -> TwilioConfig {
    TwilioConfig::new(SID, TOKEN, TwilioSender::From("+15557654321".into()))
        .api_base(&fake.base_url())
        .expect("base")
        .webhook_base_url(PUBLIC)
        .expect("public url")
        .media_client(GuardedClient::allowing_localhost().expect("client"))
}

/// The fake and a provider on it.
async fn started() -> (FakeTwilio, TwilioProvider) {
    fakes::provided(FakeTwilio::start(SID, TOKEN).await, |f| {
        TwilioProvider::new(config(f))
    })
}

async fn mounted(tw: &TwilioProvider) -> (RunningWebhookServer, String) {
    fakes::mount(tw.webhook_routes()).await
}

fn sms<'a>(sid: &'a str, body: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("MessageSid", sid),
        ("SmsSid", sid),
        ("SmsMessageSid", sid),
        ("AccountSid", SID),
        ("From", USER),
        ("To", "+15557654321"),
        ("Body", body),
        ("NumMedia", "0"),
        ("NumSegments", "1"),
        ("SmsStatus", "received"),
        ("ApiVersion", "2010-04-01"),
        ("FromCountry", "US"),
    ]
}

async fn post(local: &str, params: &[(&str, &str)]) -> u16 {
    FakeTwilio::post_webhook(
        &format!("{local}/twilio"),
        &format!("{PUBLIC}/twilio"),
        Some(TOKEN),
        params,
    )
    .await
    .0
}

#[tokio::test]
async fn the_signature_is_checked_over_url_and_every_parameter() {
    let (_, tw) = started().await;
    let (rec, server, local) = fakes::started(&tw, tw.webhook_routes()).await;
    let url = format!("{local}/twilio");
    let params = sms("SM1f0e8ae6ade43cb3c0ce4525424e404f", "Hello");

    let public = format!("{PUBLIC}/twilio");
    let refused = [
        (public.as_str(), None, 401),
        (public.as_str(), Some("other-token"), 403),
        ("https://evil.example/twilio", Some(TOKEN), 403),
    ];
    for (signed_url, token, status) in refused {
        let (got, _) = FakeTwilio::post_webhook(&url, signed_url, token, &params).await;
        assert_eq!(got, status, "signed over {signed_url} with {token:?}");
    }
    // Signed over fewer parameters than were sent (a dropped or added parameter).
    let sig =
        botmesh_providers::twilio::signature(TOKEN, &format!("{PUBLIC}/twilio"), &params[..3]);
    let form = serde_urlencoded::to_string(&params).expect("form");
    let header = [("X-Twilio-Signature", sig)];
    assert_eq!(fakes::post_form(&url, header, &form).await, 403);
    assert!(rec.events().is_empty());

    // Accepted: signed on the public URL, with or without the default port; TwiML back.
    let (status, body) =
        FakeTwilio::post_webhook(&url, &format!("{PUBLIC}/twilio"), Some(TOKEN), &params).await;
    assert_eq!(
        (status, body.as_str()),
        (200, "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response/>")
    );
    let again = sms("SM2", "Hi");
    assert_eq!(
        FakeTwilio::post_webhook(&url, "https://bot.example:443/twilio", Some(TOKEN), &again)
            .await
            .0,
        200
    );
    assert_eq!(rec.events().len(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_forms_get_400_and_deliver_nothing() {
    let (_, tw) = started().await;
    let (rec, server, local) = fakes::started(&tw, tw.webhook_routes()).await;
    let malformed: [(&[(&str, &str)], &str); 3] = [
        (
            &[("From", USER), ("To", "+1"), ("Body", "no sid")],
            "no MessageSid",
        ),
        (
            &[
                ("MessageSid", "SM3"),
                ("From", USER),
                ("To", "+1"),
                ("NumMedia", "two"),
            ],
            "NumMedia not a number",
        ),
        (
            &[
                ("MessageSid", "SM4"),
                ("From", USER),
                ("To", "+1"),
                ("NumMedia", "1"),
            ],
            "MediaUrl0 missing",
        ),
    ];
    for (form, what) in malformed {
        assert_eq!(post(&local, form).await, 400, "{what}");
    }
    let header = [("X-Twilio-Signature", "x".to_owned())];
    let status = fakes::post_form(&format!("{local}/twilio"), header, "a=%zz&&=").await;
    assert!(matches!(status, 400 | 403), "{status}");
    assert_eq!(
        FakeTwilio::post_webhook(
            &format!("{local}/twilio/status"),
            &format!("{PUBLIC}/twilio/status"),
            Some(TOKEN),
            &[("MessageSid", "SM1")]
        )
        .await
        .0,
        400
    );
    assert!(rec.events().is_empty(), "{:?}", rec.events());

    rec.set_mode(Mode::Reject);
    assert_eq!(post(&local, &sms("SM5", "later")).await, 503);
    server.shutdown().await;
}

#[tokio::test]
async fn receives_sms_mms_whatsapp_kinds_and_statuses() {
    let (fake, tw) = started().await;
    let (rec, server, local) = fakes::started(&tw, tw.webhook_routes()).await;
    let url0 = fake.add_media("MM1", "ME1", b"jpeg");
    let url1 = fake.add_media("MM1", "ME2", b"ogg");

    assert_eq!(post(&local, &sms("SM10", "hello")).await, 200);
    let mms = vec![
        ("MessageSid", "MM1"),
        ("From", USER),
        ("To", "+15557654321"),
        ("Body", "look"),
        ("NumMedia", "2"),
        ("MediaUrl0", url0.as_str()),
        ("MediaContentType0", "image/jpeg"),
        ("MediaUrl1", url1.as_str()),
        ("MediaContentType1", "audio/ogg"),
    ];
    assert_eq!(post(&local, &mms).await, 200);
    let wa = "whatsapp:+15551234567";
    let loc = vec![
        ("MessageSid", "SM11"),
        ("From", wa),
        ("To", "whatsapp:+14155238886"),
        ("ProfileName", "Ana"),
        ("WaId", "15551234567"),
        ("MessageType", "location"),
        ("Latitude", "52.37"),
        ("Longitude", "4.89"),
        ("Label", "Dam"),
        ("NumMedia", "0"),
    ];
    assert_eq!(post(&local, &loc).await, 200);
    let quick = vec![
        ("MessageSid", "SM12"),
        ("From", wa),
        ("To", "whatsapp:+14155238886"),
        ("Body", "Stop promotions"),
        ("ButtonText", "Stop promotions"),
        ("ButtonPayload", "STOP_PROMO"),
        ("NumMedia", "0"),
    ];
    assert_eq!(post(&local, &quick).await, 200);

    // Options offered with a send come back as interactions, by number or title.
    tw.send(
        &ChatId::from(USER),
        &Outgoing::buttons("Continue?", [("yes", "Yes"), ("no", "No")]),
    )
    .await
    .expect("send");
    assert_eq!(post(&local, &sms("SM13", "2")).await, 200);
    assert_eq!(post(&local, &sms("SM14", "yes")).await, 200);

    let status = [
        ("MessageSid", "SM99"),
        ("MessageStatus", "undelivered"),
        ("ErrorCode", "30003"),
        ("AccountSid", SID),
        ("From", "+15557654321"),
        ("To", USER),
        ("ApiVersion", "2010-04-01"),
    ];
    assert_eq!(
        FakeTwilio::post_webhook(
            &format!("{local}/twilio/status"),
            &format!("{PUBLIC}/twilio/status"),
            Some(TOKEN),
            &status
        )
        .await
        .0,
        200
    );

    let ev = rec.exactly(8);
    assert!(
        matches!(&ev[0], ProviderEvent::Message(m) if m.id.as_str() == "SM10" && m.chat.as_str() == USER && m.content == Content::Text("hello".into()))
    );
    assert!(
        matches!(&ev[1], ProviderEvent::Message(m) if m.id.as_str() == "MM1"
        && matches!(&m.content, Content::Media(x) if x.kind == MediaKind::Image && x.media_ref.token == url0 && x.caption.as_deref() == Some("look")))
    );
    assert!(
        matches!(&ev[2], ProviderEvent::Message(m) if m.id.as_str() == "MM1/1"
        && matches!(&m.content, Content::Media(x) if x.kind == MediaKind::Voice && x.caption.is_none()))
    );
    assert!(
        matches!(&ev[3], ProviderEvent::Message(m) if m.sender_name.as_deref() == Some("Ana")
        && matches!(&m.content, Content::Location(l) if l.latitude == 52.37 && l.name.as_deref() == Some("Dam")))
    );
    assert!(
        matches!(&ev[4], ProviderEvent::Interaction(i) if i.data == "STOP_PROMO" && i.chat.as_str() == wa && !i.from_text)
    );
    assert!(
        matches!(&ev[5], ProviderEvent::Interaction(i) if i.data == "no" && i.id == "SM13"
        && i.from_text && i.dedupe_id() == "SM13"),
        "an option picked in a text is deduped as that text: {:?}",
        ev[5]
    );
    assert!(matches!(&ev[6], ProviderEvent::Interaction(i) if i.data == "yes"));
    assert!(
        matches!(&ev[7], ProviderEvent::Status(s) if s.status == "undelivered" && s.error.as_deref() == Some("30003") && s.chat.as_str() == USER)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn sends_every_content_kind() {
    let fake = FakeTwilio::start(SID, TOKEN).await;
    let tw = TwilioProvider::new(
        config(&fake)
            .status_callback("https://bot.example/twilio/status")
            .expect("cb"),
    )
    .expect("provider");
    let c = ChatId::from(USER);
    let sent = tw.send(&c, &Outgoing::from("Hello")).await.expect("text");
    assert!(
        sent.message_id
            .is_some_and(|id| id.as_str().starts_with("SM"))
    );
    assert_eq!(fake.param(0, "To").as_deref(), Some(USER));
    assert_eq!(fake.param(0, "From").as_deref(), Some("+15557654321"));
    assert_eq!(fake.param(0, "Body").as_deref(), Some("Hello"));
    assert_eq!(
        fake.param(0, "StatusCallback").as_deref(),
        Some("https://bot.example/twilio/status")
    );

    tw.send(
        &c,
        &Outgoing::buttons("Continue?", [("yes", "Yes"), ("no", "No")]),
    )
    .await
    .expect("buttons");
    assert_eq!(
        fake.param(1, "Body").as_deref(),
        Some("Continue?\n1. Yes\n2. No")
    );
    tw.send(
        &c,
        &Outgoing::from(OutgoingContent::List {
            text: "Menu".into(),
            button: "Pick".into(),
            sections: vec![botmesh::message::ListSection {
                title: "S".into(),
                rows: vec![Button::with_id("r1", "Row")],
            }],
        }),
    )
    .await
    .expect("list");
    assert_eq!(fake.param(2, "Body").as_deref(), Some("Menu\n1. Row"));

    // One send is one create: a body over 1600 characters (the runtime would have split it)
    // is refused, not sent as several messages that a retry would send again.
    let err = tw
        .send(&c, &Outgoing::from("x".repeat(2000)))
        .await
        .expect_err("a body over 1600 characters");
    assert!(
        matches!(&err, ProviderError::UnsupportedContent { what, .. } if what.contains("2000 characters")),
        "{err}"
    );
    assert_eq!(fake.sent().len(), 3, "nothing sent for the refused body");

    tw.send(
        &c,
        &contents::media(
            MediaKind::Image,
            contents::url("https://example.com/a.jpg"),
            Some("cap"),
            None,
        ),
    )
    .await
    .expect("media");
    assert_eq!(
        fake.param(3, "MediaUrl").as_deref(),
        Some("https://example.com/a.jpg")
    );
    assert_eq!(fake.param(3, "Body").as_deref(), Some("cap"));

    tw.send(
        &c,
        &contents::template("HXb5b62575e6e4ff6129ad7c8efe1f983e", "en", &["12/1", "3pm"]),
    )
    .await
    .expect("template");
    assert_eq!(
        fake.param(4, "ContentSid").as_deref(),
        Some("HXb5b62575e6e4ff6129ad7c8efe1f983e")
    );
    let vars: serde_json::Value =
        serde_json::from_str(&fake.param(4, "ContentVariables").expect("vars")).expect("json");
    assert_eq!(vars, json!({"1": "12/1", "2": "3pm"}));

    tw.send(&c, &contents::location(1.5, 2.5, Some("Here")))
        .await
        .expect("location");
    assert_eq!(
        fake.param(5, "Body").as_deref(),
        Some("Here\nhttps://maps.google.com/?q=1.5,2.5")
    );
    tw.send(&c, &contents::contact("Bo", "+1555"))
        .await
        .expect("contacts");
    assert_eq!(fake.param(6, "Body").as_deref(), Some("Bo: +1555"));

    let n = fake.sent().len();
    let bad = [
        contents::reaction("SM1", "👍"),
        contents::media(MediaKind::Image, contents::bytes(vec![1], None), None, None),
        contents::template("order_update", "en", &[]),
    ];
    fakes::assert_unsupported(&tw, &c, &bad).await;
    assert_eq!(fake.sent().len(), n);

    let service = TwilioProvider::new(
        TwilioConfig::new(SID, TOKEN, TwilioSender::MessagingService("MG123".into()))
            .api_base(&fake.base_url())
            .expect("base"),
    )
    .expect("provider");
    service
        .send(&c, &Outgoing::from("via service"))
        .await
        .expect("service");
    assert_eq!(
        fake.param(n, "MessagingServiceSid").as_deref(),
        Some("MG123")
    );
    assert_eq!(fake.param(n, "From"), None);
}

#[tokio::test]
async fn maps_twilio_errors_onto_classes() {
    let (fake, tw) = started().await;
    let final_ = fakes::final_hiding(TOKEN);
    let fail = |(status, code, message, retry_after)| {
        fake.fail_next(status, code, message, retry_after);
    };
    let cases: Refusals<'_, (u16, i64, &str, Option<u64>), 8> = [
        (
            (429, 20429, "Too Many Requests", Some(3)),
            &fakes::rate_limited(3),
        ),
        ((503, 20500, "Service unavailable", None), &fakes::retryable),
        (
            (
                400,
                21211,
                "The 'To' number +1555 is not a valid phone number.",
                None,
            ),
            &fakes::unreachable,
        ),
        (
            (
                400,
                21610,
                "Attempt to send to unsubscribed recipient",
                None,
            ),
            &fakes::unreachable,
        ),
        (
            (
                400,
                63016,
                "Failed to send freeform message because you are outside the allowed window.",
                None,
            ),
            &|e| matches!(e, ProviderError::OutsideSessionWindow { .. }),
        ),
        (
            (
                400,
                21617,
                "The concatenated message body exceeds the 1600 character limit.",
                None,
            ),
            &|e| matches!(e, ProviderError::PayloadTooLarge { limit: 1600, .. }),
        ),
        ((401, 20003, "Authenticate", None), &final_),
        ((400, 21608, "The number is unverified", None), &final_),
    ];
    fakes::assert_refusals(&tw, USER, fail, &cases).await;
    let gone = TwilioProvider::new(
        TwilioConfig::new(SID, TOKEN, TwilioSender::From("+1".into()))
            .api_base("http://127.0.0.1:9")
            .expect("base"),
    )
    .expect("provider");
    fakes::assert_network_error(&gone, &ChatId::from(USER), TOKEN).await;
}

#[tokio::test]
async fn downloads_media_through_the_guarded_client_only_from_twilio() {
    let fake = FakeTwilio::start(SID, TOKEN).await;
    let url = fake.add_media("MM1", "ME1", b"jpeg-bytes");
    let tw = TwilioProvider::new(config(&fake)).expect("provider");
    let r = |u: &str| MediaRef {
        provider: "twilio".into(),
        token: u.into(),
    };
    assert_eq!(
        tw.download_media(&r(&url))
            .await
            .expect("download via redirect"),
        b"jpeg-bytes"
    );
    // Never sends the credentials elsewhere.
    fakes::assert_download_refused(&tw, &r("https://evil.example/steal"), "refusing").await;
    let strict = TwilioProvider::new(
        TwilioConfig::new(SID, TOKEN, TwilioSender::From("+1".into()))
            .api_base(&fake.base_url())
            .expect("base"),
    )
    .expect("provider");
    let e = strict.download_media(&r(&url)).await.expect_err("guard");
    assert!(
        e.to_string().contains("refused to connect") && !e.to_string().contains(TOKEN),
        "{e}"
    );
}

#[tokio::test]
async fn media_refs_round_trip_and_every_rejection() {
    let (fake, tw) = started().await;
    let url = fake.add_media("MM1", "ME1", b"x");
    for token in [
        url.as_str(),
        "https://api.twilio.com/2010-04-01/Accounts/AC1/Messages/MM1/Media/ME1",
        "https://media.twiliocdn.twilio.com/x",
    ] {
        let media = MediaRef {
            provider: "twilio".into(),
            token: token.into(),
        };
        let stored = tw.serialize_media_ref(&media).expect("durable");
        assert_eq!(stored.data, json!({"url": token}));
        let back: StoredMediaRef =
            serde_json::from_value(serde_json::to_value(&stored).expect("json")).expect("parse");
        assert_eq!(tw.rehydrate_media_ref(&back).expect("rehydrate"), media);
    }
    for off in [
        "https://evil.example/x",
        "http://api.twilio.com/x",
        "https://twilio.com.evil.example/x",
    ] {
        assert!(
            tw.serialize_media_ref(&MediaRef {
                provider: "twilio".into(),
                token: off.into()
            })
            .is_none(),
            "not-durable: {off}"
        );
    }
    let good = fakes::stored_ref(&tw, json!({"url": url}));
    fakes::assert_refuses_foreign_refs(
        &tw,
        &good,
        &[
            json!({"url": "https://evil.example/x"}),
            json!({"href": "x"}),
        ],
    );
}

#[tokio::test]
async fn a_crash_before_the_200_is_redelivered_and_answered_once() {
    let fake = FakeTwilio::start(SID, TOKEN).await;
    let params = sms("SM77", "ping");
    let sig = botmesh_providers::twilio::signature(TOKEN, &format!("{PUBLIC}/twilio"), &params);
    let form = serde_urlencoded::to_string(&params).expect("form");
    let provider = || TwilioProvider::new(config(&fake)).expect("provider");
    let channel = (provider, TwilioProvider::webhook_routes);
    fakes::crash_before_the_200(channel, "/twilio", |req| {
        req.header("X-Twilio-Signature", &sig)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.clone())
    })
    .await;
    let bodies: Vec<_> = (0..fake.sent().len())
        .filter_map(|i| fake.param(i, "Body"))
        .collect();
    assert_eq!(bodies, ["pong: ping"]);
}

#[test]
fn config_from_env_names_the_variable() {
    assert_eq!(
        TwilioConfig::from_lookup(fakes::env(&[("TWILIO_ACCOUNT_SID", "AC1")])).expect_err("token"),
        TwilioConfigError::MissingEnv("TWILIO_AUTH_TOKEN")
    );
    assert_eq!(
        TwilioConfig::from_lookup(fakes::env(&[
            ("TWILIO_ACCOUNT_SID", "AC1"),
            ("TWILIO_AUTH_TOKEN", "t")
        ]))
        .expect_err("sender"),
        TwilioConfigError::MissingEnv("TWILIO_FROM")
    );
    let e = TwilioConfig::from_lookup(fakes::env(&[
        ("TWILIO_ACCOUNT_SID", "AC1"),
        ("TWILIO_AUTH_TOKEN", "t"),
        ("TWILIO_FROM", "+1"),
        ("TWILIO_WEBHOOK_BASE_URL", "bot.example"),
    ]))
    .expect_err("url");
    assert!(e.to_string().contains("TWILIO_WEBHOOK_BASE_URL"));
    let cfg = TwilioConfig::from_lookup(fakes::env(&[
        ("TWILIO_ACCOUNT_SID", "AC1"),
        ("TWILIO_AUTH_TOKEN", "sekrit"),
        ("TWILIO_MESSAGING_SERVICE_SID", "MG1"),
    ]))
    .expect("config");
    assert!(!format!("{cfg:?}").contains("sekrit"));
}

/// An empty auth token would leave the webhook unauthenticated (any request signed with the
/// empty key would pass): refused at `new`, and never a valid key for `verify`.
#[test]
fn an_empty_auth_token_is_refused() {
    let Err(err) = TwilioProvider::new(TwilioConfig::new(SID, "", TwilioSender::From("+1".into())))
    else {
        panic!("an empty auth token is refused");
    };
    assert!(err.to_string().contains("auth token"), "{err}");
    let url = "https://bot.example/twilio";
    let params = [("Body", "hi")];
    let forged = botmesh_providers::twilio::signature("", url, &params);
    assert!(!botmesh_providers::twilio::verify(
        "", url, &params, &forged
    ));
}

/// A text with buttons whose numbered options would take its `Body` over 1600 characters:
/// the runtime splits it (the provider leaves room for the options), so each part is one
/// create of at most 1600 characters and the options ride on the last.
#[tokio::test]
async fn a_long_text_with_buttons_is_one_create_per_part() {
    let (fake, provider) = started().await;
    let (server, local) = mounted(&provider).await;
    let bot = Bot::builder(provider).build().expect("bot");
    bot.on_message(|ctx: Ctx| async move {
        let text = "word ".repeat(318); // 1590 characters
        let o = ctx
            .reply_buttons(text, [("y", "Yes, place the order"), ("n", "No, thanks")])
            .await?;
        assert_eq!(o.parts, 2);
        Ok(())
    });
    bot.start().await.expect("start");
    assert_eq!(post(&local, &sms("SM88", "order")).await, 200);
    bot.idle().await;
    let bodies = two_bodies(&fake);
    assert!(!bodies[0].contains("1. Yes"), "{}", bodies[0]);
    assert!(
        bodies[1].ends_with("\n1. Yes, place the order\n2. No, thanks"),
        "{}",
        bodies[1]
    );
    bot.stop().await.expect("stop");
    server.shutdown().await;
}

/// The bodies of the creates so far: two, each within Twilio's 1600 characters.
fn two_bodies(fake: &FakeTwilio) -> Vec<String> {
    let bodies: Vec<String> = (0..fake.sent().len())
        .filter_map(|i| fake.param(i, "Body"))
        .collect();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert!(
        bodies.iter().all(|b| b.chars().count() <= 1600),
        "{bodies:?}"
    );
    bodies
}

/// A list whose text is over 1600 characters: the runtime splits it like a text with buttons,
/// so each part is one create and the numbered rows ride on the last.
#[tokio::test]
async fn a_long_list_is_one_create_per_part() {
    let (fake, provider) = started().await;
    let (server, local) = mounted(&provider).await;
    let bot = Bot::builder(provider).build().expect("bot");
    let parts = Arc::new(AtomicUsize::new(0));
    let seen = parts.clone();
    bot.on_message(move |ctx: Ctx| {
        let seen = seen.clone();
        async move {
            let list = OutgoingContent::List {
                text: "menu ".repeat(500), // 2500 characters
                button: "Pick".into(),
                sections: vec![botmesh::message::ListSection {
                    title: "Drinks".into(),
                    rows: vec![
                        Button::with_id("tea", "Tea"),
                        Button::with_id("coffee", "Coffee"),
                    ],
                }],
            };
            let o = ctx.reply(Outgoing::from(list)).await?;
            seen.store(o.parts, Ordering::SeqCst);
            Ok(())
        }
    });
    bot.start().await.expect("start");
    assert_eq!(post(&local, &sms("SM89", "menu")).await, 200);
    bot.idle().await;
    assert_eq!(
        parts.load(Ordering::SeqCst),
        2,
        "two sends, not one of two creates"
    );
    let bodies = two_bodies(&fake);
    assert_eq!(
        bodies.concat().matches("menu").count(),
        500,
        "the whole text went out"
    );
    assert!(!bodies[0].contains("1. Tea"), "{}", bodies[0]);
    assert!(bodies[1].ends_with("\n1. Tea\n2. Coffee"), "{}", bodies[1]);
    bot.stop().await.expect("stop");
    server.shutdown().await;
}

/// Options that alone take more than the 400 characters a message leaves them: refused with
/// an error naming them, and nothing is sent (two creates under one send would be sent
/// again by a retry).
#[tokio::test]
async fn options_over_their_room_are_refused_before_any_create() {
    let (fake, tw) = started().await;
    let title = "a very long option title that goes on";
    let buttons: Vec<Button> = (0..12)
        .map(|i| Button::with_id(format!("b{i}"), title))
        .collect();
    let text = "pick ".repeat(240); // 1200 characters: what the runtime leaves with buttons
    let err = tw
        .send(&ChatId::from(USER), &Outgoing::buttons(text, buttons))
        .await
        .expect_err("options over 400 characters");
    assert!(
        matches!(&err, ProviderError::UnsupportedContent { what, .. } if what.contains("12 numbered options")),
        "{err}"
    );
    assert!(fake.sent().is_empty(), "no create was made");
}

/// The options of a question count from the moment its request leaves, not from Twilio's
/// answer: a user who reads the question and answers `2` before the response reaches the bot
/// (here: a create that fails after Twilio got it) answers the new question, which has no
/// options, so `2` is a text, not the second option of the question before.
#[tokio::test]
async fn an_answer_reads_against_the_question_whose_request_left() {
    let (fake, tw) = started().await;
    let (rec, server, local) = fakes::started(&tw, tw.webhook_routes()).await;
    let chat = ChatId::from(USER);
    tw.send(
        &chat,
        &Outgoing::buttons("Which one?", [("tea", "Tea"), ("coffee", "Coffee")]),
    )
    .await
    .expect("send");
    fake.fail_next(500, 20500, "Internal Server Error", None);
    tw.send(&chat, &Outgoing::from("How many?"))
        .await
        .expect_err("the create fails");
    assert_eq!(post(&local, &sms("SM20", "2")).await, 200);
    let ev = rec.events();
    assert!(
        matches!(&ev[..], [ProviderEvent::Message(m)] if m.content == Content::Text("2".into())),
        "{ev:#?}"
    );
    server.shutdown().await;
}
