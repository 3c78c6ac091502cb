//! Conformance cases of the journals (`KvDurability`) running on the backend under test.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{Ctx, ensure};
use crate::clock::ManualClock;
use crate::config::DurabilityConfig;
use crate::error::DurabilityError;
use crate::inbox::{InboxJournalClaim, InboxState, NewInbound};
use crate::journal::{KvDurability, index};
use crate::keys::SendKey;
use crate::kv::{DurableKv, Entry, Index, Scope};
use crate::operating::{DurabilityEvent, RecordKind};
use crate::outbox::{BeginAttempt, NewSend, OutboxState, SendJournal};
use crate::retries::SendFailure;

pub(super) type Case = Result<(), String>;

pub(super) const T0: i64 = 1_700_000_000_000;

pub(super) fn scope() -> Scope {
    Scope::new("tenant", "test", "bot", "conn")
}

pub(super) fn durability(
    kv: &Arc<dyn DurableKv>,
    scope: Scope,
    instance: &str,
    clock: &ManualClock,
    tweak: impl FnOnce(&mut DurabilityConfig),
) -> Result<KvDurability, String> {
    let mut config = DurabilityConfig {
        instance_id: Some(instance.to_owned()),
        ..DurabilityConfig::default()
    };
    tweak(&mut config);
    KvDurability::builder(Arc::clone(kv), scope)
        .config(config)
        .clock(clock.clone())
        .jitter_seed(7)
        .build()
        .ctx("build durability")
}

pub(super) async fn claimed(
    d: &KvDurability,
    chat: &str,
    msg: &str,
) -> Result<crate::leases::InboxLease, String> {
    match d
        .inbox()
        .journal_and_claim(NewInbound::new(chat, msg, json!({"text": msg})))
        .await
        .ctx("journal_and_claim")?
    {
        InboxJournalClaim::Claimed(c) => Ok(c.lease),
        InboxJournalClaim::Duplicate(r) => {
            Err(format!("fresh inbound reported as duplicate: {r:?}"))
        }
    }
}

pub(super) async fn leased_send(
    d: &KvDurability,
    key: &str,
) -> Result<crate::leases::OutboxLease, String> {
    match d.outbox().begin_attempt(key).await.ctx("begin_attempt")? {
        BeginAttempt::Leased { lease, .. } => Ok(lease),
        other => Err(format!("expected a lease on `{key}`, got {other:?}")),
    }
}

pub(super) async fn journal_send(d: &KvDurability, key: SendKey, chat: &str, text: &str) -> Case {
    match d
        .outbox()
        .journal(NewSend::new(key, chat, json!({"text": text})))
        .await
        .ctx("outbox journal")?
    {
        SendJournal::Journaled(_) => Ok(()),
        other => Err(format!("expected a new record, got {other:?}")),
    }
}

async fn write_garbage(kv: &Arc<dyn DurableKv>, kind: RecordKind, state: &str, id: &str) -> Case {
    let e = Entry {
        value: b"\xff{ not a record".to_vec(),
        idx1: Some(index::idx1(kind, state, T0 - 1, id)),
        idx2: None,
    };
    kv.cas(&scope(), &index::storage_key(kind, id), None, e)
        .await
        .ctx("write garbage")?;
    Ok(())
}

pub(super) async fn undecodable_inbound_is_quarantined(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let d = durability(&kv, scope(), "i1", &clock, |_| {})?;
    write_garbage(&kv, RecordKind::Inbound, "pending", "bad").await?;
    d.inbox()
        .journal(NewInbound::new("chat", "good", json!({})))
        .await
        .ctx("journal")?;
    let mut events = d.subscribe();
    let claims = d
        .inbox()
        .claim_due(10)
        .await
        .ctx("claim_due must not fail on a poison record")?;
    ensure!(
        claims.len() == 1,
        "the good record must still be claimed, got {}",
        claims.len()
    );
    let event = events.try_recv().ctx("dead event")?;
    ensure!(
        matches!(&event, DurabilityEvent::Dead { kind: RecordKind::Inbound, id, .. } if id == "bad"),
        "expected Dead for `bad`, got {event:?}"
    );
    ensure!(
        d.metrics().inbound_dead == 1,
        "inbound_dead must count the quarantine"
    );
    ensure!(
        d.inbox()
            .claim_due(10)
            .await
            .ctx("second sweep")?
            .is_empty(),
        "nothing left to claim"
    );
    ensure!(
        events.try_recv().is_err(),
        "a quarantined record was reported twice"
    );
    ensure!(
        d.inbox()
            .list(InboxState::Pending, 10)
            .await
            .ctx("list")?
            .is_empty(),
        "a quarantined record is still listed as pending"
    );
    let q = d
        .quarantined(RecordKind::Inbound, 10)
        .await
        .ctx("quarantined")?;
    ensure!(
        q.len() == 1 && q[0].id == "bad" && q[0].bytes.starts_with(b"\xff"),
        "the bytes must be kept for an operator, got {q:?}"
    );
    ensure!(
        matches!(
            d.inbox().get("bad").await,
            Err(DurabilityError::Corrupt { .. })
        ),
        "reading it must say it is corrupt"
    );
    ensure!(
        d.discard_quarantined(RecordKind::Inbound, "bad")
            .await
            .ctx("discard")?,
        "discard must remove it"
    );
    Ok(())
}

