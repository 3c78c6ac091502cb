//! A flow step's outcome as one value, [`FlowCommit`] (the checkpoint or its removal, the
//! step's sends, the completion of the inbound record that fed it, the effect records to
//! forget, the note that a non-persistent flow waits in memory), and the one module that
//! writes the store's flow data: [`write`] for a step, and [`save_checkpoint`] /
//! [`remove_checkpoint`] / [`remove_lost_note`] for the writes outside a step (a flow
//! replaced, a version policy's drop or resave, a lost flow reported).
//!
//! When the store and the durable journals share one database (a `SqliteStore` with
//! `store.durability_kv()`, a `PostgresStore` with a `PostgresKv` on the same database), a
//! persistent flow's step is atomic: its sends were collected (`sends`) instead of being
//! journaled and sent one by one, and its commit writes, in one transaction, the checkpoint
//! (or its removal), the outbox records of the step's sends (the first one leased for its
//! provider call, `sending`, unless it is paced, in parts, or behind an earlier open send of
//! the chat; the others pending), the completion of the inbound record that fed the step
//! (when nothing of its dispatch can send after the step, see [`FlowCommit::ack`]; the record
//! itself, with the message's ledger row, chat and contact, when it was not written yet) and the
//! removal of the step's effect records; then [`deliver`] sends them, in order, through the
//! outbox (attempt under a lease, `mark_sent`, ledger, `after` hooks).
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
//!
//! Other steps (a store that does not share a transaction with the journals, a non-persistent
//! stack) sent during the step; their commit writes the checkpoint change, then forgets the
//! effect records. A checkpoint write that fails leaves the store at the previous step: with
//! durable journals the message is charged as failed and replayed from it.

use std::sync::Arc;

use botmesh_durability::keys::SendKey;
use botmesh_durability::outbox::NewSend;
use botmesh_durability::store::{CheckpointWrite, FlowCheckpoint, StepCommit};
use botmesh_durability::{CommittedSend, StepCommitError, StepCommitted, StepSend};

use crate::error::BotError;
use crate::flow::api::FlowError;
use crate::flow::checkpoint::Encoded;
use crate::flow::sends::{Collected, StepBuffer};
use crate::kernel::Kernel;
use crate::kernel::context::Ctx;
use crate::kernel::journals::RecordWrite;
use crate::message::ChatId;
use crate::metrics::Counters;
use crate::outbound::presence;

/// What becomes of the chat's checkpoint.
pub(crate) enum CheckpointChange {
    /// The stack waits: its new checkpoint.
    Save(Encoded),
    /// The stack waits, not checkpointed (it holds a non-persistent flow): a stored
    /// checkpoint goes.
    Remove,
    /// The stack waits and could not be encoded (the error is reported): an atomic step
    /// removes the stored checkpoint and goes on in memory; otherwise the step counts as not
    /// written.
    Unencodable,
    /// The flow ended: its checkpoint goes.
    End,
}

/// The store scope of the notes that a chat's non-persistent flow waits in memory (`key` =
/// chat, `value` = `{"flow": "<name>"}`, plus `"replica": "<instance id>"` with hand-over;
/// see `lost` and `forward`).
pub(crate) const LOST_SCOPE: &str = "botmesh:flows-in-memory";

/// What becomes of the note that the chat's non-persistent flow waits in memory (see `lost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostNote {
    /// Nothing changes.
    Keep,
    /// The stack's first suspension with a non-persistent root flow (named): the note is
    /// written.
    Write(&'static str),
    /// The noted stack ended: the note goes.
    Remove,
}

