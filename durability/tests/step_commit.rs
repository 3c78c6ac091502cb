//! A flow step's journal operations committed with its checkpoint in one transaction
//! (`KvDurability::step` + `Store::commit_step`), on every store that shares its transactions
//! with its journal (SQLite; PostgreSQL when `BOTMESH_TEST_POSTGRES_URL` is set; Redis, in one
//! script, when `BOTMESH_TEST_REDIS_URL` is set), through one
//! factory ([`setup`]): what lands together, and how the two kinds of conflict are resolved
//! (a heartbeat moved the inbound's version; a send's key was recorded before, with the same
//! content or, under a derived key, other content). "One write request" is checked where the
//! store counts them (SQLite's writer).
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used, clippy::print_stderr)]

use crate::servers;

use std::sync::Arc;

use botmesh_durability::config::OnDiverged;
use botmesh_durability::inbox::InboxJournalClaim;
use botmesh_durability::inbox::NewInbound;
use botmesh_durability::keys::KeyKind;
use botmesh_durability::keys::SendKey;
use botmesh_durability::leases::InboxLease;
use botmesh_durability::outbox::NewSend;
use botmesh_durability::store::FlowCheckpoint;
use botmesh_durability::store::{CheckpointWrite, StepCommit, StepCommitOutcome};
use botmesh_durability::{
    DurabilityConfig, DurableKv, InboxState, KvDurability, OutboxState, Scope, StepConflict,
    StepSend, Store, keys,
};

/// A store whose transactions the journal shares.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
    Redis,
}

/// A fresh store of `Backend` and its journal backend; it derefs to the store.
struct Env {
    store: Arc<dyn Store>,
    kv: Arc<dyn DurableKv>,
    /// The store's count of write requests, where it keeps one.
    requests: Option<Box<dyn Fn() -> u64 + Send + Sync>>,
    /// What keeps the store's files or tables alive.
    _guard: Box<dyn std::any::Any + Send>,
}

impl std::ops::Deref for Env {
    type Target = dyn Store;

    fn deref(&self) -> &Self::Target {
        &*self.store
    }
}

impl Env {
    fn requests(&self) -> Option<u64> {
        self.requests.as_ref().map(|count| count())
    }

    /// Asserts that one write request ran since `before` (where the store counts them).
    fn assert_one_write(&self, before: Option<u64>) {
        if let (Some(now), Some(before)) = (self.requests(), before) {
            assert_eq!(now - before, 1, "one write request");
        }
    }
}

/// A fresh store of `b` (`None`: its server is not configured).
async fn env(b: Backend) -> Option<Env> {
    match b {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let store = botmesh_durability::SqliteStore::connect(dir.path().join("bot.db"))
                .await
                .unwrap();
            let kv: Arc<dyn DurableKv> = Arc::new(store.durability_kv());
            let counted = store.clone();
            Some(Env {
                store: Arc::new(store),
                kv,
                requests: Some(Box::new(move || counted.write_stats().requests)),
                _guard: Box::new(dir),
            })
        }
        Backend::Postgres => postgres_env().await,
        Backend::Redis => redis_env().await,
    }
}

#[cfg(feature = "redis")]
async fn redis_env() -> Option<Env> {
    use botmesh_durability::backends::redis::RedisConfig;
    let rd = servers::redis_server::Rd::new()?;
    let prefix = rd.prefix();
    let store =
        botmesh_durability::RedisStore::open_with(&rd.url, RedisConfig::new().prefix(&prefix))
            .await
            .unwrap();
    // A journal backend opened on its own, with the same URL and prefix: it shares the
    // store's transactions as the store's own journal backend does.
    let kv: Arc<dyn DurableKv> = Arc::new(rd.kv(&prefix).await);
    assert!(store.shares_transactions_with(&*kv));
    assert!(store.shares_transactions_with(&*store.journal_backend().unwrap()));
    assert!(!store.shares_transactions_with(&rd.kv(&format!("{prefix}x")).await));
    Some(Env {
        store: Arc::new(store),
        kv,
        requests: None,
        _guard: Box::new(rd),
    })
}

#[cfg(not(feature = "redis"))]
async fn redis_env() -> Option<Env> {
    eprintln!("the Redis step-commit suite was SKIPPED: build with the redis feature");
    None
}

#[cfg(feature = "postgres")]
async fn postgres_env() -> Option<Env> {
    let pg = servers::postgres::Pg::new()?;
    let config =
        botmesh_durability::backends::postgres::PostgresConfig::new().table_prefix(pg.prefix());
    let store = botmesh_durability::PostgresStore::connect_with(&pg.url, config)
        .await
        .unwrap();
    let kv: Arc<dyn DurableKv> = Arc::new(store.durability_kv());
    Some(Env {
        store: Arc::new(store),
        kv,
        requests: None,
        _guard: Box::new(pg),
    })
}

