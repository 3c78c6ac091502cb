//! The WhatsApp Cloud provider against the fake Graph API: the verification handshake, the
//! `X-Hub-Signature-256` check, every inbound kind and status, every content kind sent, error
//! classes, the 24-hour window, media downloads through the guarded client, media refs, and a
//! crash before the 200 ending in one reply.

use crate::fakes;
use crate::fakes::Refusals;

use crate::fakes::whatsapp::{FakeWhatsApp, hooks};
use crate::fakes::{Mode, contents};
use botmesh::message::{ChatId, Content, MediaKind, MediaRef, MessageId, Outgoing};
use botmesh::provider::{ErrorClass, Provider, ProviderError, ProviderEvent, StoredMediaRef};
use botmesh_providers::http::GuardedClient;
use botmesh_providers::webhook::RunningWebhookServer;
use botmesh_providers::whatsapp::{WhatsAppConfig, WhatsAppConfigError, WhatsAppProvider};
use serde_json::json;

const TOKEN: &str = "EAAGfake-access-token";
const SECRET: &str = "app-secret-1";
const VERIFY: &str = "verify-me";

fn config(fake: &FakeWhatsApp) -> WhatsAppConfig {
    WhatsAppConfig::new(TOKEN, "106540352242922", SECRET, VERIFY)
        .api_base(&fake.base_url())
        .expect("base")
        .media_client(GuardedClient::allowing_localhost().expect("client"))
}

async fn mounted(wa: &WhatsAppProvider) -> (RunningWebhookServer, String) {
    let (server, base) = fakes::mount(wa.webhook_routes()).await;
    (server, format!("{base}/whatsapp"))
}

/// A provider on `fake`, started on a recorder, its webhook mounted: the provider, the
/// recorder, the server and the webhook's URL.
async fn listening(
    fake: &FakeWhatsApp,
) -> (
    WhatsAppProvider,
    fakes::Recorder,
    RunningWebhookServer,
    String,
) {
    let wa = WhatsAppProvider::new(config(fake)).expect("provider");
    let (rec, server, base) = fakes::started(&wa, wa.webhook_routes()).await;
    (wa, rec, server, format!("{base}/whatsapp"))
}

fn chat() -> ChatId {
    ChatId::from(hooks::WA_ID)
}

async fn post(url: &str, body: &serde_json::Value) -> u16 {
    let bytes = serde_json::to_vec(body).expect("json");
    FakeWhatsApp::post_webhook(url, Some(&FakeWhatsApp::sign(SECRET, &bytes)), &bytes).await
}

#[tokio::test]
async fn answers_the_verification_handshake() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    let wa = WhatsAppProvider::new(config(&fake)).expect("provider");
    let (server, url) = mounted(&wa).await;
    let get = |mode, token, challenge| fakes::meta::handshake(&url, mode, token, challenge);
    assert_eq!(
        get("subscribe", VERIFY, Some("1158201444")).await,
        (200, "1158201444".to_owned())
    );
    assert_eq!(get("subscribe", "nope", Some("1")).await.0, 403);
    assert_eq!(get("unsubscribe", VERIFY, Some("1")).await.0, 403);
    assert_eq!(get("subscribe", VERIFY, None).await.0, 403);
    server.shutdown().await;
}

