//! The journals on the in-memory backend: every row of the table "What is guaranteed" (in
//! `docs/durability-and-backends.md`) that can be checked at the storage level, fencing,
//! scoping, retention and undecodable records.

use std::time::Duration;

use crate::journal_env::{
    Env, ambiguous_hi_to_alice, claim_new, events, journal, lease, leave_leased, send_ok, state,
};
use botmesh_durability::inbox::NewInbound;
use botmesh_durability::inbox::{Claim, InboxJournal, InboxJournalClaim};
use botmesh_durability::keys::SendKey;
use botmesh_durability::kv::Entry;
use botmesh_durability::operating::RecordKind;
use botmesh_durability::outbox::SendJournal;
use botmesh_durability::outbox::{AmbiguousOutcome, BeginAttempt};
use botmesh_durability::{
    DurabilityError, DurabilityEvent, DurableKv, InboxState, KvDurability, OnAmbiguous,
    OutboxState, Scope,
};
use serde_json::json;

// ---- the guarantee table ------------------------------------------------------------------

#[tokio::test]
async fn guarantee_dies_before_journal_nothing_recorded_redelivery_processed() {
    let (_env, d) = Env::opened();
    let m = NewInbound::new("alice", "m1", json!({}));
    assert!(
        d.inbox().get(&m.id).await.expect("get").is_none(),
        "nothing was recorded"
    );
    let again = d.reopen().expect("restart");
    assert!(
        matches!(
            again.inbox().journal(m).await.expect("journal"),
            InboxJournal::Journaled(_)
        ),
        "a redelivery is a new event"
    );
}

#[tokio::test]
async fn guarantee_dies_in_handler_replay_answers_sent_replies_and_sends_missing_ones() {
    let env = Env::new();
    let first = env.open("i1", |_| {});
    let l = claim_new(&first, "alice", "m1").await;
    let k1 = SendKey::derived(&l.id, 1);
    journal(&first, k1.clone(), "alice", "one").await;
    send_ok(&first, k1.as_str()).await;
    // The process dies here: reply 1 went out, reply 2 was never made, the inbound is open.
    let restarted = first.reopen().expect("restart");
    let replay = restarted.inbox().claim_due(10).await.expect("claim_due");
    assert_eq!(
        replay.len(),
        1,
        "the unfinished inbound is replayed at once by the same instance id"
    );
    assert_eq!(restarted.metrics().inbound_replayed, 1);
    match journal(&restarted, k1.clone(), "alice", "one").await {
        SendJournal::Recorded(r) => assert_eq!(
            (r.state, r.provider_message_id.as_deref()),
            (OutboxState::Sent, Some(format!("p-{k1}").as_str()))
        ),
        other => panic!("reply 1 must be answered from the outbox, got {other:?}"),
    }
    assert!(matches!(
        restarted
            .outbox()
            .begin_attempt(k1.as_str())
            .await
            .expect("begin"),
        BeginAttempt::AlreadySent(_)
    ));
    let k2 = SendKey::derived(&l.id, 2);
    assert!(
        matches!(
            journal(&restarted, k2.clone(), "alice", "two").await,
            SendJournal::Journaled(_)
        ),
        "the missing reply is sent"
    );
    send_ok(&restarted, k2.as_str()).await;
    let done = restarted.inbox().complete(&replay[0].lease).await;
    done.expect("complete");
    assert_eq!(restarted.metrics().outbox_deduped, 1);
}

