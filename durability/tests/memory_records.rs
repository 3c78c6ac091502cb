//! The journals' records on `MemoryKv` are kept unencoded (`DurableKv::cas_record`), and a
//! backend that stores bytes gets the same journals through the defaults: what each API
//! reads back, a record of the wrong journal, and the conformance suite on a byte-only backend.
//! `MemoryKv` changes records in place (`DurableKv::update_record`): kept, refused, written and
//! reindexed; a record stored as bytes is changed by read and compare-and-set.
#![cfg(feature = "testing")]

use std::sync::Arc;

use async_trait::async_trait;
use botmesh_durability::inbox::{Claimed, InboxJournalClaim};
use botmesh_durability::kv::{
    CasOutcome, Entry, EntryValue, Index, KvError, KvRecord, RecordChange, RecordEntry,
    RecordUpdate, RecordUpdated, RecordValue, Scope, Versioned,
};
use botmesh_durability::testing::conformance::run_conformance;
use botmesh_durability::{
    DurabilityError, DurableKv, InboundRecord, MemoryKv, NewInbound, NewSend, OutboxRecord,
    RecordKind, SendJournal, SendKey,
};
use journal_env::Env;
use serde_json::json;

#[allow(dead_code, reason = "shared by several test files, each uses a part")]
mod journal_env;

/// A backend that implements only the byte API (every journal call takes the defaults).
struct BytesOnly(MemoryKv);

