//! Conformance cases on leases and fencing, with the journals running on the backend.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::journal_cases::{
    Case, T0, claim_due, claimed, durability, journal_send, leased_send, recorded, scope,
};
use super::{Ctx, ensure, ensure_count};
use crate::clock::ManualClock;
use crate::config::{DurabilityConfig, OnAmbiguous};
use crate::error::DurabilityError;
use crate::inbox::{Claim, InboxState, NewInbound};
use crate::keys::SendKey;
use crate::kv::DurableKv;
use crate::metrics::DurabilityEvent;
use crate::outbox::OutboxState;
use crate::retries::SendFailure;

pub(super) async fn expired_inbox_lease_is_fenced(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let a = durability(&kv, scope(), "a", &clock, |_| {})?;
    let b = durability(&kv, scope(), "b", &clock, |_| {})?;
    let old = claimed(&a, "chat", "m1").await?;
    ensure!(
        claim_due(&b, "claim_due").await?.is_empty(),
        "a live lease was taken by another instance"
    );
    clock.advance(a.config().inbox.lease + Duration::from_millis(1));
    let taken = claim_due(&b, "claim_due after expiry").await?;
    ensure_count(&taken, 1, "an expired lease must be claimable")?;
    let new = &taken[0].lease;
    ensure!(
        new.token > old.token,
        "the new holder needs a higher fencing token ({} <= {})",
        new.token,
        old.token
    );
    let stale = a.inbox().complete(&old).await;
    ensure!(
        matches!(stale, Err(DurabilityError::StaleLease { .. })),
        "a stale holder completed: {stale:?}"
    );
    ensure!(
        a.inbox().heartbeat(&old).await.is_err(),
        "a stale holder extended the lease"
    );
    ensure!(
        a.metrics().stale_leases == 2,
        "stale_leases must count refusals, got {}",
        a.metrics().stale_leases
    );
    let done = b
        .inbox()
        .complete(new)
        .await
        .ctx("complete by the new holder")?;
    ensure!(
        done.state == InboxState::Done,
        "record must be done, got {:?}",
        done.state
    );
    Ok(())
}

pub(super) async fn stale_sender_cannot_mark_sent(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let resend = |c: &mut DurabilityConfig| c.outbox.on_ambiguous = OnAmbiguous::Resend;
    let a = durability(&kv, scope(), "a", &clock, resend)?;
    let b = durability(&kv, scope(), "b", &clock, resend)?;
    journal_send(&a, SendKey::explicit("k"), "chat", "hello").await?;
    let old = leased_send(&a, "k").await?;
    clock.advance(a.config().outbox.lease + Duration::from_millis(1));
    let due = b.outbox().due(10).await.ctx("due")?;
    ensure!(
        due.len() == 1 && due[0].key == "k",
        "an abandoned send must be due again under `resend`, got {due:?}"
    );
    let new = leased_send(&b, "k").await?;
    let stale = a.outbox().mark_sent(&old, Some("late".into())).await;
    ensure!(
        matches!(stale, Err(DurabilityError::StaleLease { .. })),
        "a stale sender recorded its send: {stale:?}"
    );
    let failed = a
        .outbox()
        .mark_failed(&old, &SendFailure::retryable("x"))
        .await;
    ensure!(failed.is_err(), "a stale sender recorded a failure");
    let sent = b
        .outbox()
        .mark_sent(&new, Some("p-1".into()))
        .await
        .ctx("mark_sent")?;
    ensure!(
        sent.state == OutboxState::Sent && sent.provider_message_id.as_deref() == Some("p-1"),
        "the new holder's send must be recorded, got {sent:?}"
    );
    Ok(())
}

pub(super) async fn restart_reclaims_own_leases_at_once(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let first = durability(&kv, scope(), "i1", &clock, |_| {})?;
    let other = durability(&kv, scope(), "other", &clock, |_| {})?;
    claimed(&first, "chat", "m1").await?;
    journal_send(&first, SendKey::explicit("k1"), "chat", "one").await?;
    leased_send(&first, "k1").await?;
    ensure!(
        claim_due(&other, "claim_due").await?.is_empty(),
        "another instance took a live lease"
    );
    let restarted = first.reopen().ctx("reopen")?;
    let mut events = restarted.subscribe();
    let reclaimed = claim_due(&restarted, "claim_due after restart").await?;
    ensure_count(
        &reclaimed,
        1,
        "a restart must reclaim its own inbound lease at once",
    )?;
    ensure!(
        restarted.metrics().inbound_replayed == 1,
        "the reclaim must count as a replay"
    );
    journal_send(&restarted, SendKey::explicit("k2"), "other-chat", "two").await?;
    leased_send(&restarted, "k2").await?;
    restarted.outbox().due(10).await.ctx("due")?;
    let k1 = recorded(&restarted, "k1").await?;
    ensure!(
        k1.state == OutboxState::Unknown,
        "the dead incarnation's send must be marked unknown (skip), got {:?}",
        k1.state
    );
    let k2 = recorded(&restarted, "k2").await?;
    ensure!(
        k2.state == OutboxState::Sending,
        "the sweep reclaimed a send this incarnation is making, got {:?}",
        k2.state
    );
    let event = events.try_recv().ctx("ambiguous event")?;
    ensure!(
        event
            == DurabilityEvent::Ambiguous {
                key: "k1".into(),
                chat: "chat".into(),
                text: String::new()
            },
        "unexpected event {event:?}"
    );
    Ok(())
}

pub(super) async fn concurrent_claims_one_winner(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let d0 = durability(&kv, scope(), "d0", &clock, |_| {})?;
    let new = NewInbound::new("chat", "m1", json!({}));
    let id = new.id.clone();
    d0.inbox().journal(new).await.ctx("journal")?;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let d = durability(&kv, scope(), &format!("r{i}"), &clock, |_| {})?;
        let id = id.clone();
        tasks.spawn(async move {
            d.inbox()
                .claim(&id)
                .await
                .map(|c| matches!(c, Claim::Leased(_)))
        });
    }
    let mut winners = 0;
    while let Some(joined) = tasks.join_next().await {
        if joined.ctx("task")?.ctx("claim")? {
            winners += 1;
        }
    }
    ensure!(
        winners == 1,
        "{winners} replicas claimed the same record, expected exactly 1"
    );
    Ok(())
}
