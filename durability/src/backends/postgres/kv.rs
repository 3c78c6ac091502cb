//! [`PostgresKv`]: the [`DurableKv`] in one PostgreSQL table, `{prefix}durable`.
//!
//! | operation | SQL (one statement, or one transaction for `batch`) |
//! | --- | --- |
//! | `get` | `SELECT … WHERE scope = $1 AND key = $2` |
//! | `cas(key, None, e)` | `INSERT … ON CONFLICT (scope, key) DO NOTHING RETURNING version` |
//! | `CreateIfNoneIn` | the create's `INSERT … SELECT … WHERE NOT EXISTS (SELECT 1 … WHERE scope = $1 AND idx2 >= $6 AND idx2 < $7)` |
//! | `cas(key, Some(v), e)` | `UPDATE … SET version = nextval(…) … WHERE … AND version = $v RETURNING version` |
//! | `delete(key, v)` | `DELETE … WHERE … AND version = $v RETURNING version` |
//! | `range` | `… WHERE scope = $1 AND idx1 >= $2 AND idx1 < $3 ORDER BY idx1, key LIMIT $4` |
//! | `batch` | every op above in one transaction (one commit: group commit) |
//!
//! A write that does not apply reads the current version in the same statement (a CTE), so a
//! conflict costs one round trip. Versions come from the sequence `{prefix}durable_version`,
//! shared by every scope, so a version is never reused, also after a delete and re-create
//! (the same rule as `MemoryKv`). `key`, `idx1` and `idx2` are `text COLLATE "C"` (byte order);
//! a NUL byte, which `text` cannot hold, is stored with an order-preserving escape. A write
//! answers `Ok` only after its commit, so it is as durable as the server's
//! `synchronous_commit` makes it (on by default).
//!
//! The statements live in one place, the table's `DurableTable`, so that
//! [`PostgresStore::commit_step`](crate::Store::commit_step) runs exactly them inside its own
//! transaction (a flow step's journal operations, see the [module documentation](super)).
//! Built with [`PostgresKv::new`], the table is created by [`DurableKv::open`] or the first
//! call, once per backend (clones share that).
//!
//! It does not know what a record is and never reads the store's tables.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::{Client, Pool};
use tokio::sync::OnceCell;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::pipeline::{Failed, Pipelined, Statement};
use super::{PgPool, PostgresConfig, PostgresError, is_connection_lost, query_err};
use crate::backends::{order_escape, order_unescape};
use crate::kv::{
    CasOutcome, DurableKv, Index, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned,
};

/// The statements of one table prefix.
struct Sql {
    get: String,
    create: String,
    /// A create unless `idx1` (then `idx2`) lists an entry in `$6..$7`.
    create_unless1: String,
    create_unless2: String,
    update: String,
    delete: String,
    range1: String,
    range2: String,
}

impl Sql {
    fn new(t: &str, seq: &str) -> Self {
        let current = |cte: &str| {
            format!(
                "SELECT version, true FROM {cte} UNION ALL SELECT version, false FROM {t} \
                 WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM {cte})"
            )
        };
        let range = |idx: &str| {
            format!(
                "SELECT key, version, value, idx1, idx2 FROM {t} WHERE scope = $1 \
                 AND {idx} >= $2 AND {idx} < $3 ORDER BY {idx}, key LIMIT $4"
            )
        };
        let create_unless = |idx: &str| {
            format!(
                "WITH w AS (INSERT INTO {t} (scope, key, version, value, idx1, idx2) \
                 SELECT $1::text, $2::text, nextval('{seq}'), $3::bytea, $4::text, $5::text \
                 WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE scope = $1 AND {idx} >= $6::text \
                 AND {idx} < $7::text) \
                 ON CONFLICT (scope, key) DO NOTHING RETURNING version) {}",
                current("w")
            )
        };
        Sql {
            create_unless1: create_unless("idx1"),
            create_unless2: create_unless("idx2"),
            get: format!(
                "SELECT version, value, idx1, idx2 FROM {t} WHERE scope = $1 AND key = $2"
            ),
            create: format!(
                "WITH w AS (INSERT INTO {t} (scope, key, version, value, idx1, idx2) \
                 VALUES ($1, $2, nextval('{seq}'), $3, $4, $5) \
                 ON CONFLICT (scope, key) DO NOTHING RETURNING version) {}",
                current("w")
            ),
            update: format!(
                "WITH w AS (UPDATE {t} SET version = nextval('{seq}'), value = $4, idx1 = $5, \
                 idx2 = $6 WHERE scope = $1 AND key = $2 AND version = $3 RETURNING version) {}",
                current("w")
            ),
            delete: format!(
                "WITH w AS (DELETE FROM {t} WHERE scope = $1 AND key = $2 AND version = $3 \
                 RETURNING version) {}",
                current("w")
            ),
            range1: range("idx1"),
            range2: range("idx2"),
        }
    }
}

