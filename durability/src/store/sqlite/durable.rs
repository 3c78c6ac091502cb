//! [`SqliteDurableKv`]: the [`DurableKv`] of a [`SqliteStore`], in the `durable` table of the
//! store's own file ([`SqliteStore::durability_kv`]).
//!
//! | call | runs on | how |
//! | --- | --- | --- |
//! | `get`, `range` | a read connection ([`SqliteStore::read`]) | one read transaction |
//! | `cas`, `delete`, `batch` | the writer thread ([`SqliteStore::write`]) | one request of the group-commit transaction; a whole `batch` in one |
//!
//! The writer's transactions are `BEGIN IMMEDIATE`: the version check and the write happen
//! under SQLite's write lock, so a compare-and-set holds across every process that shares the
//! file (several processes on one host; [`DurableKv::shared_between_processes`] is `true`).
//! An `Ok` means committed at the store's `synchronous` level (`FULL` by default: durable).
//!
//! A row names its scope by a small integer (`scope_id`), given by the `durable_scopes`
//! table: the first write of a scope through a store registers it there in a write of its
//! own, committed before the scope's first row is written, and the store keeps the ids it has
//! seen (an id never changes once given). A read of a scope never registered finds nothing.
//!
//! Versions come from one counter row kept in the same table under a reserved scope (id 0,
//! `"\0botmesh:versions"`, which [`Scope::new`] never produces; a [`Scope::custom`] id must
//! not take it), bumped once per write request by the versions its operations need, in the
//! writing transaction, so a version is never given twice, also across processes and after
//! delete + re-create.
//! Index values are `TEXT` compared with SQLite's `BINARY` collation (bytewise UTF-8).
//!
//! It touches no other table than `durable` and `durable_scopes`, and it neither creates nor
//! migrates them: the store's migrations do.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Transaction, params};

use super::SqliteStore;
use crate::config::DurabilityConfig;
use crate::error::DurabilityError;
use crate::journal::KvDurability;
use crate::kv::{
    CasOutcome, DurableKv, Entry, Index, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned,
    only_outcome,
};
use crate::store::StoreError;

/// The scope id of the version counter row (`"\0botmesh:versions"` in `durable_scopes`). The
/// ids of [`Scope::new`] never start with a NUL; a [`Scope::custom`] id must not be that one
/// (it is reserved).
const COUNTER_SCOPE_ID: i64 = 0;
const COUNTER_KEY: &str = "last_version";

/// The `durable_scopes` ids an open store has seen committed in its file, keyed by the
/// scope's text ([`Scope::id`]).
#[derive(Debug, Default)]
pub(super) struct ScopeIds {
    ids: Mutex<HashMap<String, i64>>,
    /// Held while a scope is registered: the writes that find it missing at the same moment
    /// (a bot's first messages) wait for the one registration instead of each writing it.
    registering: tokio::sync::Mutex<()>,
}

impl ScopeIds {
    fn get(&self, scope: &str) -> Option<i64> {
        self.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(scope)
            .copied()
    }

    fn insert(&self, scope: &str, id: i64) {
        self.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(scope.to_owned(), id);
    }
}

/// Registers `scope` in `durable_scopes` (unless it is there) and returns its id.
fn register_scope(tx: &Transaction<'_>, scope: &str) -> rusqlite::Result<i64> {
    tx.prepare_cached(
        "INSERT INTO durable_scopes (scope) VALUES (?1) ON CONFLICT (scope) DO NOTHING",
    )?
    .execute([scope])?;
    tx.prepare_cached("SELECT id FROM durable_scopes WHERE scope = ?1")?
        .query_row([scope], |row| row.get(0))
}

impl SqliteStore {
    /// The id of `scope` in this store's file, registered (in a committed write of its own)
    /// the first time a scope is written.
    pub(super) async fn scope_id_to_write(&self, scope: &Scope) -> Result<i64, StoreError> {
        let conns = self.conns()?;
        if let Some(id) = conns.scope_ids.get(scope.id()) {
            return Ok(id);
        }
        let _registering = conns.scope_ids.registering.lock().await;
        if let Some(id) = conns.scope_ids.get(scope.id()) {
            return Ok(id);
        }
        let name = scope.id().to_owned();
        let id = self
            .write("durable.scope", move |tx| register_scope(tx, &name))
            .await?;
        conns.scope_ids.insert(scope.id(), id);
        Ok(id)
    }