#[tokio::test]
async fn the_signature_is_checked_over_the_raw_body() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    let (_wa, rec, server, url) = listening(&fake).await;
    let body = serde_json::to_vec(&hooks::text("wamid.A1", "hi")).expect("json");

    assert_eq!(FakeWhatsApp::post_webhook(&url, None, &body).await, 401);
    assert_eq!(
        FakeWhatsApp::post_webhook(&url, Some(&FakeWhatsApp::sign("other", &body)), &body).await,
        403
    );
    assert_eq!(
        FakeWhatsApp::post_webhook(&url, Some("sha256=zz"), &body).await,
        403
    );
    let sig = FakeWhatsApp::sign(SECRET, &body);
    assert_eq!(
        FakeWhatsApp::post_webhook(&url, Some(sig.trim_start_matches("sha256=")), &body).await,
        403
    );
    // A body re-encoded after signing (Meta escapes non-ASCII) no longer matches.
    let mut reencoded = body.clone();
    reencoded.push(b' ');
    assert_eq!(
        FakeWhatsApp::post_webhook(&url, Some(&sig), &reencoded).await,
        403
    );
    assert!(rec.events().is_empty());

    // Meta's check vector: HMAC_SHA256("secret", "test"). The signature passes; "test" is no JSON.
    let wa2 =
        WhatsAppProvider::new(WhatsAppConfig::new(TOKEN, "1", "secret", VERIFY)).expect("provider");
    let (server2, url2) = mounted(&wa2).await;
    let vector = "sha256=0329a06b62cd16b33eb6792be8c60b158d89a2ee3a876fce9a881ebb488c0914";
    assert_eq!(
        FakeWhatsApp::post_webhook(&url2, Some(vector), b"test").await,
        400
    );

    assert_eq!(
        FakeWhatsApp::post_webhook(&url, Some(&sig), &body).await,
        200
    );
    assert_eq!(rec.events().len(), 1);
    server.shutdown().await;
    server2.shutdown().await;
}