pub(super) async fn undecodable_send_is_quarantined(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let d = durability(&kv, scope(), "i1", &clock, |_| {})?;
    write_garbage(&kv, RecordKind::Outbound, "pending", "badkey").await?;
    write_garbage(&kv, RecordKind::Outbound, "sending", "badsending").await?;
    journal_send(&d, SendKey::explicit("good"), "chat", "hi").await?;
    let mut events = d.subscribe();
    let due = d
        .outbox()
        .due(10)
        .await
        .ctx("due must not fail on a poison record")?;
    ensure!(
        due.len() == 1 && due[0].key == "good",
        "the good send must still be due, got {due:?}"
    );
    let mut dead = Vec::new();
    while let Ok(DurabilityEvent::Dead { id, .. }) = events.try_recv() {
        dead.push(id);
    }
    dead.sort();
    ensure!(
        dead == ["badkey", "badsending"],
        "each poison record must be reported once, got {dead:?}"
    );
    ensure!(
        matches!(
            d.outbox().lookup("badkey").await,
            Err(DurabilityError::Corrupt { .. })
        ),
        "the idempotency lookup must refuse a corrupt record instead of sending again"
    );
    ensure!(
        d.outbox()
            .list(OutboxState::Pending, 10)
            .await
            .ctx("list")?
            .len()
            == 1,
        "list must skip quarantined records"
    );
    ensure!(
        d.metrics().outbox_dead == 2,
        "outbox_dead must count quarantines, got {}",
        d.metrics().outbox_dead
    );
    Ok(())
}

pub(super) async fn explicit_keys_are_per_bot(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let a = durability(
        &kv,
        Scope::new("t", "prod", "bot-a", "c"),
        "a",
        &clock,
        |_| {},
    )?;
    let b = durability(
        &kv,
        Scope::new("t", "prod", "bot-b", "c"),
        "b",
        &clock,
        |_| {},
    )?;
    journal_send(&a, SendKey::explicit("reminder:1"), "alice", "for alice").await?;
    journal_send(&b, SendKey::explicit("reminder:1"), "bob", "for bob").await?;
    let lease = leased_send(&a, "reminder:1").await?;
    a.outbox()
        .mark_sent(&lease, Some("pa".into()))
        .await
        .ctx("mark_sent")?;
    let ra = a
        .outbox()
        .lookup("reminder:1")
        .await
        .ctx("lookup a")?
        .ok_or("a missing")?;
    let rb = b
        .outbox()
        .lookup("reminder:1")
        .await
        .ctx("lookup b")?
        .ok_or("b missing")?;
    ensure!(
        ra.chat == "alice" && ra.state == OutboxState::Sent,
        "bot a must keep its own send, got {ra:?}"
    );
    ensure!(
        rb.chat == "bob" && rb.state == OutboxState::Pending,
        "bot b's send must be untouched, got {rb:?}"
    );
    ensure!(
        b.outbox().due(10).await.ctx("due b")?.len() == 1,
        "bot b must still have its send due"
    );
    ensure!(
        a.outbox().due(10).await.ctx("due a")?.is_empty(),
        "bot a sees bot b's send"
    );
    Ok(())
}