#[cfg(not(feature = "postgres"))]
async fn postgres_env() -> Option<Env> {
    eprintln!("the Postgres step-commit suite was SKIPPED: build with the postgres feature");
    None
}

async fn setup(b: Backend) -> Option<(Env, KvDurability, InboxLease)> {
    setup_with(b, DurabilityConfig::default()).await
}

async fn setup_with(
    b: Backend,
    config: DurabilityConfig,
) -> Option<(Env, KvDurability, InboxLease)> {
    let store = env(b).await?;
    let d = KvDurability::new(Arc::clone(&store.kv), Scope::custom("bot"), config).unwrap();
    let new = NewInbound::new("alice", "m1", serde_json::json!({"text": "pears"}));
    let InboxJournalClaim::Claimed(claimed) = d.inbox().journal_and_claim(new).await.unwrap()
    else {
        panic!("a new message is claimed");
    };
    Some((store, d, claimed.lease))
}

fn checkpoint(step: u64) -> FlowCheckpoint {
    FlowCheckpoint {
        chat: "alice".into(),
        flow: "order".into(),
        layout_hash: 7,
        state: serde_json::json!({"Quantity": {"item": "pears"}}),
        inbound_id: Some("alice/m1".into()),
        step,
        updated_ms: 1,
    }
}

fn send(key: &str, text: &str) -> NewSend {
    NewSend::new(
        SendKey::with_kind(key, KeyKind::Derived),
        "alice",
        serde_json::json!({"text": text}),
    )
}

/// Commits `journal` with a checkpoint, resolving conflicts as the runtime does.
async fn commit(
    store: &Env,
    d: &KvDurability,
    mut journal: botmesh_durability::StepJournal<'_, dyn DurableKv>,
) -> (Vec<botmesh_durability::outbox::OutboxRecord>, usize) {
    let mut step = StepCommit::new(d.scope().clone(), CheckpointWrite::Save(checkpoint(2)));
    let mut conflicts = 0;
    loop {
        step.journal = journal.ops();
        journal.before_commit().unwrap();
        match store.commit_step(&step).await.unwrap() {
            StepCommitOutcome::Committed(outcomes) => {
                let sends = journal.committed(&outcomes).unwrap();
                return (sends.into_iter().map(|s| s.record).collect(), conflicts);
            }
            StepCommitOutcome::Conflict { op, .. } => {
                conflicts += 1;
                assert!(conflicts < 4, "conflicts resolve");
                assert_eq!(
                    journal.resolve_conflict(op).await.unwrap(),
                    StepConflict::Retry
                );
            }
        }
    }
}

async fn a_step_lands_whole_after_a_heartbeat_moved_the_inbound(b: Backend) {
    let Some((store, d, lease)) = setup(b).await else {
        return;
    };
    let mut journal = d.step();
    let StepSend::Journaled { key, parts } = journal
        .send(send("alice/m1:order/q#1", "How many?"), Vec::new())
        .unwrap()
    else {
        panic!("journaled");
    };
    assert_eq!((key.as_str(), parts), ("alice/m1:order/q#1", 1));
    journal.complete_inbound(&lease).await.unwrap();
    // A heartbeat between the step's preparation and its commit changes the inbound's version.
    d.inbox().heartbeat(&lease).await.unwrap();
    let (records, conflicts) = commit(&store, &d, journal).await;
    assert_eq!(conflicts, 1, "the inbound's version moved once");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].state, OutboxState::Pending);
    assert_eq!(
        record(&d, "alice/m1:order/q#1").await.state,
        OutboxState::Pending
    );
    assert_eq!(
        d.inbox().get(&lease.id).await.unwrap().unwrap().state,
        InboxState::Done
    );
    assert_eq!(store.checkpoint("alice").await.unwrap().unwrap().step, 2);
}

async fn a_send_recorded_before_is_answered_from_its_record(b: Backend) {
    let Some((store, d, lease)) = setup(b).await else {
        return;
    };
    // An earlier run, outside a step transaction, journaled the same key.
    journaled(&d, "alice/m1:order/q#1", "How many?").await;
    let mut journal = d.step();
    journal
        .send(send("alice/m1:order/q#1", "How many?"), Vec::new())
        .unwrap();
    journal
        .send(send("alice/m1:order/q#2", "Say a number"), Vec::new())
        .unwrap();
    journal.complete_inbound(&lease).await.unwrap();
    let (records, conflicts) = commit(&store, &d, journal).await;
    assert_eq!(conflicts, 1);
    let keys: Vec<_> = records.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        ["alice/m1:order/q#1", "alice/m1:order/q#2"],
        "in order"
    );
    assert_eq!(
        d.inbox().get(&lease.id).await.unwrap().unwrap().state,
        InboxState::Done
    );
    assert_eq!(d.metrics().outbox_deduped, 1);
}

