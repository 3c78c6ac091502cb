//! The TikTok provider against the fake TikTok Business Messaging API: the webhook signature
//! (missing, forged, tampered and stale refused), the bot's own sends echoed and other
//! accounts' messages not delivered, texts and images sent (an image uploaded first), TikTok's
//! codes on HTTP 200 and HTTP failures mapped onto classes (5xx and 429 retried by the outbox,
//! a refused token final and named), media refs round-tripping through the download route,
//! and duplicates and a crash before the 200 answered once.

use crate::fakes;
use crate::fakes::Refusals;
use crate::fakes::contents;

use crate::fakes::tiktok::{FakeTikTok, hooks};
use botmesh::message::{ChatId, MediaKind, Outgoing};
use botmesh::provider::{ErrorClass, Provider, ProviderError};
use botmesh_providers::http::GuardedClient;
use botmesh_providers::tiktok::{TikTokConfig, TikTokConfigError, TikTokProvider, signature};
use serde_json::{Value, json};

const TOKEN: &str = "act.tiktok-test-token";
const BUSINESS: &str = "biz-open-id-0001";
const SECRET: &str = "tiktok-client-secret";
const CONV: &str = "conv-0001";
const USER: &str = "user-open-id-0001";

fn config(fake: &FakeTikTok) -> TikTokConfig {
    TikTokConfig::new(TOKEN, BUSINESS, SECRET)
        .and_then(|c| c.api_base(&fake.base_url()))
        .expect("config")
        .media_client(GuardedClient::allowing_localhost().expect("client"))
}

/// The fake and a provider on it.
async fn started() -> (FakeTikTok, TikTokProvider) {
    fakes::provided(FakeTikTok::start(TOKEN, BUSINESS).await, |f| {
        TikTokProvider::new(config(f))
    })
}

async fn post(url: &str, signature: Option<&str>, body: &[u8]) -> u16 {
    let header = signature.map(|s| ("TikTok-Signature", s.to_owned()));
    fakes::post_signed(url, header, body).await
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("json")
}

#[tokio::test]
async fn forged_tampered_or_stale_signatures_are_refused_and_echoes_not_delivered() {
    let (_, tiktok) = started().await;
    let (rec, server, local) = fakes::started(&tiktok, tiktok.webhook_routes()).await;
    let url = format!("{local}/tiktok");
    let hi = bytes(&hooks::text(BUSINESS, CONV, USER, "m1", "hi"));
    let now = botmesh::clock::now_ms() / 1000;
    let stale = format!("t={},s={}", now - 3600, signature(SECRET, now - 3600, &hi));
    let mut tampered = hi.clone();
    tampered.push(b' ');
    let refused = [
        (None, hi.clone(), 401),
        (Some(hooks::sign("not-the-secret", &hi)), hi.clone(), 403),
        (Some(hooks::sign(SECRET, &hi)), tampered, 403),
        (Some(stale), hi.clone(), 403),
        (Some("s=00".to_owned()), hi.clone(), 403),
    ];
    for (sig, body, status) in refused {
        assert_eq!(post(&url, sig.as_deref(), &body).await, status, "{sig:?}");
    }
    assert!(rec.events().is_empty());
    let mut echo = hooks::text(BUSINESS, CONV, BUSINESS, "m0", "pong: hi");
    echo["event"] = json!("im_send_msg");
    for body in [
        echo,
        hooks::text("another-business", CONV, USER, "m9", "hi"),
    ] {
        let body = bytes(&body);
        assert_eq!(
            post(&url, Some(&hooks::sign(SECRET, &body)), &body).await,
            200
        );
    }
    assert_eq!(post(&url, Some(&hooks::sign(SECRET, &hi)), &hi).await, 200);
    let events = rec.wait_for(1).await;
    assert_eq!(
        fakes::gateway::summary(&events),
        [format!("text hi {CONV}")]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn sends_texts_options_and_images() {
    let (fake, tiktok) = started().await;
    let reply = contents::reply("plain", "m7");
    assert_eq!(
        fakes::sent_id(&tiktok, CONV, &reply).await,
        "tt-msg-00000001"
    );
    let buttons = Outgoing::buttons("Pick one", [("a", "Apples"), ("b", "Pears")]);
    fakes::sent_id(&tiktok, CONV, &buttons).await;
    let png = contents::bytes(b"png bytes".to_vec(), Some("a.png"));
    let image = contents::media(MediaKind::Image, png, Some("a photo"), None);
    fakes::sent_id(&tiktok, CONV, &image).await;
    assert_eq!(
        fake.sent()[0],
        json!({"business_id": BUSINESS, "recipient_type": "CONVERSATION", "recipient": CONV,
            "message_type": "TEXT", "text": {"body": "plain"},
            "referenced_message_info": {"referenced_message_id": "m7"}})
    );
    assert_eq!(
        fake.delivered_to(CONV),
        [
            "plain",
            "Pick one\n\n1. Apples\n2. Pears",
            "[image v0upload0001]",
            "a photo"
        ]
    );
    let video = contents::media(
        MediaKind::Video,
        contents::url("https://example.com/a.mp4"),
        None,
        None,
    );
    let large = contents::bytes(vec![0; 4 * 1024 * 1024], None);
    let big = contents::media(MediaKind::Image, large, None, None);
    let chat = ChatId::from(CONV);
    assert!(matches!(
        tiktok.send(&chat, &video).await,
        Err(ProviderError::UnsupportedContent { .. })
    ));
    assert!(matches!(
        tiktok.send(&chat, &big).await,
        Err(ProviderError::PayloadTooLarge { .. })
    ));
    assert_eq!(fake.uploads(), 1);
}

#[tokio::test]
async fn maps_tiktok_codes_and_http_failures_onto_classes() {
    let (fake, tiktok) = started().await;
    let http = |(status, retry_after)| fake.fail_next(status, retry_after);
    let failures: Refusals<'_, (u16, Option<u64>), 2> = [
        ((429, Some(3)), &fakes::rate_limited(3)),
        ((503, None), &fakes::retryable),
    ];
    fakes::assert_refusals(&tiktok, CONV, http, &failures).await;
    let final_ = fakes::class_is(ErrorClass::Final);
    let coded: Refusals<'_, (i64, &str), 5> = [
        (
            (40100, "Too many requests."),
            &fakes::class_is(ErrorClass::RateLimited(None)),
        ),
        ((50000, "System error."), &fakes::retryable),
        ((40002, "Invalid parameters."), &final_),
        ((40001, "No permission."), &final_),
        (
            (40064, "You are sending messages too fast. Take a rest."),
            &|e| matches!(e, ProviderError::OutsideSessionWindow { .. }),
        ),
    ];
    let code = |(code, message)| fake.fail_next_code(code, message);
    fakes::assert_refusals(&tiktok, CONV, code, &coded).await;
    fakes::assert_dropped_is_ambiguous(&tiktok, CONV, || fake.drop_next()).await;
    let wrong = TikTokConfig::new("revoked", BUSINESS, SECRET)
        .and_then(|c| c.api_base(&fake.base_url()))
        .expect("config");
    let e = fakes::refused_send(TikTokProvider::new(wrong), CONV).await;
    assert!(
        matches!(&e, ProviderError::Api { code: Some(c), retryable: false, .. } if c == "40105")
            && e.to_string().contains("access token was refused"),
        "{e}"
    );
}

