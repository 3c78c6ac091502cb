//! The sweeper's side of the outbox: what is due, ambiguity recovery, and parts that die with
//! (or come back with) their previous part.
//!
//! | found by the sweep | lease | `on_ambiguous` | becomes | event |
//! | --- | --- | --- | --- | --- |
//! | `sending` | live (another holder, or this incarnation's own call) | — | untouched | — |
//! | `sending` | expired, or an earlier incarnation of this instance id | `skip` | `unknown` | `Ambiguous` |
//! | `sending` | expired, or an earlier incarnation of this instance id | `resend` | `pending`, due now | `Ambiguous` |
//! | `pending` / `failed`, due, first open send of its chat, previous part settled | — | — | returned by `due` | — |
//! | `pending` / `failed` whose previous part is `dead` | — | — | `dead` (dies with it) | `Dead` |
//!
//! The `on_ambiguous` that applies is the send's own (`OutboxRecord::on_ambiguous`, from
//! `NewSend::with_on_ambiguous`), else the bot's `outbox.on_ambiguous`.
//!
//! `due` does not lease anything: the sweeper calls `begin_attempt` on each record it returns,
//! one chat at a time, and calls `due` again once it made progress.

use super::{Outbox, OutboxRecord, OutboxState};
use crate::error::DurabilityError;
use crate::journal::{Step, index};
use crate::kv::{DurableKv, WritePoint};
use crate::metrics::RecordKind;

/// How many sends in flight one recovery pass looks at.
const RECOVERY_PAGE: usize = 256;
/// How many candidates `due` reads per page.
const DUE_PAGE: usize = 256;
/// The most candidates one `due` call reads before returning what it found.
const DUE_SCAN_MAX: usize = 10_000;

