//! The durable outbox on the outbound path: the idempotency lookup, journaling, the inline
//! retry with deferral, parts, `bot.enqueue`, and the sweeper's delivery of due sends.
//!
//! A send is journaled under its key (after the `before` send hooks) before the provider is
//! called ("about to call" = `begin_attempt`, which takes a lease with a fencing token and
//! charges an attempt; a send that goes out in one part is journaled and leased in the same
//! write, `journal_and_lease`), and `mark_sent` records the provider's id right after. A send whose key
//! is already recorded as sent is answered from the outbox. A failure is classified (rate
//! limit with its `retry_after`, retryable, final) and scheduled by the journal; a failure
//! whose request may have reached the channel ([`ErrorClass::Ambiguous`]: a timeout, a
//! connection lost after the request was written) is settled by `mark_ambiguous` under the
//! send's ambiguity policy (skipped as `unknown`, or sent again after the backoff) and named
//! by `durability:ambiguous`; the caller
//! keeps retrying inline for `outbox.inline_max`, then gets `SendDeferred` carrying the key while
//! the sweeper keeps trying. Texts over the channel's limit become parts `key`, `key#2`, …
//! delivered in order. Payloads over `outbox.max_payload_bytes` (or not encodable) bypass the
//! outbox with a warning. The key never reaches the provider.

use std::sync::Arc;
use std::time::Duration;

use botmesh_durability::StepCommitError;
use botmesh_durability::keys::Fingerprint;
use botmesh_durability::keys::KeyKind;
use botmesh_durability::keys::SendKey;
use botmesh_durability::leases::OutboxLease;
use botmesh_durability::outbox::NewSend;
use botmesh_durability::outbox::OutboxRecord;
use botmesh_durability::outbox::SendJournal;
use botmesh_durability::outbox::{AmbiguousOutcome, BeginAttempt, JournalLeased, Payload};
use botmesh_durability::retries::FailOutcome;
use botmesh_durability::retries::SendFailure;
use botmesh_durability::retries::{InlineBudget, InlineStep};
use botmesh_durability::store::{CheckpointWrite, StepCommit};
use botmesh_durability::{DurabilityError, OutboxState};
use tokio::time::Instant;

use crate::error::BotError;
use crate::kernel::Bot;
use crate::kernel::Kernel;
use crate::kernel::journals::{Durable, beats, with_heartbeat};
use crate::kernel::routes::SendDraft;
use crate::message::{ChatId, MessageId, Outgoing};
use crate::outbound::{
    self, KeyRule, SendOutcome, on_failed, on_sent, on_sent_recorded, split_outgoing,
};
use crate::provider::{ErrorClass, ProviderError};

/// The fingerprint of a send: its chat and content before the hooks.
pub(crate) fn fingerprint(chat: &ChatId, outgoing: &Outgoing) -> Fingerprint {
    Fingerprint::of_content(chat.as_str(), &outgoing.content)
}

/// Whether the fingerprint of `outgoing` can be computed from its journaled JSON: its content
/// holds no float (a float read back from JSON text may differ in its last bit).
pub(crate) fn payload_fingerprints(outgoing: &Outgoing) -> bool {
    !matches!(
        outgoing.content,
        crate::message::OutgoingContent::Location(_)
    )
}

/// The fingerprint of a send journaled as `payload` (an [`Outgoing`]'s JSON) whose content no
/// hook changed, computed from the payload the first time it is read.
pub(crate) fn deferred_fingerprint(chat: &ChatId, payload: &Payload) -> Fingerprint {
    let chat = chat.0.clone();
    let payload = payload.clone();
    Fingerprint::deferred(move || {
        let content = serde_json::from_str::<serde_json::Value>(payload.as_json())
            .ok()
            .and_then(|mut outgoing| outgoing.get_mut("content").map(serde_json::Value::take))
            .unwrap_or(serde_json::Value::Null);
        Fingerprint::of(&chat, &content)
    })
}

fn send_key(rule: &KeyRule, key: &str) -> SendKey {
    let kind = match rule {
        KeyRule::Explicit(_) => KeyKind::Explicit,
        KeyRule::Derived { .. } | KeyRule::Site { .. } => KeyKind::Derived,
        KeyRule::Random => KeyKind::Random,
    };
    SendKey::with_kind(key, kind)
}

fn journal_error(e: DurabilityError) -> BotError {
    BotError::Durability(e)
}

fn deduped(record: &OutboxRecord) -> SendOutcome {
    SendOutcome {
        message_id: record.provider_message_id.clone().map(MessageId),
        key: Some(record.key.clone()),
        skipped: false,
        deduped: true,
        parts: 0,
    }
}

