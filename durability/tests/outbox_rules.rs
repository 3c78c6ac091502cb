//! The outbox's rules on the in-memory backend: keys and fingerprints, divergence, bypass,
//! retries, deferral and the DLQ, parts and per-chat order.

use std::sync::Arc;
use std::time::Duration;

use crate::journal_env::{
    Env, T0, claim_new, events, journal, journal_and_begin, lease, send_ok, state,
};
use botmesh_durability::config::OnDiverged;
use botmesh_durability::keys::Fingerprint;
use botmesh_durability::keys::SendKey;
use botmesh_durability::keys::{self, inbound_id, part_key};
use botmesh_durability::kv::Entry;
use botmesh_durability::operating::RecordKind;
use botmesh_durability::outbox::SendJournal;
use botmesh_durability::outbox::{BeginAttempt, JournalBegun};
use botmesh_durability::retries::Backoff;
use botmesh_durability::retries::FailOutcome;
use botmesh_durability::retries::SendFailure;
use botmesh_durability::retries::{InlineBudget, InlineStep};
use botmesh_durability::{DurabilityEvent, DurableKv, OutboxState, Scope};
use serde_json::json;

// ---- keys ------------------------------------------------------------------------------------

#[test]
fn derived_ids_and_keys_are_pinned() {
    assert_eq!(
        inbound_id("alice", "m1"),
        "in:46ccd5ad8cbbe1d5dff2366343d4a6fe"
    );
    assert_eq!(
        SendKey::derived(&inbound_id("alice", "m1"), 2).as_str(),
        "in:46ccd5ad8cbbe1d5dff2366343d4a6fe:2"
    );
    assert_eq!(
        Fingerprint::of("alice", &json!({"text": "hi"})).as_str(),
        "2f401667236d3dee5213669aa113b6b7"
    );
    assert_eq!(part_key("invoice:42", 1), "invoice:42");
    assert_eq!(part_key("invoice:42", 3), "invoice:42#3");
    let fp = Fingerprint::of("alice", &json!({"text": "hi"}));
    assert_eq!(
        keys::diverged_key("k:1", &fp),
        format!("k:1~{}", &fp.as_str()[..12])
    );
    assert!(SendKey::random().as_str().starts_with("r:"));
    assert_ne!(SendKey::random(), SendKey::random());
}

#[tokio::test]
async fn diverged_derived_key_is_sent_under_a_new_key_or_skipped() {
    let env = Env::new();
    let send = env.open_in(Scope::custom("send"), "i1", |_| {});
    let skip = env.open_in(Scope::custom("skip"), "i1", |c| {
        c.outbox.on_diverged = OnDiverged::Skip
    });
    for d in [&send, &skip] {
        let key = SendKey::derived("in:x", 1);
        journal(d, key.clone(), "alice", "first path").await;
        let again = journal(d, key.clone(), "alice", "other path").await;
        let SendJournal::Diverged { recorded, resend } = again else {
            panic!("expected divergence, got {again:?}")
        };
        assert_eq!(recorded.key, key.as_str());
        assert_eq!(d.metrics().outbox_diverged, 1);
        if d.config().outbox.on_diverged == OnDiverged::Send {
            let next = resend.expect("new content is journaled");
            let r = next.record().expect("a record");
            assert!(r.key.starts_with("in:x:1~"), "new key {}", r.key);
            // A second replay of the same new content finds that record.
            let third = journal(d, key.clone(), "alice", "other path").await;
            assert!(
                matches!(third, SendJournal::Diverged { resend: Some(ref n), .. } if matches!(**n, SendJournal::Recorded(_)))
            );
        } else {
            assert!(resend.is_none(), "skip answers from the recorded send");
        }
    }
    let explicit = env.open_in(Scope::custom("explicit"), "i1", |_| {});
    journal(&explicit, SendKey::explicit("reminder:1"), "alice", "a").await;
    assert!(
        matches!(
            journal(&explicit, SendKey::explicit("reminder:1"), "alice", "b").await,
            SendJournal::Recorded(_)
        ),
        "explicit keys are never compared"
    );
}