pub(super) async fn purge_after_retention(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let d = durability(&kv, scope(), "i1", &clock, |c| {
        c.retention = Some(Duration::from_secs(3600))
    })?;
    let done = claimed(&d, "chat", "done").await?;
    d.inbox().complete(&done).await.ctx("complete")?;
    let dead = claimed(&d, "chat", "dead").await?;
    d.inbox().fail(&dead, "boom", false).await.ctx("fail")?;
    d.inbox()
        .journal(NewInbound::new("chat", "pending", json!({})))
        .await
        .ctx("journal")?;
    journal_send(&d, SendKey::explicit("sent"), "c1", "a").await?;
    journal_send(&d, SendKey::explicit("dead"), "c2", "b").await?;
    journal_send(&d, SendKey::explicit("pending"), "c3", "c").await?;
    let l = leased_send(&d, "sent").await?;
    d.outbox().mark_sent(&l, None).await.ctx("mark_sent")?;
    let l = leased_send(&d, "dead").await?;
    d.outbox()
        .mark_failed(&l, &SendFailure::final_error("unsupported"))
        .await
        .ctx("mark_failed")?;
    let early = d.purge(100).await.ctx("purge")?;
    ensure!(
        early.inbound == 0 && early.outbound == 0,
        "records inside retention were purged: {early:?}"
    );
    clock.advance(Duration::from_secs(3601));
    let report = d.purge(100).await.ctx("purge")?;
    ensure!(
        report.inbound == 1 && report.outbound == 1,
        "exactly the done and sent records must go, got {report:?}"
    );
    ensure!(
        d.inbox().get(&done.id).await.ctx("get")?.is_none(),
        "the done record is still there"
    );
    ensure!(
        d.inbox().get(&dead.id).await.ctx("get")?.is_some(),
        "a dead record was purged"
    );
    ensure!(
        d.inbox()
            .list(InboxState::Pending, 10)
            .await
            .ctx("list")?
            .len()
            == 1,
        "a pending record was purged"
    );
    ensure!(
        d.outbox().lookup("sent").await.ctx("lookup")?.is_none(),
        "the sent record is still there"
    );
    ensure!(
        d.outbox().lookup("dead").await.ctx("lookup")?.is_some(),
        "a dead send was purged"
    );
    ensure!(
        d.outbox().lookup("pending").await.ctx("lookup")?.is_some(),
        "a pending send was purged"
    );
    let keep = durability(&kv, scope(), "i2", &clock, |c| c.retention = None)?;
    clock.advance(Duration::from_secs(365 * 24 * 3600));
    ensure!(
        keep.purge(100).await.ctx("purge")? == Default::default(),
        "retention None must keep everything"
    );
    Ok(())
}

/// A [`RecordUpdate`](crate::kv::RecordUpdate) that gives a scripted answer, replacing the
/// record when it answers `Changed`.
struct Scripted {
    answer: Option<Result<crate::kv::RecordChange, crate::kv::KvError>>,
    replace_with: Option<crate::inbox::InboundRecord>,
    shown: Vec<u64>,
}

impl crate::kv::RecordUpdate for Scripted {
    fn apply(
        &mut self,
        record: &mut crate::kv::RecordValue,
        version: u64,
    ) -> Result<crate::kv::RecordChange, crate::kv::KvError> {
        self.shown.push(version);
        let answer = self
            .answer
            .take()
            .unwrap_or(Ok(crate::kv::RecordChange::Keep));
        if let (Ok(crate::kv::RecordChange::Changed { .. }), Some(new)) =
            (&answer, self.replace_with.take())
        {
            *record = crate::kv::RecordValue::from(new);
        }
        answer
    }
}

fn scripted(
    answer: Result<crate::kv::RecordChange, crate::kv::KvError>,
    replace_with: Option<crate::inbox::InboundRecord>,
) -> Scripted {
    Scripted {
        answer: Some(answer),
        replace_with,
        shown: Vec::new(),
    }
}