/// The idempotency lookup: `Some` when the key is recorded as sent (for a derived key, with
/// the same fingerprint), counted in `outbox_deduped`.
pub(crate) async fn answered(
    _k: &Kernel,
    dur: &Durable,
    key: &str,
    rule: &KeyRule,
    fp: &Fingerprint,
) -> Result<Option<SendOutcome>, BotError> {
    Ok(dur
        .d
        .outbox()
        .sent_before(key, rule.is_explicit(), fp)
        .await
        .map_err(journal_error)?
        .map(|r| deduped(&r)))
}

/// A send journals its own policy ([`Outgoing::on_ambiguous`]; an ask's prompt: resend) on
/// its record, and recovery applies it. A record written by an older version carries it only
/// in its payload: recovery resolved it by the bot's policy, so such a send left `unknown`
/// whose payload says `resend` is made pending here, due now, in its place in the chat's
/// order. The `durability:ambiguous` event was emitted for each either way.
pub(crate) async fn resend_by_own_policy(k: &Kernel, dur: &Durable, resolved: &[OutboxRecord]) {
    for r in resolved {
        if r.state != OutboxState::Unknown || r.on_ambiguous.is_some() {
            continue;
        }
        let own = serde_json::from_str::<Outgoing>(r.payload.as_json())
            .ok()
            .and_then(|o| o.on_ambiguous);
        if own != Some(botmesh_durability::OnAmbiguous::Resend) {
            continue;
        }
        match dur.d.outbox().retry(&r.key).await {
            Ok(_) => {
                tracing::warn!(key = %r.key, chat = %r.chat, "send of unknown outcome sent again (its policy is resend)")
            }
            Err(e) => k.events.error(
                "durability:resend",
                Some(&ChatId(r.chat.clone())),
                BotError::Durability(e),
            ),
        }
    }
}

/// The failure class of a provider error, for the journal (an ambiguous error is settled by
/// `mark_ambiguous` instead: here it counts as retryable).
pub(crate) fn classify(e: &ProviderError) -> SendFailure {
    match e.class() {
        ErrorClass::RateLimited(Some(after)) => SendFailure::rate_limited(e.to_string(), after),
        ErrorClass::RateLimited(None) | ErrorClass::Retryable | ErrorClass::Ambiguous => {
            SendFailure::retryable(e.to_string())
        }
        ErrorClass::Final => SendFailure::final_error(e.to_string()),
    }
}

/// Journals an already-hooked send and delivers it inline (see the module docs). `fp` is its
/// fingerprint when computed before the hooks; `None` when no hook ran on it (it is then
/// computed from the journaled payload when first read).
pub(crate) async fn deliver(
    k: &Arc<Kernel>,
    dur: &Durable,
    rule: &KeyRule,
    key: String,
    chat: ChatId,
    outgoing: Outgoing,
    fp: Option<Fingerprint>,
) -> Result<SendOutcome, BotError> {
    // A send that goes out in one part is journaled and leased in one write, and the
    // provider called at once; one in parts is journaled, split, then delivered part by part.
    let begin = !over_limit(&outgoing, &k.capabilities);
    let outgoing = Arc::new(outgoing);
    if !crate::outbound::fence::may_use_transport(k) {
        // A standby of a leader-only transport: journaled for the leader's sweeper.
        return Box::pin(journal_for_leader(dur, rule, key, &chat, &outgoing, fp)).await;
    }
    let begun = journal(dur, rule, &key, &chat, &outgoing, fp, begin).await?;
    let outgoing = &*outgoing;
    let (record, fresh) = match begun {
        Journaled::Bypassed => return direct(k, &chat, outgoing, &key).await,
        // One part, journaled under `key` with `outgoing`.
        Journaled::Leased(lease) => return deliver_leased(k, dur, lease, outgoing).await,
        Journaled::Record(record, fresh) => (record, fresh),
    };
    if record.state == OutboxState::Sent {
        // Sent before under this key (found by the journal write: without hooks, the send
        // made no lookup of its own): answered from the outbox.
        crate::metrics::Counters::inc(&k.counters.send_deduped);
        return Ok(deduped(&record));
    }
    let outcome = SendOutcome {
        key: Some(record.key.clone()),
        ..SendOutcome::default()
    };
    // A record this call journaled holds `outgoing` itself: no need to decode it back.
    let known = fresh.then_some(outgoing);
    let parts = ensure_parts(k, dur, record, known).await?;
    let known = known.filter(|_| parts.len() == 1);
    let keys = parts.into_iter().map(|p| p.key).collect();
    deliver_parts(k, dur, keys, known, outcome).await
}

