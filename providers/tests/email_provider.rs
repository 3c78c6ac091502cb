//! The email provider against a local fake SMTP server and its inbound-parse routes: the
//! threading headers and our own Message-ID of a reply, auto-submitted / list / bounce mail
//! not answered, the Mailgun signature (forged, stale, replayed), the SendGrid secret, the same
//! mail answered once however often it comes, 4xx retried and 5xx dead-lettered, and
//! attachments as media refs that survive a restart.

use crate::fakes;

use std::sync::Arc;

use crate::fakes::smtp::{FakeSmtp, Stage};
use botmesh::durability::{DurableKv, MemoryKv};
use botmesh::message::{ChatId, Content, MediaKind, MediaSource, Outgoing, OutgoingContent};
use botmesh::provider::{ErrorClass, Provider, ProviderError};
use botmesh_providers::email::{EmailConfig, EmailProvider, mailgun_signature};

const KEY: &str = "mailgun-signing-key";
const SECRET: &str = "sendgrid-secret-0123456789";
const BOT: &str = "Shop <bot@shop.example>";

fn config(smtp: &FakeSmtp, kv: Arc<dyn DurableKv>) -> EmailConfig {
    EmailConfig::new(BOT, &smtp.url(), kv)
        .expect("config")
        .mailgun(KEY, "/email/mailgun")
        .expect("mailgun")
        .sendgrid(SECRET, "/email/sendgrid")
        .expect("sendgrid")
        .subject("Your order")
}

/// The fake SMTP server and a provider on it, its threads in memory.
async fn started() -> (FakeSmtp, EmailProvider) {
    fakes::provided(FakeSmtp::start().await, |smtp| {
        EmailProvider::new(config(smtp, Arc::new(MemoryKv::new())))
    })
}

fn now_secs() -> i64 {
    botmesh::clock::now_ms() / 1000
}

/// Mailgun's fields of a mail from Ana (parsed, no attachment).
fn mailgun_fields(
    message_id: &str,
    extra_headers: &[(&str, &str)],
    body: &str,
) -> Vec<(String, String)> {
    let mut headers = vec![
        ("From", "Ana <ana@example.com>"),
        ("To", "bot@shop.example"),
        ("Subject", "Order 42"),
        ("Message-Id", message_id),
    ];
    headers.extend_from_slice(extra_headers);
    let headers_json = serde_json::to_string(
        &headers
            .iter()
            .map(|(n, v)| [(*n).to_owned(), (*v).to_owned()])
            .collect::<Vec<_>>(),
    )
    .expect("json");
    vec![
        ("recipient".into(), "bot@shop.example".into()),
        ("sender".into(), "ana@example.com".into()),
        ("from".into(), "Ana <ana@example.com>".into()),
        ("subject".into(), "Order 42".into()),
        ("body-plain".into(), body.into()),
        ("message-headers".into(), headers_json),
    ]
}

