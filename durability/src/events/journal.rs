//! [`EventJournal`]: an app's events (append, list, claim under a fenced lease, complete,
//! fail, replay) kept in a [`DurableKv`], the same storage the bot's inbox and outbox use.
//!
//! The events live in a scope of their own (`"\0botmesh:events"`, reserved to backends), so
//! they never mix with a bot's records, and every change is one compare-and-set on the
//! event's version: on a [`SharedFileKv`](super::SharedFileKv) that write runs under the
//! cross-process mutex against the current file, so two processes never both claim an event
//! and a stale holder's `complete` is refused.
//!
//! | what | value |
//! | --- | --- |
//! | key | `e/<id>` |
//! | `idx1` (claim order), pending and claimed events only | `<channel>/<status>/<16-digit ms>/<id>`: `<channel>` is `-` without a channel, else `c<len, 8 hex>:<channel>`; the ms is the due time (pending) or the lease expiry (claimed) |
//! | `idx2` (list order) | `<16-digit created ms>/<id>` |

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::kv::{CasOutcome, DurableKv, Entry, Index, KvError, Scope, Versioned};

use super::{
    ClaimRequest, ClaimedEvent, EventJournalError, EventLease, EventQuery, EventRecord,
    EventStatus, NewEvent,
};

/// The scope the events live in.
pub(crate) const EVENTS_SCOPE: &str = "\0botmesh:events";
/// How often a write re-reads an event that changed under it.
const MAX_RETRIES: usize = 32;
/// Past every index value.
const END: &str = "\u{10FFFF}";

/// An app's event journal over the storage `B`; clones share it.
///
/// [`FileEventJournal`](super::FileEventJournal) and
/// [`SharedFileEventJournal`](super::SharedFileEventJournal) are this over a locked file and
/// over a file shared by processes.
pub struct EventJournal<B> {
    storage: Arc<B>,
    clock: Arc<dyn Clock>,
    scope: Scope,
}

impl<B> Clone for EventJournal<B> {
    fn clone(&self) -> Self {
        EventJournal {
            storage: Arc::clone(&self.storage),
            clock: Arc::clone(&self.clock),
            scope: self.scope.clone(),
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for EventJournal<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventJournal")
            .field("storage", &self.storage)
            .finish()
    }
}

/// Appends `n` zero-padded to 16 digits (negative times count as 0).
fn push_ms(out: &mut String, ms: i64) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(u64::try_from(ms).unwrap_or(0));
    for _ in digits.len()..16 {
        out.push('0');
    }
    out.push_str(digits);
}

/// The channel part of `idx1`.
fn channel_tag(channel: Option<&str>) -> String {
    match channel {
        None => "-".to_owned(),
        Some(c) => format!("c{:08x}:{c}", c.len()),
    }
}

fn claim_index(record: &EventRecord) -> Option<String> {
    let ms = match (record.status, &record.lease) {
        (EventStatus::Pending, _) => record.available_at_ms,
        (EventStatus::Claimed, Some(lease)) => lease.expires_at_ms,
        _ => return None,
    };
    let mut value = channel_tag(record.channel.as_deref());
    value.push('/');
    value.push_str(record.status.as_str());
    value.push('/');
    push_ms(&mut value, ms);
    value.push('/');
    value.push_str(&record.id);
    Some(value)
}

fn list_index(record: &EventRecord) -> String {
    let mut value = String::new();
    push_ms(&mut value, record.created_at_ms);
    value.push('/');
    value.push_str(&record.id);
    value
}