#[tokio::test]
async fn guarantee_ambiguous_send_skip_marks_unknown_and_never_resends() {
    let env = Env::new();
    let first = env.open("i1", |_| {});
    leave_leased(&first).await;
    let restarted = first.reopen().expect("restart");
    let mut rx = restarted.subscribe();
    assert!(
        restarted.outbox().due(10).await.expect("due").is_empty(),
        "nothing is resent under skip"
    );
    assert_eq!(state(&restarted, "k").await, OutboxState::Unknown);
    assert_eq!(events(&mut rx), [ambiguous_hi_to_alice()]);
    assert_eq!(restarted.metrics().outbox_ambiguous, 1);
    assert!(matches!(
        restarted.outbox().begin_attempt("k").await.expect("begin"),
        BeginAttempt::Settled(_)
    ));
    restarted
        .retry_send("k")
        .await
        .expect("an operator may send it again");
    assert_eq!(restarted.outbox().due(10).await.expect("due").len(), 1);
}

#[tokio::test]
async fn guarantee_ambiguous_send_resend_makes_it_due_again() {
    let env = Env::new();
    let first = env.open("i1", |c| c.outbox.on_ambiguous = OnAmbiguous::Resend);
    leave_leased(&first).await;
    let restarted = first.reopen().expect("restart");
    let mut rx = restarted.subscribe();
    let due = restarted.outbox().due(10).await.expect("due");
    assert_eq!(
        due.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["k"],
        "never lost under resend"
    );
    assert_eq!(events(&mut rx), [ambiguous_hi_to_alice()]);
    send_ok(&restarted, "k").await;
}

/// Recovery reports an ambiguous send before the write that settles it: a process killed
/// right after that write has named it, and the next one (which finds it settled: due again
/// under `resend`, `unknown` under `skip`) has nothing left to report.
#[cfg(feature = "testing")]
#[tokio::test]
async fn guarantee_ambiguity_is_reported_by_a_recovery_killed_after_settling_it() {
    use botmesh_durability::kv::WritePoint;
    use botmesh_durability::testing::crash::crashable_durability;

    for policy in [OnAmbiguous::Skip, OnAmbiguous::Resend] {
        let env = Env::new();
        let first = env.open("i1", |c| c.outbox.on_ambiguous = policy);
        leave_leased(&first).await;
        let (switch, recovering) = crashable_durability(&first).expect("crashable durability");
        switch.crash_after(WritePoint::OutboxMarkAmbiguous);
        let mut rx = recovering.subscribe();
        assert!(
            recovering.outbox().due(10).await.is_err(),
            "{policy:?}: the recovery dies after settling the send"
        );
        assert!(switch.is_crashed());
        assert_eq!(
            events(&mut rx),
            [ambiguous_hi_to_alice()],
            "{policy:?}: the send was named before the process died"
        );
        drop(recovering);
        let next = first.reopen().expect("restart");
        let mut rx = next.subscribe();
        let due = next.outbox().due(10).await.expect("due");
        match policy {
            OnAmbiguous::Resend => assert_eq!(due.len(), 1, "sent again under resend"),
            OnAmbiguous::Skip => {
                assert!(due.is_empty());
                assert_eq!(state(&next, "k").await, OutboxState::Unknown);
            }
        }
        assert!(events(&mut rx).is_empty(), "{policy:?}: settled already");
    }
}

#[tokio::test]
async fn guarantee_provider_timeout_is_ambiguous_by_policy() {
    let env = Env::new();
    for (policy, state_after) in [
        (OnAmbiguous::Skip, OutboxState::Unknown),
        (OnAmbiguous::Resend, OutboxState::Pending),
    ] {
        let d = env.open_in(Scope::custom(format!("{policy:?}")), "i1", |c| {
            c.outbox.on_ambiguous = policy
        });
        let mut rx = d.subscribe();
        journal(&d, SendKey::explicit("k"), "alice", "hi").await;
        let l = lease(&d, "k").await;
        let outcome = d
            .outbox()
            .mark_ambiguous(&l, "timeout")
            .await
            .expect("ambiguous");
        match policy {
            OnAmbiguous::Skip => assert_eq!(outcome, AmbiguousOutcome::Unknown),
            _ => assert!(
                matches!(outcome, AmbiguousOutcome::Resend { .. }),
                "{outcome:?}"
            ),
        }
        assert_eq!(state(&d, "k").await, state_after);
        assert_eq!(
            events(&mut rx),
            [ambiguous_hi_to_alice()],
            "{policy:?}: named by the event"
        );
    }
}