#[tokio::test]
async fn a_malformed_batch_delivers_nothing() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    let (wa, rec, server, url) = listening(&fake).await;
    // The first message is fine, the second has no `from`: the whole body is refused.
    let bad = hooks::messages(vec![
        hooks::msg("wamid.OK", "text", json!({"body": "fine"})),
        json!({"id": "wamid.BAD", "timestamp": "1718000000", "type": "text", "text": {"body": "x"}}),
    ]);
    assert_eq!(post(&url, &bad).await, 400);
    assert_eq!(
        post(&url, &json!({"object": "page", "entry": []})).await,
        400
    );
    assert_eq!(
        post(
            &url,
            &hooks::messages(vec![hooks::msg("wamid.T", "text", json!({"body": "x"}))])
                .to_string()
                .replace("1718000000", "soon")
                .parse::<serde_json::Value>()
                .expect("json")
        )
        .await,
        400
    );
    let raw = b"{\"object\":\"whatsapp_business_account\",\"entry\":[";
    assert_eq!(
        FakeWhatsApp::post_webhook(&url, Some(&FakeWhatsApp::sign(SECRET, raw)), raw).await,
        400
    );
    assert!(rec.events().is_empty(), "{:?}", rec.events());

    // Rejected by the pipeline: 503 so Meta retries.
    rec.set_mode(Mode::Reject);
    assert_eq!(post(&url, &hooks::text("wamid.R", "retry me")).await, 503);
    wa.stop().await.expect("stop");
    rec.set_mode(Mode::Accept);
    assert_eq!(
        post(&url, &hooks::text("wamid.R", "retry me")).await,
        503,
        "stopped"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn receives_every_message_kind_and_status() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    let (_wa, rec, server, url) = listening(&fake).await;
    let ctx = json!({"from": "15550783881", "id": "wamid.SENT1"});
    let mut button_reply = hooks::msg(
        "wamid.B",
        "interactive",
        json!({"type": "button_reply", "button_reply": {"id": "yes", "title": "Yes"}}),
    );
    button_reply["context"] = ctx.clone();
    let body = hooks::messages(vec![
        hooks::msg("wamid.T", "text", json!({"body": "hi"})),
        hooks::msg(
            "wamid.I",
            "image",
            json!({"id": "1234567890", "mime_type": "image/jpeg", "sha256": "abc", "caption": "look"}),
        ),
        hooks::msg(
            "wamid.D",
            "document",
            json!({"id": "2234567890", "mime_type": "application/pdf", "sha256": "abc", "filename": "a.pdf"}),
        ),
        hooks::msg(
            "wamid.V",
            "audio",
            json!({"id": "3234567890", "mime_type": "audio/ogg; codecs=opus", "sha256": "abc", "voice": true}),
        ),
        hooks::msg(
            "wamid.L",
            "location",
            json!({"latitude": 52.37, "longitude": 4.89, "name": "Dam", "address": "Amsterdam"}),
        ),
        button_reply,
        hooks::msg(
            "wamid.LR",
            "interactive",
            json!({"type": "list_reply", "list_reply": {"id": "row1", "title": "Row 1", "description": "…"}}),
        ),
        hooks::msg(
            "wamid.TB",
            "button",
            json!({"payload": "STOP_PROMO", "text": "Stop promotions"}),
        ),
        hooks::msg(
            "wamid.R",
            "reaction",
            json!({"message_id": "wamid.SENT1", "emoji": "👍"}),
        ),
        json!({"from": hooks::WA_ID, "id": "wamid.U", "timestamp": "1718000000", "type": "unsupported",
               "errors": [{"code": 131051, "title": "Message type unknown"}]}),
        // A WhatsApp Flow's answer: an interactive reply without an `id`, in the same batch.
        hooks::msg(
            "wamid.F",
            "interactive",
            json!({"type": "nfm_reply", "nfm_reply": {"name": "flow", "body": "Sent",
                   "response_json": "{\"flow_token\": \"t1\"}"}}),
        ),
    ]);
    assert_eq!(post(&url, &body).await, 200);
    let statuses = hooks::envelope(json!({"messaging_product": "whatsapp", "statuses": [
        {"id": "wamid.SENT1", "status": "delivered", "timestamp": "1718000005", "recipient_id": hooks::WA_ID},
        {"id": "wamid.SENT2", "status": "failed", "timestamp": "1718000006", "recipient_id": hooks::WA_ID,
         "errors": [{"code": 131047, "title": "Re-engagement message"}]}
    ]}));
    assert_eq!(post(&url, &statuses).await, 200);

    let ev = rec.exactly(13);
    let msg = |i: usize| fakes::message_at(&ev, i);
    let t = msg(0);
    assert_eq!(
        (t.id.as_str(), t.chat.as_str(), t.sender_name.as_deref()),
        ("wamid.T", hooks::WA_ID, Some("Ana"))
    );
    assert_eq!(t.content, Content::Text("hi".into()));
    assert_eq!(t.timestamp_ms, 1_718_000_000_000);
    assert!(
        matches!(&msg(1).content, Content::Media(m) if m.kind == MediaKind::Image && m.media_ref.token == "1234567890" && m.caption.as_deref() == Some("look"))
    );
    assert!(
        matches!(&msg(2).content, Content::Media(m) if m.kind == MediaKind::Document && m.file_name.as_deref() == Some("a.pdf"))
    );
    assert!(matches!(&msg(3).content, Content::Media(m) if m.kind == MediaKind::Voice));
    assert!(matches!(&msg(4).content, Content::Location(l) if l.name.as_deref() == Some("Dam")));
    let ProviderEvent::Interaction(b) = &ev[5] else {
        panic!("button reply")
    };
    assert_eq!(
        (b.data.as_str(), b.title.as_deref(), b.message_id.clone()),
        ("yes", Some("Yes"), Some(MessageId::from("wamid.SENT1")))
    );
    assert!(matches!(&ev[6], ProviderEvent::Interaction(i) if i.data == "row1"));
    assert!(matches!(&ev[7], ProviderEvent::Interaction(i) if i.data == "STOP_PROMO"));
    assert!(matches!(&ev[8], ProviderEvent::Reaction { reaction, .. } if reaction.emoji == "👍"));
    assert!(matches!(&msg(9).content, Content::Other(_)));
    let flow = msg(10);
    assert_eq!(flow.id.as_str(), "wamid.F");
    assert!(
        matches!(&flow.content, Content::Other(raw) if raw["interactive"]["type"] == "nfm_reply"),
        "{flow:?}"
    );
    assert!(
        matches!(&ev[11], ProviderEvent::Status(s) if s.status == "delivered" && s.message_id.as_str() == "wamid.SENT1")
    );
    assert!(
        matches!(&ev[12], ProviderEvent::Status(s) if s.status == "failed" && s.error.as_deref().is_some_and(|e| e.starts_with("131047")))
    );
    server.shutdown().await;
}