/// A derived key recorded before with other content (the replay took another path): the
/// step counts it in `outbox_diverged` and follows `on_diverged`, as a send outside a step
/// does: `send` (the default) journals the new content under the diverged key, `skip`
/// answers it from the recorded send.
async fn a_derived_key_recorded_with_other_content_follows_on_diverged(b: Backend) {
    for policy in [OnDiverged::Send, OnDiverged::Skip] {
        let mut config = DurabilityConfig::default();
        config.outbox.on_diverged = policy;
        let Some((store, d, lease)) = setup_with(b, config).await else {
            return;
        };
        let key = "alice/m1:order/q#1";
        d.outbox()
            .journal(send(key, "What would you like?"))
            .await
            .unwrap();
        let mut journal = d.step();
        journal.send(send(key, "How many?"), Vec::new()).unwrap();
        journal.complete_inbound(&lease).await.unwrap();
        let (records, conflicts) = commit(&store, &d, journal).await;
        assert_eq!(conflicts, 1, "{policy:?}");
        assert_eq!(d.metrics().outbox_diverged, 1, "{policy:?}");
        let text =
            |r: &botmesh_durability::outbox::OutboxRecord| r.payload.to_value()["text"].clone();
        assert_eq!(records.len(), 1, "{policy:?}");
        match policy {
            OnDiverged::Send => {
                let new_key = keys::diverged_key(key, &records[0].fingerprint);
                assert_eq!(records[0].key, new_key);
                assert_eq!(text(&records[0]), "How many?");
                let stored = d.outbox().lookup(&new_key).await.unwrap().unwrap();
                assert_eq!(text(&stored), "How many?", "journaled with the step");
                assert_eq!(d.metrics().outbox_deduped, 0);
            }
            OnDiverged::Skip => {
                assert_eq!(records[0].key, key);
                assert_eq!(text(&records[0]), "What would you like?");
                assert_eq!(d.metrics().outbox_deduped, 1);
            }
        }
        assert_eq!(
            d.inbox().get(&lease.id).await.unwrap().unwrap().state,
            InboxState::Done
        );
    }
}

async fn a_lost_lease_drops_the_whole_step(b: Backend) {
    let Some((store, d, lease)) = setup(b).await else {
        return;
    };
    let mut journal = d.step();
    journal
        .send(send("alice/m1:order/q#1", "How many?"), Vec::new())
        .unwrap();
    journal.complete_inbound(&lease).await.unwrap();
    // Another holder took the message over (here: it was completed under the lease).
    d.inbox().complete(&lease).await.unwrap();
    let step = StepCommit {
        journal: journal.ops(),
        ..StepCommit::new(d.scope().clone(), CheckpointWrite::Save(checkpoint(2)))
    };
    let StepCommitOutcome::Conflict { op, .. } = store.commit_step(&step).await.unwrap() else {
        panic!("the inbound's version moved");
    };
    assert!(
        journal.resolve_conflict(op).await.is_err(),
        "a lease that is gone cannot complete the message"
    );
    assert!(
        store.checkpoint("alice").await.unwrap().is_none(),
        "nothing of the step landed"
    );
    assert!(
        d.outbox()
            .lookup("alice/m1:order/q#1")
            .await
            .unwrap()
            .is_none()
    );
}

async fn a_send_is_marked_sent_with_its_ledger_row_in_one_write(b: Backend) {
    let Some((store, d, _lease)) = setup(b).await else {
        return;
    };
    journaled(&d, "alice/m1:1", "Hello").await;
    let botmesh_durability::outbox::BeginAttempt::Leased { lease, .. } =
        d.outbox().begin_attempt("alice/m1:1").await.unwrap()
    else {
        panic!("leased");
    };
    let before = store.requests();
    let mut journal = d.step();
    journal
        .mark_sent(&lease, Some("tg-42".into()))
        .await
        .unwrap();
    let mut step = StepCommit::new(d.scope().clone(), CheckpointWrite::Keep);
    step.journal = journal.ops();
    step.ledger = vec![sent_row("alice", "tg-42", "Hello", "alice/m1:1", 5)];
    journal.before_commit().unwrap();
    let StepCommitOutcome::Committed(outcomes) = store.commit_step(&step).await.unwrap() else {
        panic!("committed");
    };
    journal.committed(&outcomes).unwrap();
    store.assert_one_write(before);
    let record = record(&d, "alice/m1:1").await;
    assert_eq!(record.state, OutboxState::Sent);
    assert_eq!(record.provider_message_id.as_deref(), Some("tg-42"));
    let ledger = store.ledger("alice", 10).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].message_id.as_deref(), Some("tg-42"));
    // The lease is spent: marking it sent again is refused.
    let mut again = d.step();
    assert!(again.mark_sent(&lease, None).await.is_err());
}

