//! Conformance cases of the journals (`KvDurability`) running on the backend under test.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{Ctx, ensure, ensure_count};
use crate::clock::ManualClock;
use crate::config::DurabilityConfig;
use crate::error::DurabilityError;
use crate::inbox::{Claimed, InboundRecord, InboxJournalClaim, InboxState, NewInbound};
use crate::journal::{KvDurability, index};
use crate::keys::SendKey;
use crate::kv::{DurableKv, Entry, Index, Scope};
use crate::metrics::{DurabilityEvent, RecordKind};
use crate::outbox::{BeginAttempt, NewSend, OutboxRecord, OutboxState, SendJournal};
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

/// What a sweep of `d`'s inbox claims (at most 10); `what` names the sweep in an error.
pub(super) async fn claim_due(d: &KvDurability, what: &str) -> Result<Vec<Claimed>, String> {
    d.inbox().claim_due(10).await.ctx(what)
}

/// The send recorded under `key` in `d`'s outbox (an error when there is none).
pub(super) async fn recorded(d: &KvDurability, key: &str) -> Result<OutboxRecord, String> {
    let found = d.outbox().lookup(key).await.ctx("lookup")?;
    found.ok_or_else(|| format!("no send is recorded under `{key}`"))
}

/// The pending inbound records of `d` (at most 10).
async fn pending_inbound(d: &KvDurability) -> Result<Vec<InboundRecord>, String> {
    d.inbox().list(InboxState::Pending, 10).await.ctx("list")
}

/// Whether a read answered that its record is corrupt.
fn is_corrupt<T>(read: &Result<T, DurabilityError>) -> bool {
    matches!(read, Err(DurabilityError::Corrupt { .. }))
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
    let claims = claim_due(&d, "claim_due must not fail on a poison record").await?;
    ensure_count(&claims, 1, "the good record must still be claimed")?;
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
        claim_due(&d, "second sweep").await?.is_empty(),
        "nothing left to claim"
    );
    ensure!(
        events.try_recv().is_err(),
        "a quarantined record was reported twice"
    );
    ensure!(
        pending_inbound(&d).await?.is_empty(),
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
        is_corrupt(&d.inbox().get("bad").await),
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
        is_corrupt(&d.outbox().lookup("badkey").await),
        "the idempotency lookup must refuse a corrupt record instead of sending again"
    );
    let pending = d
        .outbox()
        .list(OutboxState::Pending, 10)
        .await
        .ctx("list")?;
    ensure_count(&pending, 1, "list must skip quarantined records")?;
    ensure!(
        d.metrics().outbox_dead == 2,
        "outbox_dead must count quarantines, got {}",
        d.metrics().outbox_dead
    );
    Ok(())
}

pub(super) async fn explicit_keys_are_per_bot(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let bot = |name: &str| {
        let scope = Scope::new("t", "prod", &format!("bot-{name}"), "c");
        durability(&kv, scope, name, &clock, |_| {})
    };
    let (a, b) = (bot("a")?, bot("b")?);
    journal_send(&a, SendKey::explicit("reminder:1"), "alice", "for alice").await?;
    journal_send(&b, SendKey::explicit("reminder:1"), "bob", "for bob").await?;
    let lease = leased_send(&a, "reminder:1").await?;
    a.outbox()
        .mark_sent(&lease, Some("pa".into()))
        .await
        .ctx("mark_sent")?;
    let ra = recorded(&a, "reminder:1").await?;
    let rb = recorded(&b, "reminder:1").await?;
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
    ensure_count(
        &pending_inbound(&d).await?,
        1,
        "a pending record was purged",
    )?;
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
