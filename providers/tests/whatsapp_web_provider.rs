//! The WhatsApp Web provider through its seam, over the fake session (recorded event shapes
//! in a directory): pairing once and restoring the session from the store, one sender for a
//! LID and its phone number, duplicates and replays after a reconnect answered once, a
//! message acknowledged to the server only once the bot's inbox journaled it and left
//! unacknowledged (then delivered again and answered once) when the journal fails, a burst
//! larger than the native client's mailbox delivered whole, sends retried under the same
//! message id, receipts as statuses, error classes, media refs round-tripping and expired
//! media uploaded again by the phone, and a second process on the same session refused.
#![allow(clippy::expect_used)]

use crate::fakes::poll;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::durability::kv::{
    CasOutcome, KvOp, KvRecord, RangeQuery, Versioned, WritePhase, WritePoint,
};
use botmesh::durability::{DurableKv, KvError, MemoryKv, Scope};
use botmesh::durable::DurabilityOptions;
use botmesh::message::{ChatId, Content, MediaKind, Outgoing};
use botmesh::prelude::*;
use botmesh::provider::{
    Accepted, ErrorClass, EventSink, InboundPipeline, MediaUnavailableReason, Provider,
    ProviderError, ProviderEvent, Rejected, TransportStatus,
};
use botmesh_providers::whatsapp_web::{
    FakeFault, FakeSession, PairingPrompt, WaContent, WaMedia, WhatsAppWebConfig, WhatsAppWebError,
    WhatsAppWebProvider, message_id_for,
};

const PN: &str = "15551234567@s.whatsapp.net";
const LID: &str = "100000012345678@lid";

/// Records what the provider delivered.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<ProviderEvent>>,
    statuses: Mutex<Vec<TransportStatus>>,
}

#[async_trait]
impl InboundPipeline for Recorder {
    async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
        self.events.lock().expect("lock").push(event);
        Ok(Accepted::Queued)
    }

    fn transport_status(&self, status: TransportStatus) {
        self.statuses.lock().expect("lock").push(status);
    }

    fn end_of_input(&self) {}
}

impl Recorder {
    fn events(&self) -> Vec<ProviderEvent> {
        self.events.lock().expect("lock").clone()
    }
}

/// The server delivers the text `text` of message `id` from `from` (with its other identity
/// `alt`, when the server names it).
fn says(fake: &FakeSession, id: &str, from: &str, alt: Option<&str>, text: &str) {
    fake.push(&FakeSession::text(id, from, alt, text))
        .expect("push");
}

/// Empty journals, and a fake session in a temporary directory (removed when dropped).
fn fresh() -> (Arc<dyn DurableKv>, tempfile::TempDir, FakeSession) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let fake = FakeSession::new(dir.path().join("wa")).expect("fake session");
    (Arc::new(MemoryKv::new()), dir, fake)
}

fn provider(kv: &Arc<dyn DurableKv>, fake: &FakeSession) -> WhatsAppWebProvider {
    let config = WhatsAppWebConfig::new(Arc::clone(kv))
        .session_lease(Duration::from_millis(600))
        .on_pairing(|_| {});
    WhatsAppWebProvider::new(config, Arc::new(fake.clone())).expect("provider")
}

/// Waits (the fake follows its file on the wall clock) until `done`, at most 20 s.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    assert!(poll::eventually(done).await, "never: {what}");
}