/// The `{prefix}durable` table: its statements, its creation, and the compare-and-set writes
/// on any connection or transaction of a pool that reaches it. [`PostgresKv`] runs them on
/// its own connections; [`PostgresStore::commit_step`](super::PostgresStore) runs them inside
/// the store's transaction, with the same statements and so the same semantics (the same
/// version sequence, the same conflict answers).
pub(crate) struct DurableTable {
    prefix: String,
    name: String,
    seq: String,
    sql: Sql,
    /// Set once the table is known to exist (created or checked through some pool).
    ready: OnceCell<()>,
}

impl std::fmt::Debug for DurableTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableTable")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl DurableTable {
    /// The table `{prefix}durable` (`prefix` already checked), not yet created.
    pub(crate) fn new(prefix: &str) -> Self {
        let name = format!("{prefix}durable");
        let seq = format!("{prefix}durable_version");
        DurableTable {
            prefix: prefix.to_owned(),
            sql: Sql::new(&name, &seq),
            name,
            seq,
            ready: OnceCell::new(),
        }
    }

    /// The same table, for another pool (which checks on its own that the table exists).
    pub(crate) fn for_another_pool(&self) -> Self {
        Self::new(&self.prefix)
    }

    /// The table prefix.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The table's name (`{prefix}durable`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Creates the table, its indexes and its sequence if missing, once (through `pool`).
    pub(crate) async fn ensure(&self, pool: &PgPool) -> Result<(), PostgresError> {
        self.ready
            .get_or_try_init(|| async {
                let (table, seq) = (&self.name, &self.seq);
                let ddl = format!(
                    "CREATE SEQUENCE IF NOT EXISTS {seq};
                     CREATE TABLE IF NOT EXISTS {table} (
                         scope text COLLATE \"C\" NOT NULL,
                         key text COLLATE \"C\" NOT NULL,
                         version bigint NOT NULL,
                         value bytea NOT NULL,
                         idx1 text COLLATE \"C\",
                         idx2 text COLLATE \"C\",
                         PRIMARY KEY (scope, key));
                     CREATE INDEX IF NOT EXISTS {table}_idx1 ON {table} (scope, idx1, key)
                         WHERE idx1 IS NOT NULL;
                     CREATE INDEX IF NOT EXISTS {table}_idx2 ON {table} (scope, idx2, key)
                         WHERE idx2 IS NOT NULL;"
                );
                pool.create_schema(table, &ddl).await?;
                tracing::debug!(server = %pool.target, %table, "PostgreSQL durable table ready");
                Ok(())
            })
            .await
            .map(|_| ())
    }

    fn unavailable(operation: &'static str, e: PostgresError) -> KvError {
        KvError::Unavailable {
            operation,
            source: Box::new(e),
        }
    }

    fn failed(&self, operation: &'static str, key: &str, e: tokio_postgres::Error) -> KvError {
        Self::unavailable(operation, query_err(&self.name, key, e))
    }

    /// Reads a `(version, applied)` answer of a write statement; `None` when it has no row:
    /// an update or delete found no row (a conflict with nothing), or an insert lost to a row
    /// committed after its snapshot (the caller reads that row's version).
    fn outcome(&self, key: &str, rows: &[Row]) -> Result<Option<CasOutcome>, PostgresError> {
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let err = |e| query_err(&self.name, key, e);
        let version: i64 = row.try_get(0).map_err(err)?;
        let applied: bool = row.try_get(1).map_err(err)?;
        let version = self.decode_version(key, version)?;
        Ok(Some(if applied {
            CasOutcome::Ok { version }
        } else {
            CasOutcome::Conflict {
                current: Some(version),
            }
        }))
    }

    fn decode_version(&self, key: &str, v: i64) -> Result<u64, PostgresError> {
        u64::try_from(v).map_err(|_| query_err(&self.name, key, "negative version"))
    }

    fn versioned(&self, key: &str, row: &Row, first: usize) -> Result<Versioned, PostgresError> {
        let err = |e| query_err(&self.name, key, e);
        let version: i64 = row.try_get(first).map_err(err)?;
        let value: Vec<u8> = row.try_get(first + 1).map_err(err)?;
        let idx1: Option<String> = row.try_get(first + 2).map_err(err)?;
        let idx2: Option<String> = row.try_get(first + 3).map_err(err)?;
        Ok(Versioned {
            version: self.decode_version(key, version)?,
            value,
            idx1: idx1.map(|v| order_unescape(&v).into_owned()),
            idx2: idx2.map(|v| order_unescape(&v).into_owned()),
        })
    }

    /// The statement of `op` (its arguments in `args`) in `scope`.
    fn statement<'a>(&'a self, scope: &'a &'a str, args: &'a OpArgs<'a>) -> Statement<'a> {
        let key = args.op.key();
        let (sql, params): (&str, Vec<&(dyn ToSql + Sync)>) = match args.op {
            KvOp::Cas {
                expected: None,
                entry,
                ..
            } => (
                &self.sql.create,
                vec![scope, &args.key, &entry.value, &args.idx1, &args.idx2],
            ),
            KvOp::Cas { entry, .. } => (
                &self.sql.update,
                vec![
                    scope,
                    &args.key,
                    &args.version,
                    &entry.value,
                    &args.idx1,
                    &args.idx2,
                ],
            ),
            KvOp::Delete { .. } => (&self.sql.delete, vec![scope, &args.key, &args.version]),
            KvOp::CreateIfNoneIn { entry, index, .. } => (
                match index {
                    Index::One => &self.sql.create_unless1,
                    Index::Two => &self.sql.create_unless2,
                },
                vec![
                    scope,
                    &args.key,
                    &entry.value,
                    &args.idx1,
                    &args.idx2,
                    &args.from,
                    &args.to,
                ],
            ),
        };
        Statement {
            sql,
            params,
            table: &self.name,
            key,
        }
    }

    /// The statement reading the version of the key in `args`.
    fn get_statement<'a>(&'a self, scope: &'a &'a str, args: &'a OpArgs<'a>) -> Statement<'a> {
        Statement {
            sql: &self.sql.get,
            params: vec![scope, &args.key],
            table: &self.name,
            key: args.op.key(),
        }
    }

    /// The version a `get` answered (`rows`), as a conflict.
    fn found(&self, key: &str, rows: &[Row]) -> Result<CasOutcome, PostgresError> {
        let current = match rows.first() {
            Some(row) => Some(self.versioned(key, row, 0)?.version),
            None => None,
        };
        Ok(CasOutcome::Conflict { current })
    }

    /// Applies `op` on its own (one statement, committed by itself) on `client`.
    async fn apply(
        &self,
        client: &Client,
        scope: &str,
        op: &KvOp,
    ) -> Result<CasOutcome, PostgresError> {
        let scope = &scope;
        let args = OpArgs::new(op);
        let run = async |s: Statement<'_>| {
            let prepared = client.prepare_cached(s.sql).await?;
            client.query(&prepared, &s.params).await
        };
        let key = op.key();
        let rows = run(self.statement(scope, &args))
            .await
            .map_err(|e| query_err(&self.name, key, e))?;
        match self.outcome(key, &rows)? {
            Some(outcome) => Ok(outcome),
            None if op.creates() => {
                let rows = run(self.get_statement(scope, &args))
                    .await
                    .map_err(|e| query_err(&self.name, key, e))?;
                self.found(key, &rows)
            }
            None => Ok(CasOutcome::Conflict { current: None }),
        }
    }

    /// Runs `ops`, then `then` (statements that cannot conflict), in one transaction on
    /// `client`, all sent together (see [`Pipelined`]), and commits. With `all_or_none` (a
    /// flow step), an operation that conflicts commits nothing and the first conflict is
    /// answered; without (a batch), it is answered among the outcomes and the others land.
    /// This is the one write path of a batch and of a store's flow step.
    pub(crate) async fn commit(
        &self,
        client: Client,
        scope: &str,
        ops: &[KvOp],
        then: Vec<Statement<'_>>,
        all_or_none: bool,
    ) -> Result<Committed, PostgresError> {
        let scope = &scope;
        let args: Vec<OpArgs<'_>> = ops.iter().map(OpArgs::new).collect();
        let mut statements: Vec<Statement<'_>> =
            args.iter().map(|a| self.statement(scope, a)).collect();
        statements.extend(then);
        let mut tx = Pipelined::on(client);
        let answers = tx
            .begin(&statements)
            .await
            .map_err(|f| f.named(&statements, (&self.name, scope)))?;
        let mut outcomes = Vec::with_capacity(ops.len());
        for (op, (a, rows)) in args.iter().zip(&answers).enumerate() {
            let key = a.op.key();
            let outcome = match self.outcome(key, rows)? {
                Some(outcome) => outcome,
                None if a.op.creates() => {
                    let rows = tx.query(&self.get_statement(scope, a)).await;
                    self.found(key, &rows.map_err(|e| query_err(&self.name, key, e))?)?
                }
                None => CasOutcome::Conflict { current: None },
            };
            if let (CasOutcome::Conflict { current }, true) = (outcome, all_or_none) {
                tx.rollback().await;
                return Ok(Committed::Conflict { op, current });
            }
            outcomes.push(outcome);
        }
        tx.commit()
            .await
            .map_err(|f| f.named(&statements, (&self.name, scope)))?;
        Ok(Committed::Ok(outcomes))
    }
    /// Runs several flow steps (`parts`) in one transaction on `client`, all their statements
    /// sent together (see [`Pipelined`]), and commits: each part's outcomes, in order. When an
    /// operation of any part conflicts, a creation finds the key taken or a statement fails,
    /// nothing is committed and the answer is [`GroupCommitted::Split`]: run each part alone
    /// ([`commit`](Self::commit)) to learn which one and why. The group is the store's group
    /// commit (see `PostgresStore::commit_step`); a part alone is [`commit`](Self::commit).
    pub(crate) async fn commit_group(
        &self,
        client: Client,
        parts: Vec<GroupPart<'_>>,
    ) -> Result<GroupCommitted, PostgresError> {
        let scopes: Vec<&str> = parts.iter().map(|p| p.scope).collect();
        let args: Vec<Vec<OpArgs<'_>>> = parts
            .iter()
            .map(|p| p.ops.iter().map(OpArgs::new).collect())
            .collect();
        let mut statements: Vec<Statement<'_>> = Vec::new();
        let mut firsts = Vec::with_capacity(parts.len());
        for ((part, scope), args) in parts.into_iter().zip(&scopes).zip(&args) {
            firsts.push(statements.len());
            statements.extend(args.iter().map(|a| self.statement(scope, a)));
            statements.extend(part.then);
        }
        let mut tx = Pipelined::on(client);
        let answers = match tx.begin(&statements).await {
            Ok(answers) => answers,
            // Rolled back (or its connection closed): nothing of the group was committed.
            Err(Failed { index: Some(_), .. }) => return Ok(GroupCommitted::Split),
            Err(f) => return Err(f.named(&statements, (&self.name, "a group of flow steps"))),
        };
        let mut outcomes = Vec::with_capacity(args.len());
        for (args, first) in args.iter().zip(firsts) {
            let mut part = Vec::with_capacity(args.len());
            for (i, a) in args.iter().enumerate() {
                let rows = answers.get(first + i).map_or(&[][..], Vec::as_slice);
                match self.outcome(a.op.key(), rows)? {
                    Some(ok @ CasOutcome::Ok { .. }) => part.push(ok),
                    Some(CasOutcome::Conflict { .. }) | None => {
                        tx.rollback().await;
                        return Ok(GroupCommitted::Split);
                    }
                }
            }
            outcomes.push(part);
        }
        tx.commit()
            .await
            .map_err(|f| f.named(&statements, (&self.name, "a group of flow steps")))?;
        Ok(GroupCommitted::Ok(outcomes))
    }
}

