//! The Evolution API provider against the fake Evolution server: the webhook secret (header,
//! path, path with the event name) and the instance refused when wrong, the apikey a webhook
//! carries never echoed, message kinds, the bot's own messages and history not answered,
//! statuses, every content kind sent, edits, error classes (5xx and 429 retried by the
//! outbox, final errors dead-lettered), media refs round-tripping through the server's media
//! route, and duplicates and a crash before the 200 answered once.

use crate::fakes;
use crate::fakes::Refusals;

use crate::fakes::contents;
use crate::fakes::evolution::{FakeEvolution, hooks};
use crate::gateway_suite::{self as suite, GatewayCase};
use botmesh::message::{ChatId, MediaKind, Outgoing, OutgoingContent};
use botmesh::provider::{ErrorClass, Provider};
use botmesh_providers::evolution::{
    Evolution, EvolutionConfig, EvolutionConfigError, EvolutionProvider,
};
use serde_json::{Value, json};

const KEY: &str = "evo-instance-key-123";
const INSTANCE: &str = "shop1";
const SECRET: &str = "evo-webhook-secret-0123";
const USER: &str = "5511999999999@s.whatsapp.net";

/// The Evolution API channel's case of the gateway suite.
struct Case;

impl GatewayCase for Case {
    type Api = Evolution;
    type State = fakes::evolution::S;
    const ROUTE: &'static str = "/evolution";
    const SECRET: &'static str = SECRET;
    const ANSWERED: &'static str = USER;

    async fn fake() -> FakeEvolution {
        FakeEvolution::start(KEY, INSTANCE).await
    }

    fn provider(fake: &FakeEvolution) -> EvolutionProvider {
        let config = EvolutionConfig::new(&fake.base_url(), KEY, INSTANCE, SECRET);
        EvolutionProvider::new(config.expect("config")).expect("provider")
    }

    fn text(id: &str, text: &str) -> Value {
        hooks::text_from(INSTANCE, KEY, USER, id, text)
    }

    fn fail_next(fake: &FakeEvolution, status: u16, retry_after: Option<u64>) {
        let message = match status {
            429 => json!("Too many requests"),
            _ => json!(["Service Unavailable"]),
        };
        fake.fail_next(status, message, retry_after);
    }
}

/// The fake and a provider on it.
async fn started() -> (FakeEvolution, EvolutionProvider) {
    suite::started::<Case>().await
}

#[tokio::test]
async fn the_secret_and_the_instance_are_checked_and_the_apikey_never_echoed() {
    let broken = json!({"event": "messages.upsert", "instance": INSTANCE, "data": {"key": {"remoteJid": USER}}, "apikey": KEY});
    let refused = [
        (
            hooks::text_from("other", KEY, USER, "3EB0C431C26A1916B5F3", "hi"),
            403,
        ),
        (broken.clone(), 400),
    ];
    let (rec, server, route) = suite::assert_guarded::<Case>(&refused).await;
    let (_, answer) = fakes::post_json(&format!("{route}/{SECRET}"), None, &broken).await;
    assert!(!answer.contains(KEY), "{answer}");
    // `byEvents`: Evolution appends the event's name to the URL.
    let by_event = format!("{route}/{SECRET}/messages-upsert");
    let hi = Case::text("3EB0C431C26A1916B5F2", "hi");
    assert_eq!(fakes::post_json(&by_event, None, &hi).await.0, 200);
    let events = rec.wait_for(3).await;
    assert!(!format!("{events:?}").contains(KEY));
    server.shutdown().await;
}