#[tokio::test]
async fn pairs_once_and_a_restart_restores_the_session_from_the_store() {
    let (kv, _dir, fake) = fresh();
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let seen = prompts.clone();
    let config = WhatsAppWebConfig::new(Arc::clone(&kv))
        .pair_phone("+1 555 000 0000")
        .on_pairing(move |p| seen.lock().expect("lock").push(p.clone()));
    let first = WhatsAppWebProvider::new(config, Arc::new(fake.clone())).expect("provider");
    let rec = Arc::new(Recorder::default());
    first.open(EventSink::new(rec.clone())).await.expect("open");
    eventually("connected", || first.is_connected()).await;
    let shown = prompts.lock().expect("lock").clone();
    assert!(
        matches!(shown[0], PairingPrompt::QrCode { .. }),
        "{shown:?}"
    );
    assert!(
        matches!(&shown[1], PairingPrompt::PairCode { code, .. } if code.len() == 8),
        "{shown:?}"
    );
    assert!(
        matches!(shown[2], PairingPrompt::Paired { .. }),
        "{shown:?}"
    );
    assert_eq!(fake.pairings(), 1);
    first.close().await;

    // A new process on the same store: no pairing.
    let fresh = FakeSession::new(fake.dir()).expect("fake");
    let second = provider(&kv, &fresh);
    second
        .open(EventSink::new(rec.clone()))
        .await
        .expect("open");
    eventually("connected again", || second.is_connected()).await;
    assert_eq!(fresh.pairings(), 0, "the session came back from the store");
    assert_eq!(prompts.lock().expect("lock").len(), 3);
    assert!(
        rec.statuses
            .lock()
            .expect("lock")
            .contains(&TransportStatus::Ready)
    );
    second.close().await;
}

#[tokio::test]
async fn a_lid_and_its_phone_number_are_one_chat_and_own_messages_are_not_delivered() {
    let (kv, _dir, fake) = fresh();
    says(&fake, "A1", PN, Some(LID), "hello");
    says(&fake, "A2", LID, None, "again, by LID");
    let mut own = FakeSession::text("A3", PN, None, "from the phone");
    if let botmesh_providers::whatsapp_web::WaEvent::Message(m) = &mut own {
        m.info.source.is_from_me = true;
    }
    fake.push(&own).expect("push");
    says(&fake, "A4", "status@broadcast", None, "a status");
    // The last event of the file, from someone else: the provider hands the session's events
    // over in order, so once it came, every event before it was delivered or left out.
    let last = "15550000000@s.whatsapp.net";
    says(&fake, "A5", last, None, "the last event");
    let p = provider(&kv, &fake);
    let rec = Arc::new(Recorder::default());
    p.open(EventSink::new(rec.clone())).await.expect("open");
    let came = |events: &[ProviderEvent]| events.iter().any(|e| e.chat().as_str() == last);
    eventually("the last event", || came(&rec.events())).await;
    let mut events = rec.events();
    assert_eq!(
        events.pop().map(|e| e.chat().clone()),
        Some(ChatId::from(last))
    );
    assert_eq!(events.len(), 2, "{events:?}");
    for e in &events {
        assert_eq!(e.chat(), &ChatId::from(PN), "{e:?}");
    }
    // The phone number refused (a contact moved to its LID): the same message to the LID.
    fake.fail_next(FakeFault::Unreachable).expect("fault");
    let sent = p
        .send(&ChatId::from(PN), &Outgoing::from("hi"))
        .await
        .expect("sent to the LID");
    let id = sent.message_id.expect("an id").0;
    assert_eq!(fake.delivered_to(LID), ["hi"]);
    assert_eq!(fake.sent()[0].id, id);
    p.close().await;
}

#[tokio::test]
async fn receipts_of_the_bot_s_messages_are_statuses_in_the_person_s_chat() {
    use botmesh_providers::whatsapp_web::WaEvent;
    let (kv, _dir, fake) = fresh();
    // The person is known by both identities; the receipt names the LID only.
    says(&fake, "R1", PN, Some(LID), "hello");
    fake.push(&WaEvent::Receipt {
        chat: LID.to_owned(),
        sender: "100000012345678:4@lid".to_owned(),
        is_group: false,
        ids: vec!["3EB0AA".to_owned(), "3EB0BB".to_owned()],
        status: "read".to_owned(),
    })
    .expect("push");
    let p = provider(&kv, &fake);
    let rec = Arc::new(Recorder::default());
    p.open(EventSink::new(rec.clone())).await.expect("open");
    eventually("a message and two statuses", || rec.events().len() >= 3).await;
    let statuses: Vec<_> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            ProviderEvent::Status(s) => Some((s.chat.0, s.message_id.0, s.status)),
            _ => None,
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (PN.to_owned(), "3EB0AA".to_owned(), "read".to_owned()),
            (PN.to_owned(), "3EB0BB".to_owned(), "read".to_owned()),
        ]
    );
    p.close().await;
}