#[tokio::test]
async fn large_payload_bypasses_the_outbox() {
    let env = Env::new();
    let d = env.open("i1", |c| c.outbox.max_payload_bytes = 64);
    let j = journal(&d, SendKey::explicit("big"), "alice", &"x".repeat(100)).await;
    assert!(matches!(j, SendJournal::Bypassed { limit: 64, .. }));
    assert!(d.outbox().lookup("big").await.expect("lookup").is_none());
    assert_eq!(d.metrics().outbox_bypassed, 1);
}

// ---- retries, deferral, DLQ ------------------------------------------------------------------

#[test]
fn backoff_is_exponential_capped_and_jittered() {
    let b = Backoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(10),
        jitter: 0.2,
    };
    assert_eq!(b.delay(1, 0.5), Duration::from_secs(1));
    assert_eq!(b.delay(2, 0.5), Duration::from_secs(2));
    assert_eq!(b.delay(4, 0.5), Duration::from_secs(8));
    assert_eq!(b.delay(30, 0.5), Duration::from_secs(10), "capped");
    assert_eq!(b.delay(2, 0.0), Duration::from_millis(1600), "-20%");
    assert_eq!(b.delay(2, 1.0), Duration::from_millis(2400), "+20%");
    assert_eq!(
        b.delay(30, 1.0),
        Duration::from_secs(10),
        "jitter never exceeds the cap"
    );
}

#[tokio::test]
async fn failed_sends_retry_with_backoff_then_dead_letter() {
    let env = Env::new();
    let d = env.open("i1", |c| c.outbox.retries = 2);
    let mut rx = d.subscribe();
    journal(&d, SendKey::explicit("k"), "alice", "hi").await;
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let l = lease(&d, "k").await;
        outcomes.push(
            d.outbox()
                .mark_failed(&l, &SendFailure::retryable("503"))
                .await
                .expect("mark_failed"),
        );
        if let Some(FailOutcome::Retrying { at_ms }) = outcomes.last() {
            assert!(matches!(
                d.outbox().begin_attempt("k").await.expect("begin"),
                BeginAttempt::NotDue { .. }
            ));
            env.clock.set(*at_ms);
        }
    }
    assert_eq!(outcomes[0], FailOutcome::Retrying { at_ms: T0 + 1000 });
    assert!(matches!(outcomes[1], FailOutcome::Retrying { .. }));
    assert_eq!(
        outcomes[2],
        FailOutcome::DeadLettered,
        "retries = 2 means 3 provider calls at most"
    );
    assert_eq!(state(&d, "k").await, OutboxState::Dead);
    assert_eq!(d.metrics().outbox_retried, 2);
    assert!(
        matches!(&events(&mut rx)[..], [DurabilityEvent::Dead { kind: RecordKind::Outbound, id, error }] if id == "k" && error == "503")
    );
    assert_eq!(
        d.outbox()
            .list(OutboxState::Dead, 10)
            .await
            .expect("dlq")
            .len(),
        1
    );
}

#[tokio::test]
async fn final_errors_dead_letter_at_once_and_rate_limits_wait() {
    let (_env, d) = Env::with_send("final", "a", "x").await;
    let l = lease(&d, "final").await;
    assert_eq!(
        d.outbox()
            .mark_failed(&l, &SendFailure::final_error("unsupported content"))
            .await
            .expect("fail"),
        FailOutcome::DeadLettered
    );
    journal(&d, SendKey::explicit("limited"), "b", "x").await;
    let l = lease(&d, "limited").await;
    let out = d
        .outbox()
        .mark_failed(
            &l,
            &SendFailure::rate_limited("429", Duration::from_secs(30)),
        )
        .await
        .expect("fail");
    // One millisecond past: the system clock's millisecond can be up to one behind the real
    // moment, and `retry_after` is a floor.
    assert_eq!(
        out,
        FailOutcome::Retrying { at_ms: T0 + 30_001 },
        "waits at least retry_after"
    );
}

