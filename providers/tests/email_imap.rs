//! The email provider's IMAP side against a local fake IMAP server: mail that arrives while
//! idling is delivered, IDLE is renewed, the read position survives a restart, a reconnect
//! polls what arrived meanwhile, a mail the bot refused is read again, and a new UIDVALIDITY
//! reads the mailbox again (the inbox then drops the copies by Message-ID).

use crate::fakes;

use std::sync::Arc;
use std::time::Duration;

use crate::fakes::imap::{FakeImap, PASSWORD, USER};
use crate::fakes::smtp::FakeSmtp;
use crate::fakes::{Mode, Recorder};
use botmesh::durability::{DurableKv, MemoryKv};
use botmesh::provider::{Provider, TransportStatus};
use botmesh_providers::email::{EmailConfig, EmailProvider, ImapConfig, Position};

fn mail(n: u32) -> String {
    format!(
        "From: Ana <ana@example.com>\r\nTo: bot@shop.example\r\nSubject: Order {n}\r\n\
Message-ID: <imap-{n}@example.com>\r\nDate: Mon, 1 Dec 2026 10:00:00 +0000\r\n\
Content-Type: text/plain; charset=utf-8\r\n\r\nmessage {n}\r\n"
    )
}

fn config(imap: &FakeImap, smtp: &FakeSmtp, kv: Arc<dyn DurableKv>) -> EmailConfig {
    EmailConfig::new("Shop <bot@shop.example>", &smtp.url(), kv)
        .expect("config")
        .imap(
            ImapConfig::new("127.0.0.1", USER, PASSWORD)
                .port(imap.port())
                .plain()
                .idle_renew(Duration::from_millis(300))
                .reconnect_max(Duration::from_millis(200)),
        )
}

fn texts(rec: &Recorder) -> Vec<String> {
    rec.events()
        .iter()
        .enumerate()
        .map(|(i, _)| match fakes::message_at(&rec.events(), i).content {
            botmesh::message::Content::Text(t) => t,
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn mail_is_read_by_idle_and_the_position_survives_a_restart() {
    let imap = FakeImap::start(7).await;
    let smtp = FakeSmtp::start().await;
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    imap.add(&mail(0)); // there before the first start: not answered
    let email = EmailProvider::new(config(&imap, &smtp, kv.clone())).expect("provider");
    let rec = Recorder::new();
    email.start(rec.sink()).await.expect("start");
    assert!(imap.wait_until(|_, idles| idles >= 1).await, "idling");
    assert_eq!(
        email.imap_position().await.expect("position"),
        Some(Position {
            uid_validity: 7,
            uid: 1
        }),
        "the first start begins at the mailbox's end"
    );
    imap.add(&mail(1));
    imap.add(&mail(2));
    rec.wait_for(2).await;
    assert_eq!(texts(&rec), ["message 1", "message 2"]);
    let m = fakes::message_at(&rec.events(), 0);
    assert_eq!(m.id.0, "imap-1@example.com");
    assert_eq!(m.chat.as_str(), "ana@example.com/imap-1@example.com");
    assert!(rec.statuses().contains(&TransportStatus::Ready));
    // IDLE is ended and issued again before the renewal time runs out.
    let idles = imap.idles();
    assert!(imap.wait_until(|_, n| n >= idles + 2).await, "IDLE renewed");
    email.stop().await.expect("stop");
    assert_eq!(
        email.imap_position().await.expect("position"),
        Some(Position {
            uid_validity: 7,
            uid: 3
        })
    );

    // Mail while the bot is down, then another process on the same store.
    imap.add(&mail(3));
    let again = EmailProvider::new(config(&imap, &smtp, kv)).expect("provider");
    let rec2 = Recorder::new();
    again.start(rec2.sink()).await.expect("start");
    rec2.wait_for(1).await;
    assert!(imap.wait_until(|logins, _| logins >= 2).await);
    assert_eq!(
        texts(&rec2),
        ["message 3"],
        "resumed after the stored position"
    );
    assert_eq!(imap.fetches().last().map(String::as_str), Some("4:*"));
    again.stop().await.expect("stop");
}

#[tokio::test]
async fn a_reconnect_polls_and_a_refused_mail_is_read_again() {
    let imap = FakeImap::start(1).await;
    let smtp = FakeSmtp::start().await;
    let email =
        EmailProvider::new(config(&imap, &smtp, Arc::new(MemoryKv::new()))).expect("provider");
    let rec = Recorder::new();
    email.start(rec.sink()).await.expect("start");
    assert!(imap.wait_until(|_, idles| idles >= 1).await);

    // The bot refuses (stopping): the position stays, and the mail comes again.
    rec.set_mode(Mode::Reject);
    imap.add(&mail(1));
    rec.wait_for_deliveries(1).await;
    rec.set_mode(Mode::Accept);
    assert!(rec.events().is_empty());
    assert!(
        imap.wait_until(|logins, _| logins >= 2).await,
        "reconnected"
    );
    rec.wait_for(1).await;
    assert_eq!(texts(&rec), ["message 1"]);

    // The server drops the connection; mail arrives meanwhile; the reconnect polls it.
    let logins = imap.logins();
    imap.drop_connections();
    imap.add(&mail(2));
    assert!(imap.wait_until(|l, _| l > logins).await);
    rec.wait_for(2).await;
    assert_eq!(texts(&rec), ["message 1", "message 2"]);
    email.stop().await.expect("stop");
}

#[tokio::test]
async fn a_new_uidvalidity_reads_the_mailbox_again() {
    let imap = FakeImap::start(1).await;
    let smtp = FakeSmtp::start().await;
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let email = EmailProvider::new(config(&imap, &smtp, kv.clone())).expect("provider");
    let rec = Recorder::new();
    email.start(rec.sink()).await.expect("start");
    assert!(imap.wait_until(|_, idles| idles >= 1).await);
    imap.add(&mail(1));
    imap.add(&mail(2));
    rec.wait_for(2).await;
    email.stop().await.expect("stop");

    imap.renumber(99);
    let again = EmailProvider::new(config(&imap, &smtp, kv)).expect("provider");
    let rec2 = Recorder::new();
    again.start(rec2.sink()).await.expect("start");
    rec2.wait_for(2).await;
    // The same Message-IDs: the bot's inbox drops them as duplicates.
    let ids: Vec<String> = (0..2)
        .map(|i| fakes::message_at(&rec2.events(), i).id.0)
        .collect();
    assert_eq!(ids, ["imap-1@example.com", "imap-2@example.com"]);
    assert_eq!(
        again.imap_position().await.expect("position"),
        Some(Position {
            uid_validity: 99,
            uid: 2
        })
    );
    again.stop().await.expect("stop");
}