/// `update_record`, for a backend that changes records in place (one that answers `None`
/// passes: the journals read and compare-and-set there): the update is shown the stored
/// record at its version; keeping or refusing changes nothing, not even the version; a change
/// is stored at a version the key never had, with the index values given; a missing key and
/// an entry of bytes are answered without showing anything.
pub(super) async fn record_updates_in_place_are_versioned_and_atomic(
    kv: Arc<dyn DurableKv>,
) -> Case {
    use crate::kv::{EntryValue, KvError, RecordChange, RecordIdx1, RecordUpdated};

    let s = scope();
    let clock = ManualClock::new(T0);
    let d = durability(&kv, s.clone(), "i1", &clock, |_| {})?;
    claimed(&d, "alice", "m1").await?;
    let id = NewInbound::new("alice", "m1", json!({})).id;
    let key = index::storage_key(RecordKind::Inbound, &id);
    let stored = |kv: Arc<dyn DurableKv>| {
        let (s, key) = (s.clone(), key.clone());
        async move {
            let v = kv
                .get_record(&s, &key)
                .await
                .ctx("get_record")?
                .ok_or("the record is missing")?;
            let record = match &v.value {
                EntryValue::Record(r) => r.as_inbound().cloned().ok_or("not an inbound record")?,
                EntryValue::Bytes(b) => serde_json::from_slice(b).ctx("decode")?,
            };
            Ok::<_, String>((v.version, record, v.idx1, v.idx2))
        }
    };
    // The journal gives inbound records no `idx2`: this change puts one on the record, so
    // that the changes below can be seen leaving it.
    let (_, claimed_record, claimed_idx1, _) = stored(Arc::clone(&kv)).await?;
    let in_chat = RecordChange::Changed {
        idx1: RecordIdx1::Given(claimed_idx1),
        idx2: Some(index::idx2(
            RecordKind::Inbound,
            "alice",
            claimed_record.seq,
            0,
        )),
    };
    let mut setup = scripted(Ok(in_chat), Some(claimed_record));
    let Some(written) = kv.update_record(&s, &key, &mut setup) else {
        return Ok(()); // not supported: nothing to check
    };
    ensure!(
        matches!(written, Ok(RecordUpdated::Written { .. })),
        "a change giving idx2 must be written, got {written:?}"
    );
    let mut probe = scripted(Ok(RecordChange::Keep), None);
    let kept = kv
        .update_record(&s, &key, &mut probe)
        .ok_or("update_record answered once, then not")?;
    let (v0, before, idx1_before, idx2_before) = stored(Arc::clone(&kv)).await?;
    let (chat_from, chat_to) = index::chat_range(RecordKind::Inbound, "alice");
    let open_in_chat = || async {
        kv.range(&s, crate::kv::Index::Two, &chat_from, &chat_to, 10)
            .await
            .ctx("range idx2")
            .map(|found| found.len())
    };
    ensure!(
        open_in_chat().await? == 1,
        "the claimed record must be open in its chat"
    );
    ensure!(
        matches!(kept, Ok(RecordUpdated::Kept)),
        "a kept record must answer Kept, got {kept:?}"
    );
    ensure!(
        probe.shown == vec![v0],
        "the update must be shown version {v0}, saw {:?}",
        probe.shown
    );
    let (v, record, ..) = stored(Arc::clone(&kv)).await?;
    ensure!(
        v == v0 && record == before,
        "keeping must change nothing, not even the version"
    );

    let mut refused = scripted(Err(KvError::Closed), None);
    let out = kv.update_record(&s, &key, &mut refused);
    ensure!(
        matches!(out, Some(Err(KvError::Closed))),
        "a refused update must return its error, got {out:?}"
    );
    let (v, record, idx1, idx2) = stored(Arc::clone(&kv)).await?;
    ensure!(
        v == v0 && record == before && idx1 == idx1_before && idx2 == idx2_before,
        "a refused update must change nothing"
    );

    let mut done = before.clone();
    done.state = InboxState::Done;
    done.lease = None;
    let idx1_done = index::idx1(RecordKind::Inbound, "done", T0, &id);
    let change = RecordChange::Changed {
        idx1: RecordIdx1::Given(Some(idx1_done.clone())),
        idx2: None,
    };
    let mut write = scripted(Ok(change), Some(done.clone()));
    let written = kv.update_record(&s, &key, &mut write);
    let Some(Ok(RecordUpdated::Written { version })) = written else {
        return Err(format!("a change must be written, got {written:?}"));
    };
    ensure!(version != v0, "a change must get a new version");
    let (v, record, idx1, idx2) = stored(Arc::clone(&kv)).await?;
    ensure!(
        v == version && record == done,
        "the changed record must be stored at its new version"
    );
    ensure!(
        idx1.as_deref() == Some(idx1_done.as_str()) && idx2.is_none(),
        "the change must be indexed as given, got {idx1:?} / {idx2:?}"
    );
    ensure!(
        open_in_chat().await? == 0,
        "a change without idx2 must leave the chat's range"
    );
    let (from, to) = index::state_range(RecordKind::Inbound, "done");
    let listed = kv
        .range(&s, crate::kv::Index::One, &from, &to, 10)
        .await
        .ctx("range")?;
    ensure!(
        listed.len() == 1 && listed[0].key == key,
        "the change must be listed under its new index value"
    );

    // A change that leaves `idx1` to derive is indexed as its record's journal indexes it,
    // however late the backend computes it.
    let mut later = done.clone();
    later.updated_ms = T0 + 5;
    let derived = RecordChange::Changed {
        idx1: RecordIdx1::Derived,
        idx2: None,
    };
    let mut write = scripted(Ok(derived), Some(later.clone()));
    let written = kv.update_record(&s, &key, &mut write);
    ensure!(
        matches!(written, Some(Ok(RecordUpdated::Written { .. }))),
        "a change with a derived idx1 must be written, got {written:?}"
    );
    let idx1_later = index::idx1(RecordKind::Inbound, "done", T0 + 5, &id);
    let (_, record, idx1, _) = stored(Arc::clone(&kv)).await?;
    ensure!(
        record == later && idx1.as_deref() == Some(idx1_later.as_str()),
        "a derived idx1 must read back as the record's own, got {idx1:?}"
    );
    let listed = kv
        .range(&s, crate::kv::Index::One, &from, &to, 10)
        .await
        .ctx("range")?;
    ensure!(
        listed.len() == 1
            && listed[0].key == key
            && listed[0].entry.idx1.as_deref() == Some(idx1_later.as_str()),
        "a derived idx1 must be listed under the record's value, got {listed:?}"
    );
    let (old_from, old_to) = (idx1_done.clone(), format!("{idx1_done}\u{0}"));
    let stale = kv
        .range(&s, crate::kv::Index::One, &old_from, &old_to, 10)
        .await
        .ctx("range")?;
    ensure!(
        stale.is_empty(),
        "a derived idx1 must leave the value it replaced, got {stale:?}"
    );

    let mut nothing = scripted(Ok(RecordChange::Keep), None);
    let out = kv.update_record(&s, "i/nobody", &mut nothing);
    ensure!(
        matches!(out, Some(Ok(RecordUpdated::Missing))),
        "a missing key must answer Missing, got {out:?}"
    );
    let elsewhere = Scope::new("tenant", "test", "other-bot", "conn");
    let out = kv.update_record(&elsewhere, &key, &mut nothing);
    ensure!(
        matches!(out, Some(Ok(RecordUpdated::Missing))),
        "another scope's key must answer Missing, got {out:?}"
    );
    kv.cas(
        &s,
        "bytes",
        None,
        Entry {
            value: b"{}".to_vec(),
            idx1: None,
            idx2: None,
        },
    )
    .await
    .ctx("cas bytes")?;
    let out = kv.update_record(&s, "bytes", &mut nothing);
    ensure!(
        matches!(out, Some(Ok(RecordUpdated::NotARecord))),
        "bytes must answer NotARecord, got {out:?}"
    );
    ensure!(
        nothing.shown.is_empty(),
        "nothing must be shown for a missing key or bytes"
    );
    Ok(())
}