#[tokio::test]
async fn sends_every_content_kind() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    let wa = WhatsAppProvider::new(config(&fake)).expect("provider");
    let c = chat();
    let sent = wa
        .send(&c, &Outgoing::from("Hello").reply_to("wamid.IN"))
        .await
        .expect("text");
    assert_eq!(sent.message_id, Some(MessageId::from("wamid.OUT1")));
    let b = &fake.sent()[0];
    assert_eq!(b["messaging_product"], "whatsapp");
    assert_eq!(b["to"], hooks::WA_ID);
    assert_eq!(b["text"]["body"], "Hello");
    assert_eq!(b["context"]["message_id"], "wamid.IN");

    wa.send(&c, &contents::two_buttons())
        .await
        .expect("buttons");
    let b = &fake.sent()[1]["interactive"];
    assert_eq!(b["type"], "button");
    assert_eq!(
        b["action"]["buttons"][0],
        json!({"type": "reply", "reply": {"id": "yes", "title": "Yes"}})
    );
    assert_eq!(
        contents::chars(&b["action"]["buttons"][1]["reply"]["title"]),
        Some(20)
    );

    wa.send(&c, &contents::many_buttons(5))
        .await
        .expect("buttons as list");
    assert_eq!(fake.sent()[2]["interactive"]["type"], "list");
    assert_eq!(
        fake.sent()[2]["interactive"]["action"]["sections"][0]["rows"]
            .as_array()
            .map(Vec::len),
        Some(5)
    );

    wa.send(&c, &fakes::menu_list()).await.expect("list");
    assert_eq!(
        fake.sent()[3]["interactive"]["action"],
        json!({"button": "Options", "sections": [{"title": "S1", "rows": [{"id": "row1", "title": "Row 1"}]}]})
    );

    let media = |kind, source, caption: Option<&str>| contents::media(kind, source, caption, None);
    wa.send(
        &c,
        &media(
            MediaKind::Image,
            contents::url("https://example.com/a.jpg"),
            Some("cap"),
        ),
    )
    .await
    .expect("image link");
    assert_eq!(
        fake.sent()[4]["image"],
        json!({"link": "https://example.com/a.jpg", "caption": "cap"})
    );
    wa.send(
        &c,
        &media(
            MediaKind::Document,
            contents::bytes(b"%PDF".to_vec(), Some("a.pdf")),
            None,
        ),
    )
    .await
    .expect("upload");
    let up = &fake.uploads()[0];
    assert_eq!(
        (up["messaging_product"].clone(), up["type"].clone()),
        (json!("whatsapp"), json!("application/pdf"))
    );
    assert_eq!(up["file"]["file_name"], "a.pdf");
    assert_eq!(fake.sent()[5]["document"]["filename"], "a.pdf");
    assert!(
        fake.sent()[5]["document"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("9000"))
    );

    wa.send(&c, &contents::template("order_update", "en_US", &["42"]))
        .await
        .expect("template");
    assert_eq!(
        fake.sent()[6]["template"],
        json!({"name": "order_update", "language": {"code": "en_US"},
        "components": [{"type": "body", "parameters": [{"type": "text", "text": "42"}]}]})
    );
    wa.send(&c, &contents::location(1.0, 2.0, Some("Here")))
        .await
        .expect("location");
    assert_eq!(fake.sent()[7]["location"]["name"], "Here");
    wa.send(&c, &contents::contact("Bo", "+1555"))
        .await
        .expect("contacts");
    assert_eq!(fake.sent()[8]["contacts"][0]["phones"][0]["phone"], "+1555");
    wa.send(&c, &contents::reaction("wamid.IN", "👍"))
        .await
        .expect("reaction");
    assert_eq!(
        fake.sent()[9]["reaction"],
        json!({"message_id": "wamid.IN", "emoji": "👍"})
    );

    let long = "a ".repeat(3000);
    wa.send(&c, &Outgoing::from(long))
        .await
        .expect("long text in parts");
    assert_eq!(fake.sent().len(), 12);

    wa.mark_read(&c, &MessageId::from("wamid.IN"))
        .await
        .expect("read");
    assert_eq!(
        fake.sent()[12],
        json!({"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.IN"})
    );

    // Refused before a call.
    let n = fake.sent().len();
    for bad in [
        Outgoing::buttons("x".repeat(1025), ["ok"]),
        Outgoing::buttons("x", (0..11).map(|i| format!("b{i}")).collect::<Vec<_>>()),
    ] {
        assert!(matches!(
            wa.send(&c, &bad).await,
            Err(ProviderError::UnsupportedContent { .. })
        ));
    }
    let big = media(
        MediaKind::Image,
        contents::bytes(vec![0; 5 * 1024 * 1024 + 1], None),
        None,
    );
    assert!(matches!(
        wa.send(&c, &big).await,
        Err(ProviderError::PayloadTooLarge { .. })
    ));
    assert_eq!(fake.sent().len(), n);
}