#[tokio::test]
async fn reads_messages_and_statuses_and_skips_own_sends_and_history() {
    let (_, evo) = started().await;
    let (rec, server, local) = fakes::started(&evo, evo.webhook_routes()).await;
    let url = format!("{local}/evolution/{SECRET}");
    let mut old = hooks::data(
        USER,
        "3EB0OLD000000001",
        json!({"conversation": "from last week"}),
    );
    old["messageTimestamp"] = json!(1_718_000_000);
    let mut own = hooks::data(
        USER,
        "BAE5OWN000000001",
        json!({"conversation": "our reply"}),
    );
    own["key"]["fromMe"] = json!(true);
    let mut lid = hooks::data(
        "98765@lid",
        "3EB0LID000000001",
        json!({"conversation": "via lid"}),
    );
    lid["key"]["remoteJidAlt"] = json!(USER);
    let bodies = [
        hooks::text_from(INSTANCE, KEY, USER, "3EB0TXT000000001", "hello"),
        hooks::upsert(
            INSTANCE,
            KEY,
            hooks::data(
                USER,
                "3EB0IMG000000001",
                json!({
            "imageMessage": {"mimetype": "image/jpeg", "caption": "look", "fileLength": "1234"}, "base64": "aGVsbG8="}),
            ),
        ),
        hooks::upsert(
            INSTANCE,
            KEY,
            hooks::data(
                USER,
                "3EB0BTN000000001",
                json!({
            "buttonsResponseMessage": {"selectedButtonId": "yes", "selectedDisplayText": "Yes"}}),
            ),
        ),
        hooks::upsert(
            INSTANCE,
            KEY,
            hooks::data(
                USER,
                "3EB0LST000000001",
                json!({
            "listResponseMessage": {"title": "Tea", "singleSelectReply": {"selectedRowId": "tea"}}}),
            ),
        ),
        hooks::upsert(INSTANCE, KEY, lid),
        hooks::upsert(INSTANCE, KEY, old),
        hooks::upsert(INSTANCE, KEY, own),
        json!({"event": "send.message", "instance": INSTANCE, "data": {}, "apikey": KEY}),
        json!({"event": "connection.update", "instance": INSTANCE, "data": {"state": "open"}, "apikey": KEY}),
        json!({"event": "messages.update", "instance": INSTANCE, "apikey": KEY, "data": {
            "keyId": "BAE5000000000001", "remoteJid": USER, "fromMe": true, "status": "READ"}}),
    ];
    fakes::gateway::post_all_accepted(&url, &bodies).await;
    let events = rec.wait_for(6).await;
    assert_eq!(
        fakes::gateway::summary(&events),
        [
            format!("text hello {USER}"),
            "media Image 3EB0IMG000000001 Some(\"look\")".to_owned(),
            "press yes Some(\"Yes\")".to_owned(),
            "press tea Some(\"Tea\")".to_owned(),
            format!("text via lid {USER}"),
            "status read BAE5000000000001".to_owned(),
        ]
    );
    assert!(
        !format!("{events:?}").contains("aGVsbG8="),
        "the embedded base64 is not kept"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn sends_every_content_kind_and_edits() {
    let (fake, evo) = started().await;
    let c = ChatId::from(USER);
    let quoted = contents::reply("a reply", "3EB0TXT000000001");
    let bytes = contents::media(
        MediaKind::Document,
        contents::bytes(b"%PDF".to_vec(), Some("a.pdf")),
        Some("the invoice"),
        Some("application/pdf"),
    );
    let url = contents::media(
        MediaKind::Image,
        contents::url("https://example.com/a.png"),
        None,
        None,
    );
    let sends = [
        Outgoing::from("hello"),
        Outgoing::buttons("Pick", [("yes", "Yes"), ("no", "No")]),
        Outgoing::buttons("Pick", [("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")]),
        fakes::menu_list(),
        bytes,
        url,
        contents::location(-23.5, -46.6, Some("Shop")),
        contents::contact("Ana", "+55 11 99999"),
        contents::reaction("3EB0TXT000000001", "👍"),
        quoted,
    ];
    let mut ids = Vec::new();
    for o in &sends {
        ids.push(
            evo.send(&c, o)
                .await
                .expect("sent")
                .message_id
                .expect("key.id"),
        );
    }
    let sent = fake.sent();
    let actions: Vec<&str> = sent.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        actions,
        [
            "sendText",
            "sendButtons",
            "sendList",
            "sendList",
            "sendMedia",
            "sendMedia",
            "sendLocation",
            "sendContact",
            "sendReaction",
            "sendText"
        ]
    );
    let body = |n: usize| sent[n].1.clone();
    assert_eq!(body(0), json!({"number": USER, "text": "hello"}));
    assert_eq!(
        body(1)["buttons"][1],
        json!({"type": "reply", "displayText": "No", "id": "no"})
    );
    assert_eq!(body(2)["sections"][0]["rows"][3]["rowId"], "d");
    assert_eq!(body(3)["buttonText"], "Options");
    assert_eq!(
        (body(4)["media"].as_str(), body(4)["mediatype"].as_str()),
        (Some("JVBERg=="), Some("document"))
    );
    assert_eq!(body(5)["media"], "https://example.com/a.png");
    assert_eq!(body(7)["contact"][0]["wuid"], "551199999");
    assert_eq!(body(8)["key"]["id"], "3EB0TXT000000001");
    assert_eq!(body(9)["quoted"]["key"]["id"], "3EB0TXT000000001");

    evo.edit(&c, &ids[0], &OutgoingContent::from("hello again"))
        .await
        .expect("edited");
    assert_eq!(fake.sent()[10].0, "updateMessage");
    assert_eq!(fake.sent()[10].1["key"]["id"], ids[0].as_str());
    fakes::assert_unsupported(&evo, &c, &[contents::template("t", "en", &[])]).await;
    assert!(evo.capabilities().edits);
}

#[tokio::test]
async fn maps_evolution_errors_onto_classes() {
    let (fake, evo) = started().await;
    let final_ = fakes::final_hiding(KEY);
    let unknown = json!([{"jid": USER, "exists": false, "number": "5511999999999"}]);
    let no_instance = json!(["The \"shop1\" instance does not exist"]);
    let fail = |(status, message, retry_after)| fake.fail_next(status, message, retry_after);
    let cases: Refusals<'_, (u16, Value, Option<u64>), 5> = [
        (
            (429, json!("Too many requests"), Some(4)),
            &fakes::rate_limited(4),
        ),
        ((500, json!(["Connection Closed"]), None), &fakes::retryable),
        ((400, unknown, None), &fakes::unreachable),
        ((401, json!("Unauthorized"), None), &final_),
        ((404, no_instance, None), &final_),
    ];
    fakes::assert_refusals(&evo, USER, fail, &cases).await;
    fakes::assert_dropped_is_ambiguous(&evo, USER, || fake.drop_next()).await;
    let wrong_key = EvolutionConfig::new(&fake.base_url(), "wrong", INSTANCE, SECRET);
    let e = fakes::refused_send(EvolutionProvider::new(wrong_key.expect("config")), USER).await;
    assert_eq!(
        (e.class(), e.to_string().contains("Unauthorized")),
        (ErrorClass::Final, true),
        "{e}"
    );
}

