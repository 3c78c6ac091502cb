//! The journals' records on `MemoryKv` are kept unencoded (`DurableKv::cas_record`), and a
//! backend that stores bytes gets the same journals through the defaults: what each API
//! reads back, a record of the wrong journal, and the conformance suite on a byte-only backend.
//! `MemoryKv` changes records in place (`DurableKv::update_record`, its contract is in the
//! conformance suite): a refused change leaves the record as it was; a record stored as bytes
//! is changed by read and compare-and-set.
#![cfg(feature = "testing")]

#[macro_use]
mod byte_api;

use std::sync::Arc;

use botmesh_durability::inbox::{Claimed, InboxJournalClaim};
use botmesh_durability::kv::{
    Entry, EntryValue, Index, RecordEntry, RecordIdx1, RecordValue, Scope,
};
use botmesh_durability::outbox::JournalBegun;
use botmesh_durability::testing::conformance::run_conformance;
use botmesh_durability::{
    DurabilityError, DurableKv, InboundRecord, KvDurability, MemoryKv, NewInbound, NewSend,
    OutboxRecord, RecordKind, SendJournal, SendKey,
};
use journal_env::Env;
use serde_json::json;

#[allow(dead_code, reason = "shared by several test files, each uses a part")]
mod journal_env;

/// A backend that implements only the byte API (every journal call takes the defaults).
struct BytesOnly(MemoryKv);

byte_api_over_memory!(BytesOnly {});

/// Journals and claims message `m1` of chat `alice` (a new message is claimed): its record id
/// and the claim.
async fn claim_m1<K: DurableKv + ?Sized>(d: &KvDurability<K>) -> (String, Claimed) {
    let m = NewInbound::new("alice", "m1", json!({"text": "hi"}));
    let id = m.id.clone();
    match d.inbox().journal_and_claim(m).await.expect("journal") {
        InboxJournalClaim::Claimed(claimed) => (id, claimed),
        InboxJournalClaim::Duplicate(_) => panic!("a new message is claimed"),
    }
}

#[tokio::test]
async fn a_byte_only_backend_passes_the_conformance_suite_through_the_defaults() {
    run_conformance(|| async { Arc::new(BytesOnly(MemoryKv::new())) as Arc<dyn DurableKv> })
        .await
        .assert_passed();
}

#[tokio::test]
async fn memory_keeps_journal_records_unencoded_and_reads_them_back_as_json() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let m = NewInbound::new("alice", "m1", json!({"text": "hi"}));
    let id = m.id.clone();
    d.inbox().journal_and_claim(m).await.expect("journal");
    let send = NewSend::new(SendKey::explicit("k1"), "alice", json!({"text": "hello"}));
    d.outbox().journal(send).await.expect("journal send");

    let inbound = d.inbox().get(&id).await.expect("get").expect("recorded");
    let outbound = d
        .outbox()
        .lookup("k1")
        .await
        .expect("lookup")
        .expect("recorded");

    // Stored as the records themselves: no JSON was written.
    let key = format!("i/{id}");
    let stored = d.kv().get_record(d.scope(), &key).await.expect("read");
    match stored.map(|s| s.value) {
        Some(EntryValue::Record(r)) => assert_eq!(r.as_inbound(), Some(&inbound)),
        other => panic!("expected an unencoded record, found {other:?}"),
    }
    // The byte API encodes it: the JSON a byte backend would hold, decoding to the record.
    let bytes = d
        .kv()
        .get(d.scope(), &key)
        .await
        .expect("get")
        .expect("there");
    let decoded: InboundRecord = serde_json::from_slice(&bytes.value).expect("JSON record");
    assert_eq!(decoded, inbound);
    assert_eq!(
        bytes.value,
        RecordValue::from(inbound.clone())
            .encode()
            .expect("encodes")
    );
    let listed = d
        .kv()
        .range(d.scope(), Index::One, "o/", "o0", 10)
        .await
        .expect("range");
    assert_eq!(listed.len(), 1);
    let decoded: OutboxRecord = serde_json::from_slice(&listed[0].entry.value).expect("JSON");
    assert_eq!(decoded, outbound);
}

#[tokio::test]
async fn a_byte_only_backend_stores_the_same_records_as_json() {
    let kv = Arc::new(BytesOnly(MemoryKv::new()));
    let scope = Scope::custom("bytes");
    let d = botmesh_durability::KvDurability::new(kv, scope.clone(), Default::default())
        .expect("durability");
    let (id, Claimed { lease, .. }) = claim_m1(&d).await;
    let stored = d
        .kv()
        .get_record(&scope, &format!("i/{id}"))
        .await
        .expect("read")
        .expect("there");
    let EntryValue::Bytes(bytes) = stored.value else {
        panic!("a byte backend reads bytes back");
    };
    let record: InboundRecord = serde_json::from_slice(&bytes).expect("JSON record");
    assert_eq!(Some(record), d.inbox().get(&id).await.expect("get"));
    let done = d.inbox().complete(&lease).await.expect("complete");
    assert_eq!(Some(done), d.inbox().get(&id).await.expect("get"));
}