/// One flow step of a group (see [`DurableTable::commit_group`]): its journal operations in
/// `scope`, then its statements that cannot conflict.
pub(crate) struct GroupPart<'a> {
    /// The journals' scope id.
    pub(crate) scope: &'a str,
    /// The journal operations, all or none.
    pub(crate) ops: &'a [KvOp],
    /// The step's other statements (checkpoint, values, chat, contact, ledger rows).
    pub(crate) then: Vec<Statement<'a>>,
}

/// What [`DurableTable::commit_group`] ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GroupCommitted {
    /// Committed: each part's outcomes, in order.
    Ok(Vec<Vec<CasOutcome>>),
    /// Nothing was committed: a part conflicted or a statement failed. Each part is to run
    /// alone.
    Split,
}

/// What [`DurableTable::commit`] ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Committed {
    /// Committed; each operation's outcome, in order.
    Ok(Vec<CasOutcome>),
    /// Operation `op` conflicted (the first one that did): nothing was committed.
    Conflict {
        /// Its index.
        op: usize,
        /// The version it found.
        current: Option<u64>,
    },
}

/// An operation's arguments as its statement takes them: the key and index values escaped
/// (a NUL byte, which `text` cannot hold, see [`order_escape`]), the expected version as the
/// column's `i64`.
struct OpArgs<'a> {
    op: &'a KvOp,
    key: Cow<'a, str>,
    version: i64,
    idx1: Option<Cow<'a, str>>,
    idx2: Option<Cow<'a, str>>,
    /// A guarded create's range, escaped as the index values are.
    from: Cow<'a, str>,
    to: Cow<'a, str>,
}