#[async_trait]
impl DurableKv for BytesOnly {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        self.0.get(scope, key).await
    }
    async fn cas(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        self.0.cas(scope, key, expected, entry).await
    }
    async fn delete(&self, scope: &Scope, key: &str, expected: u64) -> Result<CasOutcome, KvError> {
        self.0.delete(scope, key, expected).await
    }
    async fn range(
        &self,
        scope: &Scope,
        index: Index,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<KvRecord>, KvError> {
        self.0.range(scope, index, from, to, limit).await
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
    let m = NewInbound::new("alice", "m1", json!({"text": "hi"}));
    let id = m.id.clone();
    let InboxJournalClaim::Claimed(Claimed { lease, .. }) =
        d.inbox().journal_and_claim(m).await.expect("journal")
    else {
        panic!("a new message is claimed");
    };
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
        idx1: Some("i/done/0000000000000001/x".into()),
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

/// A [`RecordUpdate`] that answers what a test tells it and counts its calls.
struct Scripted {
    answer: Option<Result<RecordChange, KvError>>,
    /// The record to store when the answer is `Changed`.
    replace_with: Option<InboundRecord>,
    seen: Vec<u64>,
}

impl RecordUpdate for Scripted {
    fn apply(&mut self, record: &mut RecordValue, version: u64) -> Result<RecordChange, KvError> {
        self.seen.push(version);
        if let Some(new) = self.replace_with.take() {
            *record = RecordValue::from(new);
        }
        self.answer.take().expect("apply is called once")
    }
}

fn scripted(
    answer: Result<RecordChange, KvError>,
    replace_with: Option<InboundRecord>,
) -> Scripted {
    Scripted {
        answer: Some(answer),
        replace_with,
        seen: Vec::new(),
    }
}

#[tokio::test]
async fn memory_changes_a_record_in_place_at_a_new_version_and_reindexes_it() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let m = NewInbound::new("alice", "m1", json!({"text": "hi"}));
    let key = format!("i/{}", m.id);
    d.inbox().journal_and_claim(m).await.expect("journal");
    let before = d
        .kv()
        .get_record(d.scope(), &key)
        .await
        .expect("read")
        .expect("there");
    let record = |v: &botmesh_durability::VersionedValue| match &v.value {
        EntryValue::Record(r) => r.as_inbound().cloned().expect("an inbound record"),
        EntryValue::Bytes(_) => panic!("kept unencoded"),
    };
    let open_in_chat = || async {
        d.kv()
            .range(d.scope(), Index::Two, "i/", "i0", 10)
            .await
            .expect("range")
            .len()
    };
    assert_eq!(open_in_chat().await, 1);

    // Kept: nothing changes, not even the version.
    let mut keep = scripted(Ok(RecordChange::Keep), None);
    let out = d.kv().update_record(d.scope(), &key, &mut keep);
    assert!(matches!(out, Some(Ok(RecordUpdated::Kept))), "{out:?}");
    assert_eq!(keep.seen, vec![before.version]);
    let now = d.kv().get_record(d.scope(), &key).await.unwrap().unwrap();
    assert_eq!(now.version, before.version);

    // Refused (a write hook): nothing changes either, whatever the update did to its copy.
    let mut refused = scripted(Err(KvError::Closed), None);
    let out = d.kv().update_record(d.scope(), &key, &mut refused);
    assert!(matches!(out, Some(Err(KvError::Closed))), "{out:?}");
    let now = d.kv().get_record(d.scope(), &key).await.unwrap().unwrap();
    assert_eq!(
        (now.version, record(&now)),
        (before.version, record(&before))
    );

    // Changed: stored at a new version with the index values given (closed: out of idx2).
    let mut done = record(&before);
    done.last_error = Some("changed in place".into());
    let change = RecordChange::Changed {
        idx1: Some("i/done/0000000000000009/x".into()),
        idx2: None,
    };
    let mut write = scripted(Ok(change), Some(done.clone()));
    let Some(Ok(RecordUpdated::Written { version })) =
        d.kv().update_record(d.scope(), &key, &mut write)
    else {
        panic!("the change is written");
    };
    assert!(version > before.version);
    let now = d.kv().get_record(d.scope(), &key).await.unwrap().unwrap();
    assert_eq!((now.version, record(&now)), (version, done));
    assert_eq!(now.idx1.as_deref(), Some("i/done/0000000000000009/x"));
    assert_eq!(now.idx2, None);
    assert_eq!(open_in_chat().await, 0);
    let listed = d
        .kv()
        .range(d.scope(), Index::One, "i/done/", "i/done0", 10)
        .await
        .expect("range");
    assert_eq!(listed.len(), 1);

    // No entry, or bytes under the key: the update is not shown anything.
    let mut missing = scripted(Ok(RecordChange::Keep), None);
    let out = d.kv().update_record(d.scope(), "i/nobody", &mut missing);
    assert!(matches!(out, Some(Ok(RecordUpdated::Missing))), "{out:?}");
    let out = d
        .kv()
        .update_record(&Scope::custom("elsewhere"), &key, &mut missing);
    assert!(matches!(out, Some(Ok(RecordUpdated::Missing))), "{out:?}");
    assert!(missing.seen.is_empty());
    let bytes = Entry {
        value: b"{}".to_vec(),
        idx1: None,
        idx2: None,
    };
    assert!(
        d.kv()
            .cas(d.scope(), "b", None, bytes)
            .await
            .unwrap()
            .is_ok()
    );
    let out = d.kv().update_record(d.scope(), "b", &mut missing);
    assert!(
        matches!(out, Some(Ok(RecordUpdated::NotARecord))),
        "{out:?}"
    );
    assert!(missing.seen.is_empty());
}

#[tokio::test]
async fn a_refused_change_leaves_the_stored_record_as_it_was() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let m = NewInbound::new("alice", "m1", json!({"text": "hi"}));
    let id = m.id.clone();
    let InboxJournalClaim::Claimed(Claimed { lease, .. }) =
        d.inbox().journal_and_claim(m).await.expect("journal")
    else {
        panic!("a new message is claimed");
    };
    let key = format!("i/{id}");
    let before = d.kv().get_record(d.scope(), &key).await.unwrap().unwrap();
    let mut forged = lease.clone();
    forged.token += 1;
    match d.inbox().complete(&forged).await {
        Err(DurabilityError::StaleLease { .. }) => {}
        other => panic!("expected StaleLease, got {other:?}"),
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

#[tokio::test]
async fn a_record_stored_as_bytes_is_changed_by_read_and_compare_and_set() {
    let env = Env::new();
    let d = env.open("i1", |_| {});
    let m = NewInbound::new("alice", "m1", json!({"text": "hi"}));
    let id = m.id.clone();
    let InboxJournalClaim::Claimed(Claimed { lease, record }) =
        d.inbox().journal_and_claim(m).await.expect("journal")
    else {
        panic!("a new message is claimed");
    };
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
