//! The sends of an atomic flow step, collected for its commit instead of being journaled and
//! sent one by one (see `commit`). Each still gets its compile-time key, runs the `before` send
//! hooks and is split into parts now; nothing is written until the step commits.

use std::sync::Mutex;

use botmesh_durability::keys::{Fingerprint, KeyKind};

use crate::error::BotError;
use crate::kernel::context::Ctx;
use crate::kernel::routes::SendDraft;
use crate::message::{ChatId, Outgoing};
use crate::metrics::Counters;
use crate::outbound::interaction_ack;
use crate::outbound::{self, KeyRule, SendOutcome, split_outgoing};

/// A send collected during an atomic step.
pub(crate) struct Collected {
    pub(crate) key: String,
    pub(crate) kind: KeyKind,
    pub(crate) chat: ChatId,
    pub(crate) fingerprint: Fingerprint,
    /// The content after the `before` send hooks.
    pub(crate) outgoing: Outgoing,
    /// Its parts (one when it fits the channel's text limit).
    pub(crate) parts: Vec<Outgoing>,
    /// Whether pacing (typing, then a delay) goes before it.
    pub(crate) paced: bool,
}

/// The sends of one atomic step, in the order the flow made them.
#[derive(Default)]
pub(crate) struct StepBuffer {
    sends: Mutex<Vec<Collected>>,
}

impl StepBuffer {
    /// The sends collected so far, in order; the buffer is left empty.
    pub(crate) fn take(&self) -> Vec<Collected> {
        std::mem::take(&mut *self.sends.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl std::fmt::Debug for StepBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepBuffer").finish_non_exhaustive()
    }
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
    outbound::resend_where_deduplicated(k, &mut outgoing);
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
