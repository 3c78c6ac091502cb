//! The atomic flow step: when the store and the durable journals share one database (a
//! `SqliteStore` with `store.durability_kv()`, a `PostgresStore` with a `PostgresKv` on the
//! same database), a persistent flow's step commits in one transaction.
//!
//! While such a step runs, its sends are collected ([`StepBuffer`]) instead of being journaled
//! and sent one by one: each still gets its compile-time key, runs the `before` send hooks and
//! is split into parts, but nothing is written. When the step suspends or ends, one
//! [`StepCommit`] writes the checkpoint (or removes it), the outbox records of the step's sends
//! (the first one leased for its provider call, `sending`, unless it is paced, in parts, or
//! behind an earlier open send of the chat; the others pending), the completion of the
//! inbound record that fed the step (when nothing of its dispatch can send after the step,
//! see [`commit`]) and the removal of the step's effect records; then the sends are delivered, in order, through the outbox (attempt under a
//! lease, `mark_sent`, ledger, `after` hooks).
//!
//! | the process dies… | on restart |
//! | --- | --- |
//! | during the step, before the commit | the inbound is replayed, the step runs again from the previous checkpoint; nothing of the cut run was written or sent |
//! | after the commit, before or while the sends go out | the checkpoint is the new one, the inbound done; recovery queues the pending sends on the chat's queue, in order; the first send, leased by the commit, is ambiguous (the provider may have been called), as any send in flight |
//!
//! So no crash leaves a checkpoint without its sends, or sends without their checkpoint. A
//! send's `.outcome()` inside such a step reports its key, not yet a provider message id (the
//! message goes out at the commit). A commit that fails (the database is away) writes nothing:
//! the step's outcome is dropped, the inbound record is retried, and the step runs again.
//! Stores that do not share a transaction with the journals keep the separate writes.

use std::sync::{Arc, Mutex};

use botmesh_durability::keys::KeyKind;
use botmesh_durability::keys::SendKey;
use botmesh_durability::outbox::NewSend;
use botmesh_durability::store::{CheckpointWrite, StepCommit};
use botmesh_durability::{CommittedSend, StepCommitError, StepCommitted, StepSend};

use crate::error::BotError;
use crate::flow::effect;
use crate::kernel::Kernel;
use crate::kernel::context::Ctx;
use crate::kernel::routes::SendDraft;
use crate::message::{ChatId, Outgoing};
use crate::metrics::Counters;
use crate::outbound::{self, KeyRule, SendOutcome, split_outgoing};
use crate::outbound::{interaction_ack, presence};

/// A send collected during an atomic step.
struct Collected {
    key: String,
    kind: KeyKind,
    chat: ChatId,
    fingerprint: botmesh_durability::keys::Fingerprint,
    /// The content after the `before` send hooks.
    outgoing: Outgoing,
    /// Its parts (one when it fits the channel's text limit).
    parts: Vec<Outgoing>,
    paced: bool,
}

/// The sends of one atomic step, in the order the flow made them.
#[derive(Default)]
pub(crate) struct StepBuffer {
    sends: Mutex<Vec<Collected>>,
}

impl std::fmt::Debug for StepBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepBuffer").finish_non_exhaustive()
    }
}

/// Whether this bot's persistent flow steps commit in one transaction.
pub(crate) fn atomic(k: &Kernel) -> bool {
    k.durable
        .as_ref()
        .is_some_and(|dur| k.store.shares_transactions_with(&**dur.d.kv()))
}

fn key_kind(rule: &KeyRule) -> KeyKind {
    match rule {
        KeyRule::Explicit(_) => KeyKind::Explicit,
        KeyRule::Derived { .. } | KeyRule::Site { .. } => KeyKind::Derived,
        KeyRule::Random => KeyKind::Random,
    }
}