impl<'a> OpArgs<'a> {
    fn new(op: &'a KvOp) -> Self {
        let (expected, entry) = (op.expected(), op.entry());
        let (from, to) = op
            .guard()
            .map_or((Cow::Borrowed(""), Cow::Borrowed("")), |(_, from, to)| {
                (order_escape(from), order_escape(to))
            });
        OpArgs {
            from,
            to,
            op,
            key: order_escape(op.key()),
            // No stored version is beyond `i64` (nor negative): such an expectation matches
            // no row, and the statement still reports the version found.
            version: expected.map_or(0, |v| i64::try_from(v).unwrap_or(-1)),
            idx1: entry.and_then(|e| e.idx1.as_deref()).map(order_escape),
            idx2: entry.and_then(|e| e.idx2.as_deref()).map(order_escape),
        }
    }
}

/// The [`DurableKv`] on PostgreSQL; cheap to clone (clones share the pool).
///
/// Built with [`new`](Self::new) it only parses the connection string: it connects and
/// creates its table in [`DurableKv::open`] (or on its first use), so an unreachable server
/// fails the bot's `start()`. Built with [`connect`](Self::connect) it does both at once.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use botmesh_durability::{KvDurability, kv::Scope, DurabilityConfig};
/// # use botmesh_durability::backends::postgres::{PostgresConfig, PostgresKv};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let kv = PostgresKv::connect_with(
///     "postgres://bot@db.internal:5432/bots",
///     PostgresConfig::new().table_prefix("shop_"),
/// )
/// .await?;
/// let durability = KvDurability::new(Arc::new(kv), Scope::new("t", "prod", "shop", "wa"), DurabilityConfig::default())?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresKv {
    pool: PgPool,
    durable: Arc<DurableTable>,
}