/// Journals a send for the leader to deliver (this replica is a standby of a leader-only
/// transport): `SendDeferred`, which a flow counts as made, or the outcome of a send already
/// made under this key.
async fn journal_for_leader(
    dur: &Durable,
    rule: &KeyRule,
    key: String,
    chat: &ChatId,
    outgoing: &Arc<Outgoing>,
    fp: Option<Fingerprint>,
) -> Result<SendOutcome, BotError> {
    match journal(dur, rule, &key, chat, outgoing, fp, false).await? {
        Journaled::Record(record, _) if record.state == OutboxState::Sent => Ok(deduped(&record)),
        Journaled::Bypassed => Err(BotError::Coordination(
            botmesh_durability::coordination::CoordinationError::NotLeader {
                name: crate::coordination::TRANSPORT_LEASE.to_owned(),
                leader: None,
            },
        )),
        _ => {
            tracing::debug!(key = %key, "standby: send journaled for the leader");
            Err(BotError::SendDeferred { key })
        }
    }
}

/// Delivers a send of one part that its journal write leased (most sends), journaled under
/// the lease's key with `known`: one attempt at once, and the retry loop only when it asks for
/// another.
pub(crate) async fn deliver_leased(
    k: &Arc<Kernel>,
    dur: &Durable,
    lease: OutboxLease,
    known: &Outgoing,
) -> Result<SendOutcome, BotError> {
    let budget = Budget::start(dur);
    let key = lease.key.clone();
    let delivered = match attempt(k, dur, lease, Content::Known(known)).await? {
        Attempt::Sent(id) => Delivered::Now(id),
        Attempt::Unknown => Delivered::Before(None),
        // Boxed, as the other rare paths: the send's future holds only their box.
        Attempt::Retry { at_ms, key } => {
            Box::pin(attempt_inline(
                k,
                dur,
                &key,
                &budget,
                Some(known),
                Some(at_ms),
            ))
            .await?
        }
        Attempt::Dead(err) => return Err(err),
    };
    let mut outcome = SendOutcome {
        key: Some(key),
        ..SendOutcome::default()
    };
    delivered.add_to(&mut outcome);
    Ok(outcome)
}

/// Delivers the parts `keys` of one send in order, inline, adding each to `outcome`.
async fn deliver_parts(
    k: &Arc<Kernel>,
    dur: &Durable,
    keys: Vec<String>,
    known: Option<&Outgoing>,
    mut outcome: SendOutcome,
) -> Result<SendOutcome, BotError> {
    let budget = Budget::start(dur);
    for key in keys {
        // Boxed (as `attempt` in it): each level would otherwise hold, and copy when it
        // creates it, the whole future below it.
        Box::pin(attempt_inline(k, dur, &key, &budget, known, None))
            .await?
            .add_to(&mut outcome);
    }
    Ok(outcome)
}

/// What journaling a send left to do.
#[allow(clippy::large_enum_variant)] // returned and matched at once, never stored
enum Journaled {
    /// It bypasses the outbox (too large or not encodable): send it directly.
    Bypassed,
    /// Journaled (with the content given) and leased in one write: call the provider with
    /// this lease.
    Leased(OutboxLease),
    /// The record to carry on with, and whether this call wrote it (its payload is then
    /// `outgoing`).
    Record(OutboxRecord, bool),
}

/// Journals a send (see [`Journaled`]); with `begin`, leases it for its first attempt in
/// the same write when it can (`journal_and_lease`).
async fn journal(
    dur: &Durable,
    rule: &KeyRule,
    key: &str,
    chat: &ChatId,
    outgoing: &Arc<Outgoing>,
    fp: Option<Fingerprint>,
    begin: bool,
) -> Result<Journaled, BotError> {
    let outbox = dur.d.outbox();
    let payload = match Payload::encode(&**outgoing) {
        Ok(payload) => payload,
        Err(e) => {
            outbox.bypass(key, &format!("not encodable: {e}"));
            return Ok(Journaled::Bypassed);
        }
    };
    let fp = fp.unwrap_or_else(|| deferred_fingerprint(chat, &payload));
    let new = NewSend::new(send_key(rule, key), chat.0.clone(), payload)
        .with_fingerprint(fp)
        .with_on_ambiguous(outgoing.on_ambiguous);
    let journaled = if begin {
        match outbox.journal_and_lease(new).await.map_err(journal_error)? {
            JournalLeased::Leased(lease) => return Ok(Journaled::Leased(lease)),
            JournalLeased::Journal(journaled) => journaled,
        }
    } else {
        outbox.journal(new).await.map_err(journal_error)?
    };
    Ok(carry_on(key, journaled))
}

