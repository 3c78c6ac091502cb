//! The Gupshup provider against the fake Gupshup API: the callback secret (path or header)
//! and app refused when wrong, both callback formats, `message-event` statuses under the
//! Gupshup id a send returned (`gsId`), every content kind sent, error classes (5xx and 429
//! retried by the outbox, final errors dead-lettered), media refs round-tripping, and
//! duplicates and a crash before the 200 answered once.

use crate::fakes;
use crate::fakes::Refusals;

use crate::fakes::contents;
use crate::fakes::gupshup::{FakeGupshup, hooks};
use crate::gateway_suite::{self as suite, GatewayCase};
use botmesh::message::{Button, ChatId, MediaKind, MediaRef, Outgoing};
use botmesh::provider::{Provider, ProviderError};
use botmesh_providers::gupshup::{Gupshup, GupshupConfig, GupshupConfigError, GupshupProvider};
use botmesh_providers::http::GuardedClient;
use serde_json::{Value, json};

const KEY: &str = "gupshup-api-key";
const APP: &str = "DemoApp";
const SECRET: &str = "gs-callback-secret-0123";
const USER: &str = "918x98xx21x4";

fn config(fake: &FakeGupshup) -> GupshupConfig {
    GupshupConfig::new(KEY, APP, "917834811114", SECRET)
        .expect("config")
        .api_base(&fake.base_url())
        .expect("base")
        .media_client(GuardedClient::allowing_localhost().expect("client"))
}

/// The Gupshup channel's case of the gateway suite.
struct Case;

impl GatewayCase for Case {
    type Api = Gupshup;
    type State = fakes::gupshup::S;
    const ROUTE: &'static str = "/gupshup";
    const SECRET: &'static str = SECRET;
    const ANSWERED: &'static str = USER;

    async fn fake() -> FakeGupshup {
        FakeGupshup::start(KEY).await
    }

    fn provider(fake: &FakeGupshup) -> GupshupProvider {
        GupshupProvider::new(config(fake)).expect("provider")
    }

    fn text(id: &str, text: &str) -> Value {
        hooks::text_from(APP, USER, id, text)
    }

    fn fail_next(fake: &FakeGupshup, status: u16, retry_after: Option<u64>) {
        let message = match status {
            429 => "Too Many Requests",
            _ => "Service Unavailable",
        };
        fake.fail_next(status, message, retry_after);
    }
}

/// The fake and a provider on it.
async fn started() -> (FakeGupshup, GupshupProvider) {
    suite::started::<Case>().await
}

#[tokio::test]
async fn the_callback_secret_and_the_app_are_checked() {
    let refused = [
        (hooks::text_from("OtherApp", USER, "ABEG2", "Hi"), 403),
        (json!({"app": APP}), 400),
    ];
    let (rec, server, route) = suite::assert_guarded::<Case>(&refused).await;
    rec.set_mode(fakes::Mode::Reject);
    let hi = Case::text("ABEG1", "Hi");
    assert_eq!(
        fakes::post_json(&format!("{route}/{SECRET}"), None, &hi)
            .await
            .0,
        503
    );
    server.shutdown().await;
}

