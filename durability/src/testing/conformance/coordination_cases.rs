//! Conformance cases on coordination: chat turns and leader leases, kept in the backend.

use std::sync::Arc;
use std::time::Duration;

use super::journal_cases::{Case, T0, durability, scope};
use super::{Ctx, ensure};
use crate::clock::ManualClock;
use crate::coordination::{
    CoordinationConfig, CoordinationError, Coordinator, Fence, Leadership, TurnAttempt,
};
use crate::kv::DurableKv;

fn coordinator(
    kv: &Arc<dyn DurableKv>,
    instance: &str,
    clock: &ManualClock,
) -> Result<Coordinator, String> {
    let d = durability(kv, scope(), instance, clock, |_| {})?;
    Coordinator::new(&d, CoordinationConfig::default()).ctx("coordinator")
}

/// A clock at `T0` and a coordinator of each instance id of `instances` on `kv`.
fn replicas<const N: usize>(
    kv: &Arc<dyn DurableKv>,
    instances: [&str; N],
) -> Result<(ManualClock, [Coordinator; N]), String> {
    let clock = ManualClock::new(T0);
    let all: Vec<Coordinator> = instances
        .iter()
        .map(|instance| coordinator(kv, instance, &clock))
        .collect::<Result<_, _>>()?;
    let all = all
        .try_into()
        .map_err(|_| "a coordinator per instance".to_owned())?;
    Ok((clock, all))
}

async fn taken(c: &Coordinator, chat: &str, ticket: Option<u64>) -> Result<Fence, String> {
    match c.take_turn(chat, ticket).await.ctx("take_turn")? {
        TurnAttempt::Taken(fence) => Ok(fence),
        other => Err(format!(
            "{} should have taken `{chat}`'s turn, got {other:?}",
            c.instance_id()
        )),
    }
}

async fn waits(c: &Coordinator, chat: &str, ticket: Option<u64>) -> Case {
    match c.take_turn(chat, ticket).await.ctx("take_turn")? {
        TurnAttempt::Wait { .. } => Ok(()),
        TurnAttempt::Taken(fence) => Err(format!(
            "{} should wait for `{chat}`'s turn, took {fence}",
            c.instance_id()
        )),
    }
}

fn is_fenced(
    result: &Result<impl std::fmt::Debug, CoordinationError>,
    chat: &str,
    token: u64,
) -> bool {
    matches!(result, Err(CoordinationError::Fenced { name, token: t, .. }) if name == chat && *t == token)
}

pub(super) async fn a_chat_turn_is_exclusive_and_a_lost_turn_is_fenced(
    kv: Arc<dyn DurableKv>,
) -> Case {
    let (clock, [a, b]) = replicas(&kv, ["a", "b"])?;
    let old = taken(&a, "chat", Some(1)).await?;
    waits(&b, "chat", Some(2)).await?;
    a.check_turn(&old).await.ctx("the holder's check")?;
    let again = taken(&a, "chat", Some(1)).await?;
    ensure!(
        again.token == old.token,
        "taking a held turn again renews it, got {again} after {old}"
    );
    clock.advance(a.config().turn_lease + Duration::from_millis(1));
    let new = taken(&b, "chat", Some(2)).await?;
    ensure!(
        new.token > old.token,
        "the new holder needs a higher token ({new} after {old})"
    );
    ensure!(
        b.metrics().turn_steals == 1,
        "a takeover of an expired turn is a steal: {:?}",
        b.metrics()
    );
    ensure!(
        is_fenced(&a.check_turn(&old).await, "chat", old.token),
        "a late write of the old holder passed its check"
    );
    ensure!(
        is_fenced(&a.renew_turn(&old).await, "chat", old.token),
        "the old holder renewed a lost turn"
    );
    ensure!(
        is_fenced(&a.release_turn(&old).await, "chat", old.token),
        "the old holder released the new holder's turn"
    );
    ensure!(
        a.metrics().fenced_refusals == 3,
        "each refusal is counted: {:?}",
        a.metrics()
    );
    b.check_turn(&new).await.ctx("the new holder's check")?;
    b.release_turn(&new).await.ctx("release")?;
    ensure!(
        is_fenced(&b.check_turn(&new).await, "chat", new.token),
        "a released turn still passed its check"
    );
    let next = taken(&a, "chat", None).await?;
    ensure!(
        next.token > new.token,
        "tokens are never reused after a release ({next} after {new})"
    );
    Ok(())
}