/// A bot that answers every text with `echo <text>`, durable on `kv`.
async fn echo_bot(kv: &Arc<dyn DurableKv>, fake: &FakeSession) -> Bot {
    let bot = Bot::builder(provider(kv, fake))
        .durability(DurabilityOptions::shared(Arc::clone(kv)))
        .build()
        .expect("bot");
    bot.on_message(|ctx: Ctx| async move {
        let text = ctx.text().to_owned();
        ctx.reply(format!("echo {text}")).await?;
        Ok(())
    });
    bot.start().await.expect("start");
    bot
}

#[tokio::test]
async fn duplicates_and_replays_after_a_reconnect_are_answered_once() {
    let (kv, _dir, fake) = fresh();
    // The server delivers m1 twice (a retry), then m2 by LID.
    says(&fake, "M1", PN, Some(LID), "one");
    says(&fake, "M1", PN, Some(LID), "one");
    says(&fake, "M2", LID, None, "two");
    let bot = echo_bot(&kv, &fake).await;
    eventually("two answers", || fake.delivered_to(PN).len() >= 2).await;
    bot.stop().await.expect("stop");
    assert_eq!(
        fake.acked(),
        ["M1", "M1", "M2"],
        "each delivery acknowledged"
    );

    // A restart whose acknowledgements never reached the server (the process died first):
    // the server delivers every message again, and one new message comes.
    fake.lose_acks().expect("acks lost");
    says(&fake, "M3", PN, None, "three");
    let again = FakeSession::new(fake.dir()).expect("fake");
    let bot = echo_bot(&kv, &again).await;
    eventually("three answers", || fake.delivered_to(PN).len() >= 3).await;
    // M3, the file's last event, was answered: every event before it was journaled (a
    // replay as a duplicate), and a duplicate dispatched would sit in the chat's queue.
    bot.idle().await;
    bot.stop().await.expect("stop");
    assert_eq!(
        fake.delivered_to(PN),
        ["echo one", "echo two", "echo three"]
    );
    assert_eq!(fake.sent().len(), 3, "no send was made twice");
}

/// The bot's durable store, watched: each inbox journal write, once applied, logs the ids
/// the fake server had been acknowledged at that moment; while `failing`, journal writes fail
/// (the backend away). A write is not applied at once, as on a disk: it first lets every
/// other task that is ready run (on a one-thread runtime, the one the ordering test uses),
/// so an acknowledgement sent before the journal write was applied would land in the log.
struct Watched {
    inner: MemoryKv,
    fake: FakeSession,
    journaled: Mutex<Vec<Vec<String>>>,
    failing: AtomicBool,
}

impl Watched {
    fn new(fake: &FakeSession) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryKv::new(),
            fake: fake.clone(),
            journaled: Mutex::new(Vec::new()),
            failing: AtomicBool::new(false),
        })
    }

    fn journaled(&self) -> Vec<Vec<String>> {
        self.journaled.lock().expect("lock").clone()
    }
}

#[async_trait]
impl DurableKv for Watched {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        self.inner.get(scope, key).await
    }
    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        tokio::task::yield_now().await;
        self.inner.apply(scope, op).await
    }
    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        self.inner.scan(scope, query).await
    }
    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        tokio::task::yield_now().await;
        self.inner.batch(scope, ops).await
    }
    fn on_journal_write(&self, point: WritePoint, phase: WritePhase) -> Result<(), KvError> {
        if point != WritePoint::InboxJournal {
            return Ok(());
        }
        match phase {
            WritePhase::Before if self.failing.load(Ordering::SeqCst) => {
                Err(KvError::Unavailable {
                    operation: "journal",
                    source: "the disk is full".into(),
                })
            }
            WritePhase::Before => Ok(()),
            WritePhase::After => {
                let acked = self.fake.acked();
                self.journaled.lock().expect("lock").push(acked);
                Ok(())
            }
        }
    }
}