#[tokio::test]
async fn maps_graph_errors_and_the_session_window() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    let wa = WhatsAppProvider::new(config(&fake)).expect("provider");
    let c = chat();
    let hi = Outgoing::from("hi");
    let rate_limited = |e: &ProviderError| matches!(e.class(), ErrorClass::RateLimited(_));
    let final_ = fakes::class_is(ErrorClass::Final);
    let cases: Refusals<'_, (u16, i64, &str), 9> = [
        ((400, 130429, "(#130429) Rate limit hit"), &rate_limited),
        (
            (429, 4, "(#4) Application request limit reached"),
            &rate_limited,
        ),
        ((400, 131047, "Re-engagement message"), &|e| {
            matches!(e, ProviderError::OutsideSessionWindow { chat, .. } if chat == hooks::WA_ID)
                && e.class() == ErrorClass::Final
        }),
        ((400, 131026, "Message undeliverable"), &fakes::unreachable),
        ((400, 131051, "Unsupported message type"), &|e| {
            matches!(e, ProviderError::UnsupportedContent { .. })
        }),
        ((500, 131000, "Something went wrong"), &fakes::retryable),
        ((503, 131016, "Service unavailable"), &fakes::retryable),
        ((401, 190, "Access token expired"), &final_),
        ((400, 132001, "Template does not exist"), &final_),
    ];
    let fail = |(status, code, message)| fake.fail_next(status, code, message);
    fakes::assert_refusals(&wa, c.as_str(), fail, &cases).await;

    // The window: a chat known to have written 25 h ago gets no free-form message.
    let before = fake.sent().len();
    wa.note_inbound(&c, botmesh::clock::now_ms() - 25 * 60 * 60 * 1000);
    let e = wa.send(&c, &hi).await.expect_err("outside the window");
    assert!(matches!(e, ProviderError::OutsideSessionWindow { .. }));
    assert_eq!(fake.sent().len(), before, "no call was made");
    wa.send(&c, &contents::template("hello", "en", &[]))
        .await
        .expect("templates are always allowed");
    wa.note_inbound(&c, botmesh::clock::now_ms());
    wa.send(&c, &hi).await.expect("inside the window again");

    // Unreachable Graph: a retryable network error.
    let config = WhatsAppConfig::new(TOKEN, "1", SECRET, VERIFY).api_base("http://127.0.0.1:9");
    let gone = WhatsAppProvider::new(config.expect("base")).expect("provider");
    fakes::assert_network_error(&gone, &c, TOKEN).await;
}