/// Collects a flow send for the step's commit: key, fingerprint, `before` hooks and parts now;
/// the journal and the provider at the commit.
pub(crate) async fn collect(
    ctx: &Ctx,
    buffer: &StepBuffer,
    mut outgoing: Outgoing,
    rule: KeyRule,
) -> Result<SendOutcome, BotError> {
    interaction_ack::before_send(ctx).await;
    let k = &ctx.0.bot.kernel;
    let key = rule.key();
    outgoing.idempotency_key = None;
    let chat = ctx.chat().clone();
    let fingerprint = crate::outbound::outbox::fingerprint(&chat, &outgoing);
    let draft = SendDraft {
        chat,
        outgoing,
        edit_of: None,
        preview: false,
    };
    let Some(SendDraft { chat, outgoing, .. }) = outbound::run_before_send(k, draft).await else {
        Counters::inc(&k.counters.send_skipped);
        return Ok(SendOutcome {
            key: Some(key),
            skipped: true,
            ..SendOutcome::default()
        });
    };
    let parts = split_outgoing(&outgoing, &k.capabilities);
    let paced = k.config.pacing.is_some() && outgoing.content.is_text();
    buffer
        .sends
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Collected {
            key: key.clone(),
            kind: key_kind(&rule),
            chat,
            fingerprint,
            outgoing,
            parts,
            paced,
        });
    Ok(SendOutcome {
        key: Some(key),
        ..SendOutcome::default()
    })
}

/// How one collected send goes out after the commit.
enum Delivery {
    /// Through the outbox record the commit wrote (or found).
    Recorded(Collected),
    /// Without the outbox (over `outbox.max_payload_bytes`).
    Direct(Collected),
}

/// A committed step: what to deliver, in order.
pub(crate) struct Committed {
    deliveries: Vec<Delivery>,
    records: Vec<CommittedSend>,
}

/// How many times a commit is tried again after a conflict it could resolve.
const MAX_COMMIT_TRIES: usize = 8;

/// Commits the step: the checkpoint change, its sends' outbox records, the completion of the
/// context's inbound record and the removal of its effect records, in one transaction.
///
/// The inbound record is completed here only when nothing else of its dispatch can send after
/// the step (`owns_message`: the step was routed as the chat's conversation, and no `after`
/// message hook is registered); otherwise the dispatch completes it when it ends, so a send
/// made after the step (a handler that started the flow and goes on) is still replayed if the
/// process dies before it.
pub(crate) async fn commit(
    ctx: &Ctx,
    buffer: &StepBuffer,
    checkpoint: CheckpointWrite,
    effect_keys: &[String],
    owns_message: bool,
) -> Result<Committed, BotError> {
    let k = &ctx.0.bot.kernel;
    let Some(dur) = k.durable.as_ref() else {
        return Err(BotError::config(
            "durability",
            "an atomic flow step needs durability",
        ));
    };
    let collected = std::mem::take(&mut *buffer.sends.lock().unwrap_or_else(|e| e.into_inner()));
    let mut journal = dur.d.step();
    let mut deliveries = Vec::with_capacity(collected.len());
    for c in collected {
        let payload = botmesh_durability::outbox::Payload::encode(&c.outgoing)
            .map_err(|e| BotError::Durability(encode_error(&c.key, &e.to_string())))?;
        let parts = if c.parts.len() > 1 {
            c.parts
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| BotError::Durability(encode_error(&c.key, &e.to_string())))?
        } else {
            Vec::new()
        };
        let new = NewSend::new(
            SendKey::with_kind(c.key.clone(), c.kind),
            c.chat.0.clone(),
            payload,
        )
        .with_fingerprint(c.fingerprint.clone())
        .with_on_ambiguous(c.outgoing.on_ambiguous);
        // The step's first send goes out as soon as the step committed: leased in the step's
        // own transaction, its provider call needs no write of its own. A paced send waits
        // (typing) after the commit, and parts go out one by one: those are journaled pending.
        let journaled = if deliveries.is_empty() && !c.paced && parts.is_empty() {
            journal.send_and_begin(new).await?
        } else {
            journal.send(new, parts)?
        };
        match journaled {
            StepSend::Journaled { .. } => deliveries.push(Delivery::Recorded(c)),
            StepSend::Bypassed { size, limit } => {
                tracing::warn!(key = %c.key, size, limit, "payload over outbox.max_payload_bytes: sent without the outbox");
                deliveries.push(Delivery::Direct(c));
            }
        }
    }
    let last_word = owns_message && {
        let routes = k.routes.read().unwrap_or_else(|e| e.into_inner());
        routes.after_message.is_empty()
    };
    let slot = ctx
        .0
        .lease
        .as_ref()
        .filter(|s| last_word && !s.is_settled());
    if let Some(slot) = slot {
        journal.complete_inbound(&slot.lease).await?;
    }
    let scope = effect::scope(ctx.chat().as_str());
    let mut step = StepCommit::new(dur.d.scope().clone(), checkpoint);
    step.delete_values = effect_keys
        .iter()
        .map(|key| (scope.clone(), key.clone()))
        .collect();
    let records = match journal.commit(&*k.store, &mut step, MAX_COMMIT_TRIES).await {
        Ok(StepCommitted::Written(records)) => records,
        // A flow step journals no inbound: nothing else can be a duplicate.
        Ok(StepCommitted::InboundDuplicate(_)) => Vec::new(),
        Err(StepCommitError::Store(e)) => return Err(BotError::Store(e)),
        Err(StepCommitError::Journal(e)) => return Err(BotError::Durability(e)),
        Err(StepCommitError::AfterCommit(e)) => {
            // The transaction completed the inbound record all the same.
            if let Some(slot) = slot {
                slot.settle();
            }
            return Err(BotError::Durability(e));
        }
        Err(StepCommitError::Contention { .. }) => {
            return Err(BotError::Durability(
                botmesh_durability::DurabilityError::Contention {
                    kind: botmesh_durability::operating::RecordKind::Outbound,
                    id: format!("flow step of chat {}", ctx.chat()),
                    operation: "commit_step",
                },
            ));
        }
    };
    // The transaction completed the inbound record (when the step took it).
    if let Some(slot) = slot {
        slot.settle();
    }
    Ok(Committed {
        deliveries,
        records,
    })
}

