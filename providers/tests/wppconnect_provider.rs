//! The WPPConnect provider against the fake WPPConnect Server: the webhook secret and the
//! session refused when wrong, message kinds, the bot's own messages and history not
//! answered, acks, every content kind sent, edits, error classes (5xx, 429 and a
//! disconnected session retried by the outbox, final errors dead-lettered), media refs
//! round-tripping through the server's media route, and duplicates and a crash before the
//! 200 answered once.

use crate::fakes;
use crate::fakes::Refusals;

use crate::fakes::contents;
use crate::fakes::wppconnect::{FakeWppConnect, hooks};
use crate::gateway_suite::{self as suite, GatewayCase};
use botmesh::message::{ChatId, MediaKind, Outgoing, OutgoingContent};
use botmesh::provider::{Provider, ProviderError};
use botmesh_providers::wppconnect::{
    WppConnect, WppConnectConfig, WppConnectConfigError, WppConnectProvider,
};
use serde_json::{Value, json};

const TOKEN: &str = "$2b$10$fakebcrypttokenvalue";
const SESSION: &str = "s1";
const SECRET: &str = "wpp-webhook-secret-0123";
const USER: &str = "5521999999999@c.us";
const PHONE: &str = "5521999999999";

/// The WPPConnect channel's case of the gateway suite.
struct Case;

impl GatewayCase for Case {
    type Api = WppConnect;
    type State = fakes::wppconnect::S;
    const ROUTE: &'static str = "/wppconnect";
    const SECRET: &'static str = SECRET;
    const ANSWERED: &'static str = PHONE;

    async fn fake() -> FakeWppConnect {
        FakeWppConnect::start(TOKEN, SESSION).await
    }

    fn provider(fake: &FakeWppConnect) -> WppConnectProvider {
        let config = WppConnectConfig::new(&fake.base_url(), SESSION, TOKEN, SECRET);
        WppConnectProvider::new(config.expect("config")).expect("provider")
    }

    fn text(id: &str, text: &str) -> Value {
        hooks::text_from(SESSION, USER, id, text)
    }

    fn fail_next(fake: &FakeWppConnect, status: u16, retry_after: Option<u64>) {
        let body = match status {
            429 => json!({"message": "Too many requests"}),
            _ => json!({"status": "error", "message": "Error on send message"}),
        };
        fake.fail_next(status, body, retry_after);
    }
}

/// The fake and a provider on it.
async fn started() -> (FakeWppConnect, WppConnectProvider) {
    suite::started::<Case>().await
}

#[tokio::test]
async fn the_secret_and_the_session_are_checked() {
    let refused = [
        (hooks::text_from("s2", USER, "3EB0A1B2C3D4E5F7", "hi"), 403),
        (json!({"session": SESSION}), 400),
    ];
    let (_, server, _) = suite::assert_guarded::<Case>(&refused).await;
    server.shutdown().await;
}