#[tokio::test]
async fn reads_both_formats_and_keys_statuses_by_the_gupshup_id() {
    let fake = FakeGupshup::start(KEY).await;
    let gs = GupshupProvider::new(config(&fake).app_id("app-1")).expect("provider");
    let (rec, server, local) = fakes::started(&gs, gs.webhook_routes()).await;
    let url = format!("{local}/gupshup/{SECRET}");
    let sent = gs
        .send(&ChatId::from(USER), &Outgoing::from("hi"))
        .await
        .expect("send");
    let gs_id = sent.message_id.expect("the Gupshup id").to_string();
    let bodies = [
        hooks::text_from(APP, USER, "ABEG1", "Hi"),
        hooks::inbound(
            APP,
            USER,
            "ABEG2",
            "image",
            json!({"url": "https://filemanager.gupshup.io/fm/wamedia/a.jpg", "caption": "look", "contentType": "image/jpeg"}),
        ),
        hooks::inbound(
            APP,
            USER,
            "ABEG3",
            "location",
            json!({"latitude": "28.6", "longitude": 77.2}),
        ),
        hooks::inbound(
            APP,
            USER,
            "ABEG4",
            "button_reply",
            json!({"title": "Yes", "id": "1", "reply": "Yes 1", "postbackText": "yes"}),
        ),
        hooks::v2(
            APP,
            "message-event",
            json!({"id": "gBEGkYaY", "gsId": gs_id, "type": "delivered", "destination": USER, "payload": {"ts": 1}}),
        ),
        hooks::v2(
            APP,
            "user-event",
            json!({"phone": USER, "type": "opted-in"}),
        ),
        json!({"object": "whatsapp_business_account", "gs_app_id": "app-1", "entry": [{"id": "1", "changes": [{"field": "messages", "value": {
            "messaging_product": "whatsapp", "metadata": {"display_phone_number": "917834811114", "phone_number_id": "1"},
            "contacts": [{"profile": {"name": "Andy"}, "wa_id": USER}],
            "messages": [{"from": USER, "id": "wamid.M1", "timestamp": "1718000000", "type": "image",
                "image": {"id": "1234", "mime_type": "image/jpeg", "url": "https://filemanager.gupshup.io/fm/wamedia/b.jpg"}}],
            "statuses": [{"id": "wamid.S1", "gs_id": gs_id, "status": "read", "timestamp": "1718000001", "recipient_id": USER}]}}]}]}),
    ];
    fakes::gateway::post_all_accepted(&url, &bodies).await;
    let events = rec.wait_for(7).await;
    assert_eq!(
        fakes::gateway::summary(&events),
        [
            format!("text Hi {USER}"),
            "media Image https://filemanager.gupshup.io/fm/wamedia/a.jpg Some(\"look\")".to_owned(),
            "location 28.6 77.2 None".to_owned(),
            "press yes Some(\"Yes\")".to_owned(),
            format!("status delivered {gs_id}"),
            "media Image https://filemanager.gupshup.io/fm/wamedia/b.jpg None".to_owned(),
            format!("status read {gs_id}"),
        ]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn sends_every_content_kind() {
    let (fake, gs) = started().await;
    let c = ChatId::from(USER);
    let three = Outgoing::buttons("Pick", [("yes", "Yes"), ("no", "No"), ("later", "Later")]);
    let four = Outgoing::buttons("Pick", [("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")]);
    let image = contents::media(
        MediaKind::Image,
        contents::url("https://example.com/a.png"),
        Some("an image"),
        None,
    );
    let sends = [
        Outgoing::from("hello"),
        three,
        four,
        fakes::menu_list(),
        image,
        contents::location(28.6, 77.2, Some("Office")),
        contents::contact("Ana", "+5511999"),
        contents::reaction("gBEG1", "👍"),
        contents::template("tpl-1", "en", &["Ana"]),
    ];
    for o in &sends {
        assert!(gs.send(&c, o).await.expect("sent").message_id.is_some());
    }
    let m = |n| fake.message(n);
    assert_eq!(m(0), json!({"type": "text", "text": "hello"}));
    assert_eq!(m(1)["type"], "quick_reply");
    assert_eq!(
        m(1)["options"][2],
        json!({"type": "text", "title": "Later", "postbackText": "later"})
    );
    assert_eq!(m(2)["type"], "list");
    assert_eq!(
        m(2)["items"][0]["options"].as_array().map(Vec::len),
        Some(4)
    );
    assert_eq!(m(3)["globalButtons"][0]["title"], "Options");
    assert_eq!(m(3)["items"][0]["options"][0]["postbackText"], "row1");
    assert_eq!(
        (m(4)["type"].as_str(), m(4)["originalUrl"].as_str()),
        (Some("image"), Some("https://example.com/a.png"))
    );
    assert_eq!(
        (m(5)["type"].as_str(), m(5)["name"].as_str()),
        (Some("location"), Some("Office"))
    );
    assert_eq!(m(6)["text"], "Ana: +5511999");
    assert_eq!(
        m(7),
        json!({"type": "reaction", "msgId": "gBEG1", "emoji": "👍"})
    );
    assert_eq!(m(8), json!({"id": "tpl-1", "params": ["Ana"]}));
    assert_eq!(fake.sent()[8].0, "/wa/api/v1/template/msg");

    let bytes = contents::media(MediaKind::Image, contents::bytes(vec![1], None), None, None);
    let eleven: Vec<Button> = (0..11)
        .map(|i| Button::with_id(format!("b{i}"), format!("B{i}")))
        .collect();
    for refused in [
        bytes,
        Outgoing::buttons("Pick", eleven),
        Outgoing::from(" "),
    ] {
        assert!(matches!(
            gs.send(&c, &refused).await,
            Err(ProviderError::UnsupportedContent { .. })
        ));
    }
    assert_eq!(fake.sent().len(), 9, "refused before any call");
    assert_eq!(gs.capabilities().text_limit, 4096);
    assert!(!gs.capabilities().edits);
}

#[tokio::test]
async fn maps_gupshup_errors_onto_classes() {
    let (fake, gs) = started().await;
    let final_ = fakes::final_hiding(KEY);
    let fail = |(status, message, retry_after)| fake.fail_next(status, message, retry_after);
    let cases: Refusals<'_, (u16, &str, Option<u64>), 5> = [
        ((429, "Too Many Requests", Some(2)), &fakes::rate_limited(2)),
        ((503, "Service Unavailable", None), &fakes::retryable),
        ((400, "Invalid Destination", None), &fakes::unreachable),
        ((401, "Authentication Failed", None), &final_),
        ((400, "Invalid Message Type", None), &final_),
    ];
    fakes::assert_refusals(&gs, USER, fail, &cases).await;
    fakes::assert_dropped_is_ambiguous(&gs, USER, || fake.drop_next()).await;
    let gone = GupshupProvider::new(
        GupshupConfig::new(KEY, APP, "1", SECRET)
            .expect("config")
            .api_base("http://127.0.0.1:9")
            .expect("base"),
    )
    .expect("provider");
    fakes::assert_network_error(&gone, &ChatId::from(USER), KEY).await;
}

#[tokio::test]
async fn the_outbox_retries_5xx_and_429_and_answers_once() {
    suite::assert_retried_and_answered_once::<Case>(503).await;
}

#[tokio::test]
async fn media_refs_round_trip_and_download_without_credentials() {
    let (fake, gs) = started().await;
    let url = fake.add_media("a.jpg", b"jpeg bytes");
    let bad = [json!({"url": "ftp://x/y"}), json!({"href": "x"})];
    let back =
        fakes::assert_media_round_trip(&gs, &url, json!({"url": url}), b"jpeg bytes", &bad).await;
    assert!(
        gs.serialize_media_ref(&MediaRef {
            provider: "gupshup".into(),
            token: "file:///etc/passwd".into()
        })
        .is_none()
    );
    let blocked = GupshupProvider::new(
        GupshupConfig::new(KEY, APP, "1", SECRET)
            .expect("config")
            .api_base(&fake.base_url())
            .expect("base"),
    )
    .expect("provider");
    assert!(
        blocked.download_media(&back).await.is_err(),
        "the guard refuses 127.0.0.1 by default"
    );
}

#[tokio::test]
async fn a_crash_before_the_200_is_redelivered_and_answered_once() {
    suite::assert_crash_before_the_200_answered_once::<Case>().await;
}

#[test]
fn config_names_the_variable_and_refuses_weak_secrets() {
    assert_eq!(
        GupshupConfig::from_lookup(fakes::env(&[("GUPSHUP_API_KEY", "k")])).expect_err("app"),
        GupshupConfigError::MissingEnv("GUPSHUP_APP_NAME")
    );
    let weak = GupshupConfig::from_lookup(fakes::env(&[
        ("GUPSHUP_API_KEY", "k"),
        ("GUPSHUP_APP_NAME", "a"),
        ("GUPSHUP_SOURCE", "1"),
        ("GUPSHUP_WEBHOOK_SECRET", "short"),
    ]));
    assert!(matches!(
        weak,
        Err(GupshupConfigError::Invalid {
            setting: "GUPSHUP_WEBHOOK_SECRET",
            ..
        })
    ));
    assert!(GupshupConfig::new(KEY, APP, "1", "has/slash-0123456789").is_err());
    let ok = GupshupConfig::from_lookup(fakes::env(&[
        ("GUPSHUP_API_KEY", "k"),
        ("GUPSHUP_APP_NAME", "a"),
        ("GUPSHUP_SOURCE", "1"),
        ("GUPSHUP_WEBHOOK_SECRET", SECRET),
        ("GUPSHUP_WEBHOOK_PATH", "/gs"),
    ]))
    .expect("config");
    assert!(!format!("{ok:?}").contains(SECRET));
}