fn encode_error(key: &str, reason: &str) -> botmesh_durability::DurabilityError {
    botmesh_durability::DurabilityError::Encode {
        kind: botmesh_durability::operating::RecordKind::Outbound,
        id: key.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Delivers a committed step's sends, in order. A send that fails is reported (it stays in
/// the outbox, retried by the sweeper or dead-lettered); the next ones still go (the outbox
/// keeps them behind an earlier open send of the chat).
pub(crate) async fn deliver(k: &Arc<Kernel>, committed: Committed) {
    let Some(dur) = k.durable.as_ref() else {
        return;
    };
    let mut records = committed.records.into_iter();
    for delivery in committed.deliveries {
        let (c, record) = match delivery {
            Delivery::Recorded(c) => {
                let record = records.next();
                (c, record)
            }
            Delivery::Direct(c) => (c, None),
        };
        if c.paced {
            if let Some(p) = &k.config.pacing {
                let delay = p.delay_for(c.outgoing.content.text().chars().count());
                if p.typing {
                    presence::typing(k, &c.chat).await;
                }
                tokio::time::sleep(delay).await;
            }
        }
        let result = match record {
            Some(CommittedSend {
                lease: Some(lease), ..
            }) => {
                // Journaled leased by this step: its one part is the content collected.
                let known = c.parts.first().unwrap_or(&c.outgoing);
                crate::outbound::outbox::deliver_leased(k, dur, lease, known).await
            }
            Some(CommittedSend { record, .. }) => {
                // A record found under the key (recorded before) may hold other content.
                let fresh = record.fingerprint == c.fingerprint && record.key == c.key;
                let parts = fresh.then_some(c.parts.as_slice());
                crate::outbound::outbox::deliver_recorded(k, dur, record, parts).await
            }
            None => crate::outbound::outbox::deliver_direct(k, &c.chat, &c.outgoing, &c.key).await,
        };
        match result {
            Ok(_) => {}
            Err(BotError::SendDeferred { key }) => {
                tracing::debug!(%key, chat = %c.chat, "flow send deferred to the outbox sweeper");
            }
            Err(e) => k.events.error("flow:send", Some(&c.chat), e),
        }
    }
}