    /// The id of `scope` in this store's file; `None` when no write ever registered it (the
    /// scope then has no rows).
    pub(super) async fn scope_id_to_read(&self, scope: &Scope) -> Result<Option<i64>, StoreError> {
        if let Some(id) = self.conns()?.scope_ids.get(scope.id()) {
            return Ok(Some(id));
        }
        let name = scope.id().to_owned();
        let id = self
            .read_statement("durable.scope", move |conn| {
                conn.prepare_cached("SELECT id FROM durable_scopes WHERE scope = ?1")?
                    .query_row([name], |row| row.get::<_, i64>(0))
                    .optional()
            })
            .await?;
        if let Some(id) = id {
            self.conns()?.scope_ids.insert(scope.id(), id);
        }
        Ok(id)
    }
}

/// A failure of the `durable` table, naming the database file once (a failed statement's
/// [`StoreError::Query`] already names it, through [`SqliteQueryError`](super::SqliteQueryError)).
#[derive(Debug, thiserror::Error)]
pub struct SqliteKvError {
    /// The database file.
    pub file: PathBuf,
    /// The store's error.
    #[source]
    pub source: StoreError,
}

impl std::fmt::Display for SqliteKvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            StoreError::Query { .. } => write!(f, "durable table: {}", self.source),
            other => write!(f, "durable table of `{}`: {other}", self.file.display()),
        }
    }
}

/// The [`DurableKv`] kept in the `durable` table of a [`SqliteStore`]'s file. Cheap to clone;
/// it shares the store's connections (open and close the store, not this).
#[derive(Debug, Clone)]
pub struct SqliteDurableKv {
    store: SqliteStore,
}

impl SqliteStore {
    /// The durable journals' backend in this store's file.
    pub fn durability_kv(&self) -> SqliteDurableKv {
        SqliteDurableKv {
            store: self.clone(),
        }
    }

    /// The inbox and outbox journals of `scope` in this store's file (`store.durability()`).
    pub fn durability(
        &self,
        scope: Scope,
        config: DurabilityConfig,
    ) -> Result<KvDurability<SqliteDurableKv>, DurabilityError> {
        KvDurability::new(Arc::new(self.durability_kv()), scope, config)
    }
}

impl SqliteDurableKv {
    /// The store whose file holds the table.
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    fn error(&self, operation: &'static str) -> impl FnOnce(StoreError) -> KvError {
        let file = self.store.path().to_path_buf();
        move |source| match source {
            StoreError::Closed => KvError::Closed,
            source => KvError::Unavailable {
                operation,
                source: Box::new(SqliteKvError { file, source }),
            },
        }
    }

    /// The id of `scope` for a read; `None` when the scope has no rows (never registered).
    async fn scope_to_read(
        &self,
        scope: &Scope,
        operation: &'static str,
    ) -> Result<Option<i64>, KvError> {
        self.store
            .scope_id_to_read(scope)
            .await
            .map_err(self.error(operation))
    }

    async fn write_ops(
        &self,
        operation: &'static str,
        scope: &Scope,
        ops: Vec<KvOp>,
    ) -> Result<Vec<CasOutcome>, KvError> {
        let scope = self
            .store
            .scope_id_to_write(scope)
            .await
            .map_err(self.error(operation))?;
        self.store
            .write(operation, move |tx| {
                let mut versions = Versions::for_ops(tx, &ops)?;
                ops.iter()
                    .map(|op| apply(tx, scope, op, &mut versions))
                    .collect()
            })
            .await
            .map_err(self.error(operation))
    }
}