#[tokio::test]
async fn inline_budget_defers_to_the_sweeper() {
    let (_env, d) = Env::opened();
    let budget = InlineBudget::start(T0, d.config().outbox.inline_max);
    assert_eq!(
        budget.next(T0 + 1000),
        InlineStep::WaitUntil { at_ms: T0 + 1000 }
    );
    assert_eq!(budget.next(T0 + 16_000), InlineStep::Defer);
    d.outbox().defer("k");
    assert_eq!(d.metrics().outbox_deferred, 1);
}

#[tokio::test]
async fn inbound_failures_before_handlers_retry_then_dead_letter() {
    let env = Env::new();
    let d = env.open("i1", |c| c.inbox.max_attempts = 2);
    let l = claim_new(&d, "alice", "m1").await;
    assert_eq!(
        d.inbox().fail(&l, "store down", true).await.expect("fail"),
        FailOutcome::Retrying { at_ms: T0 + 1000 }
    );
    assert!(
        d.inbox().claim_due(10).await.expect("claim").is_empty(),
        "not due before its backoff"
    );
    env.clock.advance(Duration::from_secs(1));
    let c = d.inbox().claim_due(10).await.expect("claim").remove(0);
    d.inbox()
        .release(&c.lease, Duration::ZERO)
        .await
        .expect("release");
    let c = d.inbox().claim_due(10).await.expect("claim").remove(0);
    assert_eq!(c.lease.attempt, 2, "a release does not charge its attempt");
    assert_eq!(
        d.inbox()
            .fail(&c.lease, "store down", true)
            .await
            .expect("fail"),
        FailOutcome::DeadLettered
    );
    let l = claim_new(&d, "bob", "m2").await;
    assert_eq!(
        d.inbox()
            .fail(&l, "bad payload", false)
            .await
            .expect("fail"),
        FailOutcome::DeadLettered,
        "non-retryable"
    );
}

// ---- parts and per-chat order ----------------------------------------------------------------

#[tokio::test]
async fn parts_go_in_order_and_wait_without_spending_attempts() {
    let (env, d) = Env::with_send("k", "alice", "p1 p2 p3").await;
    let parts = vec![
        json!({"text": "p1"}),
        json!({"text": "p2"}),
        json!({"text": "p3"}),
    ];
    let records = d
        .outbox()
        .split_parts("k", parts.clone())
        .await
        .expect("split");
    assert_eq!(
        records.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["k", "k#2", "k#3"]
    );
    assert_eq!(records[1].previous_part.as_deref(), Some("k"));
    assert_eq!(records[0].payload, json!({"text": "p1"}));
    let again = d
        .outbox()
        .split_parts("k", parts)
        .await
        .expect("split again");
    assert_eq!(again, records, "a second split journals nothing twice");
    assert_eq!(d.metrics().outbox_journaled, 3);
    let l = lease(&d, "k").await;
    d.outbox()
        .mark_failed(&l, &SendFailure::retryable("503"))
        .await
        .expect("fail");
    assert_eq!(
        d.outbox().begin_attempt("k#2").await.expect("begin"),
        BeginAttempt::Waiting { behind: "k".into() }
    );
    env.clock.advance(Duration::from_secs(5));
    let due = d.outbox().due(10).await.expect("due");
    assert_eq!(
        due.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["k"],
        "a part never overtakes the earlier one"
    );
    send_ok(&d, "k").await;
    let p2 = lease(&d, "k#2").await;
    assert_eq!(p2.attempt, 1, "waiting was not an attempt");
    d.outbox().mark_sent(&p2, None).await.expect("sent");
    send_ok(&d, "k#3").await;
}