// One thread: a journal write's `yield_now` (see `Watched`) lets every task that is ready run
// before the write is applied, an acknowledgement sent too early included.
#[tokio::test]
async fn a_message_is_acknowledged_only_once_the_bot_s_inbox_journaled_it() {
    let (_, _dir, fake) = fresh();
    let watched = Watched::new(&fake);
    let kv: Arc<dyn DurableKv> = watched.clone();
    says(&fake, "J1", PN, None, "one");
    says(&fake, "J2", PN, None, "two");
    let bot = echo_bot(&kv, &fake).await;
    eventually("two acknowledgements", || fake.acked().len() >= 2).await;
    eventually("two answers", || fake.delivered_to(PN).len() >= 2).await;
    bot.stop().await.expect("stop");
    assert_eq!(fake.acked(), ["J1", "J2"]);
    // When J1's journal write was applied, nothing was acknowledged; when J2's was, J1 only.
    assert_eq!(
        watched.journaled(),
        [Vec::<String>::new(), vec!["J1".to_owned()]],
        "each acknowledgement follows its journal write"
    );
    assert_eq!(fake.delivered_to(PN), ["echo one", "echo two"]);
}

#[tokio::test]
async fn a_message_the_journal_refused_is_not_acknowledged_and_its_redelivery_is_answered_once() {
    let (_, _dir, fake) = fresh();
    let watched = Watched::new(&fake);
    let kv: Arc<dyn DurableKv> = watched.clone();
    watched.failing.store(true, Ordering::SeqCst);
    says(&fake, "F1", PN, None, "lost?");
    let bot = echo_bot(&kv, &fake).await;
    // Refused, left unacknowledged, delivered again after the fake's reconnect, refused again.
    eventually("two refusals", || fake.not_accepted() >= 2).await;
    assert!(fake.acked().is_empty(), "{:?}", fake.acked());
    assert!(fake.delivered_to(PN).is_empty());
    assert!(watched.journaled().is_empty());

    // The journal is back: the next redelivery is journaled, acknowledged and answered.
    watched.failing.store(false, Ordering::SeqCst);
    eventually("acknowledged", || fake.acked() == ["F1"]).await;
    eventually("answered", || !fake.delivered_to(PN).is_empty()).await;
    bot.stop().await.expect("stop");

    // A restart whose acknowledgement was lost: delivered again, a duplicate for the inbox.
    fake.lose_acks().expect("acks lost");
    let again = FakeSession::new(fake.dir()).expect("fake");
    let bot = echo_bot(&kv, &again).await;
    eventually("acknowledged again", || fake.acked() == ["F1"]).await;
    // Real time, on purpose: a second answer, if any, would reach the fake's file; 200 ms.
    tokio::time::sleep(Duration::from_millis(200)).await;
    bot.stop().await.expect("stop");
    assert_eq!(fake.delivered_to(PN), ["echo lost?"]);
    assert_eq!(fake.sent().len(), 1, "answered once");
}

/// Accepts every event, and now and then not at once (a bot that journals slowly): the
/// acceptance waits for every other task that is ready. The session waits for each acceptance
/// and nothing on its way is timed, so how long a pause lasts does not matter, only that there
/// is one.
#[derive(Default)]
struct Slow(Recorder);

#[async_trait]
impl InboundPipeline for Slow {
    async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
        if self.0.events.lock().expect("lock").len() % 1000 == 999 {
            tokio::task::yield_now().await;
        }
        self.0.deliver(event).await
    }

    fn transport_status(&self, status: TransportStatus) {
        self.0.transport_status(status);
    }

    fn end_of_input(&self) {}
}

#[tokio::test]
async fn a_burst_larger_than_the_client_s_mailbox_loses_nothing() {
    const BURST: usize = 5000;
    let (kv, _dir, fake) = fresh();
    for i in 0..BURST {
        says(&fake, &format!("B{i:05}"), PN, None, "x");
    }
    let p = provider(&kv, &fake);
    let slow = Arc::new(Slow::default());
    p.open(EventSink::new(slow.clone())).await.expect("open");
    // Should some never be acknowledged, the assertions below say which.
    let _ = poll::eventually(|| fake.acked().len() >= BURST).await;
    p.close().await;
    let ids: Vec<String> = slow
        .0
        .events()
        .into_iter()
        .filter_map(|e| match e {
            ProviderEvent::Message(m) => Some(m.id.0),
            _ => None,
        })
        .collect();
    let expected: Vec<String> = (0..BURST).map(|i| format!("B{i:05}")).collect();
    assert_eq!(ids, expected, "every message, in order");
    assert_eq!(fake.acked(), expected);
}