#[tokio::test]
async fn a_record_of_the_other_journal_is_quarantined_as_its_json() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let send = NewSend::new(SendKey::explicit("k1"), "alice", json!({"text": "hello"}));
    let SendJournal::Journaled(outbound) = d.outbox().journal(send).await.expect("journal") else {
        panic!("a new send is journaled");
    };
    // An outbox record under an inbound key (a broken backend or a hand-made entry).
    let entry = RecordEntry {
        value: RecordValue::from(outbound.clone()),
        idx1: RecordIdx1::Given(Some("i/done/0000000000000001/x".into())),
        idx2: None,
    };
    let written = d
        .kv()
        .cas_record(d.scope(), "i/x", None, entry)
        .await
        .expect("write");
    assert!(written.is_ok());
    match d.inbox().get("x").await {
        Err(DurabilityError::Corrupt { kind, id, reason }) => {
            assert_eq!((kind, id.as_str()), (RecordKind::Inbound, "x"));
            assert!(reason.contains("another journal"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let quarantined = d.quarantined(RecordKind::Inbound, 10).await.expect("list");
    assert_eq!(quarantined.len(), 1);
    let kept: OutboxRecord = serde_json::from_slice(&quarantined[0].bytes).expect("its JSON");
    assert_eq!(kept, outbound);
}

#[tokio::test]
async fn a_refused_change_leaves_the_stored_record_as_it_was() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let (id, Claimed { lease, .. }) = claim_m1(&d).await;
    let key = format!("i/{id}");
    let before = d.kv().get_record(d.scope(), &key).await.unwrap().unwrap();
    let mut forged = lease.clone();
    forged.token += 1;
    match d.inbox().complete(&forged).await {
        Err(DurabilityError::StaleLease { .. }) => {}
        other => panic!("expected StaleLease, got {other:?}"),
    }
    // The bot's own settle decides on the stored record itself (no copy): refused, it must
    // leave it as it was too.
    match d.inbox().complete_without_record(&forged).await {
        Err(DurabilityError::StaleLease { .. }) => {}
        other => panic!("expected StaleLease, got {other:?}"),
    }
    // And so must the settle made at once (`complete_now`).
    match d.inbox().complete_now(&forged) {
        Some(Err(DurabilityError::StaleLease { .. })) => {}
        other => panic!("expected a refusal at once, got {other:?}"),
    }
    let after = d.kv().get_record(d.scope(), &key).await.unwrap().unwrap();
    assert_eq!(after, before, "refused: not changed, not even its version");
    let done = d
        .inbox()
        .complete(&lease)
        .await
        .expect("the real lease completes");
    assert_eq!(done.state, botmesh_durability::InboxState::Done);
    assert_eq!(Some(done), d.inbox().get(&id).await.expect("get"));
}

/// `mark_sent_without_record` decides on the stored send itself on `MemoryKv` (no copy): a
/// refused one must still leave it exactly as it was.
#[tokio::test]
async fn a_refused_mark_sent_leaves_the_stored_send_as_it_was() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let send = NewSend::new(SendKey::explicit("k1"), "alice", json!({"text": "hello"}));
    let JournalBegun::Leased { lease, .. } = d.outbox().journal_and_begin(send).await.unwrap()
    else {
        panic!("a first send of a chat is leased by its journal write");
    };
    let before = d.kv().get_record(d.scope(), "o/k1").await.unwrap().unwrap();
    let mut forged = lease.clone();
    forged.token += 1;
    match d
        .outbox()
        .mark_sent_without_record(&forged, Some("p1"))
        .await
    {
        Err(DurabilityError::StaleLease { .. }) => {}
        other => panic!("expected StaleLease, got {other:?}"),
    }
    let after = d.kv().get_record(d.scope(), "o/k1").await.unwrap().unwrap();
    assert_eq!(after, before, "refused: not changed, not even its version");
    d.outbox()
        .mark_sent_without_record(&lease, Some("p1"))
        .await
        .expect("the real lease marks it sent");
    let sent = d
        .outbox()
        .lookup("k1")
        .await
        .expect("lookup")
        .expect("there");
    assert_eq!(sent.state, botmesh_durability::OutboxState::Sent);
    assert_eq!(sent.provider_message_id.as_deref(), Some("p1"));
}

#[tokio::test]
async fn a_record_stored_as_bytes_is_changed_by_read_and_compare_and_set() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let (id, Claimed { lease, record }) = claim_m1(&d).await;
    // The same record as JSON bytes (written by a byte backend's format, or an older version).
    let key = format!("i/{id}");
    let stored = d.kv().get(d.scope(), &key).await.unwrap().unwrap();
    let entry = Entry {
        value: serde_json::to_vec(&record).expect("encodes"),
        idx1: stored.idx1.clone(),
        idx2: stored.idx2.clone(),
    };
    let rewritten = d
        .kv()
        .cas(d.scope(), &key, Some(stored.version), entry)
        .await
        .unwrap();
    assert!(rewritten.is_ok());
    let done = d.inbox().complete(&lease).await.expect("completes");
    assert_eq!(done.state, botmesh_durability::InboxState::Done);
    assert_eq!(Some(done.clone()), d.inbox().get(&id).await.expect("get"));
    // Written back through the journal's write: kept unencoded again.
    let now = d.kv().get_record(d.scope(), &key).await.unwrap().unwrap();
    match now.value {
        EntryValue::Record(r) => assert_eq!(r.as_inbound(), Some(&done)),
        EntryValue::Bytes(_) => panic!("rewritten as a record"),
    }
}