fn to_version(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(super) fn current_version(
    tx: &Transaction<'_>,
    scope: i64,
    key: &str,
) -> rusqlite::Result<Option<u64>> {
    tx.prepare_cached("SELECT version FROM durable WHERE scope_id = ?1 AND key = ?2")?
        .query_row(params![scope, key], |row| row.get::<_, i64>(0))
        .optional()
        .map(|v| v.map(to_version))
}

/// The versions a write request reserved from the counter row, handed out in order to its
/// operations that write an entry (a delete takes none).
///
/// One bump of the counter for the whole request, not one per operation: the counter row is
/// the one row every write rewrites. The bump is part of the write's transaction: a rollback
/// undoes it with the writes, and a commit makes every other process see the counter past it.
/// A version reserved by an operation that conflicts is never used (versions have gaps, and
/// are never reused).
pub(super) struct Versions {
    next: u64,
    end: u64,
}

impl Versions {
    /// Reserves one version for each operation of `ops` that writes an entry.
    pub(super) fn for_ops(tx: &Transaction<'_>, ops: &[KvOp]) -> rusqlite::Result<Self> {
        let writes = ops
            .iter()
            .filter(|op| !matches!(op, KvOp::Delete { .. }))
            .count();
        Self::reserve(tx, writes)
    }

    /// Reserves `n` versions (none for 0).
    fn reserve(tx: &Transaction<'_>, n: usize) -> rusqlite::Result<Self> {
        if n == 0 {
            return Ok(Versions { next: 1, end: 1 });
        }
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let bumped = tx
            .prepare_cached(
                "UPDATE durable SET version = version + ?3 WHERE scope_id = ?1 AND key = ?2 \
                 RETURNING version",
            )?
            .query_row(params![COUNTER_SCOPE_ID, COUNTER_KEY, n], |row| {
                row.get::<_, i64>(0)
            })
            .optional()?;
        let last = match bumped {
            Some(v) => v,
            None => {
                // The counter is created above every stored version on first use.
                let first: i64 = tx.query_row(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM durable",
                    [],
                    |row| row.get(0),
                )?;
                let last = first.saturating_add(n - 1);
                tx.execute(
                    "INSERT INTO durable (scope_id, key, version, value) VALUES (?1, ?2, ?3, x'')",
                    params![COUNTER_SCOPE_ID, COUNTER_KEY, last],
                )?;
                last
            }
        };
        let end = to_version(last).saturating_add(1);
        Ok(Versions {
            next: end.saturating_sub(to_version(n)),
            end,
        })
    }

    /// The next reserved version, or a version reserved now when they ran out.
    fn take(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<u64> {
        if self.next >= self.end {
            *self = Self::reserve(tx, 1)?;
        }
        let version = self.next;
        self.next += 1;
        Ok(version)
    }
}

/// The outcome of a conditional write that changed `changed` rows: `Ok` at `version` when it
/// changed the one row, else a conflict with the version found.
fn settled(
    tx: &Transaction<'_>,
    scope: i64,
    key: &str,
    changed: usize,
    version: u64,
) -> rusqlite::Result<CasOutcome> {
    if changed == 1 {
        Ok(CasOutcome::Ok { version })
    } else {
        Ok(CasOutcome::Conflict {
            current: current_version(tx, scope, key)?,
        })
    }
}

/// Whether some entry of `scope` has a value of `index` in `from..to`.
fn listed(
    tx: &Transaction<'_>,
    scope: i64,
    index: Index,
    from: &str,
    to: &str,
) -> rusqlite::Result<bool> {
    if from >= to {
        return Ok(false);
    }
    let sql = match index {
        Index::One => {
            "SELECT 1 FROM durable WHERE scope_id = ?1 AND idx1 >= ?2 AND idx1 < ?3 LIMIT 1"
        }
        Index::Two => {
            "SELECT 1 FROM durable WHERE scope_id = ?1 AND idx2 >= ?2 AND idx2 < ?3 LIMIT 1"
        }
    };
    tx.prepare_cached(sql)?.exists(params![scope, from, to])
}

/// The conflict `op` meets in the table as it is (`None`: it would apply), read without
/// writing: the version found under its key, or `Some(None)` for a guarded create whose
/// range lists an entry.
fn conflict_of(
    tx: &Transaction<'_>,
    scope: i64,
    op: &KvOp,
) -> rusqlite::Result<Option<Option<u64>>> {
    let current = current_version(tx, scope, op.key())?;
    if current != op.expected() {
        return Ok(Some(current));
    }
    match op.guard() {
        Some((index, from, to)) if listed(tx, scope, index, from, to)? => Ok(Some(None)),
        _ => Ok(None),
    }
}

/// Whether `ops` can be checked against the table before any of them writes: no two write
/// the same key, and a guarded create comes only first (the others' writes could change what
/// its range lists).
pub(super) fn checkable_up_front(ops: &[KvOp]) -> bool {
    ops.iter().enumerate().all(|(i, op)| {
        (i == 0 || op.guard().is_none()) && ops[..i].iter().all(|earlier| earlier.key() != op.key())
    })
}

/// The first of `ops` whose expected version is not the one stored, with the version found:
/// checked before writing, so that a group of operations that conflicts writes nothing
/// without a savepoint to roll back to. Holds only while nothing else writes between the
/// check and the writes: the writer's transaction (`BEGIN IMMEDIATE`, the one writer).
///
/// The first operation is read only when a later one conflicts (to report the first
/// conflict): it is written before the others, so its own write's version check (in its
/// `WHERE` / `ON CONFLICT`) finds its conflict while nothing is written yet. A step of one
/// operation so reads nothing before writing.
pub(super) fn first_conflict(
    tx: &Transaction<'_>,
    scope: i64,
    ops: &[KvOp],
) -> rusqlite::Result<Option<(usize, Option<u64>)>> {
    let conflict = |i: usize| -> rusqlite::Result<Option<(usize, Option<u64>)>> {
        Ok(conflict_of(tx, scope, &ops[i])?.map(|current| (i, current)))
    };
    for i in 1..ops.len() {
        if let Some(found) = conflict(i)? {
            return Ok(Some(conflict(0)?.unwrap_or(found)));
        }
    }
    Ok(None)
}

/// Applies `op`, its version (if it writes an entry) taken from `versions`.
pub(super) fn apply(
    tx: &Transaction<'_>,
    scope: i64,
    op: &KvOp,
    versions: &mut Versions,
) -> rusqlite::Result<CasOutcome> {
    // One statement decides and writes (the version check sits in its WHERE / ON CONFLICT);
    // the current version is read only to report a conflict.
    match op {
        KvOp::Cas {
            key,
            expected,
            entry,
        } => put(tx, scope, key, entry, *expected, versions),
        KvOp::CreateIfNoneIn {
            key,
            entry,
            index,
            from,
            to,
        } => {
            // The range first: an entry listed there is a conflict, reported with the
            // version under the key (`None` when the key is absent). Otherwise the insert's own
            // `ON CONFLICT` finds a key that exists.
            if listed(tx, scope, *index, from, to)? {
                return Ok(CasOutcome::Conflict {
                    current: current_version(tx, scope, key)?,
                });
            }
            put(tx, scope, key, entry, None, versions)
        }
        KvOp::Delete { key, expected } => {
            let removed = tx
                .prepare_cached(
                    "DELETE FROM durable WHERE scope_id = ?1 AND key = ?2 AND version = ?3",
                )?
                .execute(params![scope, key, sql_version(*expected)])?;
            settled(tx, scope, key, removed, *expected)
        }
    }
}

/// Writes `entry` at `key` under the next version: created unless the key exists (`expected`
/// `None`), or replacing version `expected`.
fn put(
    tx: &Transaction<'_>,
    scope: i64,
    key: &str,
    entry: &Entry,
    expected: Option<u64>,
    versions: &mut Versions,
) -> rusqlite::Result<CasOutcome> {
    let version = versions.take(tx)?;
    let Entry { value, idx1, idx2 } = entry;
    let v = sql_version(version);
    let written = match expected {
        None => tx
            .prepare_cached(
                "INSERT INTO durable (scope_id, key, version, value, idx1, idx2)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (scope_id, key) DO NOTHING",
            )?
            .execute(params![scope, key, v, value, idx1, idx2])?,
        Some(expected) => tx
            .prepare_cached(
                "UPDATE durable SET version = ?3, value = ?4, idx1 = ?5, idx2 = ?6
                 WHERE scope_id = ?1 AND key = ?2 AND version = ?7",
            )?
            .execute(params![
                scope,
                key,
                v,
                value,
                idx1,
                idx2,
                sql_version(expected)
            ])?,
    };
    settled(tx, scope, key, written, version)
}

/// A version as SQLite stores it.
fn sql_version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn versioned(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Versioned> {
    Ok(Versioned {
        version: to_version(row.get(first)?),
        value: row.get(first + 1)?,
        idx1: row.get(first + 2)?,
        idx2: row.get(first + 3)?,
    })
}

#[async_trait]
impl DurableKv for SqliteDurableKv {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        let Some(scope) = self.scope_to_read(scope, "get").await? else {
            return Ok(None);
        };
        let key = key.to_owned();
        self.store
            .read_statement("durable.get", move |conn| {
                conn.prepare_cached(
                    "SELECT version, value, idx1, idx2 FROM durable WHERE scope_id = ?1 AND key = ?2",
                )?
                .query_row(params![scope, key], |row| versioned(row, 0))
                .optional()
            })
            .await
            .map_err(self.error("get"))
    }

    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        only_outcome("apply", self.write_ops("apply", scope, vec![op]).await?)
    }

    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        let (index, from, to, limit) = (query.index, query.from, query.to, query.limit);
        if from >= to || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = match index {
            Index::One => {
                "SELECT key, version, value, idx1, idx2 FROM durable
                 WHERE scope_id = ?1 AND idx1 >= ?2 AND idx1 < ?3 ORDER BY idx1, key LIMIT ?4"
            }
            Index::Two => {
                "SELECT key, version, value, idx1, idx2 FROM durable
                 WHERE scope_id = ?1 AND idx2 >= ?2 AND idx2 < ?3 ORDER BY idx2, key LIMIT ?4"
            }
        };
        let Some(scope) = self.scope_to_read(scope, "range").await? else {
            return Ok(Vec::new());
        };
        let (from, to) = (from.to_owned(), to.to_owned());
        let rows = limit;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.store
            .read_rows("durable.range", rows, move |conn| {
                conn.prepare_cached(sql)?
                    .query_map(params![scope, from, to, limit], |row| {
                        Ok(KvRecord {
                            key: row.get(0)?,
                            entry: versioned(row, 1)?,
                        })
                    })?
                    .collect()
            })
            .await
            .map_err(self.error("range"))
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        self.write_ops("batch", scope, ops).await
    }

    fn shared_between_processes(&self) -> bool {
        true
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