/// A backend that writes records at once (`cas_record_now`) keeps `cas_record`'s contract:
/// create only if absent, replace only at the current version, the record and its indexes
/// read back.
pub(super) async fn cas_record_now_is_a_compare_and_set(kv: Arc<dyn DurableKv>) -> Case {
    use crate::kv::{CasOutcome, Index, RecordEntry, RecordIdx1, RecordValue};
    let clock = ManualClock::new(T0);
    let d = durability(&kv, scope(), "i1", &clock, |_| {})?;
    let new = NewSend::new(SendKey::explicit("k1"), "alice", json!({"text": "hi"}));
    let SendJournal::Journaled(record) = d.outbox().journal(new).await.ctx("journal")? else {
        return Err("a new send must be journaled".to_owned());
    };
    let entry = |idx2: &str| RecordEntry {
        value: RecordValue::from(record.clone()),
        idx1: RecordIdx1::Given(Some("o/now/1".to_owned())),
        idx2: Some(idx2.to_owned()),
    };
    let s = scope();
    let version = match kv.cas_record_now(&s, "now/a", None, entry("n/1")) {
        Err(_) => return Ok(()), // this backend writes only through `cas_record`
        Ok(Ok(CasOutcome::Ok { version })) => version,
        Ok(other) => return Err(format!("creating an absent key gave {other:?}")),
    };
    let stored = kv.get_record(&s, "now/a").await.ctx("get_record")?;
    ensure!(
        stored.as_ref().map(|v| v.version) == Some(version),
        "the record written at once must read back at version {version}, got {stored:?}"
    );
    let listed = kv
        .range_records(&s, Index::Two, "n/", "n0", 10)
        .await
        .ctx("range_records")?;
    ensure!(
        listed.iter().map(|e| e.key.as_str()).collect::<Vec<_>>() == ["now/a"],
        "its idx2 must list it"
    );
    match kv.cas_record_now(&s, "now/a", None, entry("n/2")) {
        Ok(Ok(CasOutcome::Conflict { current })) if current == Some(version) => {}
        other => {
            return Err(format!(
                "creating an existing key must conflict, got {other:?}"
            ));
        }
    }
    match kv.cas_record_now(&s, "now/a", Some(version + 1_000), entry("n/2")) {
        Ok(Ok(CasOutcome::Conflict { .. })) => {}
        other => return Err(format!("a wrong version must conflict, got {other:?}")),
    }
    let replaced = match kv.cas_record_now(&s, "now/a", Some(version), entry("n/3")) {
        Ok(Ok(CasOutcome::Ok { version: v })) if v > version => v,
        other => return Err(format!("the current version must replace, got {other:?}")),
    };
    let moved = kv
        .range_records(&s, Index::Two, "n/", "n0", 10)
        .await
        .ctx("range_records")?;
    ensure!(
        moved.len() == 1 && moved[0].entry.version == replaced,
        "the replaced record must be listed once, at its new version: {moved:?}"
    );
    Ok(())
}