#[tokio::test]
async fn downloads_media_through_the_guarded_client() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    fake.add_media("1234567890", b"jpeg-bytes", "image/jpeg");
    fake.add_media("666", b"original", "image/jpeg");
    let wa = WhatsAppProvider::new(config(&fake)).expect("provider");
    let r = |id: &str| MediaRef {
        provider: "whatsapp-cloud".into(),
        token: id.into(),
    };
    assert_eq!(
        wa.download_media(&r("1234567890")).await.expect("download"),
        b"jpeg-bytes"
    );
    fakes::assert_download_refused(&wa, &r("666"), "sha256").await;
    assert_eq!(
        wa.download_media(&r("404404"))
            .await
            .expect_err("unknown")
            .class(),
        ErrorClass::Final
    );
    let strict = WhatsAppProvider::new(
        WhatsAppConfig::new(TOKEN, "1", SECRET, VERIFY)
            .api_base(&fake.base_url())
            .expect("base"),
    )
    .expect("provider");
    fakes::assert_download_refused(&strict, &r("1234567890"), "refused to connect").await;
}

#[tokio::test]
async fn media_refs_round_trip_and_every_rejection() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    let wa = WhatsAppProvider::new(config(&fake)).expect("provider");
    let media = MediaRef {
        provider: "whatsapp-cloud".into(),
        token: "1234567890".into(),
    };
    let stored = wa.serialize_media_ref(&media).expect("durable");
    assert_eq!(stored.data, json!({"media_id": "1234567890"}));
    let back: StoredMediaRef =
        serde_json::from_value(serde_json::to_value(&stored).expect("json")).expect("parse");
    assert_eq!(wa.rehydrate_media_ref(&back).expect("rehydrate"), media);
    assert!(
        wa.serialize_media_ref(&MediaRef {
            provider: "whatsapp-cloud".into(),
            token: "https://x".into()
        })
        .is_none(),
        "not-durable"
    );
    fakes::assert_refuses_foreign_refs(&wa, &stored, &[json!({"media_id": "12/../x"})]);
}