/// When alice's message of [`inbound_step`] comes: far enough after her chat's last activity
/// (1) that the chat's row takes it.
const INBOUND_AT: i64 = 1 + botmesh_durability::store::ACTIVITY_RESOLUTION_MS;

/// What `record_inbound` writes for alice's message `id`: her chat, her contact, the ledger row.
fn inbound_step(
    d: &KvDurability,
    id: &str,
    journal: &botmesh_durability::StepJournal<'_, dyn DurableKv>,
) -> StepCommit {
    let mut step = StepCommit::new(d.scope().clone(), CheckpointWrite::Keep);
    step.journal = journal.ops();
    step.chat = Some(botmesh_durability::store::ChatRecord {
        id: "alice".into(),
        is_group: false,
        title: None,
        lang: None,
        first_seen_ms: INBOUND_AT,
        last_activity_ms: INBOUND_AT,
    });
    step.contact = Some(botmesh_durability::store::ContactRecord {
        id: "alice".into(),
        name: Some("Alice".into()),
        last_seen_ms: INBOUND_AT,
    });
    step.ledger = vec![botmesh_durability::store::LedgerEntry {
        chat: "alice".into(),
        message_id: Some(id.into()),
        direction: botmesh_durability::store::Direction::Inbound,
        status: botmesh_durability::store::LedgerStatus::Received,
        text: Some("pears".into()),
        content: serde_json::json!({"text": "pears"}),
        key: None,
        error: None,
        at_ms: 5,
    }];
    step
}

async fn an_inbound_is_journaled_with_its_ledger_row_chat_and_contact_in_one_write(b: Backend) {
    let Some((store, d, _)) = setup(b).await else {
        return;
    };
    // Alice's chat is known, with a title and a language the inbound must not overwrite.
    store
        .upsert_chat(&botmesh_durability::store::ChatRecord {
            id: "alice".into(),
            is_group: false,
            title: Some("Alice's shop".into()),
            lang: Some("fr".into()),
            first_seen_ms: 1,
            last_activity_ms: 1,
        })
        .await
        .unwrap();
    let before = store.requests();

    let mut journal = d.step();
    let lease = journal
        .journal_inbound(NewInbound::new(
            "alice",
            "m2",
            serde_json::json!({"text": "pears"}),
        ))
        .unwrap();
    journal.before_commit().unwrap();
    let StepCommitOutcome::Committed(outcomes) = store
        .commit_step(&inbound_step(&d, "m2", &journal))
        .await
        .unwrap()
    else {
        panic!("a new message is journaled");
    };
    assert!(journal.committed(&outcomes).unwrap().is_empty(), "no send");
    store.assert_one_write(before);

    // The record, leased to this process, and the rows, all there.
    let record = d.inbox().get(&lease.id).await.unwrap().unwrap();
    assert_eq!(record.state, InboxState::Processing);
    assert_eq!(record.lease.map(|l| l.token), Some(lease.token));
    let ledger = store.ledger("alice", 10).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].message_id.as_deref(), Some("m2"));
    let chat = store.chat("alice").await.unwrap().unwrap();
    assert_eq!(
        (
            chat.title.as_deref(),
            chat.lang.as_deref(),
            chat.first_seen_ms,
            chat.last_activity_ms
        ),
        (Some("Alice's shop"), Some("fr"), 1, INBOUND_AT),
        "an existing chat keeps its title, language and first sighting"
    );
    let contact = store.contact("alice").await.unwrap().unwrap();
    assert_eq!(contact.name.as_deref(), Some("Alice"));
    // The lease completes the record like one from `journal_and_claim`.
    d.inbox().complete(&lease).await.unwrap();

    // A redelivery: the conflict is a duplicate, and nothing of the second write landed.
    let mut again = d.step();
    again
        .journal_inbound(NewInbound::new(
            "alice",
            "m2",
            serde_json::json!({"text": "pears"}),
        ))
        .unwrap();
    let StepCommitOutcome::Conflict { op, .. } = store
        .commit_step(&inbound_step(&d, "m2", &again))
        .await
        .unwrap()
    else {
        panic!("the message was journaled before");
    };
    let StepConflict::InboundDuplicate(found) = again.resolve_conflict(op).await.unwrap() else {
        panic!("a redelivery is a duplicate");
    };
    assert_eq!(found.state, InboxState::Done);
    assert_eq!(
        store.ledger("alice", 10).await.unwrap().len(),
        1,
        "no second ledger row"
    );
}

