//! The Telegram provider against the fake Bot API: every inbound kind over long polling, every
//! content kind sent, edits, typing, callback answers, error classes, media downloads through
//! the guarded client, and media refs.

use crate::fakes;
use crate::fakes::Refusals;

use std::time::Duration;

use crate::fakes::telegram::{FakeTelegram, updates};
use crate::fakes::{Mode, Recorder, contents};
use botmesh::message::{
    ChatId, Content, Interaction, MediaKind, MediaRef, MediaSource, MessageId, Outgoing,
    OutgoingContent,
};
use botmesh::provider::{ErrorClass, Provider, ProviderError, ProviderEvent, StoredMediaRef};
use botmesh_providers::http::GuardedClient;
use botmesh_providers::telegram::{
    TelegramConfig, TelegramConfigError, TelegramMode, TelegramProvider,
};
use serde_json::json;

const TOKEN: &str = "123456:ABC-fake_token";
const ANA: i64 = 1111;

fn config(fake: &FakeTelegram) -> TelegramConfig {
    fake.config()
        .polling(Duration::from_secs(1))
        .media_client(GuardedClient::allowing_localhost().expect("client"))
}

async fn provider(fake: &FakeTelegram) -> TelegramProvider {
    TelegramProvider::new(config(fake)).expect("provider")
}

fn chat() -> ChatId {
    ChatId(ANA.to_string())
}

#[tokio::test]
async fn receives_every_message_kind_over_long_polling() {
    let fake = FakeTelegram::start(TOKEN).await;
    fake.push_update(updates::text(ANA, 42, "/start hello"));
    fake.push_update(updates::message(ANA, 43, json!({
        "photo": [
            {"file_id": "AgACAgQAAxsmall", "file_unique_id": "AQADs", "width": 90, "height": 67, "file_size": 1200},
            {"file_id": "AgACAgQAAxlarge", "file_unique_id": "AQADl", "width": 800, "height": 600, "file_size": 52000}
        ],
        "caption": "look"
    })));
    fake.push_update(updates::message(ANA, 44, json!({
        "document": {"file_id": "BQACAgQAAxdoc01", "file_unique_id": "AgADd", "file_name": "a.pdf", "mime_type": "application/pdf", "file_size": 48213}
    })));
    fake.push_update(updates::message(ANA, 45, json!({
        "voice": {"file_id": "AwACAgQAAxvoice", "file_unique_id": "AgADv", "duration": 3, "mime_type": "audio/ogg", "file_size": 9123}
    })));
    fake.push_update(updates::message(
        ANA,
        46,
        json!({ "location": {"latitude": 52.37, "longitude": 4.89} }),
    ));
    fake.push_update(updates::callback(ANA, "4382bfdwdsb323b2d9", 43, "choice:a"));
    fake.push_update(json!({ "edited_message": {
        "message_id": 42, "date": 1718000000, "edit_date": 1718000300,
        "from": updates::from(ANA), "chat": {"id": ANA, "type": "private"}, "text": "/start edited"
    }}));
    let last = fake.push_update(json!({ "channel_post": { "message_id": 1, "date": 1, "chat": {"id": -100, "type": "channel"}, "text": "x" }}));

    let tg = provider(&fake).await;
    let rec = Recorder::new();
    tg.start(rec.sink()).await.expect("start");
    let events = rec.wait_for(7).await;
    assert_eq!(events.len(), 7, "{events:#?}");

    let ProviderEvent::Message(text) = &events[0] else {
        panic!("text: {:?}", events[0])
    };
    assert_eq!(text.id, MessageId::from("42"));
    assert_eq!(text.chat, chat());
    assert_eq!(text.sender.as_str(), "1111");
    assert_eq!(text.sender_name.as_deref(), Some("Ana"));
    assert_eq!(text.content, Content::Text("/start hello".into()));
    assert_eq!(text.lang_hint.as_deref(), Some("en"));
    assert_eq!(text.timestamp_ms, 1_718_000_000_000);
    assert!(!text.is_group);

    let ProviderEvent::Message(photo) = &events[1] else {
        panic!("photo")
    };
    let Content::Media(m) = &photo.content else {
        panic!("photo content")
    };
    assert_eq!(
        (m.kind, m.media_ref.token.as_str()),
        (MediaKind::Image, "AgACAgQAAxlarge")
    );
    assert_eq!(m.caption.as_deref(), Some("look"));
    assert_eq!(m.size, Some(52000));

    let ProviderEvent::Message(doc) = &events[2] else {
        panic!("document")
    };
    let Content::Media(m) = &doc.content else {
        panic!("document content")
    };
    assert_eq!(m.kind, MediaKind::Document);
    assert_eq!(m.file_name.as_deref(), Some("a.pdf"));
    assert_eq!(m.mime.as_deref(), Some("application/pdf"));

    let ProviderEvent::Message(voice) = &events[3] else {
        panic!("voice")
    };
    assert!(
        matches!(&voice.content, Content::Media(m) if m.kind == MediaKind::Voice && m.media_ref.token == "AwACAgQAAxvoice")
    );

    let ProviderEvent::Message(loc) = &events[4] else {
        panic!("location")
    };
    assert!(
        matches!(&loc.content, Content::Location(l) if l.latitude == 52.37 && l.longitude == 4.89)
    );

    let ProviderEvent::Interaction(press) = &events[5] else {
        panic!("callback")
    };
    assert_eq!(press.id, "4382bfdwdsb323b2d9");
    assert_eq!(press.data, "choice:a");
    assert_eq!(press.chat, chat());
    assert_eq!(press.message_id, Some(MessageId::from("43")));
    assert!(press.respond_by_ms.is_some());

    let ProviderEvent::Message(edited) = &events[6] else {
        panic!("edit")
    };
    assert_eq!(edited.id, MessageId::from("42:edit:1718000300"));
    assert_eq!(edited.content, Content::Text("/start edited".into()));

    // Everything was confirmed, the channel post (not taken) included.
    fake.wait_confirmed().await;
    assert!(
        fake.calls("getUpdates")
            .iter()
            .any(|c| c["offset"] == json!(last + 1))
    );
    tg.stop().await.expect("stop");
}