impl std::fmt::Debug for PostgresKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresKv")
            .field("server", &self.pool.target)
            .field("table", &self.durable.name)
            .finish_non_exhaustive()
    }
}

impl PostgresKv {
    /// Parses `url` with the default [`PostgresConfig`] (prefix `botmesh_`), without
    /// connecting: the connection is made and the table created by [`DurableKv::open`] or by
    /// the first call. A malformed `url` fails here
    /// ([`PostgresError::InvalidConnectionString`], without the password).
    pub fn new(url: &str) -> Result<Self, PostgresError> {
        Self::new_with(url, PostgresConfig::default())
    }

    /// [`new`](Self::new) with `config` (its own pool, no TLS).
    pub fn new_with(url: &str, config: PostgresConfig) -> Result<Self, PostgresError> {
        let prefix = config.checked_prefix()?.to_owned();
        let pool = PgPool::from_url(url, &config)?;
        Ok(Self::lazy(pool, &prefix))
    }

    /// Connects with the default [`PostgresConfig`] (prefix `botmesh_`) and creates the table.
    pub async fn connect(url: &str) -> Result<Self, PostgresError> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Connects with `config` (its own pool, no TLS) and creates the table if missing.
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<Self, PostgresError> {
        let prefix = config.checked_prefix()?.to_owned();
        let pool = PgPool::connect(url, &config).await?;
        Self::start(pool, &prefix).await
    }