#[tokio::test]
async fn the_outbox_retries_5xx_and_429_and_answers_once() {
    suite::assert_retried_and_answered_once::<Case>(503).await;
}

#[tokio::test]
async fn media_refs_round_trip_through_the_servers_media_route() {
    let (fake, evo) = started().await;
    fake.add_media("3EB0IMG000000001", b"jpeg bytes");
    let data = json!({"key_id": "3EB0IMG000000001"});
    let bad = [json!({"key_id": "../x"}), json!({"id": "3EB0IMG000000001"})];
    fakes::assert_media_round_trip(&evo, "3EB0IMG000000001", data, b"jpeg bytes", &bad).await;
    fakes::assert_download_is_final(&evo, "3EB0GONE00000001").await;
}

#[tokio::test]
async fn a_crash_before_the_200_is_redelivered_and_answered_once() {
    suite::assert_crash_before_the_200_answered_once::<Case>().await;
}

const ENV: &[(&str, &str)] = &[
    ("EVOLUTION_API_URL", "http://evo:8080"),
    ("EVOLUTION_API_KEY", "k"),
    ("EVOLUTION_INSTANCE", "shop1"),
    ("EVOLUTION_WEBHOOK_SECRET", SECRET),
];

#[test]
fn config_names_the_variable() {
    assert_eq!(
        EvolutionConfig::from_lookup(fakes::env(&[("EVOLUTION_API_KEY", "k")])).expect_err("url"),
        EvolutionConfigError::MissingEnv("EVOLUTION_API_URL")
    );
    assert!(matches!(
        EvolutionConfig::from_lookup(fakes::env_with(ENV, "EVOLUTION_HISTORY_SECS", "soon")),
        Err(EvolutionConfigError::Invalid {
            setting: "EVOLUTION_HISTORY_SECS",
            ..
        })
    ));
    let ok = EvolutionConfig::from_lookup(fakes::env(ENV)).expect("config");
    assert!(!format!("{ok:?}").contains(SECRET) && !format!("{ok:?}").contains("\"k\""));
    assert!(EvolutionConfig::new("ftp://evo", "k", "shop1", SECRET).is_err());
}