#[tokio::test]
async fn a_send_is_retried_under_the_same_message_id() {
    let (kv, _dir, fake) = fresh();
    // The first attempt reaches the server and its answer is lost; the second meets a
    // server error; the third goes through.
    fake.fail_next(FakeFault::Timeout).expect("fault");
    fake.fail_next(FakeFault::ServerError).expect("fault");
    says(&fake, "R1", PN, None, "retry me");
    let bot = echo_bot(&kv, &fake).await;
    eventually("two sends reached the server", || fake.sent().len() >= 2).await;
    // The send's journal settles: recorded `sent`, no attempt left to make.
    let sent = poll::outbox_settled(&bot).await;
    assert_eq!(
        sent,
        Some(1),
        "the reply recorded sent, nothing left to send"
    );
    bot.idle().await;
    bot.stop().await.expect("stop");
    let sent = fake.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0].id, sent[1].id, "the resend carries the same id");
    assert!(sent[0].id.starts_with("3EB0") && sent[0].id.len() == 20);
    assert_eq!(
        fake.delivered_to(PN),
        ["echo retry me"],
        "the phone shows it once"
    );
}

#[tokio::test]
async fn send_errors_carry_their_retry_classes() {
    let (kv, _dir, fake) = fresh();
    let p = provider(&kv, &fake);
    let chat = ChatId::from(PN);
    let text = Outgoing::from("hi");
    let before = p.send(&chat, &text).await.expect_err("not connected yet");
    assert_eq!(before.class(), ErrorClass::Retryable, "{before}");
    p.open(EventSink::new(Arc::new(Recorder::default())))
        .await
        .expect("open");
    for (fault, class) in [
        (FakeFault::Timeout, ErrorClass::Retryable),
        (FakeFault::ServerError, ErrorClass::Retryable),
        (FakeFault::NotConnected, ErrorClass::Retryable),
        (
            FakeFault::RateLimited,
            ErrorClass::RateLimited(Some(Duration::from_secs(1))),
        ),
        (FakeFault::Unreachable, ErrorClass::Final),
    ] {
        fake.fail_next(fault).expect("fault");
        let e = p.send(&chat, &text).await.expect_err("fails");
        assert_eq!(e.class(), class, "{fault:?}: {e}");
    }
    let sent = p.send(&chat, &text).await.expect("sent");
    assert!(sent.message_id.is_some());
    let url = Outgoing::from(botmesh::message::OutgoingContent::Media {
        media_kind: MediaKind::Image,
        source: botmesh::message::MediaSource::Url {
            url: "https://example.com/a.png".into(),
        },
        caption: None,
        mime: None,
    });
    assert!(matches!(
        p.send(&chat, &url).await,
        Err(ProviderError::UnsupportedContent { .. })
    ));
    assert_eq!(message_id_for(Some("k1")), message_id_for(Some("k1")));
    assert_ne!(message_id_for(Some("k1")), message_id_for(Some("k2")));
    assert_eq!(p.capabilities().text_limit, 65_536);
    p.close().await;
}

fn image(path: &str) -> WaMedia {
    WaMedia {
        kind: MediaKind::Image,
        direct_path: path.to_owned(),
        media_key: vec![7; 32],
        file_sha256: vec![1; 32],
        file_enc_sha256: vec![2; 32],
        file_length: 5,
        mimetype: Some("image/jpeg".into()),
        caption: Some("a photo".into()),
        file_name: None,
    }
}