#[tokio::test]
async fn the_outbox_retries_5xx_and_429_and_a_duplicate_is_answered_once() {
    let (fake, tiktok) = started().await;
    fake.fail_next(500, None);
    fake.fail_next(429, Some(0));
    fake.fail_next_code(40100, "Too many requests.");
    let ping = bytes(&hooks::text(BUSINESS, CONV, USER, "mping", "ping"));
    // Signed afresh for each attempt, as TikTok signs each delivery.
    let signed = async |local: &str| {
        let sig = hooks::sign(SECRET, &ping);
        post(&format!("{local}/tiktok"), Some(&sig), &ping).await
    };
    fakes::retried_and_answered_once_by(tiktok, signed, || fake.delivered_to(CONV)).await;
    assert_eq!(fake.sent().len(), 4, "three failures, then the send");
    fake.check();
}

#[tokio::test]
async fn media_refs_round_trip_through_the_download_route() {
    let (fake, tiktok) = started().await;
    fake.add_media("v0media01", b"png bytes");
    let (rec, server, local) = fakes::started(&tiktok, tiktok.webhook_routes()).await;
    let body = hooks::received(
        BUSINESS,
        CONV,
        USER,
        "mimg",
        json!({"type": "image", "image": {"media_id": "v0media01"}}),
    );
    let body = bytes(&body);
    assert_eq!(
        post(
            &format!("{local}/tiktok"),
            Some(&hooks::sign(SECRET, &body)),
            &body
        )
        .await,
        200
    );
    let token = format!("{CONV}|mimg|v0media01");
    assert_eq!(
        fakes::gateway::summary(&rec.wait_for(1).await),
        [format!("media Image {token} None")]
    );
    let data = json!({ "media": token });
    let bad = [json!({"media": "only|two"}), json!({"url": token})];
    fakes::assert_media_round_trip(&tiktok, &token, data, b"png bytes", &bad).await;
    fakes::assert_download_is_final(&tiktok, &format!("{CONV}|mgone|v0gone")).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_crash_before_the_200_is_redelivered_and_answered_once() {
    let fake = FakeTikTok::start(TOKEN, BUSINESS).await;
    let body = bytes(&hooks::text(BUSINESS, CONV, USER, "mcrash", "ping"));
    let signature = [("TikTok-Signature", hooks::sign(SECRET, &body))];
    let provider = || TikTokProvider::new(config(&fake)).expect("provider");
    let channel = (provider, TikTokProvider::webhook_routes);
    fakes::crash_before_the_signed_200(channel, "/tiktok", &body, &signature).await;
    assert_eq!(fake.delivered_to(CONV), ["pong: ping"]);
}

#[test]
fn config_names_the_variable() {
    const ENV: &[(&str, &str)] = &[
        ("TIKTOK_ACCESS_TOKEN", TOKEN),
        ("TIKTOK_BUSINESS_ID", BUSINESS),
        ("TIKTOK_APP_SECRET", SECRET),
    ];
    let ok = TikTokConfig::from_lookup(fakes::env(ENV)).expect("config");
    assert!(!format!("{ok:?}").contains(TOKEN) && !format!("{ok:?}").contains(SECRET));
    assert_eq!(
        TikTokConfig::from_lookup(fakes::env(&ENV[..2])).expect_err("secret"),
        TikTokConfigError::MissingEnv("TIKTOK_APP_SECRET")
    );
    assert!(matches!(
        TikTokConfig::from_lookup(fakes::env_with(
            ENV,
            "TIKTOK_SIGNATURE_TOLERANCE_SECS",
            "soon"
        )),
        Err(TikTokConfigError::Invalid {
            setting: "TIKTOK_SIGNATURE_TOLERANCE_SECS",
            ..
        })
    ));
}