fn carry_on(key: &str, journaled: SendJournal) -> Journaled {
    if let SendJournal::Bypassed { size, limit } = journaled {
        tracing::warn!(
            key,
            size,
            limit,
            "payload over outbox.max_payload_bytes: sent without the outbox"
        );
        return Journaled::Bypassed;
    }
    let fresh = match &journaled {
        SendJournal::Journaled(_) => true,
        SendJournal::Diverged {
            resend: Some(next), ..
        } => matches!(**next, SendJournal::Journaled(_)),
        _ => false,
    };
    match journaled.into_record() {
        Some(r) => Journaled::Record(r, fresh),
        None => Journaled::Bypassed,
    }
}

/// Whether a send is a text or a list that `split_outgoing` splits (over the channel's limit,
/// or over its limit for a text with buttons).
fn over_limit(outgoing: &Outgoing, caps: &crate::provider::Capabilities) -> bool {
    outbound::is_split(outgoing, caps)
}

/// The records of a send's parts, in order; splits a first part over the text limit. `known`
/// is the first record's content when the caller has it (it is then not decoded again).
async fn ensure_parts(
    k: &Kernel,
    dur: &Durable,
    first: OutboxRecord,
    known: Option<&Outgoing>,
) -> Result<Vec<OutboxRecord>, BotError> {
    if first.part == 1 && first.next_part.is_none() {
        let decoded;
        let outgoing = match known {
            Some(o) => Some(o),
            None => {
                decoded = first.payload.decode::<Outgoing>().ok();
                decoded.as_ref()
            }
        };
        if let Some(outgoing) = outgoing.filter(|o| over_limit(o, &k.capabilities)) {
            let parts = split_outgoing(outgoing, &k.capabilities);
            if parts.len() > 1 {
                crate::metrics::Counters::inc(&k.counters.split_messages);
                let payloads = parts
                    .iter()
                    .map(serde_json::to_value)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        BotError::Durability(DurabilityError::Encode {
                            kind: botmesh_durability::operating::RecordKind::Outbound,
                            id: first.key.clone(),
                            reason: e.to_string(),
                        })
                    })?;
                return dur
                    .d
                    .outbox()
                    .split_parts(&first.key, payloads)
                    .await
                    .map_err(journal_error);
            }
        }
        return Ok(vec![first]);
    }
    let mut next = first.next_part.clone();
    let mut records = vec![first];
    while let Some(key) = next {
        match dur.d.outbox().lookup(&key).await.map_err(journal_error)? {
            Some(r) => {
                next = r.next_part.clone();
                records.push(r);
            }
            None => break,
        }
    }
    Ok(records)
}

/// The inline budget, on the journal's clock and on tokio's (a test's manual clock may stand).
struct Budget {
    journal: InlineBudget,
    deadline: Instant,
}

impl Budget {
    fn start(dur: &Durable) -> Self {
        let inline_max = dur.d.config().outbox.inline_max;
        Self {
            journal: InlineBudget::start(dur.d.now_ms(), inline_max),
            deadline: Instant::now() + inline_max,
        }
    }

    /// How long to wait before trying again at `at_ms`, or `None` to defer.
    fn wait_until(&self, dur: &Durable, at_ms: i64) -> Option<Duration> {
        if Instant::now() >= self.deadline {
            return None;
        }
        match self.journal.next(at_ms) {
            InlineStep::WaitUntil { at_ms } => {
                let ms = u64::try_from(at_ms.saturating_sub(dur.d.now_ms())).unwrap_or(0);
                Some(Duration::from_millis(ms).min(self.deadline - Instant::now()))
            }
            InlineStep::Defer => None,
        }
    }
}

enum Delivered {
    /// Sent by this call, with the provider's id.
    Now(Option<MessageId>),
    /// Sent before (or settled as unknown): answered from the outbox.
    Before(Option<MessageId>),
}

impl Delivered {
    /// Counts this part in the send's `outcome`.
    fn add_to(self, outcome: &mut SendOutcome) {
        match self {
            Delivered::Now(id) => {
                outcome.message_id = id;
                outcome.parts += 1;
            }
            Delivered::Before(id) => {
                outcome.message_id = id;
                outcome.deduped = true;
            }
        }
    }
}

const POLL: Duration = Duration::from_millis(25);