fn key(id: &str) -> String {
    format!("e/{id}")
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A generated id: the time, a per-process counter and random bits.
fn generated_id(now_ms: i64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut id = String::from("evt-");
    push_ms(&mut id, now_ms);
    format!("{id}-{n:06}-{:016x}", fastrand::u64(..))
}

impl<B: DurableKv> EventJournal<B> {
    /// A journal over `storage`, on the system clock.
    pub(crate) fn over(storage: B) -> Self {
        EventJournal {
            storage: Arc::new(storage),
            clock: Arc::new(SystemClock),
            scope: Scope::custom(EVENTS_SCOPE),
        }
    }

    /// The same journal on another clock (tests move a [`ManualClock`](crate::clock::ManualClock)).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The storage: the `DurableKv` that the bot's journals share with the events (see
    /// [`events_durability`](super::events_durability)).
    pub fn storage(&self) -> &Arc<B> {
        &self.storage
    }

    fn storage_error(
        operation: &'static str,
        id: &str,
    ) -> impl FnOnce(KvError) -> EventJournalError {
        let id = id.to_owned();
        move |source| EventJournalError::Storage {
            operation,
            id,
            source,
        }
    }

    fn decode(id: &str, entry: &Versioned) -> Result<EventRecord, EventJournalError> {
        serde_json::from_slice(&entry.value).map_err(|e| EventJournalError::Corrupt {
            id: id.to_owned(),
            reason: e.to_string(),
        })
    }

    fn entry(record: &EventRecord) -> Result<Entry, EventJournalError> {
        let value = serde_json::to_vec(record).map_err(|e| EventJournalError::Invalid {
            reason: format!("event `{}` does not serialize: {e}", record.id),
        })?;
        Ok(Entry {
            value,
            idx1: claim_index(record),
            idx2: Some(list_index(record)),
        })
    }

    /// Appends `event`, durable once this returns. An id the journal already holds returns
    /// the stored event unchanged (an idempotent append).
    pub async fn append(&self, event: NewEvent) -> Result<EventRecord, EventJournalError> {
        let now = self.clock.now_ms();
        if event.event_type.is_empty() {
            return Err(EventJournalError::Invalid {
                reason: "the event type is empty".into(),
            });
        }
        let id = match event.id {
            Some(id) if id.is_empty() => {
                return Err(EventJournalError::Invalid {
                    reason: "the event id is empty".into(),
                });
            }
            Some(id) => id,
            None => generated_id(now),
        };
        let record = EventRecord {
            id: id.clone(),
            event_type: event.event_type,
            channel: event.channel,
            payload: event.payload,
            status: EventStatus::Pending,
            attempts: 0,
            created_at_ms: now,
            available_at_ms: now.saturating_add(ms(event.delay)),
            lease: None,
            fence: 0,
            last_error: None,
        };
        let outcome = self
            .storage
            .cas(&self.scope, &key(&id), None, Self::entry(&record)?)
            .await
            .map_err(Self::storage_error("append", &id))?;
        match outcome {
            CasOutcome::Ok { .. } => Ok(record),
            CasOutcome::Conflict { .. } => self.get(&id).await?.ok_or_else(|| {
                // Deleted between the two calls: the journal never deletes events.
                EventJournalError::Contended {
                    operation: "append",
                    id,
                }
            }),
        }
    }

    /// The event `id`, if the journal holds it.
    pub async fn get(&self, id: &str) -> Result<Option<EventRecord>, EventJournalError> {
        Ok(self.load(id, "get").await?.map(|(record, _)| record))
    }

    async fn load(
        &self,
        id: &str,
        operation: &'static str,
    ) -> Result<Option<(EventRecord, u64)>, EventJournalError> {
        let entry = self
            .storage
            .get(&self.scope, &key(id))
            .await
            .map_err(Self::storage_error(operation, id))?;
        entry
            .map(|e| Ok((Self::decode(id, &e)?, e.version)))
            .transpose()
    }

    /// The events matching `query`, in the order of their append time (events appended in
    /// the same millisecond by their id).
    pub async fn list(&self, query: &EventQuery) -> Result<Vec<EventRecord>, EventJournalError> {
        let entries = self
            .storage
            .range(&self.scope, Index::Two, "", END, usize::MAX)
            .await
            .map_err(Self::storage_error("list", "*"))?;
        let mut out = Vec::new();
        for kv in entries {
            let id = kv.key.strip_prefix("e/").unwrap_or(&kv.key);
            let record = Self::decode(id, &kv.entry)?;
            if query.matches(&record) {
                out.push(record);
                if query.limit.is_some_and(|l| out.len() >= l) {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Leases due events to `request`'s owner: pending events whose time has come and claimed
    /// events whose lease ran out, oldest first. Each claim is exclusive (across processes on
    /// a shared journal) and carries a fencing token higher than any earlier claim of the
    /// event.
    pub async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<Vec<ClaimedEvent>, EventJournalError> {
        let now = self.clock.now_ms();
        let tag = channel_tag(request.channel.as_deref());
        let mut due_end = String::new();
        push_ms(&mut due_end, now.saturating_add(1));
        let mut candidates = Vec::new();
        for status in [EventStatus::Claimed, EventStatus::Pending] {
            let from = format!("{tag}/{status}/");
            let to = format!("{from}{due_end}");
            let found = self
                .storage
                .range(&self.scope, Index::One, &from, &to, request.limit)
                .await
                .map_err(Self::storage_error("claim", "*"))?;
            candidates.extend(found);
        }
        let mut claimed = Vec::new();
        for kv in candidates {
            if claimed.len() >= request.limit {
                break;
            }
            let id = kv.key.strip_prefix("e/").unwrap_or(&kv.key).to_owned();
            let mut record = Self::decode(&id, &kv.entry)?;
            let due = match (record.status, &record.lease) {
                (EventStatus::Pending, _) => record.available_at_ms <= now,
                (EventStatus::Claimed, Some(lease)) => lease.expires_at_ms <= now,
                _ => false,
            };
            if !due {
                continue;
            }
            record.fence += 1;
            record.attempts += 1;
            record.status = EventStatus::Claimed;
            record.lease = Some(EventLease {
                owner: request.owner.clone(),
                token: record.fence,
                expires_at_ms: now.saturating_add(ms(request.lease)),
            });
            let outcome = self
                .storage
                .cas(
                    &self.scope,
                    &kv.key,
                    Some(kv.entry.version),
                    Self::entry(&record)?,
                )
                .await
                .map_err(Self::storage_error("claim", &id))?;
            if outcome.is_ok() {
                let token = record.fence;
                claimed.push(ClaimedEvent { record, token });
            } else {
                tracing::debug!(event = %id, "claim lost to another claimer");
            }
        }
        Ok(claimed)
    }

    /// Changes the event `id` held under `token`: `change` gets the current record (checked
    /// to be claimed under that token) and edits it; re-read and re-decided on a conflict.
    async fn held_change(
        &self,
        operation: &'static str,
        id: &str,
        token: u64,
        change: impl Fn(&mut EventRecord, i64),
    ) -> Result<EventRecord, EventJournalError> {
        for _ in 0..MAX_RETRIES {
            let Some((mut record, version)) = self.load(id, operation).await? else {
                return Err(EventJournalError::NotFound { id: id.to_owned() });
            };
            let holds = record.status == EventStatus::Claimed
                && record.lease.as_ref().is_some_and(|l| l.token == token);
            if !holds {
                return Err(EventJournalError::Fenced {
                    id: id.to_owned(),
                    token,
                    current: record.fence,
                    status: record.status,
                });
            }
            change(&mut record, self.clock.now_ms());
            let outcome = self
                .storage
                .cas(&self.scope, &key(id), Some(version), Self::entry(&record)?)
                .await
                .map_err(Self::storage_error(operation, id))?;
            if outcome.is_ok() {
                return Ok(record);
            }
        }
        Err(EventJournalError::Contended {
            operation,
            id: id.to_owned(),
        })
    }

    /// Extends the lease of the event `id` held under `token` to `lease` from now.
    pub async fn heartbeat(
        &self,
        id: &str,
        token: u64,
        lease: Duration,
    ) -> Result<EventRecord, EventJournalError> {
        self.held_change("heartbeat", id, token, |record, now| {
            if let Some(l) = record.lease.as_mut() {
                l.expires_at_ms = now.saturating_add(ms(lease));
            }
        })
        .await
    }

    /// Marks the event `id` held under `token` done. A stale token (another claim took the
    /// event since) is refused with [`EventJournalError::Fenced`] and changes nothing.
    pub async fn complete(&self, id: &str, token: u64) -> Result<EventRecord, EventJournalError> {
        self.held_change("complete", id, token, |record, _| {
            record.status = EventStatus::Done;
            record.lease = None;
        })
        .await
    }

    /// Gives up the attempt on the event `id` held under `token`: pending again after
    /// `retry_after`, or `failed` when it is `None`.
    pub async fn fail(
        &self,
        id: &str,
        token: u64,
        error: &str,
        retry_after: Option<Duration>,
    ) -> Result<EventRecord, EventJournalError> {
        self.held_change("fail", id, token, |record, now| {
            record.lease = None;
            record.last_error = Some(error.to_owned());
            match retry_after {
                Some(after) => {
                    record.status = EventStatus::Pending;
                    record.available_at_ms = now.saturating_add(ms(after));
                }
                None => record.status = EventStatus::Failed,
            }
        })
        .await
    }

    /// Makes a done or failed event pending again, due now (the next claim takes it).
    pub async fn replay(&self, id: &str) -> Result<EventRecord, EventJournalError> {
        for _ in 0..MAX_RETRIES {
            let Some((mut record, version)) = self.load(id, "replay").await? else {
                return Err(EventJournalError::NotFound { id: id.to_owned() });
            };
            if !matches!(record.status, EventStatus::Done | EventStatus::Failed) {
                return Err(EventJournalError::NotReplayable {
                    id: id.to_owned(),
                    status: record.status,
                });
            }
            record.status = EventStatus::Pending;
            record.available_at_ms = self.clock.now_ms();
            let outcome = self
                .storage
                .cas(&self.scope, &key(id), Some(version), Self::entry(&record)?)
                .await
                .map_err(Self::storage_error("replay", id))?;
            if outcome.is_ok() {
                return Ok(record);
            }
        }
        Err(EventJournalError::Contended {
            operation: "replay",
            id: id.to_owned(),
        })
    }
}