/// The journal writes of the bot's own path are done at once on `MemoryKv` (an `AtOnce`
/// already ready, no future to poll), and only the rare outcomes that need a read (a
/// redelivery, a key recorded before) or a wait behind the chat's earlier send are finished by
/// a future; a backend that writes only through its futures gets the same outcomes that way.
#[tokio::test]
async fn memory_journals_at_once_and_any_backend_gets_the_same_outcomes() {
    use botmesh_durability::inbox::InboxJournalLease;
    use botmesh_durability::outbox::JournalLeased;

    let memory = Env::new().open("i1", |_| {});
    let bytes = KvDurability::new(
        Arc::new(BytesOnly(MemoryKv::new())),
        Scope::custom("bytes"),
        Default::default(),
    )
    .expect("durability");
    for (in_process, d) in [(true, memory.erase()), (false, bytes.erase())] {
        let inbound = || NewInbound::new("alice", "m1", json!({"text": "hi"}));
        let first = d.inbox().journal_and_lease(inbound());
        assert_eq!(first.is_ready(), in_process, "a new inbound event");
        assert!(matches!(first.await, Ok(InboxJournalLease::Leased(_))));
        let again = d.inbox().journal_and_lease(inbound());
        assert!(!again.is_ready(), "a redelivery is resolved by a read");
        assert!(matches!(again.await, Ok(InboxJournalLease::Duplicate)));

        let send = |key: &str| NewSend::new(SendKey::explicit(key), "alice", json!({"text": key}));
        let leased = d.outbox().journal_and_lease(send("k1"));
        assert_eq!(leased.is_ready(), in_process, "a chat's first send");
        let Ok(JournalLeased::Leased(lease)) = leased.await else {
            panic!("a chat's first send is leased by its journal write");
        };
        let behind = d.outbox().journal_and_lease(send("k2"));
        assert!(!behind.is_ready(), "a send behind an open one of its chat");
        match behind.await {
            Ok(JournalLeased::Journal(SendJournal::Journaled(r))) => {
                assert_eq!(r.state, botmesh_durability::OutboxState::Pending);
            }
            other => panic!("journaled pending behind k1, got {other:?}"),
        }
        let recorded = d.outbox().journal_and_lease(send("k1"));
        assert!(!recorded.is_ready(), "a key recorded before is read");
        assert!(matches!(
            recorded.await,
            Ok(JournalLeased::Journal(SendJournal::Recorded(_)))
        ));

        // Settled at once in place on `MemoryKv`; elsewhere `None`, and nothing written.
        let sent_now = d.outbox().mark_sent_now(&lease, Some("p1"));
        assert_eq!(sent_now.is_some(), in_process);
        if let Some(done) = sent_now {
            done.expect("marked sent at once");
        } else {
            let before = d.outbox().lookup("k1").await.unwrap().unwrap();
            assert_eq!(before.state, botmesh_durability::OutboxState::Sending);
            d.outbox()
                .mark_sent_without_record(&lease, Some("p1"))
                .await
                .expect("marked sent");
        }
        let sent = d.outbox().lookup("k1").await.unwrap().unwrap();
        assert_eq!(sent.state, botmesh_durability::OutboxState::Sent);
        assert_eq!(sent.provider_message_id.as_deref(), Some("p1"));
        let mut forged = lease.clone();
        forged.token += 1;
        if let Some(refused) = d.outbox().mark_sent_now(&forged, Some("p2")) {
            assert!(matches!(refused, Err(DurabilityError::StaleLease { .. })));
        }
    }
}

/// `complete_now` completes a leased inbound record at once on `MemoryKv` (its refusal of a
/// stale lease is checked with the other settles above), and answers `None`, writing
/// nothing, on a backend that does not change records in place.
#[tokio::test]
async fn complete_now_settles_in_place_on_memory_only() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let (id, Claimed { lease, .. }) = claim_m1(&d).await;
    d.inbox()
        .complete_now(&lease)
        .expect("memory completes at once")
        .expect("completed");
    let done = d.inbox().get(&id).await.unwrap().unwrap();
    assert_eq!(done.state, botmesh_durability::InboxState::Done);

    let bytes = KvDurability::new(
        Arc::new(BytesOnly(MemoryKv::new())),
        Scope::custom("bytes"),
        Default::default(),
    )
    .expect("durability");
    let (id, Claimed { lease, .. }) = claim_m1(&bytes).await;
    assert!(bytes.inbox().complete_now(&lease).is_none());
    let untouched = bytes.inbox().get(&id).await.unwrap().unwrap();
    assert_eq!(untouched.state, botmesh_durability::InboxState::Processing);
}