pub(super) async fn open_for_chat_lists_a_chats_open_inbound_in_arrival_order(
    kv: Arc<dyn DurableKv>,
) -> Case {
    let clock = ManualClock::new(T0);
    let d = durability(&kv, scope(), "i1", &clock, |_| {})?;
    d.inbox()
        .journal(NewInbound::new("a", "a1", json!({})))
        .await
        .ctx("journal a1")?;
    clock.advance(Duration::from_millis(1));
    d.inbox()
        .journal(NewInbound::new("b", "b1", json!({})))
        .await
        .ctx("journal b1")?;
    clock.advance(Duration::from_millis(1));
    // Processing (leased), then done: open, then not.
    claimed(&d, "a", "a2").await?;
    clock.advance(Duration::from_millis(1));
    let done = claimed(&d, "a", "a3").await?;
    d.inbox().complete(&done).await.ctx("complete a3")?;
    clock.advance(Duration::from_millis(1));
    d.inbox()
        .journal(NewInbound::new("a", "a4", json!({})))
        .await
        .ctx("journal a4")?;
    let open_ids = |chat: &'static str, limit: usize| {
        let d = &d;
        async move {
            let open = d.inbox().open_for_chat(chat, limit).await;
            Ok::<_, String>(
                open.ctx("open_for_chat")?
                    .into_iter()
                    .map(|r| r.id)
                    .collect::<Vec<_>>(),
            )
        }
    };
    let open = open_ids("a", 10).await?;
    let expected: Vec<String> = ["a1", "a2", "a4"]
        .iter()
        .map(|m| crate::keys::inbound_id("a", m))
        .collect();
    ensure!(
        open == expected,
        "chat a's open records in arrival order: expected {expected:?}, got {open:?}"
    );
    let first = open_ids("a", 1).await?;
    ensure!(
        first.len() == 1 && first[0] == open[0],
        "limit 1 gives the first, got {first:?}"
    );
    let none = open_ids("c", 10).await?;
    ensure!(
        none.is_empty(),
        "a chat with nothing open lists nothing, got {none:?}"
    );
    // Inbound records keep no per-chat index: nothing of theirs is listed in `idx2`.
    let listed = kv
        .range(&scope(), Index::Two, "i/", "i0", 10)
        .await
        .ctx("range idx2")?;
    ensure!(
        listed.is_empty(),
        "inbound records are not in idx2: {:?}",
        listed.iter().map(|r| &r.key).collect::<Vec<_>>()
    );
    Ok(())
}