async fn operations_on_one_key_twice_still_land_all_or_none(b: Backend) {
    use botmesh_durability::kv::Entry;
    use botmesh_durability::kv::KvOp;
    let Some((store, d, _lease)) = setup(b).await else {
        return;
    };
    let entry = |v: &str| Entry {
        value: v.as_bytes().to_vec(),
        idx1: None,
        idx2: None,
    };
    // The second operation expects a version the first cannot have produced: the step
    // conflicts there, and the first one's create is rolled back with it.
    let step = StepCommit {
        journal: vec![
            KvOp::Cas {
                key: "twice".into(),
                expected: None,
                entry: entry("first"),
            },
            KvOp::Cas {
                key: "twice".into(),
                expected: Some(u64::MAX - 1),
                entry: entry("second"),
            },
        ],
        ..StepCommit::new(d.scope().clone(), CheckpointWrite::Save(checkpoint(2)))
    };
    let StepCommitOutcome::Conflict { op, current } = store.commit_step(&step).await.unwrap()
    else {
        panic!("the second operation conflicts");
    };
    assert_eq!(op, 1);
    assert!(current.is_some(), "it found the first operation's row");
    let kv = Arc::clone(&store.kv);
    assert!(
        kv.get(d.scope(), "twice").await.unwrap().is_none(),
        "nothing landed"
    );
    assert!(store.checkpoint("alice").await.unwrap().is_none());
}

/// Commits `journal` with a checkpoint (no conflict expected) and returns what it committed.
async fn commit_once(
    store: &Env,
    d: &KvDurability,
    journal: botmesh_durability::StepJournal<'_, dyn DurableKv>,
) -> Vec<botmesh_durability::CommittedSend> {
    let mut step = StepCommit::new(d.scope().clone(), CheckpointWrite::Save(checkpoint(2)));
    let botmesh_durability::StepCommitted::Written(sends) =
        journal.commit(&**store, &mut step, 4).await.unwrap()
    else {
        panic!("written");
    };
    sends
}

/// Journals, leases and marks sent `key` outside a step, as an earlier run did.
/// Journals the send of `text` under `key` outside a step, as an earlier run did.
async fn journaled(d: &KvDurability, key: &str, text: &str) {
    d.outbox().journal(send(key, text)).await.unwrap();
}

/// A step of `lease`'s message whose one send (`text` under `key`) is its first: sent and
/// begun, the message completed, committed once; the committed sends.
async fn first_send_committed(
    store: &Env,
    d: &KvDurability,
    lease: &InboxLease,
    key: &str,
    text: &str,
) -> Vec<botmesh_durability::CommittedSend> {
    let mut journal = d.step();
    journal.send_and_begin(send(key, text)).await.unwrap();
    journal.complete_inbound(lease).await.unwrap();
    commit_once(store, d, journal).await
}

async fn sent_before(d: &KvDurability, key: &str, text: &str, provider_id: Option<&str>) {
    journaled(d, key, text).await;
    let botmesh_durability::outbox::BeginAttempt::Leased { lease, .. } =
        d.outbox().begin_attempt(key).await.unwrap()
    else {
        panic!("leased");
    };
    d.outbox()
        .mark_sent(&lease, provider_id.map(str::to_owned))
        .await
        .unwrap();
}

async fn a_first_send_is_leased_in_the_steps_own_transaction(b: Backend) {
    let Some((store, d, lease)) = setup(b).await else {
        return;
    };
    let mut journal = d.step();
    journal
        .send_and_begin(send("alice/m1:order/q#1", "How many?"))
        .await
        .unwrap();
    journal
        .send(send("alice/m1:order/q#2", "Say a number"), Vec::new())
        .unwrap();
    journal.complete_inbound(&lease).await.unwrap();
    let before = store.requests();
    let sends = commit_once(&store, &d, journal).await;
    store.assert_one_write(before);
    assert_eq!(sends.len(), 2);
    let first = sends[0].lease.clone().expect("the first send is leased");
    assert_eq!(sends[0].record.state, OutboxState::Sending);
    assert_eq!(sends[0].record.attempts, 1, "its first attempt is charged");
    assert!(sends[1].lease.is_none(), "a later send of the step waits");
    assert_eq!(sends[1].record.state, OutboxState::Pending);
    let stored = record(&d, "alice/m1:order/q#1").await;
    assert_eq!(stored.state, OutboxState::Sending);
    // The provider is called with that lease, and the send settles under it.
    let mut sent = d.step();
    sent.mark_sent(&first, Some("tg-1".into())).await.unwrap();
    let mut step = StepCommit::new(d.scope().clone(), CheckpointWrite::Keep);
    step.journal = sent.ops();
    let StepCommitOutcome::Committed(_) = store.commit_step(&step).await.unwrap() else {
        panic!("committed");
    };
    let settled = record(&d, "alice/m1:order/q#1").await;
    assert_eq!(settled.state, OutboxState::Sent);
    assert_eq!(settled.provider_message_id.as_deref(), Some("tg-1"));
}