/// Posts Mailgun `fields` signed with `key` at `timestamp` with `token`.
async fn post_mailgun(
    base: &str,
    fields: &[(String, String)],
    key: &str,
    timestamp: i64,
    token: &str,
) -> u16 {
    let ts = timestamp.to_string();
    let mut form = fields.to_vec();
    form.push(("timestamp".into(), ts.clone()));
    form.push(("token".into(), token.into()));
    form.push(("signature".into(), mailgun_signature(key, &ts, token)));
    fakes::client()
        .post(format!("{base}/email/mailgun"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(&form).expect("form"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// A SendGrid Inbound Parse body (multipart): `headers`, `text`, `from`, and files.
fn sendgrid_body(headers: &str, text: &str, files: &[(&str, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "xYzZY";
    let mut body = Vec::new();
    let mut field = |name: &str, value: &str| {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    };
    field("headers", headers);
    field("text", text);
    field("from", "Ana <ana@example.com>");
    field("to", "bot@shop.example");
    field("attachments", &files.len().to_string());
    for (i, (name, ct, bytes)) in files.iter().enumerate() {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"attachment{}\"; filename=\"{name}\"\r\nContent-Type: {ct}\r\n\r\n",
                i + 1
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn post_sendgrid(url: &str, content_type: &str, body: Vec<u8>) -> u16 {
    fakes::client()
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// A durable pong bot on the email provider, its routes served: the fake SMTP server, the
/// webhook server and its base URL, the bot (started).
async fn pong_shop() -> (
    FakeSmtp,
    botmesh_providers::webhook::RunningWebhookServer,
    String,
    botmesh::prelude::Bot,
) {
    let (smtp, email) = started().await;
    let (server, base) = fakes::mount(email.webhook_routes()).await;
    let bot = fakes::durable_pong_bot(email.clone());
    bot.start().await.expect("start");
    (smtp, server, base, bot)
}

/// Mailgun's fields of mail `id` in the thread rooted at `root`.
fn in_thread(id: &str, root: &str, body: &str) -> Vec<(String, String)> {
    mailgun_fields(id, &[("References", root), ("In-Reply-To", root)], body)
}

const SG_HEADERS: &str = "From: Ana <ana@example.com>\r\nTo: bot@shop.example\r\nSubject: Re: Order 42\r\nMessage-ID: <sg-1@example.com>\r\nIn-Reply-To: <root-42@example.com>\r\nReferences: <root-42@example.com>\r\nDate: Mon, 1 Dec 2026 10:00:00 +0000";

#[tokio::test]
async fn a_reply_threads_carries_our_message_id_and_is_marked_auto_replied() {
    let (smtp, server, base, bot) = pong_shop().await;

    let fields = in_thread(
        "<m1@example.com>",
        "<root@example.com>",
        "Two please.\r\n\r\nOn Mon, 1 Dec 2026, Shop <bot@shop.example> wrote:\r\n> How many?\r\n",
    );
    assert_eq!(
        post_mailgun(&base, &fields, KEY, now_secs(), "tok-1").await,
        200
    );
    let mails = smtp.wait_for(1).await;
    assert_eq!(mails.len(), 1, "one reply");
    let reply = &mails[0];
    assert_eq!(reply.to, ["<ana@example.com>"]);
    assert_eq!(
        reply.header("In-Reply-To").as_deref(),
        Some("<m1@example.com>")
    );
    assert_eq!(
        reply.header("References").as_deref(),
        Some("<root@example.com> <m1@example.com>")
    );
    assert_eq!(reply.header("Subject").as_deref(), Some("Re: Order 42"));
    assert_eq!(
        reply.header("Auto-Submitted").as_deref(),
        Some("auto-replied")
    );
    let id = reply.header("Message-ID").expect("message id");
    assert!(
        id.starts_with("<bm.") && id.ends_with("@shop.example>"),
        "{id}"
    );
    assert!(
        reply.data.contains("pong: Two please."),
        "the quote is cut: {}",
        reply.data
    );
    assert!(!reply.data.contains("How many"), "{}", reply.data);

    bot.stop_with(fakes::drained()).await.expect("stop");
    server.shutdown().await;
}

#[tokio::test]
async fn a_send_to_a_bare_address_starts_a_thread_and_the_message_id_follows_the_send_key() {
    let (smtp, email) = started().await;
    let chat = ChatId("ana@example.com".into());
    let sent = email
        .send(&chat, &Outgoing::from("Your order shipped"))
        .await
        .expect("send");
    let mails = smtp.wait_for(1).await;
    let mail = &mails[0];
    assert_eq!(mail.header("Subject").as_deref(), Some("Your order"));
    assert_eq!(mail.header("In-Reply-To"), None);
    assert_eq!(
        mail.header("Auto-Submitted").as_deref(),
        Some("auto-generated")
    );
    let id = sent.message_id.expect("id").0;
    assert_eq!(mail.header("Message-ID"), Some(format!("<{id}>")));
    let not_mail = email
        .send(&ChatId("12345".into()), &Outgoing::from("x"))
        .await;
    assert!(
        matches!(not_mail, Err(ProviderError::RecipientUnreachable { .. })),
        "{not_mail:?}"
    );
}

#[tokio::test]
async fn robots_lists_and_bounces_are_not_answered() {
    let (_smtp, email) = started().await;
    let (rec, server, base) = fakes::started(&email, email.webhook_routes()).await;
    let cases: [(&str, &[(&str, &str)]); 5] = [
        ("<auto@example.com>", &[("Auto-Submitted", "auto-replied")]),
        ("<ooo@example.com>", &[("X-Autoreply", "yes")]),
        ("<bulk@example.com>", &[("Precedence", "bulk")]),
        ("<list@example.com>", &[("List-Id", "<news.example.com>")]),
        ("<bounce@example.com>", &[("Return-Path", "<>")]),
    ];
    for (i, (id, headers)) in cases.iter().enumerate() {
        let fields = mailgun_fields(id, headers, "I am away");
        let status = post_mailgun(&base, &fields, KEY, now_secs(), &format!("t{i}")).await;
        assert_eq!(status, 200, "{id}: acknowledged, so Mailgun does not retry");
    }
    // A person's mail after them is delivered: the drops were not errors.
    let fields = mailgun_fields("<human@example.com>", &[("Auto-Submitted", "no")], "Hello");
    assert_eq!(
        post_mailgun(&base, &fields, KEY, now_secs(), "t-human").await,
        200
    );
    let events = rec.wait_for(1).await;
    assert_eq!(events.len(), 1);
    assert_eq!(fakes::message_at(&events, 0).id.0, "human@example.com");
    server.shutdown().await;
}

#[tokio::test]
async fn a_forged_a_stale_and_a_replayed_mailgun_post_are_refused() {
    let (_smtp, email) = started().await;
    let (rec, server, base) = fakes::started(&email, email.webhook_routes()).await;
    let fields = mailgun_fields("<m1@example.com>", &[], "Hello");

    assert_eq!(
        post_mailgun(&base, &fields, "not-the-key", now_secs(), "a").await,
        403
    );
    assert_eq!(
        post_mailgun(&base, &fields, KEY, now_secs() - 3600, "b").await,
        403,
        "stale"
    );
    let unsigned = serde_urlencoded::to_string(&fields).expect("form");
    let url = format!("{base}/email/mailgun");
    assert_eq!(fakes::post_form(&url, [], &unsigned).await, 401);
    assert!(rec.events().is_empty());

    let ts = now_secs();
    assert_eq!(post_mailgun(&base, &fields, KEY, ts, "c").await, 200);
    assert_eq!(
        post_mailgun(&base, &fields, KEY, ts, "c").await,
        403,
        "replayed token"
    );
    assert_eq!(rec.wait_for(1).await.len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn sendgrid_posts_need_the_secret_in_the_path_or_basic_auth() {
    let (_smtp, email) = started().await;
    let (rec, server, base) = fakes::started(&email, email.webhook_routes()).await;
    let (ct, body) = sendgrid_body(SG_HEADERS, "Hello", &[]);
    assert_eq!(
        post_sendgrid(&format!("{base}/email/sendgrid"), &ct, body.clone()).await,
        401
    );
    assert_eq!(
        post_sendgrid(
            &format!("{base}/email/sendgrid/wrong-secret"),
            &ct,
            body.clone()
        )
        .await,
        403
    );
    assert!(rec.events().is_empty());
    assert_eq!(
        post_sendgrid(
            &format!("{base}/email/sendgrid/{SECRET}"),
            &ct,
            body.clone()
        )
        .await,
        200
    );
    let with_auth = fakes::client()
        .post(format!("{base}/email/sendgrid"))
        .basic_auth("sendgrid", Some(SECRET))
        .header("content-type", &ct)
        .body(body)
        .send()
        .await
        .expect("post");
    assert_eq!(with_auth.status().as_u16(), 200);
    let events = rec.wait_for(2).await;
    let m = fakes::message_at(&events, 0);
    assert_eq!(m.chat.as_str(), "ana@example.com/root-42@example.com");
    assert_eq!(m.sender.0, "ana@example.com");
    assert_eq!(m.content, Content::Text("Hello".into()));
    server.shutdown().await;
}

#[tokio::test]
async fn the_same_mail_through_mailgun_twice_and_sendgrid_is_answered_once() {
    let (smtp, server, base, bot) = pong_shop().await;

    let fields = in_thread("<sg-1@example.com>", "<root-42@example.com>", "Hello");
    assert_eq!(
        post_mailgun(&base, &fields, KEY, now_secs(), "d1").await,
        200
    );
    assert_eq!(
        post_mailgun(&base, &fields, KEY, now_secs(), "d2").await,
        200,
        "a retry"
    );
    let (ct, body) = sendgrid_body(SG_HEADERS, "Hello", &[]);
    assert_eq!(
        post_sendgrid(&format!("{base}/email/sendgrid/{SECRET}"), &ct, body).await,
        200
    );
    assert_eq!(smtp.wait_for(1).await.len(), 1);
    bot.stop_with(fakes::drained()).await.expect("stop");
    assert_eq!(smtp.mails().len(), 1, "answered once");
    server.shutdown().await;
}

#[tokio::test]
async fn smtp_4xx_is_retried_5xx_is_final_and_no_connection_is_retryable() {
    let (smtp, email) = started().await;
    let chat = ChatId("ana@example.com".into());
    let hi = Outgoing::from("hi");

    smtp.fail_next(Stage::Rcpt, "451 4.7.1 greylisted, try later");
    let e = email.send(&chat, &hi).await.expect_err("4xx");
    assert_eq!(e.class(), ErrorClass::Retryable, "{e}");
    smtp.fail_next(Stage::Data, "452 4.3.1 insufficient storage");
    assert_eq!(
        email.send(&chat, &hi).await.expect_err("4xx").class(),
        ErrorClass::Retryable
    );
    smtp.fail_next(Stage::Rcpt, "550 5.1.1 no such user");
    let e = email.send(&chat, &hi).await.expect_err("5xx");
    assert!(
        matches!(e, ProviderError::RecipientUnreachable { .. }),
        "{e}"
    );
    smtp.fail_next(Stage::Data, "554 5.7.1 rejected as spam");
    let e = email.send(&chat, &hi).await.expect_err("5xx");
    assert!(
        matches!(
            e,
            ProviderError::Api {
                status: Some(554),
                retryable: false,
                ..
            }
        ),
        "{e}"
    );
    assert!(smtp.mails().is_empty());

    let nobody =
        EmailConfig::new(BOT, "smtp://127.0.0.1:9", Arc::new(MemoryKv::new())).expect("config");
    let e = fakes::refused_send(EmailProvider::new(nobody), "ana@example.com").await;
    assert!(matches!(e, ProviderError::Network { .. }), "{e}");

    // Through the bot's outbox: a 4xx is retried until the mail goes out, once.
    let bot = fakes::durable_bot(email.clone());
    bot.start().await.expect("start");
    smtp.fail_next(Stage::Data, "451 4.4.5 try again");
    smtp.fail_next(Stage::Data, "421 4.4.2 closing");
    bot.send(chat.clone(), Outgoing::from("retried"))
        .await
        .expect("accepted");
    let mails = smtp.wait_for(1).await;
    assert_eq!(mails.len(), 1);
    assert!(mails[0].data.contains("retried"));
    // A 5xx is dead-lettered: never sent.
    smtp.fail_next(Stage::Data, "554 5.7.1 rejected");
    let e = bot.send(chat.clone(), Outgoing::from("rejected")).await;
    assert!(e.is_err(), "a final error reaches the caller: {e:?}");
    bot.stop_with(fakes::drained()).await.expect("stop");
    assert_eq!(smtp.mails().len(), 1);
}

#[tokio::test]
async fn attachments_are_media_refs_that_survive_a_restart() {
    let smtp = FakeSmtp::start().await;
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let email = EmailProvider::new(config(&smtp, kv.clone())).expect("provider");
    let (rec, server, base) = fakes::started(&email, email.webhook_routes()).await;
    let pdf: &[u8] = b"%PDF-1.4\n\x00\x01\xff binary";
    let (ct, body) = sendgrid_body(SG_HEADERS, "", &[("order.pdf", "application/pdf", pdf)]);
    assert_eq!(
        post_sendgrid(&format!("{base}/email/sendgrid/{SECRET}"), &ct, body).await,
        200
    );
    let events = rec.wait_for(1).await;
    let m = fakes::message_at(&events, 0);
    assert_eq!(
        m.id.0, "sg-1@example.com",
        "an attachment alone takes the mail's id"
    );
    let Content::Media(media) = &m.content else {
        panic!("not media: {:?}", m.content)
    };
    assert_eq!(media.kind, MediaKind::Document);
    assert_eq!(media.file_name.as_deref(), Some("order.pdf"));
    assert!(media.media_ref.token.starts_with("sg-1@example.com|0|"));
    let stored = email
        .serialize_media_ref(&media.media_ref)
        .expect("durable");
    assert_eq!(stored.data["attachment"], media.media_ref.token);
    server.shutdown().await;
    email.stop().await.expect("stop");

    // Another process on the same store.
    let again = EmailProvider::new(config(&smtp, kv)).expect("provider");
    let back = again.rehydrate_media_ref(&stored).expect("rehydrate");
    assert_eq!(again.download_media(&back).await.expect("download"), pdf);
    let mut forged = back.clone();
    forged.token = format!("sg-1@example.com|0|{}", "0".repeat(64));
    assert!(matches!(
        again.download_media(&forged).await,
        Err(ProviderError::MediaUnavailable { .. })
    ));
    // Sent back as an attachment of a reply.
    let chat = m.chat.clone();
    let out = Outgoing::from(OutgoingContent::Media {
        media_kind: MediaKind::Document,
        source: MediaSource::Token {
            token: back.token.clone(),
        },
        caption: Some("Your invoice".into()),
        mime: Some("application/pdf".into()),
    });
    again.send(&chat, &out).await.expect("send");
    let mails = smtp.wait_for(1).await;
    assert!(
        mails[0].data.contains("Content-Type: application/pdf"),
        "{}",
        mails[0].data
    );
    assert_eq!(
        mails[0].header("In-Reply-To").as_deref(),
        Some("<sg-1@example.com>")
    );
}

#[tokio::test]
async fn the_config_reads_the_environment() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let env = fakes::env(&[
        ("EMAIL_FROM", "Shop <bot@shop.example>"),
        ("EMAIL_SMTP_URL", "smtp://127.0.0.1:2525"),
        ("EMAIL_IMAP_HOST", "imap.shop.example"),
        ("EMAIL_IMAP_USER", "bot"),
        ("EMAIL_IMAP_PASSWORD", "pw"),
        ("EMAIL_MAILGUN_SIGNING_KEY", "key"),
    ]);
    let config = EmailConfig::from_lookup(kv.clone(), env).expect("config");
    let shown = format!("{config:?}");
    assert!(
        shown.contains("imap.shop.example") && !shown.contains("pw"),
        "{shown}"
    );
    let missing = EmailConfig::from_lookup(kv.clone(), fakes::env(&[("EMAIL_FROM", "a@b.c")]));
    assert!(missing.is_err());
    let bad = EmailConfig::from_lookup(
        kv,
        fakes::env(&[
            ("EMAIL_FROM", "not a mailbox"),
            ("EMAIL_SMTP_URL", "smtp://x"),
        ]),
    );
    assert!(bad.is_err());
}