pub(super) async fn a_check_needs_the_safety_margin(kv: Arc<dyn DurableKv>) -> Case {
    let (clock, [a]) = replicas(&kv, ["a"])?;
    let turn = taken(&a, "chat", None).await?;
    let margin = a.config().safety_margin;
    clock.advance(a.config().turn_lease - margin);
    a.check_turn(&turn)
        .await
        .ctx("check with the margin left")?;
    clock.advance(Duration::from_millis(1));
    ensure!(
        is_fenced(&a.check_turn(&turn).await, "chat", turn.token),
        "a check passed with less than the safety margin left"
    );
    let renewed = a
        .renew_turn(&turn)
        .await
        .ctx("renew before anyone took it")?;
    a.check_turn(&renewed)
        .await
        .ctx("check after the renewal")?;
    Ok(())
}

pub(super) async fn turns_are_taken_in_ingress_order(kv: Arc<dyn DurableKv>) -> Case {
    let (_clock, [a, b, c]) = replicas(&kv, ["a", "b", "c"])?;
    let first = taken(&a, "chat", Some(5)).await?;
    waits(&b, "chat", Some(20)).await?;
    waits(&c, "chat", Some(10)).await?;
    a.release_turn(&first).await.ctx("release")?;
    waits(&b, "chat", Some(20)).await?;
    let second = taken(&c, "chat", Some(10)).await?;
    c.release_turn(&second).await.ctx("release")?;
    let third = taken(&b, "chat", Some(20)).await?;
    ensure!(
        third.token > second.token && second.token > first.token,
        "tokens grow with each holder"
    );
    Ok(())
}

pub(super) async fn a_dead_waiter_blocks_nobody(kv: Arc<dyn DurableKv>) -> Case {
    let (clock, [a, b, dead]) = replicas(&kv, ["a", "b", "dead"])?;
    let turn = taken(&a, "chat", Some(5)).await?;
    waits(&dead, "chat", Some(1)).await?;
    a.release_turn(&turn).await.ctx("release")?;
    waits(&b, "chat", Some(9)).await?;
    clock.advance(a.config().turn_lease + Duration::from_millis(1));
    taken(&b, "chat", Some(9)).await?;
    Ok(())
}

pub(super) async fn a_restart_takes_its_abandoned_turn_at_once(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let d = durability(&kv, scope(), "a", &clock, |_| {})?;
    let before = Coordinator::new(&d, CoordinationConfig::default()).ctx("coordinator")?;
    let old = taken(&before, "chat", None).await?;
    clock.advance(Duration::from_millis(5));
    let restarted = d.reopen().ctx("reopen")?;
    let after = Coordinator::new(&restarted, CoordinationConfig::default()).ctx("coordinator")?;
    let new = taken(&after, "chat", None).await?;
    ensure!(
        new.token > old.token,
        "the restarted replica needs a new token ({new} after {old})"
    );
    ensure!(
        is_fenced(&before.check_turn(&old).await, "chat", old.token),
        "the dead incarnation's turn still passed its check"
    );
    Ok(())
}

pub(super) async fn concurrent_turn_takers_have_one_winner(kv: Arc<dyn DurableKv>) -> Case {
    let clock = ManualClock::new(T0);
    let mut racers = Vec::new();
    for i in 0..6 {
        let c = coordinator(&kv, &format!("r{i}"), &clock)?;
        racers.push(tokio::spawn(async move {
            c.take_turn("chat", Some(i))
                .await
                .map(|t| matches!(t, TurnAttempt::Taken(_)))
        }));
    }
    let mut winners = 0;
    for racer in racers {
        if racer.await.map_err(|e| e.to_string())?.ctx("take_turn")? {
            winners += 1;
        }
    }
    ensure!(
        winners == 1,
        "exactly one racer takes a chat's turn, {winners} did"
    );
    Ok(())
}