async fn a_first_send_behind_an_open_send_of_its_chat_is_journaled_pending(b: Backend) {
    let Some((store, d, lease)) = setup(b).await else {
        return;
    };
    // An earlier send of alice's is still waiting.
    journaled(&d, "alice/m0:1", "Hello").await;
    let sends = first_send_committed(&store, &d, &lease, "alice/m1:order/q#1", "How many?").await;
    assert!(sends[0].lease.is_none());
    assert_eq!(sends[0].record.state, OutboxState::Pending);
    assert_eq!(sends[0].record.attempts, 0);
}

async fn a_first_send_recorded_before_is_answered_from_its_record_not_leased(b: Backend) {
    let Some((store, d, lease)) = setup(b).await else {
        return;
    };
    // An earlier run sent it (outside a step transaction).
    sent_before(&d, "alice/m1:order/q#1", "How many?", Some("tg-0")).await;
    // That send is settled, so nothing of the chat is open: the step's send is leased,
    // conflicts on its key, and is answered from the record found.
    let sends = first_send_committed(&store, &d, &lease, "alice/m1:order/q#1", "How many?").await;
    assert!(sends[0].lease.is_none(), "nothing of ours was written");
    assert_eq!(sends[0].record.state, OutboxState::Sent);
    assert_eq!(sends[0].record.provider_message_id.as_deref(), Some("tg-0"));
    assert_eq!(d.metrics().outbox_deduped, 1);
}

async fn a_leased_first_send_under_a_diverged_key_goes_pending_under_the_new_key(b: Backend) {
    let Some((store, d, lease)) = setup(b).await else {
        return;
    };
    sent_before(&d, "alice/m1:order/q#1", "How many?", None).await;
    let sends =
        first_send_committed(&store, &d, &lease, "alice/m1:order/q#1", "How many pears?").await;
    assert!(sends[0].lease.is_none(), "re-keyed sends are not leased");
    assert_ne!(sends[0].record.key, "alice/m1:order/q#1");
    assert_eq!(sends[0].record.state, OutboxState::Pending);
    assert_eq!(sends[0].record.attempts, 0);
    assert_eq!(d.metrics().outbox_diverged, 1);
}

/// A raw journal entry for [`KvOp`]-level steps.
/// Creates `key` in `kv` with the value `text` ([`raw_entry`]); its version.
async fn created(kv: &dyn DurableKv, s: &Scope, key: &str, text: &str) -> u64 {
    use botmesh_durability::kv::CasOutcome;
    let CasOutcome::Ok { version } = kv.cas(s, key, None, raw_entry(text)).await.unwrap() else {
        panic!("{key} is created");
    };
    version
}

/// The outbox record of `key`, which must exist.
async fn record(d: &KvDurability, key: &str) -> botmesh_durability::outbox::OutboxRecord {
    d.outbox().lookup(key).await.unwrap().unwrap()
}

/// The ledger row of an outbound send of `text`, sent as the channel's `message_id`.
fn sent_row(
    chat: &str,
    message_id: &str,
    text: &str,
    key: &str,
    at_ms: i64,
) -> botmesh_durability::store::LedgerEntry {
    botmesh_durability::store::LedgerEntry {
        chat: chat.into(),
        message_id: Some(message_id.into()),
        direction: botmesh_durability::store::Direction::Outbound,
        status: botmesh_durability::store::LedgerStatus::Sent,
        text: Some(text.into()),
        content: serde_json::json!({ "text": text }),
        key: Some(key.into()),
        error: None,
        at_ms,
    }
}

fn raw_entry(text: &str) -> botmesh_durability::kv::Entry {
    botmesh_durability::kv::Entry {
        value: text.as_bytes().to_vec(),
        idx1: Some(format!("due/{text}")),
        idx2: None,
    }
}