/// A send whose outcome keeps being unknown under `resend` is retried with the outbox's
/// backoff, and dead-lettered once out of retries, like a failed one.
#[tokio::test]
async fn guarantee_ambiguous_resend_runs_out_of_retries() {
    let env = Env::new();
    let d = env.open("i1", |c| {
        c.outbox.on_ambiguous = OnAmbiguous::Resend;
        c.outbox.retries = 1;
        c.outbox.backoff.base = std::time::Duration::ZERO;
        c.outbox.backoff.cap = std::time::Duration::ZERO;
    });
    journal(&d, SendKey::explicit("k"), "alice", "hi").await;
    let first = lease(&d, "k").await;
    assert!(matches!(
        d.outbox()
            .mark_ambiguous(&first, "timeout")
            .await
            .expect("ambiguous"),
        AmbiguousOutcome::Resend { .. }
    ));
    let second = lease(&d, "k").await;
    assert_eq!(
        d.outbox()
            .mark_ambiguous(&second, "timeout")
            .await
            .expect("ambiguous"),
        AmbiguousOutcome::DeadLettered
    );
    assert_eq!(state(&d, "k").await, OutboxState::Dead);
}

#[tokio::test]
async fn guarantee_dies_after_send_recorded_replay_answers_every_reply() {
    let env = Env::new();
    let first = env.open("i1", |_| {});
    let l = claim_new(&first, "alice", "m1").await;
    for n in 1..=2 {
        let k = SendKey::derived(&l.id, n);
        journal(&first, k.clone(), "alice", &format!("r{n}")).await;
        send_ok(&first, k.as_str()).await;
    }
    let restarted = first.reopen().expect("restart");
    let replay = restarted.inbox().claim_due(10).await.expect("claim_due");
    for n in 1..=2 {
        let j = journal(
            &restarted,
            SendKey::derived(&l.id, n),
            "alice",
            &format!("r{n}"),
        )
        .await;
        assert!(
            matches!(j, SendJournal::Recorded(ref r) if r.state == OutboxState::Sent),
            "reply {n}: {j:?}"
        );
    }
    let done = restarted.inbox().complete(&replay[0].lease).await;
    done.expect("complete");
    assert_eq!(restarted.metrics().outbox_deduped, 2);
    assert_eq!(
        restarted.metrics().outbox_journaled,
        0,
        "nothing goes out twice"
    );
}

#[tokio::test]
async fn guarantee_crash_loop_is_dead_lettered_after_max_attempts() {
    let env = Env::new();
    let mut d = env.open("i1", |c| c.inbox.max_attempts = 3);
    let l = claim_new(&d, "alice", "poison-pill").await;
    for run in 2..=3 {
        d = d.reopen().expect("restart"); // the handler crashed the process
        let claims = d.inbox().claim_due(10).await.expect("claim_due");
        assert_eq!(claims.len(), 1, "run {run} replays it");
        assert_eq!(claims[0].lease.attempt, run);
    }
    d = d.reopen().expect("restart");
    let mut rx = d.subscribe();
    assert!(
        d.inbox().claim_due(10).await.expect("claim_due").is_empty(),
        "not run a fourth time"
    );
    let dead = d
        .inbox()
        .list(InboxState::Dead, 10)
        .await
        .expect("list dead");
    assert_eq!(dead.len(), 1);
    assert!(
        matches!(&events(&mut rx)[..], [DurabilityEvent::Dead { kind: RecordKind::Inbound, id, .. }] if *id == l.id)
    );
    assert_eq!(d.metrics().inbound_dead, 1);
    d.replay_inbound(&l.id).await.expect("operator replay");
    assert_eq!(
        d.inbox().claim_due(10).await.expect("claim").len(),
        1,
        "a replay gets the whole budget again"
    );
}

