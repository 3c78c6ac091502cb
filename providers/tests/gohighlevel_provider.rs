//! The GoHighLevel provider against the fake HighLevel API: signatures (a forged or missing
//! one refused, the legacy RSA key taken when configured), the echoes of the bot's own sends
//! and other locations' messages not delivered, a request not accepted answered 429 (the only
//! status HighLevel redelivers on), every content kind sent, error classes (5xx and 429
//! retried by the outbox, a refused token final and named), media refs round-tripping and
//! restricted to HighLevel's hosts, and duplicates and a crash before the 200 answered once.

use crate::fakes;
use crate::fakes::Refusals;
use crate::fakes::contents;

use crate::fakes::gohighlevel::{FakeGhl, Keys, hooks};
use botmesh::message::{ChatId, MediaKind, MediaRef, Outgoing};
use botmesh::provider::{ErrorClass, Provider, ProviderError};
use botmesh_providers::gohighlevel::{
    GoHighLevelConfig, GoHighLevelConfigError, GoHighLevelProvider,
};
use botmesh_providers::http::GuardedClient;
use serde_json::{Value, json};

const TOKEN: &str = "pit-0000-test-token";
const LOCATION: &str = "l1C08ntBrFjLS0elLIYU";
const CONTACT: &str = "cI08i1Bls3iTB9bKgFJh";
const CHAT: &str = "SMS:cI08i1Bls3iTB9bKgFJh";

fn config(fake: &FakeGhl, keys: &Keys) -> GoHighLevelConfig {
    GoHighLevelConfig::new(TOKEN, LOCATION, &keys.ed25519_pem())
        .and_then(|c| c.api_base(&fake.base_url()))
        .expect("config")
        .clients(
            GuardedClient::allowing_localhost().expect("client"),
            std::time::Duration::from_secs(10),
        )
}

/// Keys, the fake and a provider on them.
async fn started() -> (Keys, FakeGhl, GoHighLevelProvider) {
    let keys = Keys::new();
    let fake = FakeGhl::start(TOKEN).await;
    let provider = GoHighLevelProvider::new(config(&fake, &keys)).expect("provider");
    (keys, fake, provider)
}