/// A step's rows beside its journal operations: a value removal, the inbound's chat and
/// contact, a ledger row.
fn with_rows(step: StepCommit) -> StepCommit {
    StepCommit {
        delete_values: vec![("effects".into(), "e1".into())],
        chat: Some(botmesh_durability::store::ChatRecord {
            id: "chat".into(),
            is_group: false,
            title: None,
            lang: None,
            first_seen_ms: 3,
            last_activity_ms: 3,
        }),
        contact: Some(botmesh_durability::store::ContactRecord {
            id: "bob".into(),
            name: Some("Bob".into()),
            last_seen_ms: 3,
        }),
        ledger: vec![sent_row("chat", "m-9", "send 1", "c", 3)],
        ..step
    }
}

/// Creates, an update and a delete land with the checkpoint, a value removal and the rows, in
/// one transaction; the journal rows read back through the kv (values, index, versions); a
/// later step removes the checkpoint.
async fn a_step_lands_every_kind_of_write_together(b: Backend) {
    use botmesh_durability::kv::{CasOutcome, Index, KvOp};
    let Some(store) = env(b).await else {
        return;
    };
    let kv = Arc::clone(&store.kv);
    assert!(store.shares_transactions_with(&*kv));
    let s = Scope::custom("bot");
    let a = created(&*kv, &s, "a", "a0").await;
    let old = created(&*kv, &s, "old", "old").await;
    store.save_checkpoint(&checkpoint(1)).await.unwrap();
    for (key, n) in [("e1", 1), ("e2", 2)] {
        store
            .set_value("effects", key, &serde_json::json!(n))
            .await
            .unwrap();
    }
    let step = with_rows(StepCommit {
        journal: vec![
            KvOp::Cas {
                key: "c".into(),
                expected: None,
                entry: raw_entry("c1"),
            },
            KvOp::Delete {
                key: "old".into(),
                expected: old,
            },
            KvOp::Cas {
                key: "a".into(),
                expected: Some(a),
                entry: raw_entry("a1"),
            },
        ],
        ..StepCommit::new(s.clone(), CheckpointWrite::Save(checkpoint(2)))
    });
    let StepCommitOutcome::Committed(outcomes) = store.commit_step(&step).await.unwrap() else {
        panic!("the step commits");
    };
    assert_eq!(
        outcomes[1],
        CasOutcome::Ok { version: old },
        "a delete answers the removed version"
    );
    for (i, (key, text)) in [(0, ("c", "c1")), (2, ("a", "a1"))] {
        let row = kv.get(&s, key).await.unwrap().unwrap();
        assert_eq!(row.value, text.as_bytes());
        assert_eq!(row.idx1, Some(format!("due/{text}")));
        assert_eq!(
            outcomes[i],
            CasOutcome::Ok {
                version: row.version
            }
        );
    }
    let CasOutcome::Ok { version: a1 } = outcomes[2] else {
        panic!("a is updated");
    };
    assert!(a1 > a, "a write gives a new version");
    assert_eq!(kv.get(&s, "old").await.unwrap(), None);
    let due = kv.range(&s, Index::One, "due/", "due0", 10).await.unwrap();
    let keys: Vec<_> = due.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        ["a", "c"],
        "the index entries were written with the rows"
    );
    assert_eq!(
        store.checkpoint("alice").await.unwrap(),
        Some(checkpoint(2))
    );
    assert_eq!(store.get_value("effects", "e1").await.unwrap(), None);
    assert_eq!(
        store.get_value("effects", "e2").await.unwrap(),
        Some(serde_json::json!(2))
    );
    assert_eq!(store.ledger("chat", 10).await.unwrap().len(), 1);
    assert!(store.chat("chat").await.unwrap().is_some());
    assert!(store.contact("bob").await.unwrap().is_some());

    let end = StepCommit::new(
        s.clone(),
        CheckpointWrite::Delete {
            chat: "alice".into(),
        },
    );
    assert_eq!(
        store.commit_step(&end).await.unwrap(),
        StepCommitOutcome::Committed(Vec::new())
    );
    assert_eq!(store.checkpoint("alice").await.unwrap(), None);
}