#[tokio::test]
async fn exactly_once_while_alive() {
    let (_env, d) = Env::opened();
    assert!(matches!(
        journal(&d, SendKey::explicit("invoice:42"), "alice", "pay").await,
        SendJournal::Journaled(_)
    ));
    send_ok(&d, "invoice:42").await;
    assert!(matches!(
        journal(&d, SendKey::explicit("invoice:42"), "alice", "pay").await,
        SendJournal::Recorded(_)
    ));
    assert!(matches!(
        d.outbox().begin_attempt("invoice:42").await.expect("begin"),
        BeginAttempt::AlreadySent(_)
    ));
    let m = NewInbound::new("alice", "m1", json!({}));
    d.inbox().journal(m.clone()).await.expect("journal");
    assert!(matches!(
        d.inbox().journal(m).await.expect("journal"),
        InboxJournal::Duplicate(_)
    ));
    let metrics = d.metrics();
    assert_eq!(
        (metrics.inbound_journaled, metrics.inbound_duplicates),
        (1, 1)
    );
    assert_eq!((metrics.outbox_journaled, metrics.outbox_deduped), (1, 1));
}

// ---- fencing, scoping, retention, poison -------------------------------------------------------

#[tokio::test]
async fn a_stale_holder_cannot_complete() {
    let env = Env::new();
    let a = env.open("a", |_| {});
    let b = env.open("b", |_| {});
    let old = claim_new(&a, "alice", "m1").await;
    assert!(
        matches!(b.inbox().claim(&old.id).await.expect("claim"), Claim::Busy { ref owner, .. } if owner == "a")
    );
    env.clock.advance(Duration::from_secs(61));
    let Claim::Leased(new) = b.inbox().claim(&old.id).await.expect("claim") else {
        panic!("expired lease")
    };
    let err = a.inbox().complete(&old).await.expect_err("stale");
    assert!(
        matches!(err, DurabilityError::StaleLease { kind: RecordKind::Inbound, ref id, token, current } if *id == old.id && token == old.token && current == new.lease.token)
    );
    assert_eq!(a.metrics().stale_leases, 1);
    b.inbox().complete(&new.lease).await.expect("complete");
}

#[tokio::test]
async fn two_bots_keep_their_own_record_under_one_explicit_key() {
    let env = Env::new();
    let a = env.open_in(Scope::new("t", "prod", "a", "c"), "a", |_| {});
    let b = env.open_in(Scope::new("t", "prod", "b", "c"), "b", |_| {});
    journal(&a, SendKey::explicit("reminder:1"), "alice", "A").await;
    assert!(matches!(
        journal(&b, SendKey::explicit("reminder:1"), "bob", "B").await,
        SendJournal::Journaled(_)
    ));
    send_ok(&a, "reminder:1").await;
    assert_eq!(state(&a, "reminder:1").await, OutboxState::Sent);
    assert_eq!(state(&b, "reminder:1").await, OutboxState::Pending);
}

#[tokio::test]
async fn retention_purges_done_and_sent_only() {
    let env = Env::new();
    let d = env.open("i1", |c| c.retention = Some(Duration::from_secs(60)));
    let l = claim_new(&d, "alice", "m1").await;
    d.inbox().complete(&l).await.expect("complete");
    journal(&d, SendKey::explicit("s"), "alice", "x").await;
    send_ok(&d, "s").await;
    journal(&d, SendKey::explicit("p"), "bob", "x").await;
    env.clock.advance(Duration::from_secs(61));
    let report = d.purge(100).await.expect("purge");
    assert_eq!((report.inbound, report.outbound), (1, 1));
    assert!(d.outbox().lookup("p").await.expect("lookup").is_some());
    // A redelivery after the purge is no longer recognised: keep retention above redelivery windows.
    assert!(matches!(
        d.inbox()
            .journal(NewInbound::new("alice", "m1", json!({})))
            .await
            .expect("journal"),
        InboxJournal::Journaled(_)
    ));
}