    /// Uses `pool` (yours: never closed here) and creates the table if missing.
    pub async fn with_pool(pool: Pool, config: PostgresConfig) -> Result<Self, PostgresError> {
        let prefix = config.checked_prefix()?.to_owned();
        Self::start(PgPool::injected(pool), &prefix).await
    }

    /// A backend on `pool` whose table is created on first use (`prefix` already checked).
    pub(crate) fn lazy(pool: PgPool, prefix: &str) -> Self {
        PostgresKv {
            durable: Arc::new(DurableTable::new(prefix)),
            pool,
        }
    }

    async fn start(pool: PgPool, prefix: &str) -> Result<Self, PostgresError> {
        let kv = Self::lazy(pool, prefix);
        kv.durable.ensure(&kv.pool).await?;
        Ok(kv)
    }

    /// The durable table's name (`{prefix}durable`).
    pub fn table(&self) -> &str {
        &self.durable.name
    }

    /// The pool (the one given to [`with_pool`](Self::with_pool), or the one created here).
    pub fn pool(&self) -> &Pool {
        &self.pool.pool
    }

    /// Ends the pool for good if it was created from a connection string (an injected pool
    /// stays open): later queries fail. [`DurableKv::close`], which `stop()` calls, only drops
    /// the idle connections, so that the bot can start again.
    pub fn close_pool(&self) {
        self.pool.close();
    }

    /// The pool with where it points, for [`PostgresStore`](super::PostgresStore)'s
    /// same-database check.
    pub(crate) fn pg_pool(&self) -> &PgPool {
        &self.pool
    }

    /// The table, for a store that commits into it.
    pub(crate) fn durable_table(&self) -> &DurableTable {
        &self.durable
    }

    /// Creates the table on first use; an unreachable server fails `operation`.
    async fn ready(&self, operation: &'static str) -> Result<(), KvError> {
        self.durable
            .ensure(&self.pool)
            .await
            .map_err(|e| DurableTable::unavailable(operation, e))
    }