pub(super) async fn one_leader_and_a_takeover_within_the_lease(kv: Arc<dyn DurableKv>) -> Case {
    let (clock, [a, b]) = replicas(&kv, ["a", "b"])?;
    let lead = match a.campaign("telegram", None).await.ctx("campaign")? {
        Leadership::Leader(fence) => fence,
        other => return Err(format!("the first campaign leads, got {other:?}")),
    };
    match b.campaign("telegram", None).await.ctx("campaign")? {
        Leadership::Standby { leader, .. } => ensure!(
            leader.as_deref() == Some("a"),
            "the standby names the leader, got {leader:?}"
        ),
        other => return Err(format!("a second replica is a standby, got {other:?}")),
    }
    let refused = b.check_leader("telegram", None).await;
    ensure!(
        matches!(&refused, Err(CoordinationError::NotLeader { leader: Some(l), .. }) if l == "a"),
        "a standby is refused with NotLeader naming the leader, got {refused:?}"
    );
    ensure!(
        b.metrics().not_leader_refusals == 1,
        "the standby counts its NotLeader refusal: {:?}",
        b.metrics()
    );
    a.check_leader("telegram", Some(&lead))
        .await
        .ctx("the leader's check")?;
    let renewed = a.campaign("telegram", Some(&lead)).await.ctx("renewal")?;
    ensure!(
        renewed.fence().map(|f| f.token) == Some(lead.token),
        "the leader's campaign renews its lease"
    );
    clock.advance(a.config().leader_lease + Duration::from_millis(1));
    let took = match b
        .campaign("telegram", None)
        .await
        .ctx("campaign after expiry")?
    {
        Leadership::Leader(fence) => fence,
        other => {
            return Err(format!(
                "a standby takes over an expired leader lease, got {other:?}"
            ));
        }
    };
    ensure!(took.token > lead.token, "the new leader has a higher token");
    ensure!(
        is_fenced(
            &a.check_leader("telegram", Some(&lead)).await,
            "telegram",
            lead.token
        ),
        "the old leader passed its check"
    );
    let back = a.campaign("telegram", Some(&lead)).await.ctx("campaign")?;
    ensure!(
        back.fence().is_none(),
        "the old leader is now a standby, got {back:?}"
    );
    ensure!(
        a.metrics().leader_changes == 2 && b.metrics().leader_changes == 1,
        "leader changes counted: a {:?}, b {:?}",
        a.metrics(),
        b.metrics()
    );
    b.resign(&took).await.ctx("resign")?;
    ensure!(
        a.campaign("telegram", None)
            .await
            .ctx("campaign")?
            .fence()
            .is_some(),
        "a resigned lease is taken at the next campaign"
    );
    Ok(())
}

pub(super) async fn idle_records_are_purged_and_tokens_keep_growing(
    kv: Arc<dyn DurableKv>,
) -> Case {
    let (clock, [a, b]) = replicas(&kv, ["a", "b"])?;
    let lease = a.config().turn_lease;
    // A chat that finished, a holder that died, a waiter that died, a leader that went away.
    let finished = taken(&a, "finished", Some(1)).await?;
    a.release_turn(&finished).await.ctx("release")?;
    let died = taken(&b, "died", Some(2)).await?;
    let waited = taken(&a, "waited", Some(3)).await?;
    waits(&b, "waited", Some(4)).await?;
    a.release_turn(&waited).await.ctx("release")?;
    let led = a.campaign("transport", None).await.ctx("campaign")?;
    let Leadership::Leader(led) = led else {
        return Err(format!("a lone replica should lead, got {led:?}"));
    };
    let purged = a.purge_idle(lease, 100).await.ctx("purge_idle")?;
    ensure!(
        purged == 0,
        "records idle for less than {lease:?} were purged: {purged}"
    );
    clock.advance(lease * 2 + Duration::from_millis(1));
    // A chat in progress is never purged.
    let busy = taken(&b, "busy", Some(5)).await?;
    let purged = a.purge_idle(lease, 100).await.ctx("purge_idle")?;
    ensure!(
        purged == 4,
        "4 idle records (3 turns, 1 leader lease) should go, {purged} did"
    );
    ensure!(
        a.metrics().records_purged == 4,
        "records_purged counts them: {:?}",
        a.metrics()
    );
    for key in ["c/t/finished", "c/t/died", "c/t/waited", "c/l/transport"] {
        let left = kv.get(&scope(), key).await.ctx("get")?;
        ensure!(left.is_none(), "{key} is still stored after the purge");
    }
    ensure!(
        kv.get(&scope(), "c/t/busy").await.ctx("get")?.is_some(),
        "the turn in progress was purged"
    );
    b.check_turn(&busy).await.ctx("the busy holder's check")?;
    ensure!(
        a.purge_idle(lease, 100).await.ctx("purge_idle")? == 0,
        "a second purge finds nothing"
    );
    // Stale holders stay fenced, and new holders get higher tokens than any deleted one.
    ensure!(
        is_fenced(&b.check_turn(&died).await, "died", died.token),
        "the dead holder passed its check after its record was purged"
    );
    for (chat, old) in [
        ("finished", &finished),
        ("died", &died),
        ("waited", &waited),
    ] {
        let new = taken(&a, chat, Some(9)).await?;
        ensure!(
            new.token > old.token && new.token > led.token,
            "a turn taken after the purge needs a token above every deleted one ({new} after {old} and {led})"
        );
        ensure!(
            is_fenced(&b.check_turn(old).await, chat, old.token),
            "an old token passed its check after the purge"
        );
    }
    let again = a.campaign("transport", None).await.ctx("campaign")?;
    ensure!(
        again.fence().is_some_and(|f| f.token > led.token),
        "a leader after the purge needs a higher token than {led}: {again:?}"
    );
    Ok(())
}