impl<K: DurableKv + ?Sized> Outbox<'_, K> {
    /// The first open send of `chat` (in journal order), if it may go now: `pending`, or
    /// `failed` whose retry time came. `None` when the chat has no open send, or when its
    /// first one is in flight or waits for a retry. It leases nothing (call `begin_attempt`);
    /// a restarted bot uses it to deliver, chat by chat, the sends an earlier incarnation
    /// journaled and did not send.
    pub async fn next_due_of_chat(
        &self,
        chat: &str,
    ) -> Result<Option<OutboxRecord>, DurabilityError> {
        let (from, to) = index::chat_range(RecordKind::Outbound, chat);
        let first = self
            .d
            .first_idx2_key(RecordKind::Outbound, &from, &to)
            .await?;
        let Some(key) = first
            .as_deref()
            .and_then(|k| index::id_of(RecordKind::Outbound, k))
        else {
            return Ok(None);
        };
        let now = self.d.now_ms();
        Ok(self.lookup(key).await?.filter(|r| {
            matches!(r.state, OutboxState::Pending | OutboxState::Failed)
                && r.next_attempt_ms <= now
        }))
    }

    /// The sweeper's call: up to `limit` sends that may go now, in due order: due (`pending`,
    /// or `failed` whose retry time came), the first open send of their chat, and behind no
    /// unsettled previous part. Runs ambiguity recovery first, and lets parts whose previous
    /// part is dead die with it. Undecodable records are quarantined and skipped.
    pub async fn due(&self, limit: usize) -> Result<Vec<OutboxRecord>, DurabilityError> {
        self.recover_ambiguous().await?;
        let now = self.d.now_ms();
        let mut candidates: Vec<OutboxRecord> = Vec::new();
        for state in [OutboxState::Pending, OutboxState::Failed] {
            let (mut cursor, to) = index::state_until(RecordKind::Outbound, state.as_str(), now);
            let mut read = 0;
            loop {
                let (page, next) = self
                    .d
                    .scan_page::<OutboxRecord>(&cursor, &to, DUE_PAGE)
                    .await?;
                read += page.len();
                candidates.extend(page.into_iter().map(|l| l.record));
                match next {
                    Some(next) if read < DUE_SCAN_MAX => cursor = next,
                    _ => break,
                }
            }
        }
        candidates.sort_by_key(|a| (a.next_attempt_ms, a.seq, a.part));
        let mut out: Vec<OutboxRecord> = Vec::new();
        for r in candidates {
            if out.len() >= limit {
                break;
            }
            if out.iter().any(|o| o.chat == r.chat) {
                continue;
            }
            match self.gate(&r).await? {
                PartGate::Go => {}
                PartGate::Wait => continue,
                PartGate::DieWith => {
                    self.die_with_previous(&r.key).await?;
                    continue;
                }
            }
            if self.earlier_open(&r).await?.is_none() {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Resolves every send left `sending` under an expired lease or under an earlier incarnation
    /// of this instance id (its process died between "about to call the provider" and "sent"):
    /// `on_ambiguous` decides, `Ambiguous` is emitted before the write that settles each one.
    /// Sends this incarnation is making itself are never touched. Returns the records resolved.
    pub async fn recover_ambiguous(&self) -> Result<Vec<OutboxRecord>, DurabilityError> {
        let now = self.d.now_ms();
        let (mut cursor, to) = index::state_range(RecordKind::Outbound, "sending");
        let mut stuck = Vec::new();
        loop {
            let (page, next) = self
                .d
                .scan_page::<OutboxRecord>(&cursor, &to, RECOVERY_PAGE)
                .await?;
            for l in page {
                let reclaimable = l
                    .record
                    .lease
                    .as_ref()
                    .is_none_or(|lease| lease.status(self.d.incarnation(), now).reclaimable());
                if reclaimable {
                    stuck.push(l.record.key);
                }
            }
            match next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        let mut resolved = Vec::new();
        for key in stuck {
            match self.resolve_ambiguous(&key).await {
                Ok(Some(r)) => resolved.push(r),
                Ok(None)
                | Err(DurabilityError::NotFound { .. } | DurabilityError::Corrupt { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(resolved)
    }

    /// Applies `on_ambiguous` to one send whose lease is abandoned; `None` if it is no longer so.
    pub(crate) async fn resolve_ambiguous(
        &self,
        key: &str,
    ) -> Result<Option<OutboxRecord>, DurabilityError> {
        let policy = self.d.config().outbox.on_ambiguous;
        let me = self.d.incarnation();
        let mut reported = false;
        let resolved = self
            .view()
            .modify(WritePoint::OutboxMarkAmbiguous, "recover", key, |r, now| {
                let abandoned = r.state == OutboxState::Sending
                    && r.lease
                        .as_ref()
                        .is_none_or(|l| l.status(me, now).reclaimable());
                if !abandoned {
                    return Ok(Step::Keep(None));
                }
                let owner = r.lease.as_ref().map_or("?", |l| &*l.owner).to_owned();
                let policy = r.on_ambiguous.unwrap_or(policy);
                Self::apply_ambiguity(
                    r,
                    policy,
                    &format!("the lease of `{owner}` was abandoned mid-send"),
                    now,
                );
                // Reported before the write settles it (see `ambiguous`).
                if !std::mem::replace(&mut reported, true) {
                    self.ambiguous(r, policy);
                }
                Ok(Step::Write(Some(r.clone())))
            })
            .await?;
        Ok(resolved)
    }

    /// The gate of a record's previous part.
    pub(crate) async fn gate(&self, r: &OutboxRecord) -> Result<PartGate, DurabilityError> {
        let Some(prev) = &r.previous_part else {
            return Ok(PartGate::Go);
        };
        let previous = match self.lookup(prev).await {
            Ok(p) => p.map(|p| p.state),
            // An undecodable previous part was quarantined and reported: treat it as dead.
            Err(DurabilityError::Corrupt { .. }) => Some(OutboxState::Dead),
            Err(e) => return Err(e),
        };
        Ok(part_gate(previous))
    }

    /// Kills a waiting part whose previous part is dead, then its own later parts.
    pub(crate) async fn die_with_previous(&self, key: &str) -> Result<(), DurabilityError> {
        if let Some(r) = self.die_behind(key).await? {
            self.dead_lettered(&r);
            self.cascade_dead(&r).await?;
        }
        Ok(())
    }

    /// Lets the later parts of a dead-lettered send die with it.
    pub(crate) async fn cascade_dead(&self, dead: &OutboxRecord) -> Result<(), DurabilityError> {
        let mut next = dead.next_part.clone();
        let mut seen = vec![dead.key.clone()];
        while let Some(key) = next.take() {
            if seen.contains(&key) {
                break;
            }
            let Some(r) = self.lookup(&key).await? else {
                break;
            };
            if r.previous_part.as_deref() != seen.last().map(String::as_str) {
                break; // not linked back: not our part
            }
            if matches!(r.state, OutboxState::Pending | OutboxState::Failed)
                && let Some(d) = self.die_behind(&key).await?
            {
                self.dead_lettered(&d);
            }
            next = r.next_part.clone();
            seen.push(key);
        }
        Ok(())
    }

    /// Dead-letters part `key` because its previous part is dead, if it is waiting (pending
    /// or failed): the record as written, `None` when it was not waiting.
    async fn die_behind(&self, key: &str) -> Result<Option<OutboxRecord>, DurabilityError> {
        self.view()
            .modify(
                WritePoint::OutboxDeadLetter,
                "dead_letter",
                key,
                |r, now| {
                    if !matches!(r.state, OutboxState::Pending | OutboxState::Failed) {
                        return Ok(Step::Keep(None));
                    }
                    let prev = r.previous_part.clone().unwrap_or_default();
                    r.state = OutboxState::Dead;
                    r.died_with_previous = true;
                    r.lease = None;
                    r.last_error = Some(format!("previous part `{prev}` was dead-lettered"));
                    r.updated_ms = now;
                    Ok(Step::Write(Some(r.clone())))
                },
            )
            .await
    }
}

/// What a part may do, given its previous part's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartGate {
    /// The previous part is settled: this part may be sent.
    Go,
    /// The previous part is still pending, failed (waiting for a retry) or in flight.
    Wait,
    /// The previous part was dead-lettered: this part dies with it.
    DieWith,
}

/// The gate of a part whose previous part is in `previous` (`None`: no previous part, or it
/// was discarded).
pub(crate) fn part_gate(previous: Option<OutboxState>) -> PartGate {
    match previous {
        None | Some(OutboxState::Sent) | Some(OutboxState::Unknown) => PartGate::Go,
        Some(OutboxState::Dead) => PartGate::DieWith,
        Some(OutboxState::Pending) | Some(OutboxState::Failed) | Some(OutboxState::Sending) => {
            PartGate::Wait
        }
    }
}