/// Attempts `key` (leasing it first) until it is delivered, settled or deferred past the
/// inline budget. `retry_at`: an attempt made under the journal write's lease asked to try
/// again then, so the loop starts by waiting for it.
async fn attempt_inline(
    k: &Arc<Kernel>,
    dur: &Durable,
    key: &str,
    budget: &Budget,
    known: Option<&Outgoing>,
    mut retry_at: Option<i64>,
) -> Result<Delivered, BotError> {
    loop {
        let wait_at = match retry_at.take() {
            Some(at_ms) => at_ms,
            None => match dur
                .d
                .outbox()
                .begin_attempt(key)
                .await
                .map_err(journal_error)?
            {
                BeginAttempt::Leased { lease, record } => {
                    let content = Content::Record(record, known);
                    match Box::pin(attempt(k, dur, lease, content)).await? {
                        Attempt::Sent(id) => return Ok(Delivered::Now(id)),
                        Attempt::Unknown => return Ok(Delivered::Before(None)),
                        Attempt::Retry { at_ms, .. } => at_ms,
                        Attempt::Dead(err) => return Err(err),
                    }
                }
                BeginAttempt::AlreadySent(r) => {
                    return Ok(Delivered::Before(r.provider_message_id.map(MessageId)));
                }
                BeginAttempt::Settled(r) if r.state == OutboxState::Unknown => {
                    return Ok(Delivered::Before(None));
                }
                BeginAttempt::Settled(r) => {
                    return Err(BotError::SendDead {
                        key: r.key,
                        error: r.last_error.unwrap_or_else(|| "dead-lettered".to_owned()),
                    });
                }
                BeginAttempt::NotDue { at_ms } => at_ms,
                BeginAttempt::Busy { .. } | BeginAttempt::Waiting { .. } => {
                    dur.d.now_ms() + i64::try_from(POLL.as_millis()).unwrap_or(25)
                }
            },
        };
        match budget.wait_until(dur, wait_at) {
            Some(wait) => tokio::time::sleep(wait.max(Duration::from_millis(1))).await,
            None => {
                dur.d.outbox().defer(key);
                return Err(BotError::SendDeferred {
                    key: key.to_owned(),
                });
            }
        }
    }
}

enum Attempt {
    Sent(Option<MessageId>),
    /// The provider call's outcome is unknown and the policy skips it (`unknown`): the caller
    /// goes on as if it was delivered (it may have been), and `durability:ambiguous` named it.
    Unknown,
    /// Try again at `at_ms`; `key` is the part's.
    Retry {
        at_ms: i64,
        key: String,
    },
    Dead(BotError),
}

impl Attempt {
    /// Try part `key` again at `at_ms`.
    fn retry(key: &str, at_ms: i64) -> Self {
        Attempt::Retry {
            at_ms,
            key: key.to_owned(),
        }
    }
}