/// A flow step's outcome for the store, written by [`write`].
pub(crate) struct FlowCommit {
    /// The chat.
    pub(crate) chat: ChatId,
    /// The checkpoint change.
    pub(crate) checkpoint: CheckpointChange,
    /// Whether the store held the stack's checkpoint when the step began.
    pub(crate) stored: bool,
    /// The step's sends when it is atomic (one transaction); `None` when they went out during
    /// the step.
    pub(crate) sends: Option<Arc<StepBuffer>>,
    /// The effect records the step read or wrote, as (scope, key): past this commit the step
    /// never runs again.
    pub(crate) effects: Vec<(String, String)>,
    /// Whether the step owns the message that fed it (it was routed as the chat's
    /// conversation: the message goes nowhere else). An atomic step then completes the
    /// inbound record in its transaction, unless an `after` message hook is registered;
    /// otherwise the dispatch completes it when it ends, so a send made after the step (a
    /// handler that started the flow and goes on) is still replayed if the process dies
    /// before it.
    pub(crate) ack: bool,
    /// The note that the chat's non-persistent flow waits in memory.
    pub(crate) lost: LostNote,
}

/// What [`write`] did.
pub(crate) enum Written {
    /// The step's outcome is stored; an atomic step's sends go out with [`deliver`].
    Stored(Committed),
    /// The checkpoint change failed and nothing replays the step (no message fed it): the
    /// flow goes on from memory, ahead of the store.
    Unstored,
    /// The checkpoint change failed: the message is charged as failed and replayed, which
    /// runs the step again from the stored checkpoint.
    Replayed,
    /// The atomic step's transaction failed: nothing was written or sent, the message (if
    /// any) is charged as failed.
    Aborted,
}

/// Whether this bot's persistent flow steps commit in one transaction.
pub(crate) fn atomic(k: &Kernel) -> bool {
    k.durable
        .as_ref()
        .is_some_and(|dur| k.store.shares_transactions_with(&**dur.d.kv()))
}

/// Writes a step's commit: in one transaction when the step is atomic, else the checkpoint
/// change and then the removal of the effect records.
pub(crate) async fn write(ctx: &Ctx, commit: FlowCommit) -> Written {
    match commit.sends.clone() {
        // Boxed: the transaction and its sends are most of a step's future.
        Some(sends) => Box::pin(write_atomic(ctx, &sends, commit)).await,
        None => write_separately(ctx, commit).await,
    }
}

/// Writes or removes the note that the chat's non-persistent flow waits in memory.
async fn write_lost(k: &Kernel, chat: &ChatId, lost: LostNote) {
    match lost {
        LostNote::Keep => {}
        LostNote::Write(flow) => {
            // With hand-over, the holding replica too (forwarding, see `forward`).
            let value = match k
                .coordination
                .as_deref()
                .filter(|c| c.options.is_handover())
            {
                Some(c) => serde_json::json!({ "flow": flow, "replica": c.c.instance_id() }),
                None => serde_json::json!({ "flow": flow }),
            };
            if let Err(e) = k.store.set_value(LOST_SCOPE, chat.as_str(), &value).await {
                k.events.error("flow:in-memory-note", Some(chat), e);
            }
        }
        LostNote::Remove => remove_lost_note(k, chat).await,
    }
}

/// Deletes the note that the chat's non-persistent flow waits in memory (the flow ended, or a
/// restart lost it and it was reported), reporting a failure as an event.
pub(crate) async fn remove_lost_note(k: &Kernel, chat: &ChatId) {
    if let Err(e) = k.store.delete_value(LOST_SCOPE, chat.as_str()).await {
        k.events.error("flow:in-memory-note", Some(chat), e);
    }
}