/// POSTs `body` to `url` with the given signature headers; the status.
async fn post(url: &str, headers: &[(&'static str, String)], body: &[u8]) -> u16 {
    fakes::post_signed(url, headers.to_vec(), body).await
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("json")
}

#[tokio::test]
async fn forged_or_missing_signatures_are_refused_and_echoes_not_delivered() {
    let (keys, fake, ghl) = started().await;
    let (rec, server, local) = fakes::started(&ghl, ghl.webhook_routes()).await;
    let url = format!("{local}/gohighlevel");
    let hi = bytes(&hooks::inbound(LOCATION, "SMS", CONTACT, "m1", "hi"));
    let forger = Keys::new();
    let mut tampered = hi.clone();
    tampered.extend_from_slice(b" ");
    let refused = [
        (vec![], hi.clone(), 401),
        (vec![("X-GHL-Signature", forger.sign(&hi))], hi.clone(), 403),
        (vec![("X-GHL-Signature", keys.sign(&hi))], tampered, 403),
        (
            vec![("X-GHL-Signature", "bm90IGEgc2ln".to_owned())],
            hi.clone(),
            403,
        ),
        // The legacy header is not read without the legacy key.
        (
            vec![("X-WH-Signature", keys.sign_rsa(&hi))],
            hi.clone(),
            401,
        ),
    ];
    for (headers, body, status) in refused {
        assert_eq!(post(&url, &headers, &body).await, status, "{headers:?}");
    }
    assert!(rec.events().is_empty());
    let not_ours = [
        hooks::outbound(LOCATION, CONTACT, "m0", "pong: hi"),
        hooks::inbound("another-location", "SMS", CONTACT, "m9", "hi"),
        hooks::inbound(LOCATION, "Call", CONTACT, "m8", ""),
    ];
    for body in not_ours {
        let body = bytes(&body);
        let sig = vec![("X-GHL-Signature", keys.sign(&body))];
        assert_eq!(post(&url, &sig, &body).await, 200);
    }
    assert_eq!(
        post(&url, &[("X-GHL-Signature", keys.sign(&hi))], &hi).await,
        200
    );
    let events = rec.wait_for(1).await;
    assert_eq!(
        fakes::gateway::summary(&events),
        [format!("text hi {CHAT}")]
    );
    server.shutdown().await;

    // With the legacy RSA key configured, `X-WH-Signature` is checked with it.
    let legacy = config(&fake, &keys)
        .legacy_key(&keys.rsa_pem())
        .expect("an RSA key");
    let ghl = GoHighLevelProvider::new(legacy).expect("provider");
    let (rec, server, local) = fakes::started(&ghl, ghl.webhook_routes()).await;
    let url = format!("{local}/gohighlevel");
    let bad = vec![("X-WH-Signature", forger.sign_rsa(&hi))];
    assert_eq!(post(&url, &bad, &hi).await, 403);
    let good = vec![("X-WH-Signature", keys.sign_rsa(&hi))];
    assert_eq!(post(&url, &good, &hi).await, 200);
    assert_eq!(rec.wait_for(1).await.len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn a_request_not_accepted_is_answered_429_for_highlevel_to_redeliver() {
    let (keys, _, ghl) = started().await;
    let (server, local) = fakes::mount(ghl.webhook_routes()).await;
    let hi = bytes(&hooks::inbound(LOCATION, "SMS", CONTACT, "m1", "hi"));
    let sig = vec![("X-GHL-Signature", keys.sign(&hi))];
    assert_eq!(post(&format!("{local}/gohighlevel"), &sig, &hi).await, 429);
    server.shutdown().await;
}

#[tokio::test]
async fn sends_every_content_kind_on_the_chats_channel() {
    let (_, fake, ghl) = started().await;
    let chat = ChatId::from("WhatsApp:c2");
    let reply = contents::reply("plain", "m7");
    assert_eq!(
        fakes::sent_id(&ghl, "WhatsApp:c2", &reply).await,
        "msg00000001"
    );
    let kinds = [
        Outgoing::buttons("Pick one", [("a", "Apples"), ("b", "Pears")]),
        fakes::menu_list(),
        contents::media(
            MediaKind::Image,
            contents::url("https://example.com/a.jpg"),
            Some("a photo"),
            None,
        ),
        contents::location(1.5, 2.5, Some("Shop")),
        contents::contact("Ana", "+15550001"),
    ];
    for outgoing in &kinds {
        ghl.send(&chat, outgoing).await.expect("sent");
    }
    let sent = fake.sent();
    assert_eq!(
        sent[0],
        json!({"type": "WhatsApp", "contactId": "c2", "message": "plain", "replyMessageId": "m7"})
    );
    assert_eq!(sent[3]["attachments"], json!(["https://example.com/a.jpg"]));
    assert_eq!(
        fake.delivered_to("WhatsApp:c2"),
        [
            "plain",
            "Pick one\n\n1. Apples\n2. Pears",
            "Menu\n\n1. Row 1",
            "a photo",
            "Shop\nhttps://maps.google.com/?q=1.5,2.5",
            "Ana: +15550001"
        ]
    );
    for (chat, outgoing) in [
        ("SMS:c2", contents::reaction("m1", "👍")),
        ("c2", Outgoing::from("no channel")),
        ("Fax:c2", Outgoing::from("no such channel")),
    ] {
        let e = ghl
            .send(&ChatId::from(chat), &outgoing)
            .await
            .expect_err("refused");
        assert!(
            matches!(e, ProviderError::UnsupportedContent { .. }),
            "{e:?}"
        );
    }
}

#[tokio::test]
async fn maps_highlevel_errors_onto_classes() {
    let (keys, fake, ghl) = started().await;
    let fail = |(status, message, retry_after)| fake.fail_next(status, message, retry_after);
    let cases: Refusals<'_, (u16, &str, Option<u64>), 4> = [
        ((429, "Too many requests", Some(4)), &fakes::rate_limited(4)),
        ((502, "Bad Gateway", None), &fakes::retryable),
        (
            (422, "contactId should not be empty", None),
            &fakes::class_is(ErrorClass::Final),
        ),
        (
            (403, "The token is not authorized for this scope.", None),
            &|e| matches!(e, ProviderError::Api { code: Some(c), retryable: false, .. } if c == "forbidden"),
        ),
    ];
    fakes::assert_refusals(&ghl, CHAT, fail, &cases).await;
    fakes::assert_dropped_is_ambiguous(&ghl, CHAT, || fake.drop_next()).await;
    let wrong = GoHighLevelConfig::new("expired", LOCATION, &keys.ed25519_pem())
        .and_then(|c| c.api_base(&fake.base_url()))
        .expect("config");
    let e = fakes::refused_send(GoHighLevelProvider::new(wrong), CHAT).await;
    assert!(
        matches!(&e, ProviderError::Api { status: Some(401), code: Some(c), retryable: false, .. } if c == "unauthorized")
            && e.to_string().contains("access token was refused")
            && !e.to_string().contains("expired\""),
        "{e}"
    );
}

#[tokio::test]
async fn the_outbox_retries_5xx_and_429_and_a_duplicate_is_answered_once() {
    let (keys, fake, ghl) = started().await;
    fake.fail_next(503, "Service Unavailable", None);
    fake.fail_next(429, "Too many requests", Some(0));
    let ping = bytes(&hooks::inbound(LOCATION, "SMS", CONTACT, "mping", "ping"));
    let sig = vec![("X-GHL-Signature", keys.sign(&ping))];
    let signed = async |local: &str| post(&format!("{local}/gohighlevel"), &sig, &ping).await;
    fakes::retried_and_answered_once_by(ghl, signed, || fake.delivered_to(CHAT)).await;
    assert_eq!(fake.sent().len(), 3, "two failures, then the send");
    fake.check();
}

#[tokio::test]
async fn media_refs_round_trip_and_stay_on_highlevels_hosts() {
    let (keys, fake, ghl) = started().await;
    let url = fake.add_media("photo.jpg", b"jpeg bytes");
    let (rec, server, local) = fakes::started(&ghl, ghl.webhook_routes()).await;
    let mut body = hooks::inbound(LOCATION, "SMS", CONTACT, "mimg", "look");
    body["attachments"] = json!([url]);
    let body = bytes(&body);
    let sig = vec![("X-GHL-Signature", keys.sign(&body))];
    assert_eq!(
        post(&format!("{local}/gohighlevel"), &sig, &body).await,
        200
    );
    let events = rec.wait_for(1).await;
    assert_eq!(
        fakes::gateway::summary(&events),
        [format!("media Image {url} Some(\"look\")")]
    );
    let bad = [
        json!({"url": "http://storage.googleapis.com/a.png"}),
        json!({"url": "https://storage.googleapis.com.attacker.example/a.png"}),
    ];
    fakes::assert_media_round_trip(&ghl, &url, json!({ "url": url }), b"jpeg bytes", &bad).await;
    let storage = "https://storage.googleapis.com/msgsndr/loc/media/a.png";
    assert!(
        ghl.serialize_media_ref(&MediaRef {
            provider: "gohighlevel".into(),
            token: storage.into(),
        })
        .is_some()
    );
    let elsewhere = MediaRef {
        provider: "gohighlevel".into(),
        token: "https://attacker.example/a.png".into(),
    };
    assert!(ghl.serialize_media_ref(&elsewhere).is_none());
    fakes::assert_download_is_final(&ghl, &elsewhere.token).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_crash_before_the_200_is_redelivered_and_answered_once() {
    let keys = Keys::new();
    let fake = FakeGhl::start(TOKEN).await;
    let body = bytes(&hooks::inbound(LOCATION, "SMS", CONTACT, "mcrash", "ping"));
    let signature = [("X-GHL-Signature", keys.sign(&body))];
    let provider = || GoHighLevelProvider::new(config(&fake, &keys)).expect("provider");
    let channel = (provider, GoHighLevelProvider::webhook_routes);
    fakes::crash_before_the_signed_200(channel, "/gohighlevel", &body, &signature).await;
    assert_eq!(fake.delivered_to(CHAT), ["pong: ping"]);
}

#[test]
fn config_names_the_variable() {
    let keys = Keys::new();
    let pem = keys.ed25519_pem().replace('\n', "\\n");
    let env = |pairs: Vec<(&'static str, String)>| {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    };
    let base = vec![
        ("GHL_ACCESS_TOKEN", TOKEN.to_owned()),
        ("GHL_LOCATION_ID", LOCATION.to_owned()),
        ("GHL_WEBHOOK_PUBLIC_KEY", pem),
    ];
    let ok = GoHighLevelConfig::from_lookup(env(base.clone())).expect("config");
    assert!(!format!("{ok:?}").contains(TOKEN));
    assert_eq!(
        GoHighLevelConfig::from_lookup(env(base[..2].to_vec())).expect_err("key"),
        GoHighLevelConfigError::MissingEnv("GHL_WEBHOOK_PUBLIC_KEY")
    );
    let mut bad = base.clone();
    bad[2].1 = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----".into();
    assert!(matches!(
        GoHighLevelConfig::from_lookup(env(bad)),
        Err(GoHighLevelConfigError::Invalid {
            setting: "GHL_WEBHOOK_PUBLIC_KEY",
            ..
        })
    ));
    let mut bad = base;
    bad.push(("GHL_API_BASE", "ftp://x".into()));
    assert!(matches!(
        GoHighLevelConfig::from_lookup(env(bad)),
        Err(GoHighLevelConfigError::Invalid {
            setting: "GHL_API_BASE",
            ..
        })
    ));
}