#[tokio::test]
async fn undecodable_records_are_reported_never_dropped() {
    let (_env, d) = Env::opened();
    let mut rx = d.subscribe();
    for (key, idx) in [
        ("i/bad", "i/done/0000000000000001/bad"),
        ("o/bad", "o/unknown/0000000000000001/bad"),
    ] {
        let entry = Entry {
            value: b"{\"half\":".to_vec(),
            idx1: Some(idx.into()),
            idx2: None,
        };
        d.kv()
            .cas(d.scope(), key, None, entry)
            .await
            .expect("write");
    }
    let done = d.inbox().list(InboxState::Done, 10).await.expect("list");
    let unknown = d
        .outbox()
        .list(OutboxState::Unknown, 10)
        .await
        .expect("list");
    assert!(
        done.is_empty() && unknown.is_empty(),
        "{done:?} {unknown:?}"
    );
    assert_eq!(events(&mut rx).len(), 2, "each reported once");
    assert_eq!(
        d.quarantined(RecordKind::Inbound, 10)
            .await
            .expect("q")
            .len(),
        1
    );
    assert_eq!(
        d.quarantined(RecordKind::Outbound, 10).await.expect("q")[0].bytes,
        b"{\"half\":"
    );
    assert!(matches!(
        d.outbox().retry("bad").await,
        Err(DurabilityError::Corrupt { .. })
    ));
    assert!(
        d.discard_send("bad").await.expect("discard"),
        "an operator can remove it"
    );
}

#[tokio::test]
async fn an_erased_durability_is_the_same_incarnation_and_runs_on_spawned_tasks() {
    let (_env, d) = Env::opened();
    let erased: KvDurability = d.erase();
    assert_eq!(erased.incarnation(), d.incarnation());
    let task = erased.clone();
    let claimed = tokio::spawn(async move {
        let m = NewInbound::new("alice", "m1", json!({}));
        let claim = task.inbox().journal_and_claim(m).await?;
        let due = task.outbox().due(10).await?;
        Ok::<_, DurabilityError>((matches!(claim, InboxJournalClaim::Claimed(_)), due.len()))
    })
    .await
    .expect("task")
    .expect("journal");
    assert_eq!(claimed, (true, 0));
    assert_eq!(
        d.metrics().inbound_journaled,
        1,
        "counters are shared with the erased handle"
    );
}

/// A send's own `on_ambiguous` wins over the bot's, both ways: under a bot-wide `resend`, a
/// send that says `skip` is left `unknown`; under the default `skip`, one that says `resend`
/// is due again. Each is reported as ambiguous.
#[tokio::test]
async fn a_sends_own_on_ambiguous_overrides_the_bots() {
    for (bot, own, after) in [
        (OnAmbiguous::Resend, OnAmbiguous::Skip, OutboxState::Unknown),
        (OnAmbiguous::Skip, OnAmbiguous::Resend, OutboxState::Pending),
    ] {
        let env = Env::new();
        let first = env.open("i1", |c| c.outbox.on_ambiguous = bot);
        let new = botmesh_durability::outbox::NewSend::new(
            SendKey::explicit("k"),
            "alice",
            json!({"text": "hi"}),
        )
        .with_on_ambiguous(Some(own));
        first.outbox().journal(new).await.expect("journal");
        lease(&first, "k").await; // "about to call the provider", then the process dies
        let restarted = first.reopen().expect("restart");
        let mut rx = restarted.subscribe();
        let due = restarted.outbox().due(10).await.expect("due");
        assert_eq!(
            state(&restarted, "k").await,
            after,
            "bot {bot:?}, own {own:?}"
        );
        assert_eq!(due.len(), usize::from(after == OutboxState::Pending));
        assert_eq!(events(&mut rx).len(), 1, "reported as ambiguous");
    }
}