async fn write_atomic(ctx: &Ctx, sends: &StepBuffer, commit: FlowCommit) -> Written {
    let k = &ctx.0.bot.kernel;
    let chat = commit.chat;
    let saving = matches!(commit.checkpoint, CheckpointChange::Save(_));
    // `Keep` in practice (only a persistent stack steps atomically, a noted one is not);
    // written after the transaction all the same.
    let lost = commit.lost;
    let change = match commit.checkpoint {
        CheckpointChange::Save(encoded) => CheckpointWrite::Save(encoded.checkpoint),
        CheckpointChange::Remove | CheckpointChange::Unencodable | CheckpointChange::End => {
            CheckpointWrite::Delete {
                chat: chat.to_string(),
            }
        }
    };
    match transaction(ctx, sends, change, commit.effects, commit.ack).await {
        Ok(committed) => {
            // The stored checkpoint is this step's (saved or deleted with it).
            k.flows().clear_ended(&chat);
            if saving {
                Counters::inc(&k.counters.checkpoints_written);
            }
            write_lost(k, &chat, lost).await;
            Written::Stored(committed)
        }
        Err(_)
            if ctx.0.lease.as_ref().and_then(|s| s.write_outcome())
                == Some(RecordWrite::Duplicate) =>
        {
            // A redelivery of a message handled before: nothing of the step is written.
            tracing::debug!(%chat, "the message was delivered before: its step is dropped");
            Written::Aborted
        }
        Err(e) => {
            ctx.0
                .journal_failed
                .store(true, std::sync::atomic::Ordering::SeqCst);
            k.events.error("flow:commit", Some(&chat), e);
            Written::Aborted
        }
    }
}

async fn write_separately(ctx: &Ctx, commit: FlowCommit) -> Written {
    let k = &ctx.0.bot.kernel;
    let chat = commit.chat.as_str();
    let written = match commit.checkpoint {
        CheckpointChange::Save(encoded) => match save_checkpoint(k, encoded.checkpoint).await {
            Ok(()) => true,
            Err(e) => {
                k.events.error("flow:checkpoint", Some(&commit.chat), e);
                false
            }
        },
        CheckpointChange::Unencodable => false,
        CheckpointChange::Remove => !commit.stored || remove_checkpoint(k, chat).await,
        // The head only: its state is not needed (nor decoded).
        CheckpointChange::End => {
            let stored =
                commit.stored || matches!(k.store.checkpoint_head(chat).await, Ok(Some(_)));
            !stored || remove_checkpoint(k, chat).await
        }
    };
    if !written && k.durable.is_some() && ctx.inbound_id().is_some() {
        tracing::warn!(chat = %commit.chat, "flow checkpoint not written: the message is replayed from the stored one");
        ctx.0
            .journal_failed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        return Written::Replayed;
    }
    write_lost(k, &commit.chat, commit.lost).await;
    for (scope, key) in commit.effects {
        if let Err(e) = k.store.delete_value(&scope, &key).await {
            tracing::warn!(error = %e, %key, "cannot delete an effect record");
        }
    }
    if written {
        Written::Stored(Committed::default())
    } else {
        Written::Unstored
    }
}

/// Saves a checkpoint outside an atomic step.
pub(crate) async fn save_checkpoint(k: &Kernel, cp: FlowCheckpoint) -> Result<(), FlowError> {
    crate::outbound::fence::chat_write(k, &cp.chat)
        .await
        .map_err(|source| FlowError::TurnLost {
            flow: cp.flow.clone(),
            chat: cp.chat.to_string(),
            source: Box::new(source),
        })?;
    k.store
        .save_checkpoint(&cp)
        .await
        .map_err(|source| FlowError::CheckpointWrite {
            flow: cp.flow.clone(),
            chat: cp.chat.clone(),
            source,
        })?;
    k.flows().clear_ended(&cp.chat.as_str().into());
    Counters::inc(&k.counters.checkpoints_written);
    Ok(())
}

/// Deletes a chat's checkpoint, reporting a failure as an event; whether it is gone.
pub(crate) async fn remove_checkpoint(k: &Kernel, chat: &str) -> bool {
    match k.store.delete_checkpoint(chat).await {
        Ok(()) => {
            k.flows().clear_ended(&chat.into());
            true
        }
        Err(e) => {
            k.events.error("flow:checkpoint", Some(&chat.into()), e);
            false
        }
    }
}

/// How one collected send goes out after the commit.
enum Delivery {
    /// Through the outbox record the commit wrote (or found).
    Recorded(Collected),
    /// Without the outbox (over `outbox.max_payload_bytes`).
    Direct(Collected),
}