#[tokio::test]
async fn an_update_the_pipeline_rejects_is_not_confirmed_and_comes_back() {
    let fake = FakeTelegram::start(TOKEN).await;
    let tg = provider(&fake).await;
    let rec = Recorder::new();
    rec.set_mode(Mode::Reject);
    tg.start(rec.sink()).await.expect("start");
    let id = fake.push_update(updates::text(ANA, 50, "hello"));
    // Several polls happen; the update stays unconfirmed while the pipeline refuses it.
    fake.wait_calls("getUpdates", 2).await;
    assert_eq!(fake.unconfirmed(), vec![id]);
    assert!(rec.events().is_empty());

    rec.set_mode(Mode::Accept);
    let events = rec.wait_for(1).await;
    assert_eq!(events.len(), 1);
    fake.wait_confirmed().await;
    tg.stop().await.expect("stop");
}

#[tokio::test]
async fn start_checks_the_token() {
    let fake = FakeTelegram::start(TOKEN).await;
    let bad = TelegramConfig::new("999:wrong")
        .api_base(&fake.base_url())
        .expect("base");
    let tg = TelegramProvider::new(bad).expect("provider");
    let err = tg.start(Recorder::new().sink()).await.expect_err("401");
    assert!(
        matches!(
            err,
            ProviderError::Api {
                status: Some(401),
                retryable: false,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        !err.to_string().contains("wrong"),
        "the token leaked: {err}"
    );
}

#[tokio::test]
async fn sends_every_content_kind() {
    let fake = FakeTelegram::start(TOKEN).await;
    let tg = provider(&fake).await;
    let c = chat();

    let sent = tg
        .send(
            &c,
            &Outgoing::buttons("Pick one", [("choice:a", "A"), ("choice:b", "B")]),
        )
        .await
        .expect("text with buttons");
    assert!(sent.message_id.is_some());
    let m = &fake.calls("sendMessage")[0];
    assert_eq!(m["chat_id"], json!(ANA));
    assert_eq!(m["text"], "Pick one");
    assert_eq!(
        m["reply_markup"],
        json!({"inline_keyboard": [[{"text": "A", "callback_data": "choice:a"}], [{"text": "B", "callback_data": "choice:b"}]]})
    );

    // A long text becomes parts, the buttons on the last one.
    let long = "word ".repeat(1000) + "end";
    tg.send(&c, &Outgoing::buttons(long.clone(), ["ok"]))
        .await
        .expect("long text");
    let calls = fake.calls("sendMessage");
    let parts = &calls[1..];
    assert_eq!(parts.len(), 2);
    assert!(
        parts
            .iter()
            .all(|p| p["text"].as_str().expect("text").chars().count() <= 4096)
    );
    assert!(parts[0].get("reply_markup").is_none());
    assert!(parts[1].get("reply_markup").is_some());
    let joined: String = parts
        .iter()
        .map(|p| p["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(joined, long);

    // A list: each row a button.
    tg.send(&c, &fakes::menu_list()).await.expect("list");
    assert_eq!(
        fake.calls("sendMessage")[3]["reply_markup"]["inline_keyboard"][0][0]["callback_data"],
        "row1"
    );

    let media = |kind, source| contents::media(kind, source, Some("cap"), None);
    tg.send(
        &c,
        &media(MediaKind::Image, contents::url("https://example.com/a.jpg")),
    )
    .await
    .expect("photo by url");
    assert_eq!(
        fake.calls("sendPhoto")[0]["photo"],
        "https://example.com/a.jpg"
    );
    assert_eq!(fake.calls("sendPhoto")[0]["caption"], "cap");

    tg.send(
        &c,
        &media(
            MediaKind::Voice,
            MediaSource::Token {
                token: "AwACAgQAAxvoice".into(),
            },
        ),
    )
    .await
    .expect("voice by file_id");
    assert_eq!(fake.calls("sendVoice")[0]["voice"], "AwACAgQAAxvoice");

    tg.send(
        &c,
        &media(
            MediaKind::Document,
            contents::bytes(b"%PDF-1.4 hello".to_vec(), Some("a.pdf")),
        ),
    )
    .await
    .expect("document upload");
    let up = &fake.calls("sendDocument")[0];
    assert_eq!(up["_multipart"], true);
    assert_eq!(up["chat_id"], ANA.to_string());
    assert_eq!(up["document"]["file_name"], "a.pdf");
    assert_eq!(up["document"]["len"], 14);

    tg.send(&c, &contents::location(1.5, 2.5, None))
        .await
        .expect("location");
    assert_eq!(fake.calls("sendLocation")[0]["latitude"], 1.5);

    tg.send(&c, &contents::contact("Bo", "+15551234"))
        .await
        .expect("contact");
    assert_eq!(fake.calls("sendContact")[0]["phone_number"], "+15551234");

    tg.send(&c, &contents::reaction("42", "👍"))
        .await
        .expect("reaction");
    assert_eq!(
        fake.calls("setMessageReaction")[0]["reaction"][0]["emoji"],
        "👍"
    );

    tg.send(&c, &Outgoing::from("quoted").reply_to("42"))
        .await
        .expect("reply");
    assert_eq!(
        fake.calls("sendMessage").last().expect("sent")["reply_parameters"]["message_id"],
        42
    );

    // Refused before any call: templates, oversized callback data, an empty text.
    let before = fake.sends().len();
    let template = OutgoingContent::Template {
        name: "order_update".into(),
        language: "en".into(),
        params: vec![],
    };
    for bad in [
        Outgoing::from(template),
        Outgoing::buttons("x", [("x".repeat(65).as_str(), "too long")]),
        Outgoing::from("   "),
    ] {
        let err = tg.send(&c, &bad).await.expect_err("refused");
        assert!(
            matches!(err, ProviderError::UnsupportedContent { .. }),
            "{err}"
        );
        assert_eq!(err.class(), ErrorClass::Final);
    }
    let big = contents::media(
        MediaKind::Image,
        contents::bytes(vec![0; 10 * 1024 * 1024 + 1], None),
        None,
        None,
    );
    assert!(matches!(
        tg.send(&c, &big).await,
        Err(ProviderError::PayloadTooLarge {
            limit: 10485760,
            ..
        })
    ));
    assert_eq!(fake.sends().len(), before);
}

#[tokio::test]
async fn edits_typing_and_callback_answers() {
    let fake = FakeTelegram::start(TOKEN).await;
    let tg = provider(&fake).await;
    let c = chat();
    let sent = tg.send(&c, &Outgoing::from("draft")).await.expect("send");
    let id = sent.message_id.expect("message id");
    tg.edit(&c, &id, &OutgoingContent::from("final"))
        .await
        .expect("edit");
    let e = &fake.calls("editMessageText")[0];
    assert_eq!(
        (e["message_id"].clone(), e["text"].clone()),
        (
            json!(id.as_str().parse::<i64>().expect("int")),
            json!("final")
        )
    );
    // The same text again: Telegram says "not modified", which is success.
    tg.edit(&c, &id, &OutgoingContent::from("final"))
        .await
        .expect("not modified is ok");

    tg.typing(&c).await.expect("typing");
    assert_eq!(fake.calls("sendChatAction")[0]["action"], "typing");

    let press = Interaction {
        id: "q1".into(),
        chat: c.clone(),
        sender: "1111".into(),
        sender_name: None,
        data: "a".into(),
        title: None,
        message_id: None,
        is_group: false,
        timestamp_ms: 0,
        respond_by_ms: None,
        from_text: false,
    };
    tg.ack_interaction(&press, Some("Got it"))
        .await
        .expect("answer");
    assert_eq!(
        fake.calls("answerCallbackQuery")[0],
        json!({"callback_query_id": "q1", "text": "Got it"})
    );
    // A replayed press is too old to answer: not an error.
    fake.fail_next("answerCallbackQuery", 400, json!({"ok": false, "error_code": 400,
        "description": "Bad Request: query is too old and response timeout expired or query ID is invalid"}));
    tg.ack_interaction(&press, None)
        .await
        .expect("stale query is fine");
    assert!(tg.capabilities().interactions_require_ack);
}

#[tokio::test]
async fn maps_telegram_errors_onto_classes() {
    let fake = FakeTelegram::start(TOKEN).await;
    let tg = provider(&fake).await;
    let c = chat();
    let error = |code: u16, description: &str| json!({"ok": false, "error_code": code, "description": description});
    let mut too_many = error(429, "Too Many Requests: retry after 7");
    too_many["parameters"] = json!({"retry_after": 7});
    let cases: Refusals<'_, (u16, serde_json::Value), 8> = [
        ((429, too_many), &fakes::rate_limited(7)),
        (
            (403, error(403, "Forbidden: bot was blocked by the user")),
            &|e| {
                matches!(e, ProviderError::RecipientUnreachable { chat, .. } if chat == "1111")
                    && e.class() == ErrorClass::Final
            },
        ),
        (
            (400, error(400, "Bad Request: chat not found")),
            &fakes::unreachable,
        ),
        (
            (400, error(400, "Bad Request: message is too long")),
            &|e| matches!(e, ProviderError::PayloadTooLarge { limit: 4096, .. }),
        ),
        (
            (
                400,
                error(400, "Bad Request: can't parse entities: unexpected end"),
            ),
            &|e| matches!(e, ProviderError::UnsupportedContent { .. }),
        ),
        ((502, error(502, "Bad Gateway")), &fakes::retryable),
        ((502, json!("<html>bad gateway</html>")), &fakes::retryable),
        (
            (
                409,
                error(409, "Conflict: terminated by other getUpdates request"),
            ),
            &fakes::class_is(ErrorClass::Final),
        ),
    ];
    let fail = |(status, body)| fake.fail_next("sendMessage", status, body);
    fakes::assert_refusals(&tg, c.as_str(), fail, &cases).await;

    // A group that became a supergroup: retried once to the new id.
    fake.fail_next(
        "sendMessage",
        400,
        json!({"ok": false, "error_code": 400, "description": "Bad Request: group chat was upgraded to a supergroup chat",
        "parameters": {"migrate_to_chat_id": -1001234567890_i64}}),
    );
    tg.send(&ChatId::from("-4242"), &"to the group".into())
        .await
        .expect("migrated");
    let last = fake.calls("sendMessage");
    assert_eq!(last[last.len() - 1]["chat_id"], json!(-1001234567890_i64));

    // The server is gone: a retryable network error, without the token in it.
    let gone = TelegramProvider::new(
        TelegramConfig::new(TOKEN)
            .api_base("http://127.0.0.1:9")
            .expect("base"),
    )
    .expect("provider");
    fakes::assert_network_error(&gone, &c, "ABC-fake_token").await;
}

#[tokio::test]
async fn downloads_media_through_the_guarded_client() {
    let fake = FakeTelegram::start(TOKEN).await;
    fake.add_file(
        "AgACAgQAAxlarge",
        "photos/file_1.jpg",
        b"\xff\xd8jpeg-bytes",
    );
    let media = MediaRef {
        provider: "telegram".into(),
        token: "AgACAgQAAxlarge".into(),
    };

    let tg = provider(&fake).await;
    assert_eq!(
        tg.download_media(&media).await.expect("download"),
        b"\xff\xd8jpeg-bytes"
    );
    assert_eq!(fake.calls("getFile")[0]["file_id"], "AgACAgQAAxlarge");

    // Without the allow-list, the guard refuses the fake's 127.0.0.1 file URL.
    let strict = TelegramProvider::new(fake.config()).expect("provider");
    let err = strict.download_media(&media).await.expect_err("refused");
    assert!(err.to_string().contains("refused to connect"), "{err}");
    assert!(
        !err.to_string().contains("ABC-fake_token"),
        "token leaked: {err}"
    );

    // An unknown file id is a final API error.
    let missing = MediaRef {
        provider: "telegram".into(),
        token: "AgACAgQAAxmissing".into(),
    };
    assert_eq!(
        tg.download_media(&missing)
            .await
            .expect_err("missing")
            .class(),
        ErrorClass::Final
    );
}

#[tokio::test]
async fn media_refs_round_trip_and_every_rejection() {
    let fake = FakeTelegram::start(TOKEN).await;
    let tg = provider(&fake).await;
    let media = MediaRef {
        provider: "telegram".into(),
        token: "AgACAgQAAxlarge".into(),
    };
    let stored = tg.serialize_media_ref(&media).expect("durable");
    assert_eq!(
        stored,
        StoredMediaRef {
            provider: "telegram".into(),
            v: 1,
            data: json!({"file_id": "AgACAgQAAxlarge"})
        }
    );
    // Through JSON, as the journal stores it.
    let back: StoredMediaRef =
        serde_json::from_str(&serde_json::to_string(&stored).expect("json")).expect("parse");
    assert_eq!(tg.rehydrate_media_ref(&back).expect("rehydrate"), media);

    // not-durable: a token that is no file_id is not journaled.
    assert!(
        tg.serialize_media_ref(&MediaRef {
            provider: "telegram".into(),
            token: "https://x/y".into()
        })
        .is_none()
    );

    fakes::assert_refuses_foreign_refs(
        &tg,
        &stored,
        &[
            json!({"file_id": "../../etc/passwd"}),
            json!("AgACAgQAAxlarge"),
        ],
    );
}

#[test]
fn config_from_env_names_the_variable() {
    use crate::fakes::env;
    assert_eq!(
        TelegramConfig::from_lookup(env(&[])).expect_err("missing"),
        TelegramConfigError::MissingEnv("TELEGRAM_BOT_TOKEN")
    );
    let err = TelegramConfig::from_lookup(env(&[
        ("TELEGRAM_BOT_TOKEN", "1:x"),
        ("TELEGRAM_WEBHOOK_SECRET", "has space"),
    ]))
    .expect_err("bad secret");
    assert!(
        err.to_string().contains("TELEGRAM_WEBHOOK_SECRET")
            && !err.to_string().contains("has space"),
        "{err}"
    );
    let err = TelegramConfig::from_lookup(env(&[
        ("TELEGRAM_BOT_TOKEN", "1:x"),
        ("TELEGRAM_POLL_TIMEOUT_SECS", "0"),
    ]))
    .expect_err("a timeout of 0 would poll back to back");
    assert!(
        matches!(
            err,
            TelegramConfigError::Invalid {
                setting: "TELEGRAM_POLL_TIMEOUT_SECS",
                ..
            }
        ),
        "{err}"
    );
    let cfg = TelegramConfig::from_lookup(env(&[
        ("TELEGRAM_BOT_TOKEN", "1:x"),
        ("TELEGRAM_WEBHOOK_SECRET", "s3cr3t_-"),
        ("TELEGRAM_WEBHOOK_PATH", "/tg"),
    ]))
    .expect("webhook config");
    assert!(matches!(cfg.mode(), TelegramMode::Webhook { path, .. } if path == "/tg"));
    assert!(
        !format!("{cfg:?}").contains("1:x"),
        "the token leaked into Debug"
    );
    let err = TelegramConfig::from_lookup(env(&[
        ("TELEGRAM_BOT_TOKEN", "1:x"),
        ("TELEGRAM_API_BASE", "ftp://x"),
    ]))
    .expect_err("scheme");
    assert!(err.to_string().contains("TELEGRAM_API_BASE"));
}
