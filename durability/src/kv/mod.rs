//! `DurableKv`: the small storage SPI every durability backend implements.
//!
//! A backend stores, per [`Scope`], a map from string keys to versioned entries. Each entry is
//! an opaque value (bytes) plus up to two secondary index values, and the backend can list the
//! entries of one index in a range, sorted by index value. Writes are compare-and-set on a
//! version. That is all [`KvDurability`](crate::KvDurability) needs to build the inbox and the
//! outbox on top: record layout, states, leases, time and retries live there, not here.
//!
//! What a backend must guarantee (the conformance suite, `testing::conformance` under the
//! `testing` feature, checks every point):
//!
//! | operation | contract |
//! | --- | --- |
//! | `open()` / `close()` | `open` prepares the backend (connects, creates tables) and fails there rather than at the first call; `close` lets go of what it holds; a later `open` makes it usable again |
//! | `get(key)` | the entry and its version as last written, or `None` |
//! | `apply(Cas)`, `cas(key, None, e)` | creates `key` only if it does not exist; else `Conflict { current }` |
//! | `cas(key, Some(v), e)` | replaces `key` only if its version is `v`; else `Conflict` |
//! | `apply(Delete)`, `delete(key, v)` | removes `key` only if its version is `v`; else `Conflict { current }` |
//! | any write | value, `idx1` and `idx2` change together or not at all (no torn entry) |
//! | versions | a new version is never one that key had before, also after delete + re-create |
//! | `scan(RangeQuery { index, from, to, limit })` (`range`) | entries with `from <= value < to` (byte order), sorted by (value, key), at most `limit` |
//! | scopes | nothing of one scope is visible, listed or changed through another |
//! | `apply(CreateIfNoneIn { key, index, from, to, .. })` | creates `key` only if it does not exist (else `Conflict { current: Some(v) }`) and no entry has an `index` value in `from..to` (else `Conflict { current: None }`) |
//! | `batch(ops)` | one outcome per op, in order; each op succeeds or conflicts on its own, against the entries as the ops before it left them |
//! | a returned `Ok` | the write is durable (for a backend that survives a crash) |
//!
//! It does not know what a record is, it has no clock and no TTL: expiry is decided by the
//! journals from the record's own fields. Index values are compared as bytes (`COLLATE "C"` in
//! Postgres, the default `BINARY` collation in SQLite, lexicographic sorted sets in Redis).
//!
//! A SQLite backend keeps the rows in `durable(scope_id, key, version, value, idx1, idx2)` with
//! indexes on `(scope_id, idx1, key)` and `(scope_id, idx2, key)`; `batch` runs one transaction (group
//! commit). Postgres is the same table under `{tablePrefix}durable`; Redis keeps a hash per key and
//! two sorted sets per scope, each write one Lua script.

mod memory;

pub use memory::MemoryKv;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

/// The namespace one bot works in: derived from tenant, environment, bot and connection.
///
/// Two bots sharing a backend never see each other's records: every [`DurableKv`] call takes
/// the scope, and a backend keeps scopes apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    id: String,
    bot: String,
    connection: String,
}

impl Scope {
    /// The scope of a bot: `tenant/environment/bot/connection`, each part escaped so that a `/`
    /// inside a part cannot make two different namespaces collide.
    pub fn new(tenant: &str, environment: &str, bot: &str, connection: &str) -> Self {
        let mut id = String::new();
        for (i, part) in [tenant, environment, bot, connection]
            .into_iter()
            .enumerate()
        {
            if i > 0 {
                id.push('/');
            }
            crate::keys::push_escaped(&mut id, part);
        }
        Scope {
            id,
            bot: bot.to_owned(),
            connection: connection.to_owned(),
        }
    }