/// A committed step: what to deliver, in order.
#[derive(Default)]
pub(crate) struct Committed {
    deliveries: Vec<Delivery>,
    records: Vec<CommittedSend>,
}

/// How many times a commit is tried again after a conflict it could resolve.
const MAX_COMMIT_TRIES: usize = 8;

/// Commits an atomic step: the checkpoint change, its sends' outbox records, the completion of
/// the context's inbound record and the removal of its effect records, in one transaction.
///
/// The inbound record is completed here only when nothing else of its dispatch can send after
/// the step (`owns_message`: the step was routed as the chat's conversation, and no `after`
/// message hook is registered); otherwise the dispatch completes it when it ends, so a send
/// made after the step (a handler that started the flow and goes on) is still replayed if the
/// process dies before it.
async fn transaction(
    ctx: &Ctx,
    buffer: &StepBuffer,
    checkpoint: CheckpointWrite,
    effects: Vec<(String, String)>,
    owns_message: bool,
) -> Result<Committed, BotError> {
    let k = &ctx.0.bot.kernel;
    let Some(dur) = k.durable.as_ref() else {
        return Err(BotError::config(
            "durability",
            "an atomic flow step needs durability",
        ));
    };
    // The fence: a step of work that lost its chat's turn commits nothing.
    crate::outbound::fence::chat_write(k, ctx.chat().as_str()).await?;
    let collected = buffer.take();
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
    let mut step = StepCommit::new(dur.d.scope().clone(), checkpoint);
    step.delete_values = effects;
    // The inbound record that fed the step: written with it when it is not written yet
    // (completed when the step has the last word), else completed with it when the step has
    // the last word.
    let mut took = None;
    if let Some(s) = ctx.0.lease.as_ref() {
        if let Some(record) = s.take_unwritten() {
            if let Err(e) = record.add_to(&mut journal, &mut step, last_word) {
                s.written(RecordWrite::Unavailable(e.to_string()));
                return Err(BotError::Durability(e));
            }
            took = Some(s);
        } else if let outcome @ (RecordWrite::Duplicate | RecordWrite::Unavailable(_)) =
            s.wait_written().await
        {
            return Err(not_accepted(ctx, &outcome));
        }
    }
    let slot = ctx
        .0
        .lease
        .as_ref()
        .filter(|s| took.is_none() && last_word && !s.is_settled());
    if let Some(slot) = slot {
        journal.complete_inbound(&slot.lease).await?;
    }
    let written = journal.commit(&*k.store, &mut step, MAX_COMMIT_TRIES).await;
    if let Some(s) = took {
        let outcome = match &written {
            Ok(StepCommitted::Written(_)) | Err(StepCommitError::AfterCommit(_)) => {
                if last_word {
                    s.settle();
                }
                RecordWrite::Written
            }
            Ok(StepCommitted::InboundDuplicate(_)) => RecordWrite::Duplicate,
            Err(e) => RecordWrite::Unavailable(e.to_string()),
        };
        s.written(outcome);
    }
    let records = match written {
        Ok(StepCommitted::Written(records)) => records,
        Ok(StepCommitted::InboundDuplicate(_)) => {
            return Err(not_accepted(ctx, &RecordWrite::Duplicate));
        }
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

/// The error of a step whose message was not accepted: its record was found written before
/// (a redelivery, `done`) or could not be written (`unwritten`; the admission reports why).
/// Nothing of the step is written.
fn not_accepted(ctx: &Ctx, outcome: &RecordWrite) -> BotError {
    let state = match outcome {
        RecordWrite::Duplicate => "done",
        RecordWrite::Unavailable(_) | RecordWrite::Written => "unwritten",
    };
    BotError::Durability(botmesh_durability::DurabilityError::InvalidState {
        kind: botmesh_durability::operating::RecordKind::Inbound,
        id: ctx
            .0
            .lease
            .as_ref()
            .map_or_else(String::new, |s| s.lease.id.clone()),
        state,
        operation: "commit_step",
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