#[tokio::test]
async fn media_refs_round_trip_and_expired_media_is_uploaded_again() {
    let (kv, _dir, fake) = fresh();
    let path = "/v/t62.7118-24/old.enc";
    fake.put_media(path, b"JPEG!").expect("media");
    fake.push(&FakeSession::message(
        "P1",
        PN,
        None,
        WaContent::Media(image(path)),
    ))
    .expect("push");
    let p = provider(&kv, &fake);
    let rec = Arc::new(Recorder::default());
    p.open(EventSink::new(rec.clone())).await.expect("open");
    eventually("the photo", || !rec.events().is_empty()).await;
    let ProviderEvent::Message(m) = &rec.events()[0] else {
        panic!("not a message");
    };
    let Content::Media(media) = &m.content else {
        panic!("not media: {m:?}");
    };
    assert_eq!((media.kind, media.size), (MediaKind::Image, Some(5)));
    assert_eq!(media.caption.as_deref(), Some("a photo"));

    // Journaled and read back (after a restart: a new provider).
    let stored = p.serialize_media_ref(&media.media_ref).expect("durable");
    let json = serde_json::to_string(&stored).expect("json");
    assert!(!json.contains("http"), "no URL journaled: {json}");
    let back: botmesh::provider::StoredMediaRef = serde_json::from_str(&json).expect("json");
    let again = provider(&kv, &fake);
    let rehydrated = again.rehydrate_media_ref(&back).expect("rehydrated");
    assert_eq!(rehydrated, media.media_ref);
    assert_eq!(
        p.download_media(&rehydrated).await.expect("download"),
        b"JPEG!"
    );

    // The CDN copy expired: the phone uploads it again.
    fake.expire_media(path, Some("/v/t62.7118-24/new.enc"))
        .expect("expire");
    assert_eq!(
        p.download_media(&rehydrated).await.expect("re-upload"),
        b"JPEG!"
    );
    // The phone no longer has it either.
    fake.expire_media(path, None).expect("expire");
    assert!(matches!(
        p.download_media(&rehydrated).await,
        Err(ProviderError::MediaUnavailable {
            reason: MediaUnavailableReason::Expired,
            ..
        })
    ));

    // Tampered with, or another provider's.
    let mut bad = back.clone();
    bad.data["media"]["media_key"] = serde_json::json!("AAAA");
    assert!(matches!(
        again.rehydrate_media_ref(&bad),
        Err(ProviderError::MediaUnavailable {
            reason: MediaUnavailableReason::RehydrateFailed,
            ..
        })
    ));
    let mut other = back;
    other.provider = "telegram".into();
    assert!(matches!(
        again.rehydrate_media_ref(&other),
        Err(ProviderError::MediaUnavailable {
            reason: MediaUnavailableReason::ProviderMismatch,
            ..
        })
    ));
    p.close().await;
}

#[tokio::test]
async fn a_second_process_on_the_same_session_is_refused() {
    let (kv, _dir, fake) = fresh();
    let first = provider(&kv, &fake);
    first
        .open(EventSink::new(Arc::new(Recorder::default())))
        .await
        .expect("open");
    let config = WhatsAppWebConfig::new(Arc::clone(&kv))
        .session_lease(Duration::from_millis(600))
        .session_wait(Duration::from_millis(700))
        .on_pairing(|_| {});
    let other = FakeSession::new(fake.dir()).expect("fake");
    let second = WhatsAppWebProvider::new(config, Arc::new(other.clone())).expect("provider");
    // The first renews its lock while it runs: the second waits past a lease, then gives up.
    let refused = second
        .open(EventSink::new(Arc::new(Recorder::default())))
        .await
        .expect_err("refused");
    assert!(
        matches!(&refused, WhatsAppWebError::SessionHeld { session, holder: Some(_) } if session == "default"),
        "{refused}"
    );
    let as_provider = second
        .start(EventSink::new(Arc::new(Recorder::default())))
        .await
        .expect_err("refused");
    assert!(
        matches!(&as_provider, ProviderError::Api { code: Some(c), retryable: false, .. } if c == "session-held"),
        "{as_provider}"
    );
    assert_eq!(other.connects(), 0, "the refused process never connected");
    // Once the first stops (its lock given back), the second takes the session at once.
    first.close().await;
    second
        .open(EventSink::new(Arc::new(Recorder::default())))
        .await
        .expect("open after the first stopped");
    assert_eq!(other.connects(), 1);
    second.close().await;
}