    /// A scope with an id chosen by the caller (a custom backend or a test). Ids starting
    /// with a NUL byte are reserved to the backends (the SQLite journal keeps its version
    /// counter under `"\0botmesh:versions"`).
    pub fn custom(id: impl Into<String>) -> Self {
        let id = id.into();
        Scope {
            bot: id.clone(),
            id,
            connection: String::new(),
        }
    }

    /// The derived id that backends store.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The bot part (used for the default instance id).
    pub fn bot(&self) -> &str {
        &self.bot
    }

    /// The connection part (used for the default instance id).
    pub fn connection(&self) -> &str {
        &self.connection
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// What a write stores under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The opaque value.
    pub value: Vec<u8>,
    /// The first secondary index value (the journals use it for due-time ordering).
    pub idx1: Option<String>,
    /// The second secondary index value (the journals use it for per-chat ordering).
    pub idx2: Option<String>,
}

/// A stored entry with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The version of this entry; changes on every write.
    pub version: u64,
    /// The opaque value.
    pub value: Vec<u8>,
    /// The first secondary index value.
    pub idx1: Option<String>,
    /// The second secondary index value.
    pub idx2: Option<String>,
}

/// One entry returned by a range query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvRecord {
    /// The entry's key.
    pub key: String,
    /// The entry.
    pub entry: Versioned,
}

/// The outcome of a compare-and-set or a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasOutcome {
    /// The write was applied; `version` is the new version (for a delete, the removed one).
    Ok {
        /// The version written (or removed).
        version: u64,
    },
    /// The expected version did not match; nothing was written.
    Conflict {
        /// The version found, `None` when the key does not exist.
        current: Option<u64>,
    },
}

impl CasOutcome {
    /// Whether the write was applied.
    pub fn is_ok(self) -> bool {
        matches!(self, CasOutcome::Ok { .. })
    }
}

/// One operation of a [`DurableKv::batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvOp {
    /// A compare-and-set (`expected: None` creates).
    Cas {
        /// The key.
        key: String,
        /// The expected version, `None` = the key must not exist.
        expected: Option<u64>,
        /// What to store.
        entry: Entry,
    },
    /// A delete at an expected version.
    Delete {
        /// The key.
        key: String,
        /// The expected version.
        expected: u64,
    },
    /// Creates `key` only if it does not exist and no entry has a value of `index` in
    /// `from..to` (bytewise), the entries as the operations before it in the same batch left
    /// them: a check and a write in one operation, with no read of its own (the outbox leases
    /// a chat's new send only while no earlier send of the chat is open). A key found answers
    /// `Conflict { current: Some(version) }`; an entry found in the range (and the key
    /// absent) `Conflict { current: None }`, which no other create answers.
    CreateIfNoneIn {
        /// The key.
        key: String,
        /// What to store.
        entry: Entry,
        /// The index checked.
        index: Index,
        /// The first index value checked (included).
        from: String,
        /// The end of the range checked (excluded).
        to: String,
    },
}

impl KvOp {
    /// The key the operation writes.
    pub fn key(&self) -> &str {
        match self {
            KvOp::Cas { key, .. } | KvOp::Delete { key, .. } | KvOp::CreateIfNoneIn { key, .. } => {
                key
            }
        }
    }

    /// Whether it creates its key (a compare-and-set expecting no entry, or a guarded create).
    pub fn creates(&self) -> bool {
        matches!(
            self,
            KvOp::Cas { expected: None, .. } | KvOp::CreateIfNoneIn { .. }
        )
    }

    /// The version it expects its key at (`None`: absent).
    pub fn expected(&self) -> Option<u64> {
        match self {
            KvOp::Cas { expected, .. } => *expected,
            KvOp::Delete { expected, .. } => Some(*expected),
            KvOp::CreateIfNoneIn { .. } => None,
        }
    }

    /// The entry it writes (`None` for a delete).
    pub fn entry(&self) -> Option<&Entry> {
        match self {
            KvOp::Cas { entry, .. } | KvOp::CreateIfNoneIn { entry, .. } => Some(entry),
            KvOp::Delete { .. } => None,
        }
    }