#[tokio::test]
async fn a_part_dies_with_its_dead_previous_part_and_comes_back_with_it() {
    let (_env, d) = Env::opened();
    let mut rx = d.subscribe();
    journal(&d, SendKey::explicit("k"), "alice", "long").await;
    d.outbox()
        .split_parts("k", vec![json!("a"), json!("b"), json!("c")])
        .await
        .expect("split");
    let l = lease(&d, "k").await;
    d.outbox()
        .mark_failed(&l, &SendFailure::final_error("unsupported"))
        .await
        .expect("fail");
    for key in ["k", "k#2", "k#3"] {
        assert_eq!(state(&d, key).await, OutboxState::Dead, "{key}");
    }
    let dead: Vec<String> = events(&mut rx)
        .into_iter()
        .filter_map(|e| match e {
            DurabilityEvent::Dead { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(dead, ["k", "k#2", "k#3"]);
    assert_eq!(d.metrics().outbox_dead, 3);
    let part = d
        .outbox()
        .lookup("k#2")
        .await
        .expect("lookup")
        .expect("part");
    assert_eq!(
        part.attempts, 0,
        "dying with the previous part is not an attempt"
    );
    d.retry_send("k").await.expect("retry");
    for key in ["k", "k#2", "k#3"] {
        assert_eq!(
            state(&d, key).await,
            OutboxState::Pending,
            "{key} comes back"
        );
    }
    send_ok(&d, "k").await;
    send_ok(&d, "k#2").await;
    send_ok(&d, "k#3").await;
}

#[tokio::test]
async fn a_part_journaled_later_dies_lazily_when_swept() {
    let (_env, d) = Env::with_send("k", "alice", "long").await;
    let l = lease(&d, "k").await;
    // The part is journaled while the first part is in flight; the first then dies.
    d.outbox()
        .split_parts("k", vec![json!("a"), json!("b")])
        .await
        .expect_err("cannot split a send in flight");
    d.outbox()
        .mark_failed(&l, &SendFailure::final_error("x"))
        .await
        .expect("fail");
    let kv = Arc::clone(d.kv());
    let part = botmesh_durability::outbox::OutboxRecord {
        key: "k#2".into(),
        previous_part: Some("k".into()),
        part: 2,
        ..d.outbox()
            .lookup("k")
            .await
            .expect("lookup")
            .expect("record")
    };
    let mut part = part;
    part.state = OutboxState::Pending;
    let bytes = serde_json::to_vec(&part).expect("encode");
    let entry = Entry {
        value: bytes,
        idx1: Some(format!("o/pending/{:016}/k#2", T0)),
        idx2: None,
    };
    kv.cas(d.scope(), "o/k#2", None, entry)
        .await
        .expect("write part");
    assert!(d.outbox().due(10).await.expect("due").is_empty());
    assert_eq!(
        state(&d, "k#2").await,
        OutboxState::Dead,
        "the sweep lets it die with its previous part"
    );
}

#[tokio::test]
async fn a_later_send_never_overtakes_an_earlier_one_of_its_chat() {
    let (env, d) = Env::with_send("a1", "alice", "first").await;
    let l = lease(&d, "a1").await;
    d.outbox()
        .mark_failed(&l, &SendFailure::retryable("503"))
        .await
        .expect("fail");
    journal(&d, SendKey::explicit("a2"), "alice", "second").await;
    journal(&d, SendKey::explicit("b1"), "bob", "other chat").await;
    assert_eq!(
        d.outbox().begin_attempt("a2").await.expect("begin"),
        BeginAttempt::Waiting {
            behind: "a1".into()
        }
    );
    let due = d.outbox().due(10).await.expect("due");
    assert_eq!(
        due.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["b1"],
        "other chats are not held up"
    );
    env.clock.advance(Duration::from_secs(2));
    let due = d.outbox().due(10).await.expect("due");
    assert_eq!(
        due.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["b1", "a1"],
        "soonest due first"
    );
    send_ok(&d, "a1").await;
    assert_eq!(d.outbox().due(10).await.expect("due")[0].key, "a2");
}

// ---- journal and first attempt in one write ----------------------------------------------------

#[tokio::test]
async fn journal_and_begin_leases_a_new_send_in_the_write_that_journals_it() {
    let (env, d) = Env::opened();
    let JournalBegun::Leased { lease, record } =
        journal_and_begin(&d, SendKey::explicit("k1"), "alice", "hi").await
    else {
        panic!("a new send of a chat with nothing open is leased")
    };
    assert_eq!(
        (record.state, record.attempts, record.fence),
        (OutboxState::Sending, 1, 1)
    );
    assert_eq!((lease.key.as_str(), lease.attempt), ("k1", 1));
    assert_eq!(state(&d, "k1").await, OutboxState::Sending, "stored leased");
    assert_eq!(d.metrics().outbox_journaled, 1);
    // Another attempt while the call is in flight is refused; the lease marks it sent.
    assert!(matches!(
        d.outbox().begin_attempt("k1").await.expect("begin"),
        BeginAttempt::Busy { .. }
    ));
    d.outbox()
        .mark_sent(&lease, Some("p-1".into()))
        .await
        .expect("mark_sent with the journal write's lease");
    // The same send again is answered from the record, not leased again.
    let again = journal_and_begin(&d, SendKey::explicit("k1"), "alice", "hi").await;
    let JournalBegun::Journal(SendJournal::Recorded(r)) = again else {
        panic!("expected the recorded send, got {again:?}")
    };
    assert_eq!(
        (r.state, r.provider_message_id.as_deref()),
        (OutboxState::Sent, Some("p-1"))
    );
    assert_eq!(d.metrics().outbox_deduped, 1);
    // Over the payload limit: bypassed, nothing journaled.
    let small = env.open_in(Scope::custom("small"), "i1", |c| {
        c.outbox.max_payload_bytes = 8
    });
    assert!(matches!(
        journal_and_begin(&small, SendKey::explicit("big"), "alice", "far too long").await,
        JournalBegun::Journal(SendJournal::Bypassed { .. })
    ));
    assert!(
        small
            .outbox()
            .lookup("big")
            .await
            .expect("lookup")
            .is_none()
    );
}

#[tokio::test]
async fn journal_and_begin_journals_pending_behind_an_open_send_of_the_chat() {
    let (_env, d) = Env::with_send("a1", "alice", "first").await;
    let begun = journal_and_begin(&d, SendKey::explicit("a2"), "alice", "second").await;
    let JournalBegun::Journal(SendJournal::Journaled(r)) = begun else {
        panic!("expected a pending journal behind a1, got {begun:?}")
    };
    assert_eq!((r.state, r.attempts), (OutboxState::Pending, 0));
    assert_eq!(
        d.outbox().begin_attempt("a2").await.expect("begin"),
        BeginAttempt::Waiting {
            behind: "a1".into()
        }
    );
    // Another chat is not held up.
    assert!(matches!(
        journal_and_begin(&d, SendKey::explicit("b1"), "bob", "other").await,
        JournalBegun::Leased { .. }
    ));
}

#[tokio::test]
async fn a_send_leased_by_its_journal_write_is_ambiguous_after_a_crash() {
    let (env, d) = Env::opened();
    assert!(matches!(
        journal_and_begin(&d, SendKey::explicit("k1"), "alice", "hi").await,
        JournalBegun::Leased { .. }
    ));
    // The process dies before the provider's answer is recorded; the next incarnation finds
    // the send under a dead lease: its outcome is unknown (`on_ambiguous: skip`).
    drop(d);
    let next = env.open("i1", |_| {});
    let mut rx = next.subscribe();
    assert!(matches!(
        next.outbox().begin_attempt("k1").await.expect("begin"),
        BeginAttempt::Settled(ref r) if r.state == OutboxState::Unknown
    ));
    assert!(
        events(&mut rx)
            .iter()
            .any(|e| matches!(e, DurabilityEvent::Ambiguous { .. })),
        "reported as ambiguous"
    );
}