#[tokio::test]
async fn reads_messages_and_acks_and_skips_own_sends_and_history() {
    let (_, wpp) = started().await;
    let (rec, server, local) = fakes::started(&wpp, wpp.webhook_routes()).await;
    let url = format!("{local}/wppconnect/{SECRET}");
    let bodies = [
        hooks::text_from(SESSION, USER, "3EB0TXT1", "hello"),
        hooks::message(
            SESSION,
            USER,
            "3EB0IMG1",
            "image",
            json!({"body": "/9j/4AAQSkZJRgABAQ", "caption": "look", "mimetype": "image/jpeg"}),
        ),
        hooks::message(
            SESSION,
            USER,
            "3EB0LST1",
            "list_response",
            json!({"body": "Tea", "listResponse": {"singleSelectReply": {"selectedRowId": "tea"}}}),
        ),
        hooks::message(
            SESSION,
            USER,
            "3EB0LOC1",
            "location",
            json!({"lat": -22.9, "lng": "-43.2", "loc": "Rio"}),
        ),
        hooks::message(
            SESSION,
            USER,
            "3EB0OLD1",
            "chat",
            json!({"body": "old", "t": 1_718_000_000}),
        ),
        hooks::message(
            SESSION,
            USER,
            "3EB0OWN1",
            "chat",
            json!({"body": "ours", "fromMe": true}),
        ),
        json!({"event": "unreadmessages", "session": SESSION, "data": []}),
        json!({"event": "onack", "session": SESSION, "ack": 3, "id": {"fromMe": true, "remote": USER, "id": "3EB0SENT", "_serialized": format!("true_{USER}_3EB0SENT")}}),
    ];
    fakes::gateway::post_all_accepted(&url, &bodies).await;
    let events = rec.wait_for(5).await;
    assert_eq!(
        fakes::gateway::summary(&events),
        [
            format!("text hello {USER}"),
            format!("media Image false_{USER}_3EB0IMG1 Some(\"look\")"),
            "press tea Some(\"Tea\")".to_owned(),
            "location -22.9 -43.2 Some(\"Rio\")".to_owned(),
            format!("status read true_{USER}_3EB0SENT"),
        ]
    );
    assert!(
        !format!("{events:?}").contains("/9j/4AAQ"),
        "the embedded base64 is not kept"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn sends_every_content_kind_and_edits() {
    let (fake, wpp) = started().await;
    let c = ChatId::from(USER);
    let quoted = contents::reply("a reply", &format!("false_{USER}_3EB0TXT1"));
    let bytes = contents::media(
        MediaKind::Image,
        contents::bytes(b"\x89PNG".to_vec(), Some("a.png")),
        Some("an image"),
        Some("image/png"),
    );
    let doc = contents::media(
        MediaKind::Document,
        contents::url("https://example.com/a.pdf"),
        None,
        None,
    );
    let sends = [
        Outgoing::from("hello"),
        Outgoing::buttons("Pick", [("yes", "Yes"), ("no", "No")]),
        fakes::menu_list(),
        bytes,
        doc,
        contents::location(-22.9, -43.2, Some("Rio")),
        contents::contact("Ana", "+55 21 99999"),
        quoted,
    ];
    let mut ids = Vec::new();
    for o in &sends {
        ids.push(wpp.send(&c, o).await.expect("sent").message_id.expect("id"));
    }
    assert!(ids[0].as_str().starts_with(&format!("true_{USER}_")));
    let sent = fake.sent();
    let routes: Vec<&str> = sent.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        routes,
        [
            "send-message",
            "send-list-message",
            "send-list-message",
            "send-image",
            "send-file",
            "send-location",
            "send-message",
            "send-message"
        ]
    );
    let body = |n: usize| sent[n].1.clone();
    assert_eq!(
        body(0),
        json!({"phone": PHONE, "isGroup": false, "isLid": false, "message": "hello"})
    );
    assert_eq!(body(1)["sections"][0]["rows"][1]["rowId"], "no");
    assert_eq!(body(2)["buttonText"], "Options");
    assert_eq!(body(3)["base64"], "data:image/png;base64,iVBORw==");
    assert_eq!(body(4)["path"], "https://example.com/a.pdf");
    assert_eq!(body(5)["lat"], "-22.9");
    assert_eq!(body(6)["message"], "Ana: +55 21 99999");
    assert_eq!(
        body(7)["options"]["quotedMsg"],
        format!("false_{USER}_3EB0TXT1")
    );
    let group = wpp
        .send(
            &ChatId::from("120363012345@g.us"),
            &Outgoing::from("hi all"),
        )
        .await
        .expect("sent");
    assert!(group.message_id.is_some());
    assert_eq!(fake.sent()[8].1["isGroup"], true);

    wpp.edit(&c, &ids[0], &OutgoingContent::from("hello again"))
        .await
        .expect("edited");
    assert_eq!(
        fake.sent()[9],
        (
            "edit-message".to_owned(),
            json!({"id": ids[0].as_str(), "newText": "hello again"})
        )
    );
    wpp.send(&c, &contents::reaction("false_x_3EB0", "👍"))
        .await
        .expect("reacted");
    assert_eq!(fake.sent()[10].0, "react-message");
    fakes::assert_unsupported(&wpp, &c, &[contents::template("t", "en", &[])]).await;
}

#[tokio::test]
async fn maps_wppconnect_errors_onto_classes() {
    let (fake, wpp) = started().await;
    let final_ = fakes::final_hiding(TOKEN);
    let error = |message: &str| json!({"status": "error", "message": message});
    let disconnected = json!({"response": null, "status": "Disconnected", "message": "A sessão do WhatsApp não está ativa."});
    let fail = |(status, body, retry_after)| fake.fail_next(status, body, retry_after);
    let cases: Refusals<'_, (u16, Value, Option<u64>), 5> = [
        (
            (429, json!({"message": "Too many requests"}), Some(1)),
            &fakes::rate_limited(1),
        ),
        (
            (500, error("Error on send message"), None),
            &fakes::retryable,
        ),
        ((404, disconnected, None), &|e| {
            matches!(e, ProviderError::NotConnected { .. })
        }),
        ((401, json!({"message": "Unauthorized"}), None), &final_),
        ((400, error("Invalid phone"), None), &final_),
    ];
    fakes::assert_refusals(&wpp, USER, fail, &cases).await;
    fakes::assert_dropped_is_ambiguous(&wpp, USER, || fake.drop_next()).await;
}

#[tokio::test]
async fn the_outbox_retries_5xx_and_429_and_answers_once() {
    suite::assert_retried_and_answered_once::<Case>(500).await;
}

#[tokio::test]
async fn media_refs_round_trip_through_the_servers_media_route() {
    let (fake, wpp) = started().await;
    let id = format!("false_{USER}_3EB0IMG1");
    fake.add_media(&id, b"jpeg bytes");
    let data = json!({"message_id": id});
    let bad = [json!({"message_id": "../../etc"}), json!({"id": "x"})];
    fakes::assert_media_round_trip(&wpp, &id, data, b"jpeg bytes", &bad).await;
}

#[tokio::test]
async fn a_crash_before_the_200_is_redelivered_and_answered_once() {
    suite::assert_crash_before_the_200_answered_once::<Case>().await;
}

#[test]
fn config_names_the_variable() {
    assert_eq!(
        WppConnectConfig::from_lookup(fakes::env(&[("WPPCONNECT_API_URL", "http://wpp:21465")]))
            .expect_err("session"),
        WppConnectConfigError::MissingEnv("WPPCONNECT_SESSION")
    );
    let ok = WppConnectConfig::from_lookup(fakes::env(&[
        ("WPPCONNECT_API_URL", "http://wpp:21465"),
        ("WPPCONNECT_SESSION", "s1"),
        ("WPPCONNECT_TOKEN", TOKEN),
        ("WPPCONNECT_WEBHOOK_SECRET", SECRET),
    ]))
    .expect("config");
    assert!(!format!("{ok:?}").contains(SECRET) && !format!("{ok:?}").contains(TOKEN));
    assert!(WppConnectConfig::new("http://wpp", "s1", TOKEN, "short").is_err());
}