    /// The range a guarded create checks (`index`, `from`, `to`), if it is one.
    pub fn guard(&self) -> Option<(Index, &str, &str)> {
        match self {
            KvOp::CreateIfNoneIn {
                index, from, to, ..
            } => Some((*index, from, to)),
            KvOp::Cas { .. } | KvOp::Delete { .. } => None,
        }
    }
}

/// A range query: the entries whose `index` value is in `from..to` (bytewise), sorted by
/// (value, key), at most `limit` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeQuery<'a> {
    /// The index read.
    pub index: Index,
    /// The first value listed (included).
    pub from: &'a str,
    /// The end of the range (excluded).
    pub to: &'a str,
    /// At most this many entries.
    pub limit: usize,
}

/// Which secondary index a range query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// `idx1`.
    One,
    /// `idx2`.
    Two,
}

/// A journal write point: the moment the journals write one state change to the backend.
///
/// Backends receive them through [`DurableKv::on_journal_write`] (a no-op by default); the crash
/// harness (`testing::crash`) stops "the process" at any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WritePoint {
    /// An inbound event is journaled (possibly claimed in the same write).
    InboxJournal,
    /// An inbound record is leased for processing (also a reclaim of an expired lease).
    InboxClaim,
    /// A processing lease is extended.
    InboxHeartbeat,
    /// An inbound record is marked done.
    InboxComplete,
    /// A failed inbound attempt is scheduled for a retry or dead-lettered.
    InboxFail,
    /// A lease is given back without charging the attempt.
    InboxRelease,
    /// An inbound record out of attempts is dead-lettered when it would be claimed again.
    InboxDeadLetter,
    /// An operator replays an inbound record.
    InboxReplay,
    /// An operator discards an inbound record.
    InboxDiscard,
    /// An undecodable inbound record is quarantined.
    InboxQuarantine,
    /// A send is journaled under its idempotency key.
    OutboxJournal,
    /// A send is split into parts (`key#2`, … then the first part's payload).
    OutboxSplit,
    /// "About to call the provider": the send is leased and its attempt charged.
    OutboxBeginAttempt,
    /// A send-in-flight lease is extended.
    OutboxHeartbeat,
    /// The provider's message id is recorded.
    OutboxMarkSent,
    /// A failed send is scheduled for a retry or dead-lettered.
    OutboxMarkFailed,
    /// An ambiguous send is marked `unknown` or made due again.
    OutboxMarkAmbiguous,
    /// A part dies with its dead-lettered previous part.
    OutboxDeadLetter,
    /// An operator retries a send.
    OutboxRetry,
    /// An operator discards a send.
    OutboxDiscard,
    /// An undecodable outbox record is quarantined.
    OutboxQuarantine,
    /// Done/sent records past retention are purged.
    RetentionPurge,
}

impl WritePoint {
    /// Every write point, in pipeline order.
    pub const ALL: [WritePoint; 22] = [
        WritePoint::InboxJournal,
        WritePoint::InboxClaim,
        WritePoint::InboxHeartbeat,
        WritePoint::InboxComplete,
        WritePoint::InboxFail,
        WritePoint::InboxRelease,
        WritePoint::InboxDeadLetter,
        WritePoint::InboxReplay,
        WritePoint::InboxDiscard,
        WritePoint::InboxQuarantine,
        WritePoint::OutboxJournal,
        WritePoint::OutboxSplit,
        WritePoint::OutboxBeginAttempt,
        WritePoint::OutboxHeartbeat,
        WritePoint::OutboxMarkSent,
        WritePoint::OutboxMarkFailed,
        WritePoint::OutboxMarkAmbiguous,
        WritePoint::OutboxDeadLetter,
        WritePoint::OutboxRetry,
        WritePoint::OutboxDiscard,
        WritePoint::OutboxQuarantine,
        WritePoint::RetentionPurge,
    ];