    /// Runs one statement. A connection found lost before the statement ran is replaced and
    /// the statement retried; after it ran, only when `idempotent`.
    async fn query(
        &self,
        operation: &'static str,
        key: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        idempotent: bool,
    ) -> Result<Vec<Row>, KvError> {
        self.ready(operation).await?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let client = self
                .pool
                .client()
                .await
                .map_err(|e| DurableTable::unavailable(operation, e))?;
            let statement = match client.prepare_cached(sql).await {
                Ok(s) => s,
                Err(e) if attempt == 1 && is_connection_lost(&e) => continue,
                Err(e) => return Err(self.durable.failed(operation, key, e)),
            };
            match client.query(&statement, params).await {
                Ok(rows) => return Ok(rows),
                Err(e) if idempotent && attempt == 1 && is_connection_lost(&e) => continue,
                Err(e) => return Err(self.durable.failed(operation, key, e)),
            }
        }
    }

    /// A connection for a write, after the table is known to exist.
    async fn write_client(&self, operation: &'static str) -> Result<Client, KvError> {
        self.ready(operation).await?;
        self.pool
            .write_client()
            .await
            .map_err(|e| DurableTable::unavailable(operation, e))
    }
}

#[async_trait]
impl DurableKv for PostgresKv {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        let k = order_escape(key);
        let rows = self
            .query(
                "get",
                key,
                &self.durable.sql.get,
                &[&scope.id(), &k.as_ref()],
                true,
            )
            .await?;
        match rows.first() {
            Some(row) => Ok(Some(
                self.durable
                    .versioned(key, row, 0)
                    .map_err(|e| DurableTable::unavailable("get", e))?,
            )),
            None => Ok(None),
        }
    }

    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        let client = self.write_client("apply").await?;
        self.durable
            .apply(&client, scope.id(), &op)
            .await
            .map_err(|e| DurableTable::unavailable("apply", e))
    }

    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        let (index, from, to, limit) = (query.index, query.from, query.to, query.limit);
        if from >= to || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = match index {
            Index::One => &self.durable.sql.range1,
            Index::Two => &self.durable.sql.range2,
        };
        let (from_e, to_e) = (order_escape(from), order_escape(to));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let params: [&(dyn ToSql + Sync); 4] =
            [&scope.id(), &from_e.as_ref(), &to_e.as_ref(), &limit];
        let rows = self.query("range", from, sql, &params, true).await?;
        rows.iter()
            .map(|row| {
                let key: String = row
                    .try_get(0)
                    .map_err(|e| self.durable.failed("range", from, e))?;
                let entry = self
                    .durable
                    .versioned(&key, row, 1)
                    .map_err(|e| DurableTable::unavailable("range", e))?;
                Ok(KvRecord {
                    key: order_unescape(&key).into_owned(),
                    entry,
                })
            })
            .collect()
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.write_client("batch").await?;
        // The operations are independent: one that conflicts is answered as such, the others
        // land.
        match self
            .durable
            .commit(client, scope.id(), &ops, Vec::new(), false)
            .await
        {
            Ok(Committed::Ok(outcomes)) => Ok(outcomes),
            Ok(Committed::Conflict { op, current }) => {
                unreachable!("a batch commits whatever conflicts: op {op} found {current:?}")
            }
            Err(e) => Err(DurableTable::unavailable("batch", e)),
        }
    }

    fn shared_between_processes(&self) -> bool {
        true
    }

    /// Connects and creates the table if missing (once; later calls return at once). An
    /// unreachable server fails with [`KvError::Unavailable`] whose source is a
    /// [`PostgresError::Connect`] naming host and port, never the password.
    async fn open(&self) -> Result<(), KvError> {
        self.ready("open").await
    }

    /// Drops the idle connections of a pool created here (a later query makes new ones); an
    /// injected pool is left alone.
    async fn close(&self) -> Result<(), KvError> {
        if self.pool.owned {
            let _ = self.pool.pool.retain(|_, _| false);
        }
        Ok(())
    }

    /// This backend, so that a [`PostgresStore`](super::PostgresStore) on the same database
    /// can commit flow steps into its table.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