/// The first operation of a step is checked by its own write (no read before it): a conflict
/// there writes nothing of the step and is reported as operation 0 with the version found,
/// also when a later operation conflicts too; a conflict on a later operation alone is
/// reported as that operation, and writes nothing either: no journal operation, no checkpoint
/// change (a save or a removal), no value removal, no chat, contact or ledger row.
async fn a_conflict_on_any_op_is_reported_first_and_writes_nothing(b: Backend) {
    use botmesh_durability::kv::KvOp;
    let Some(store) = env(b).await else {
        return;
    };
    let kv = Arc::clone(&store.kv);
    let s = Scope::custom("bot");
    let a = created(&*kv, &s, "a", "a0").await;
    let b = created(&*kv, &s, "b", "b0").await;
    store.save_checkpoint(&checkpoint(1)).await.unwrap();
    store
        .set_value("effects", "e1", &serde_json::json!(1))
        .await
        .unwrap();
    let cas = |key: &str, expected: Option<u64>, text: &str| KvOp::Cas {
        key: key.into(),
        expected,
        entry: raw_entry(text),
    };
    let step = |journal: Vec<KvOp>, checkpoint: CheckpointWrite| {
        with_rows(StepCommit {
            journal,
            ..StepCommit::new(s.clone(), checkpoint)
        })
    };
    let untouched = async || {
        assert_eq!(
            store.checkpoint("alice").await.unwrap(),
            Some(checkpoint(1))
        );
        assert_eq!(kv.get(&s, "a").await.unwrap().unwrap().value, b"a0");
        assert_eq!(kv.get(&s, "b").await.unwrap().unwrap().value, b"b0");
        assert_eq!(kv.get(&s, "c").await.unwrap(), None);
        assert_eq!(
            store.get_value("effects", "e1").await.unwrap(),
            Some(serde_json::json!(1))
        );
        assert_eq!(store.chat("chat").await.unwrap(), None, "no chat row");
        assert_eq!(store.contact("bob").await.unwrap(), None, "no contact row");
        assert!(
            store.ledger("chat", 10).await.unwrap().is_empty(),
            "no ledger row"
        );
    };

    // Each step, and the conflict it reports: the first operation's (a create of a key that
    // exists, then a stale version), the first one's when both conflict, and the last one's
    // when only it does (the first one's write does not land either).
    let cases = [
        (vec![cas("a", None, "a1"), cas("c", None, "c1")], 0, a),
        (
            vec![cas("a", Some(a + 100), "a1"), cas("c", None, "c1")],
            0,
            a,
        ),
        (
            vec![cas("a", Some(a + 100), "a1"), cas("b", None, "b1")],
            0,
            a,
        ),
        (
            vec![
                cas("c", None, "c1"),
                cas("a", Some(a), "a1"),
                cas("b", Some(b + 100), "b1"),
            ],
            2,
            b,
        ),
    ];
    for (journal, op, current) in cases {
        for checkpoint in [
            CheckpointWrite::Save(checkpoint(2)),
            CheckpointWrite::Delete {
                chat: "alice".into(),
            },
        ] {
            assert_eq!(
                store
                    .commit_step(&step(journal.clone(), checkpoint))
                    .await
                    .unwrap(),
                StepCommitOutcome::Conflict {
                    op,
                    current: Some(current)
                }
            );
            untouched().await;
        }
    }
    // Nothing conflicts: every operation lands with the checkpoint (on the connection the
    // rollbacks left, for a server).
    let StepCommitOutcome::Committed(outcomes) = store
        .commit_step(&step(
            vec![cas("a", Some(a), "a1"), cas("c", None, "c1")],
            CheckpointWrite::Save(checkpoint(2)),
        ))
        .await
        .unwrap()
    else {
        panic!("the step commits");
    };
    assert_eq!(outcomes.len(), 2);
    assert_eq!(kv.get(&s, "a").await.unwrap().unwrap().value, b"a1");
    assert_eq!(kv.get(&s, "c").await.unwrap().unwrap().value, b"c1");
    assert_eq!(
        store.checkpoint("alice").await.unwrap(),
        Some(checkpoint(2))
    );
    assert_eq!(store.get_value("effects", "e1").await.unwrap(), None);
    assert_eq!(store.ledger("chat", 10).await.unwrap().len(), 1);
}

/// Every case above, as a test per backend.
macro_rules! per_backend {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::Backend::Sqlite).await;
                }
            )*
        }

        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::Backend::Postgres).await;
                }
            )*
        }

        mod redis {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::Backend::Redis).await;
                }
            )*
        }
    };
}

per_backend!(
    a_step_lands_whole_after_a_heartbeat_moved_the_inbound,
    a_send_recorded_before_is_answered_from_its_record,
    a_derived_key_recorded_with_other_content_follows_on_diverged,
    a_lost_lease_drops_the_whole_step,
    a_send_is_marked_sent_with_its_ledger_row_in_one_write,
    an_inbound_is_journaled_with_its_ledger_row_chat_and_contact_in_one_write,
    operations_on_one_key_twice_still_land_all_or_none,
    a_first_send_is_leased_in_the_steps_own_transaction,
    a_first_send_behind_an_open_send_of_its_chat_is_journaled_pending,
    a_first_send_recorded_before_is_answered_from_its_record_not_leased,
    a_leased_first_send_under_a_diverged_key_goes_pending_under_the_new_key,
    a_step_lands_every_kind_of_write_together,
    a_conflict_on_any_op_is_reported_first_and_writes_nothing,
);