    /// The stable name (`inbox.journal`, `outbox.markSent`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            WritePoint::InboxJournal => "inbox.journal",
            WritePoint::InboxClaim => "inbox.claim",
            WritePoint::InboxHeartbeat => "inbox.heartbeat",
            WritePoint::InboxComplete => "inbox.complete",
            WritePoint::InboxFail => "inbox.fail",
            WritePoint::InboxRelease => "inbox.release",
            WritePoint::InboxDeadLetter => "inbox.deadLetter",
            WritePoint::InboxReplay => "inbox.replay",
            WritePoint::InboxDiscard => "inbox.discard",
            WritePoint::InboxQuarantine => "inbox.quarantine",
            WritePoint::OutboxJournal => "outbox.journal",
            WritePoint::OutboxSplit => "outbox.split",
            WritePoint::OutboxBeginAttempt => "outbox.beginAttempt",
            WritePoint::OutboxHeartbeat => "outbox.heartbeat",
            WritePoint::OutboxMarkSent => "outbox.markSent",
            WritePoint::OutboxMarkFailed => "outbox.markFailed",
            WritePoint::OutboxMarkAmbiguous => "outbox.markAmbiguous",
            WritePoint::OutboxDeadLetter => "outbox.deadLetter",
            WritePoint::OutboxRetry => "outbox.retry",
            WritePoint::OutboxDiscard => "outbox.discard",
            WritePoint::OutboxQuarantine => "outbox.quarantine",
            WritePoint::RetentionPurge => "retention.purge",
        }
    }

    /// The point named `name`, if any.
    pub fn from_name(name: &str) -> Option<WritePoint> {
        WritePoint::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for WritePoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Before or after the write of a [`WritePoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WritePhase {
    /// The write has not been issued yet.
    Before,
    /// The write was applied.
    After,
}

impl fmt::Display for WritePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WritePhase::Before => "before",
            WritePhase::After => "after",
        })
    }
}

/// A failure of the backend itself (not a CAS conflict, which is an [`CasOutcome`]).
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The backend could not run the operation (I/O error, server down, …).
    #[error("durable backend failed during `{operation}`: {source}")]
    Unavailable {
        /// What was being done (`get`, `cas`, `range`, …).
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The backend (or the process, under the crash harness) died at a journal write point.
    #[error("durable backend crashed {phase} `{point}`")]
    Crashed {
        /// Where it died.
        point: WritePoint,
        /// Before or after the write.
        phase: WritePhase,
    },
    /// The backend was used after `close()`.
    #[error("durable backend is closed")]
    Closed,
}

/// The durability storage SPI: versioned compare-and-set plus two sorted secondary indexes,
/// scoped per bot. See the module documentation for the contract.
#[async_trait]
pub trait DurableKv: Send + Sync + 'static {
    /// Prepares the backend before its first use: connects, creates missing tables. The bot's
    /// `start()` calls it, so a backend built lazily (`PostgresKv::new`) fails there, not on
    /// the first message. Each `open` is matched by a [`close`](Self::close) (a backend shared
    /// by several bots closes at the last one); the default does nothing.
    async fn open(&self) -> Result<(), KvError> {
        Ok(())
    }

    /// Called by `stop()` once the bot's work is drained: flushes and lets go of what the
    /// backend holds (`FileDurability` folds its log and releases its lock; `PostgresKv`
    /// drops the idle connections of a pool it created). A later [`open`](Self::open) makes it
    /// usable again (the bot started again). The default does nothing.
    async fn close(&self) -> Result<(), KvError> {
        Ok(())
    }

    /// Reads one entry.
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError>;

    /// Applies one operation on its own: a [`KvOp::Cas`] writes its entry if the key's version
    /// is the one expected (`None`: the key must not exist), a [`KvOp::Delete`] removes the key
    /// if its version is the one expected.
    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError>;

    /// The entries of `query` (see [`RangeQuery`]): entries without a value for its index are
    /// never listed.
    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError>;

    /// Applies many operations, returning one outcome per operation in order. Each op succeeds
    /// or conflicts independently. A backend should commit them together (one transaction, one
    /// fsync); the default applies them one by one. On `Err`, any subset may have been applied.
    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            out.push(self.apply(scope, op).await?);
        }
        Ok(out)
    }

    /// Writes `entry` under `key` if the key's version is `expected` (`None`: it must not
    /// exist): [`apply`](Self::apply) of a [`KvOp::Cas`] (a backend implements `apply`).
    async fn cas(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        let key = key.to_owned();
        self.apply(
            scope,
            KvOp::Cas {
                key,
                expected,
                entry,
            },
        )
        .await
    }

    /// Removes `key` if its version is `expected`: [`apply`](Self::apply) of a
    /// [`KvOp::Delete`].
    async fn delete(&self, scope: &Scope, key: &str, expected: u64) -> Result<CasOutcome, KvError> {
        let key = key.to_owned();
        self.apply(scope, KvOp::Delete { key, expected }).await
    }

    /// Entries whose `index` value is in `from..to` (bytewise), sorted by (value, key), at most
    /// `limit` of them: [`scan`](Self::scan) of that [`RangeQuery`].
    async fn range(
        &self,
        scope: &Scope,
        index: Index,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<KvRecord>, KvError> {
        let query = RangeQuery {
            index,
            from,
            to,
            limit,
        };
        self.scan(scope, query).await
    }

    /// Whether several processes can share this backend at once (Postgres, Redis). The default
    /// instance id then gets a per-boot suffix (see [`crate::leases`]).
    fn shared_between_processes(&self) -> bool {
        false
    }

    /// Called by the journals around every journal write (before the first backend call of the
    /// write, and after it was applied). The default does nothing; an error aborts the write
    /// (before) or reports it as failed (after). The crash harness is built on it.
    fn on_journal_write(&self, point: WritePoint, phase: WritePhase) -> Result<(), KvError> {
        let _ = (point, phase);
        Ok(())
    }

    /// The concrete backend, for a [`Store`](crate::Store) that checks whether this backend
    /// keeps its rows in the store's own database (see
    /// [`Store::shares_transactions_with`](crate::Store::shares_transactions_with)). `None` by
    /// default; a wrapper (the crash harness) answers its inner backend.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

#[async_trait]
impl<T: DurableKv + ?Sized> DurableKv for Arc<T> {
    async fn open(&self) -> Result<(), KvError> {
        (**self).open().await
    }
    async fn close(&self) -> Result<(), KvError> {
        (**self).close().await
    }
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        (**self).get(scope, key).await
    }
    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        (**self).apply(scope, op).await
    }
    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        (**self).scan(scope, query).await
    }
    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        (**self).batch(scope, ops).await
    }
    fn shared_between_processes(&self) -> bool {
        (**self).shared_between_processes()
    }
    fn on_journal_write(&self, point: WritePoint, phase: WritePhase) -> Result<(), KvError> {
        (**self).on_journal_write(point, phase)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        (**self).as_any()
    }
}

/// The outcome of a write of one operation, by a backend whose writer takes batches.
#[cfg(any(feature = "file", feature = "sqlite"))]
pub(crate) fn only_outcome(
    operation: &'static str,
    mut outcomes: Vec<CasOutcome>,
) -> Result<CasOutcome, KvError> {
    outcomes.pop().ok_or_else(|| KvError::Unavailable {
        operation,
        source: "the writer returned no outcome".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::Scope;

    /// A `/` inside a part does not make two scopes one.
    #[test]
    fn scope_parts_join_without_collisions() {
        let a = Scope::new("t", "e/x", "b", "c");
        let b = Scope::new("t", "e", "x/b", "c");
        assert_ne!(a.id(), b.id());
        assert_eq!(a.id(), "t/e%2Fx/b/c");
    }
}