#[tokio::test]
async fn a_crash_before_the_200_is_redelivered_and_answered_once() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    // Sent just now: inside the 24-hour window.
    let now = (botmesh::clock::now_ms() / 1000).to_string();
    let bytes = hooks::text("wamid.PING", "ping")
        .to_string()
        .replace("1718000000", &now)
        .into_bytes();
    let sig = FakeWhatsApp::sign(SECRET, &bytes);
    let provider = || WhatsAppProvider::new(config(&fake)).expect("provider");
    let channel = (provider, WhatsAppProvider::webhook_routes);
    fakes::crash_before_the_200(channel, "/whatsapp", |req| {
        req.header("X-Hub-Signature-256", &sig).body(bytes.clone())
    })
    .await;
    let texts: Vec<_> = fake
        .sent()
        .iter()
        .filter_map(|b| b["text"]["body"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(texts, ["pong: ping"]);
}

#[test]
fn config_from_env_names_the_variable() {
    let full = [
        ("WHATSAPP_ACCESS_TOKEN", "t"),
        ("WHATSAPP_PHONE_NUMBER_ID", "106540352242922"),
        ("WHATSAPP_APP_SECRET", "s"),
        ("WHATSAPP_VERIFY_TOKEN", "v"),
    ];
    let lookup = |skip: &'static str| {
        move |k: &str| {
            full.iter()
                .find(|(n, _)| *n == k && *n != skip)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(
        WhatsAppConfig::from_lookup(lookup("WHATSAPP_APP_SECRET")).expect_err("missing"),
        WhatsAppConfigError::MissingEnv("WHATSAPP_APP_SECRET")
    );
    let cfg = WhatsAppConfig::from_lookup(lookup("")).expect("complete");
    assert!(
        !format!("{cfg:?}").contains("\"t\""),
        "secrets leaked into Debug"
    );
}

/// An empty app secret or verify token would leave the webhook unauthenticated (HMAC takes
/// the empty key; an empty token matches an empty `hub.verify_token`): refused at `new`,
/// naming the setting.
#[test]
fn empty_secrets_are_refused() {
    for (secret, verify, named) in [("", "v", "app secret"), ("s", "", "verify token")] {
        let Err(err) = WhatsAppProvider::new(WhatsAppConfig::new("t", "1065", secret, verify))
        else {
            panic!("an empty {named} is refused");
        };
        assert!(err.to_string().contains(named), "{err}");
    }
}

/// Outside the 24-hour window a send goes out as the configured template, the message's text
/// its parameter: when the provider knows the chat has been silent for more than 24 h (no
/// free-form call is made), and when Meta refuses the free-form message with 131047. Without
/// a template it fails with the typed error that names the window, and makes no call.
#[tokio::test]
async fn outside_the_window_a_send_goes_out_as_the_configured_template() {
    let fake = FakeWhatsApp::start(TOKEN).await;
    let c = chat();
    let silent = || botmesh::clock::now_ms() - 25 * 60 * 60 * 1000;
    let shipped = Outgoing::from("Your order #7 shipped");
    let template_of = |body: &serde_json::Value| {
        assert_eq!(body["type"], "template", "{body}");
        (
            body["template"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            body["template"]["language"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            body["template"]["components"][0]["parameters"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    let expected = (
        "order_update".to_owned(),
        "en_US".to_owned(),
        "Your order #7 shipped".to_owned(),
    );

    // Without a template: the typed error, no call.
    let plain = WhatsAppProvider::new(config(&fake)).expect("provider");
    plain.note_inbound(&c, silent());
    let err = plain
        .send(&c, &shipped)
        .await
        .expect_err("outside the window");
    assert!(
        matches!(&err, ProviderError::OutsideSessionWindow { chat, .. } if chat == hooks::WA_ID),
        "{err}"
    );
    assert!(err.to_string().contains("session window"), "{err}");
    assert_eq!(err.class(), ErrorClass::Final);
    assert!(fake.sent().is_empty(), "no call was made");

    // With one, from the environment as from the builder.
    let env = [
        ("WHATSAPP_ACCESS_TOKEN", TOKEN.to_owned()),
        ("WHATSAPP_PHONE_NUMBER_ID", "106540352242922".to_owned()),
        ("WHATSAPP_APP_SECRET", SECRET.to_owned()),
        ("WHATSAPP_VERIFY_TOKEN", VERIFY.to_owned()),
        ("WHATSAPP_API_BASE", fake.base_url()),
        ("WHATSAPP_WINDOW_TEMPLATE", "order_update".to_owned()),
    ];
    let from_env =
        WhatsAppConfig::from_lookup(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
            .expect("config");
    let built = config(&fake).window_template("order_update", "en_US");
    for cfg in [from_env, built] {
        let wa = WhatsAppProvider::new(cfg).expect("provider");
        let before = fake.sent().len();
        wa.note_inbound(&c, silent());
        wa.send(&c, &shipped).await.expect("sent as the template");
        let sent = fake.sent();
        assert_eq!(sent.len(), before + 1, "the template only: {sent:?}");
        assert_eq!(template_of(&sent[before]), expected);

        // Meta says the window closed (131047): the template follows the refused message.
        wa.note_inbound(&c, botmesh::clock::now_ms());
        fake.fail_next(400, 131047, "Re-engagement message");
        wa.send(&c, &shipped).await.expect("sent as the template");
        let sent = fake.sent();
        assert_eq!(sent.len(), before + 3, "{sent:?}");
        assert_eq!(sent[before + 1]["type"], "text");
        assert_eq!(template_of(&sent[before + 2]), expected);
    }
    assert_eq!(
        fake.delivered_to(hooks::WA_ID).len(),
        4,
        "two templates per provider"
    );
    fake.check();
}