/// What an attempt sends.
#[allow(clippy::large_enum_variant)] // passed to one attempt, never stored
enum Content<'a> {
    /// The content this process journaled the part with (one part: a send split in parts is
    /// journaled first and leased part by part).
    Known(&'a Outgoing),
    /// The leased record's payload; `known` is the content the record was journaled with,
    /// when the caller has it, used only while the record is unsplit (splitting is the one
    /// change of a journaled payload).
    Record(OutboxRecord, Option<&'a Outgoing>),
}

/// One provider call under a lease: heartbeat while it runs, then `mark_sent` / `mark_failed`.
async fn attempt(
    k: &Arc<Kernel>,
    dur: &Durable,
    lease: OutboxLease,
    content: Content<'_>,
) -> Result<Attempt, BotError> {
    // The key is copied only where it outlives the lease (the provider's task-local, a retry,
    // a dead letter).
    let key = lease.key.as_str();
    let chat = ChatId(lease.chat.clone());
    let decoded;
    let outgoing: &Outgoing = match content {
        Content::Known(o) => o,
        Content::Record(record, Some(o))
            if record.next_part.is_none() && record.previous_part.is_none() =>
        {
            o
        }
        Content::Record(record, _) => match record.payload.decode::<Outgoing>() {
            Ok(o) => {
                decoded = o;
                &decoded
            }
            Err(e) => {
                let failure = SendFailure::final_error(format!("undecodable outbox payload: {e}"));
                tracing::error!(key = %key, error = %e, "undecodable outbox payload: dead-lettered");
                // Boxed, as the other rare paths below: the send's future holds only their box.
                Box::pin(dur.d.outbox().mark_failed(&lease, &failure))
                    .await
                    .map_err(journal_error)?;
                return Ok(Attempt::Dead(BotError::SendDead {
                    key: key.to_owned(),
                    error: failure.error,
                }));
            }
        },
    };
    let every = (dur.d.config().outbox.lease / 3).max(Duration::from_millis(5));
    let beats = beats(
        ("outbox", &lease.key),
        every,
        &lease,
        || false,
        |l| async move { dur.d.outbox().heartbeat(&l).await },
    );
    // The send fence, right before the provider: a standby of a leader-only transport, or
    // work that lost its chat's turn, does not call it; the send is retried (by the leader,
    // by the turn's new holder).
    if let Err(refused) = Box::pin(crate::outbound::fence::provider_call(k, chat.as_str())).await {
        tracing::warn!(key = %key, error = %refused, "send refused by the fence before the provider");
        let failure = SendFailure::retryable(refused.to_string());
        return match Box::pin(dur.d.outbox().mark_failed(&lease, &failure))
            .await
            .map_err(journal_error)?
        {
            FailOutcome::Retrying { at_ms } => Ok(Attempt::retry(key, at_ms)),
            FailOutcome::DeadLettered => Ok(Attempt::Dead(BotError::Coordination(refused))),
        };
    }
    let send = crate::outbound::provider_send(k, &chat, outgoing, key);
    let result = with_heartbeat(send, beats).await;
    match result {
        Ok(sent) => {
            let id = sent.message_id.as_ref().map(|m| m.0.as_str());
            // With a store that shares the journal's transactions (SQLite) the send is marked
            // sent with its ledger row in one write; boxed, as the journal write it waits on
            // outweighs the box.
            if crate::kernel::journals::atomic(k)
                && Box::pin(mark_sent_with_ledger(
                    k, dur, &lease, id, &chat, outgoing, &sent,
                ))
                .await
                .map_err(journal_error)?
            {
                on_sent_recorded(k, &chat, outgoing, sent.message_id.clone(), key).await;
                return Ok(Attempt::Sent(sent.message_id));
            }
            // The provider accepted it: only the journal is in doubt, so keep trying to record
            // it while the backend is away (within the lease), rather than leave it ambiguous.
            // The retries are boxed, as they would otherwise sit in every send's future.
            Box::pin(retry_while_unavailable(dur, || {
                let lease = &lease;
                let id = id.map(str::to_owned);
                async move { dur.d.outbox().mark_sent(lease, id).await.map(|_| ()) }
            }))
            .await
            .map_err(journal_error)?;
            on_sent(k, &chat, outgoing, sent.message_id.clone(), key).await;
            Ok(Attempt::Sent(sent.message_id))
        }
        Err(e) if e.class() == ErrorClass::Ambiguous => {
            Box::pin(settle_ambiguous(k, dur, &lease, outgoing, &e)).await
        }
        Err(e) => {
            let failure = classify(&e);
            match Box::pin(retry_while_unavailable(dur, || {
                let (lease, failure) = (&lease, &failure);
                async move { dur.d.outbox().mark_failed(lease, failure).await }
            }))
            .await
            .map_err(journal_error)?
            {
                FailOutcome::Retrying { at_ms } => {
                    tracing::debug!(key = %key, error = %e, at_ms, "send failed: retrying");
                    Ok(Attempt::retry(key, at_ms))
                }
                FailOutcome::DeadLettered => {
                    Box::pin(on_failed(k, &chat, outgoing, key, &e)).await;
                    Ok(Attempt::Dead(e.into()))
                }
            }
        }
    }
}

/// Settles a provider call whose request may have reached the channel
/// ([`ErrorClass::Ambiguous`]): `mark_ambiguous` applies the send's own `on_ambiguous`, else
/// the bot's (`durability:ambiguous` fires either way). Skipped: the caller goes on as if it
/// was delivered. Resent: retried after the backoff, as a failed attempt. Out of retries:
/// dead-lettered.
async fn settle_ambiguous(
    k: &Arc<Kernel>,
    dur: &Durable,
    lease: &OutboxLease,
    outgoing: &Outgoing,
    e: &ProviderError,
) -> Result<Attempt, BotError> {
    let key = lease.key.as_str();
    let chat = ChatId(lease.chat.clone());
    let error = e.to_string();
    let outcome = retry_while_unavailable(dur, || {
        let error = &error;
        async move { dur.d.outbox().mark_ambiguous(lease, error).await }
    })
    .await
    .map_err(journal_error)?;
    match outcome {
        AmbiguousOutcome::Unknown => Ok(Attempt::Unknown),
        AmbiguousOutcome::Resend { at_ms } => {
            tracing::debug!(key = %key, error = %e, at_ms, "send of unknown outcome: sending again");
            Ok(Attempt::retry(key, at_ms))
        }
        AmbiguousOutcome::DeadLettered => {
            on_failed(k, &chat, outgoing, key, e).await;
            Ok(Attempt::Dead(e.clone().into()))
        }
    }
}

/// Records a send the provider accepted and its ledger row in one transaction, for a store
/// that shares its transactions with the journals (the caller checks: one write instead of
/// two). `Ok(false)`: not done (the ledger off, or the transaction wrote nothing): the caller
/// records them apart, with its retries.
async fn mark_sent_with_ledger(
    k: &Arc<Kernel>,
    dur: &Durable,
    lease: &OutboxLease,
    id: Option<&str>,
    chat: &ChatId,
    outgoing: &Outgoing,
    sent: &crate::message::SentMessage,
) -> Result<bool, DurabilityError> {
    let entry = crate::outbound::persistence::outbound_entry(
        k,
        crate::outbound::persistence::OutboundEntry {
            chat,
            outgoing,
            message_id: sent.message_id.as_ref(),
            key: Some(&lease.key),
            error: None,
        },
    );
    let Some(entry) = entry else {
        return Ok(false);
    };
    let mut journal = dur.d.step();
    if let Err(e) = journal.mark_sent(lease, id.map(str::to_owned)).await {
        return match e {
            DurabilityError::Backend {
                source: botmesh_durability::KvError::Unavailable { .. },
                ..
            } => Ok(false),
            e => Err(e),
        };
    }
    let mut step = StepCommit::new(dur.d.scope().clone(), CheckpointWrite::Keep);
    step.ledger = vec![entry];
    match journal.commit(&*k.store, &mut step, 4).await {
        Ok(_) => Ok(true),
        Err(StepCommitError::Journal(e) | StepCommitError::AfterCommit(e)) => Err(e),
        Err(e) => {
            tracing::debug!(key = %lease.key, error = %e, "sent and ledger not recorded together: recording them apart");
            Ok(false)
        }
    }
}

/// Whether a journal write failed because the backend is unavailable (a restart, a
/// failover): worth trying again.
pub(crate) fn backend_unavailable(e: &DurabilityError) -> bool {
    matches!(
        e,
        DurabilityError::Backend {
            source: botmesh_durability::KvError::Unavailable { .. },
            ..
        }
    )
}

/// Runs a journal write again while it fails because the backend is unavailable (a restart,
/// a failover), for up to half the outbox lease, backing off up to 2 s; other errors (a stale
/// lease, a crashed or closed backend) return at once.
async fn retry_while_unavailable<T, F, Fut>(
    dur: &Durable,
    mut write: F,
) -> Result<T, DurabilityError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DurabilityError>>,
{
    let give_up = Instant::now() + dur.d.config().outbox.lease / 2;
    let mut wait = Duration::from_millis(50);
    loop {
        match write().await {
            Err(e) if backend_unavailable(&e) && Instant::now() + wait < give_up => {
                tracing::warn!(error = %e, "journal write failed: retrying while the backend is away");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Delivers a send a flow step's commit journaled (or found recorded under its key): each
/// part in order, inline, deferred to the sweeper past `outbox.inline_max`. `parts` is the
/// content of each part as the step journaled it (`None` for a record found: read from it).
pub(crate) async fn deliver_recorded(
    k: &Arc<Kernel>,
    dur: &Durable,
    first: OutboxRecord,
    parts: Option<&[Outgoing]>,
) -> Result<SendOutcome, BotError> {
    if first.state == OutboxState::Sent && first.next_part.is_none() {
        return Ok(deduped(&first));
    }
    let outcome = SendOutcome {
        key: Some(first.key.clone()),
        ..SendOutcome::default()
    };
    let (keys, known): (Vec<String>, Option<&Outgoing>) = match parts {
        Some(parts) => (
            (1..=parts.len())
                .map(|n| {
                    botmesh_durability::keys::part_key(
                        &first.key,
                        u32::try_from(n).unwrap_or(u32::MAX),
                    )
                })
                .collect(),
            // The content is used only while the record is unsplit (one part).
            parts.first().filter(|_| parts.len() == 1),
        ),
        None => (
            ensure_parts(k, dur, first, None)
                .await?
                .into_iter()
                .map(|r| r.key)
                .collect(),
            None,
        ),
    };
    deliver_parts(k, dur, keys, known, outcome).await
}

/// A send that bypasses the outbox (a flow step's send over `outbox.max_payload_bytes`).
pub(crate) async fn deliver_direct(
    k: &Arc<Kernel>,
    chat: &ChatId,
    outgoing: &Outgoing,
    key: &str,
) -> Result<SendOutcome, BotError> {
    direct(k, chat, outgoing, key).await
}

/// A send that bypasses the outbox: straight to the provider, split into parts.
async fn direct(
    k: &Arc<Kernel>,
    chat: &ChatId,
    outgoing: &Outgoing,
    key: &str,
) -> Result<SendOutcome, BotError> {
    let mut outcome = SendOutcome {
        key: Some(key.to_owned()),
        ..SendOutcome::default()
    };
    for (i, part) in split_outgoing(outgoing, &k.capabilities).iter().enumerate() {
        let part_key = outbound::part_key(key, i);
        match crate::outbound::provider_send(k, chat, part, &part_key).await {
            Ok(sent) => {
                on_sent(k, chat, part, sent.message_id.clone(), &part_key).await;
                outcome.message_id = sent.message_id;
                outcome.parts += 1;
            }
            Err(e) => {
                on_failed(k, chat, part, &part_key, &e).await;
                return Err(e.into());
            }
        }
    }
    Ok(outcome)
}

/// The sweeper's delivery of one due send: split when oversize, then one attempt.
pub(crate) async fn deliver_due(k: &Arc<Kernel>, dur: &Durable, record: OutboxRecord) {
    if !crate::outbound::fence::may_use_transport(k) {
        // A standby never calls a leader-only transport: the leader's sweeper delivers it.
        tracing::trace!(key = %record.key, "standby: due send left to the leader");
        return;
    }
    let chat = ChatId(record.chat.clone());
    let first_key = record.key.clone();
    let key = match ensure_parts(k, dur, record, None).await {
        Ok(parts) => parts.into_iter().next().map_or(first_key, |p| p.key),
        Err(e) => {
            k.events.error("durability:sweeper", Some(&chat), e);
            return;
        }
    };
    let result = match dur.d.outbox().begin_attempt(&key).await {
        Ok(BeginAttempt::Leased { lease, record }) => {
            attempt(k, dur, lease, Content::Record(record, None)).await
        }
        Ok(_) => return,
        Err(e) => Err(journal_error(e)),
    };
    if let Err(e) = result {
        k.events.error("durability:sweeper", Some(&chat), e);
    }
}

/// What [`Bot::enqueue`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueOutcome {
    /// The send's idempotency key.
    pub key: String,
    /// A `before` send hook aborted it: nothing was journaled.
    pub skipped: bool,
    /// The key was already journaled: this enqueue was a no-op.
    pub deduped: bool,
}

impl Bot {
    /// Journals a send and returns at once; the sweeper delivers it, then runs the `after`
    /// send hooks and writes the ledger. The `before` send hooks run once, here. A second
    /// enqueue of the same explicit key is a no-op. Needs durability.
    ///
    /// ```
    /// # use botmesh::prelude::*;
    /// # async fn demo(bot: Bot) -> Result<(), BotError> {
    /// let done = bot.enqueue("alice", Outgoing::from("Your appointment is tomorrow at 9").key("reminder:42")).await?;
    /// assert_eq!(done.key, "reminder:42");
    /// # Ok(()) }
    /// ```
    pub async fn enqueue(
        &self,
        chat: impl Into<ChatId>,
        outgoing: impl Into<Outgoing>,
    ) -> Result<EnqueueOutcome, BotError> {
        let k = &self.kernel;
        let Some(dur) = k.durable.as_ref() else {
            return Err(BotError::config(
                "durability",
                "bot.enqueue needs durability",
            ));
        };
        let chat = chat.into();
        let mut outgoing = outgoing.into();
        crate::outbound::resend_where_deduplicated(k, &mut outgoing);
        let rule = match outgoing.idempotency_key.take() {
            Some(key) => KeyRule::Explicit(key),
            None => KeyRule::Random,
        };
        let key = rule.key();
        // The idempotency lookup comes before the hooks: a second enqueue of a key is a
        // no-op, and the hooks run once per key.
        if let KeyRule::Explicit(_) = rule {
            if dur
                .d
                .outbox()
                .lookup(&key)
                .await
                .map_err(journal_error)?
                .is_some()
            {
                return Ok(EnqueueOutcome {
                    key,
                    skipped: false,
                    deduped: true,
                });
            }
        }
        let fp = fingerprint(&chat, &outgoing);
        let draft = SendDraft {
            chat,
            outgoing,
            edit_of: None,
            preview: false,
        };
        let Some(draft) = outbound::run_before_send(k, draft).await else {
            return Ok(EnqueueOutcome {
                key,
                skipped: true,
                deduped: false,
            });
        };
        let before = dur.d.outbox().lookup(&key).await.map_err(journal_error)?;
        let outgoing = Arc::new(draft.outgoing);
        let Journaled::Record(record, fresh) =
            journal(dur, &rule, &key, &draft.chat, &outgoing, Some(fp), false).await?
        else {
            return Err(BotError::config(
                "durability.outbox.max_payload_bytes",
                format!("enqueued send {key} is too large for the outbox"),
            ));
        };
        ensure_parts(k, dur, record, fresh.then_some(&*outgoing)).await?;
        Ok(EnqueueOutcome {
            key,
            skipped: false,
            deduped: before.is_some(),
        })
    }
}
