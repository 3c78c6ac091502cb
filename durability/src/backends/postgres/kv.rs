//! [`PostgresKv`]: the [`DurableKv`] in one PostgreSQL table, `{prefix}durable`.
//!
//! | operation | SQL (one statement, or one transaction for `batch`) |
//! | --- | --- |
//! | `get` | `SELECT … WHERE scope = $1 AND key = $2` |
//! | `cas`, `delete`, `batch` | `SELECT … FROM {prefix}durable_apply_all($1, …)`: the table's function, which applies a list of operations in order |
//! | `range` | `… WHERE scope = $1 AND idx1 >= $2 AND idx1 < $3 ORDER BY idx1, key LIMIT $4` |
//!
//! Every write goes through one PL/pgSQL function, `{prefix}durable_apply_all`, created with the
//! table: it takes the operations as arrays (one element per operation) and runs, for each
//! in order, one statement, so that a transaction of any number of operations is one
//! statement from the client and each operation sees the writes of the ones before it:
//!
//! | operation | the function's statement |
//! | --- | --- |
//! | `cas(key, None, e)` | `INSERT … ON CONFLICT (scope, key) DO NOTHING RETURNING version` |
//! | `CreateIfNoneIn` | `INSERT … SELECT … WHERE NOT EXISTS (SELECT 1 … WHERE scope = … AND idx2 >= … AND idx2 < …) ON CONFLICT DO NOTHING` |
//! | `cas(key, Some(v), e)` | `UPDATE … SET version = nextval(…) … WHERE … AND version = v RETURNING version` |
//! | `delete(key, v)` | `DELETE … WHERE … AND version = v RETURNING version` |
//!
//! It answers a row per operation: the new version, or (a conflict) the version found, read
//! after the write did not apply (an insert that lost to a row committed after its snapshot
//! finds that row). Asked to apply all or none (a flow step), it raises at the first conflict
//! instead (SQLSTATE `BM409`, the operation's index and the version found in its detail), which
//! aborts the transaction: a transaction sent together with its `COMMIT` (see
//! [`Pipelined`]) then commits nothing, with no round trip to decide. A database that a binary
//! of an earlier release also uses holds that release's `{prefix}durable_apply` too, which
//! answers the conflict as a row; neither binary replaces the other's function.
//! Versions come from the sequence `{prefix}durable_version`,
//! shared by every scope, so a version is never reused, also after a delete and re-create
//! (the same rule as `MemoryKv`). `key`, `idx1` and `idx2` are `text COLLATE "C"` (byte order);
//! a NUL byte, which `text` cannot hold, is stored with an order-preserving escape. A write
//! answers `Ok` only after its commit, so it is as durable as the server's
//! `synchronous_commit` makes it (on by default).
//!
//! The statements live in one place, the table's `DurableTable`, so that
//! [`PostgresStore::commit_step`](crate::Store::commit_step) runs exactly them inside its own
//! transaction (a flow step's journal operations, see the [module documentation](super)).
//! Built with [`PostgresKv::new`], the table and its function are created by
//! [`DurableKv::open`] or the first call, once per backend (clones share that).
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
    /// A call of the apply function (see [`apply_function`]).
    apply: String,
    range1: String,
    range2: String,
}

/// The operation kinds of the apply function's `p_kind` array.
mod kind {
    pub(super) const CREATE: i16 = 0;
    pub(super) const CREATE_UNLESS_IDX1: i16 = 1;
    pub(super) const CREATE_UNLESS_IDX2: i16 = 2;
    pub(super) const UPDATE: i16 = 3;
    pub(super) const DELETE: i16 = 4;
}

impl Sql {
    fn new(t: &str, function: &str) -> Self {
        let range = |idx: &str| {
            format!(
                "SELECT key, version, value, idx1, idx2 FROM {t} WHERE scope = $1 \
                 AND {idx} >= $2 AND {idx} < $3 ORDER BY {idx}, key LIMIT $4"
            )
        };
        Sql {
            get: format!(
                "SELECT version, value, idx1, idx2 FROM {t} WHERE scope = $1 AND key = $2"
            ),
            apply: format!(
                "SELECT found_version, applied FROM {function}($1, $2, $3, $4, $5, $6, $7, $8, \
                 $9, $10)"
            ),
            range1: range("idx1"),
            range2: range("idx2"),
        }
    }
}

/// The SQLSTATE the apply function raises at a conflict when it applies all or none.
const CONFLICT_SQLSTATE: &str = "BM409";

/// The conflict (operation index, version found) that `failed` reports, when it is the apply
/// function's exception at a conflict (see [`apply_function`]).
fn conflict_of(failed: &Failed) -> Option<(usize, Option<u64>)> {
    let db = failed.source.as_db_error()?;
    if db.code().code() != CONFLICT_SQLSTATE {
        return None;
    }
    let (op, current) = db.detail()?.split_once(' ')?;
    let current = match current {
        "-" => None,
        v => Some(v.parse().ok()?),
    };
    Some((op.parse().ok()?, current))
}

/// The `CREATE OR REPLACE FUNCTION` of table `t`'s apply function `function` (versions from
/// `seq`): the operations in arrays, one element each (`p_kind`: see [`kind`]; `p_version`:
/// the expected version of an update or a delete; `p_from`, `p_to`: a guarded create's
/// range), applied in order; one `(found_version, applied)` row per operation applied or
/// conflicting, or, with `p_all`, an exception at the first conflict (SQLSTATE
/// [`CONFLICT_SQLSTATE`], detail `"<operation index> <version found or ->"`: see
/// [`conflict_of`]).
fn apply_function(t: &str, seq: &str, function: &str) -> String {
    let insert = format!("INSERT INTO {t} AS d (scope, key, version, value, idx1, idx2)");
    let row = format!("p_scope[i], p_key[i], nextval('{seq}'), p_value[i], p_idx1[i], p_idx2[i]");
    let unless = |idx: &str| {
        format!(
            "{insert} SELECT {row} WHERE NOT EXISTS (SELECT 1 FROM {t} r \
             WHERE r.scope = p_scope[i] AND r.{idx} >= p_from[i] AND r.{idx} < p_to[i]) \
             ON CONFLICT (scope, key) DO NOTHING RETURNING d.version INTO v;"
        )
    };
    let (unless1, unless2) = (unless("idx1"), unless("idx2"));
    let [create, unless_idx1, unless_idx2, update, delete] = [
        kind::CREATE,
        kind::CREATE_UNLESS_IDX1,
        kind::CREATE_UNLESS_IDX2,
        kind::UPDATE,
        kind::DELETE,
    ];
    format!(
        "CREATE OR REPLACE FUNCTION {function}(p_scope text[], p_kind smallint[], \
             p_key text[], p_version bigint[], p_value bytea[], p_idx1 text[], p_idx2 text[], \
             p_from text[], p_to text[], p_all boolean) \
         RETURNS TABLE (found_version bigint, applied boolean) LANGUAGE plpgsql AS $fn$
         DECLARE v bigint;
         BEGIN
             FOR i IN 1 .. coalesce(array_length(p_kind, 1), 0) LOOP
                 v := NULL;
                 CASE p_kind[i]
                 WHEN {create} THEN
                     {insert} VALUES ({row})
                     ON CONFLICT (scope, key) DO NOTHING RETURNING d.version INTO v;
                 WHEN {unless_idx1} THEN {unless1}
                 WHEN {unless_idx2} THEN {unless2}
                 WHEN {update} THEN
                     UPDATE {t} AS d SET version = nextval('{seq}'), value = p_value[i],
                         idx1 = p_idx1[i], idx2 = p_idx2[i]
                     WHERE d.scope = p_scope[i] AND d.key = p_key[i]
                         AND d.version = p_version[i]
                     RETURNING d.version INTO v;
                 WHEN {delete} THEN
                     DELETE FROM {t} AS d WHERE d.scope = p_scope[i] AND d.key = p_key[i]
                         AND d.version = p_version[i]
                     RETURNING d.version INTO v;
                 END CASE;
                 IF v IS NOT NULL THEN
                     found_version := v;
                     applied := true;
                     RETURN NEXT;
                 ELSE
                     SELECT r.version INTO v FROM {t} r
                         WHERE r.scope = p_scope[i] AND r.key = p_key[i];
                     IF p_all THEN
                         RAISE EXCEPTION USING ERRCODE = '{CONFLICT_SQLSTATE}',
                             MESSAGE = 'durable operation ' || (i - 1) || ' conflicts',
                             DETAIL = (i - 1) || ' ' || coalesce(v::text, '-');
                     END IF;
                     found_version := v;
                     applied := false;
                     RETURN NEXT;
                 END IF;
             END LOOP;
         END
         $fn$;"
    )
}

/// The `{prefix}durable` table: its statements, its creation (with its apply function,
/// `{prefix}durable_apply_all`), and the compare-and-set writes
/// on any connection or transaction of a pool that reaches it. [`PostgresKv`] runs them on
/// its own connections; [`PostgresStore::commit_step`](super::PostgresStore) runs them inside
/// the store's transaction, with the same statements and so the same semantics (the same
/// version sequence, the same conflict answers).
pub(crate) struct DurableTable {
    prefix: String,
    name: String,
    seq: String,
    /// The apply function's name (see [`apply_function`]).
    function: String,
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
        let function = format!("{prefix}durable_apply_all");
        DurableTable {
            prefix: prefix.to_owned(),
            sql: Sql::new(&name, &function),
            name,
            seq,
            function,
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

    /// Creates the table, its indexes and its sequence if missing, and (re)creates its apply
    /// function, once (through `pool`).
    pub(crate) async fn ensure(&self, pool: &PgPool) -> Result<(), PostgresError> {
        self.ready
            .get_or_try_init(|| async {
                let (table, seq) = (&self.name, &self.seq);
                let function = apply_function(table, seq, &self.function);
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
                         WHERE idx2 IS NOT NULL;
                     {function}"
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

    /// The outcomes of the apply function's answer (`rows`) to `ops`, in order: as many as
    /// it answered (fewer than `ops` when it stopped at a conflict).
    fn outcomes(&self, ops: &OpArrays<'_>, rows: &[Row]) -> Result<Vec<CasOutcome>, PostgresError> {
        rows.iter()
            .zip(&ops.ops)
            .map(|(row, op)| {
                let key = op.key();
                let err = |e| query_err(&self.name, key, e);
                let version: Option<i64> = row.try_get(0).map_err(err)?;
                let applied: bool = row.try_get(1).map_err(err)?;
                let version = version.map(|v| self.decode_version(key, v)).transpose()?;
                Ok(match (applied, version) {
                    (true, Some(version)) => CasOutcome::Ok { version },
                    (true, None) => {
                        return Err(query_err(&self.name, key, "applied without a version"));
                    }
                    (false, current) => CasOutcome::Conflict { current },
                })
            })
            .collect()
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

    /// The statement applying `ops` (see [`apply_function`]); a failure of it names `key`.
    fn apply_statement<'a>(&'a self, ops: &'a OpArrays<'a>, key: &'a str) -> Statement<'a> {
        Statement {
            sql: &self.sql.apply,
            params: ops.params(),
            table: &self.name,
            key,
        }
    }

    /// Applies `op` on its own (one statement, committed by itself) on `client`.
    async fn apply(
        &self,
        client: &Client,
        scope: &str,
        op: &KvOp,
    ) -> Result<CasOutcome, PostgresError> {
        // One operation: its conflict is answered as its row.
        let ops = OpArrays::new([(scope, op)], false);
        let key = op.key();
        let s = self.apply_statement(&ops, key);
        let run = async {
            let prepared = client.prepare_cached(s.sql).await?;
            client.query(&prepared, &s.params).await
        };
        let rows = run.await.map_err(|e| query_err(&self.name, key, e))?;
        self.outcomes(&ops, &rows)?
            .pop()
            .ok_or_else(|| query_err(&self.name, key, "no answer for the operation"))
    }

    /// Runs `ops`, then `then` (statements that cannot conflict), in one transaction on
    /// `client`, all sent together with the `COMMIT` (see [`Pipelined`]). With `all_or_none`
    /// (a flow step), an operation that conflicts commits nothing and the conflict is
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
        let arrays = OpArrays::new(ops.iter().map(|op| (scope, op)), all_or_none);
        let key = ops.first().map_or(scope, KvOp::key);
        let mut statements = Vec::with_capacity(1 + then.len());
        statements.extend((!ops.is_empty()).then(|| self.apply_statement(&arrays, key)));
        statements.extend(then);
        let answers = match Pipelined::commit(client, &statements).await {
            Ok(answers) => answers,
            Err(failed) => {
                return match conflict_of(&failed) {
                    Some((op, current)) if failed.index == Some(0) && !ops.is_empty() => {
                        Ok(Committed::Conflict { op, current })
                    }
                    _ => Err(failed.named(&statements, (&self.name, scope))),
                };
            }
        };
        let rows = if ops.is_empty() {
            &[][..]
        } else {
            answers.first().map_or(&[][..], Vec::as_slice)
        };
        let outcomes = self.outcomes(&arrays, rows)?;
        if outcomes.len() != ops.len() {
            return Err(query_err(
                &self.name,
                key,
                "the apply function answered too few operations (the transaction committed)",
            ));
        }
        Ok(Committed::Ok(outcomes))
    }

    /// Runs several flow steps (`parts`) in one transaction on `client`: their journal
    /// operations in one statement (the apply function, all or none), then their other
    /// statements, all sent together with the `COMMIT` (see [`Pipelined`]): each part's
    /// outcomes, in order. When an operation of any part conflicts, a creation finds the key
    /// taken or a statement fails, nothing is committed and the answer is
    /// [`GroupCommitted::Split`]: run each part alone ([`commit`](Self::commit)) to learn
    /// which one and why. The group is the store's group commit (see
    /// `PostgresStore::commit_step`); a part alone is [`commit`](Self::commit).
    pub(crate) async fn commit_group<'a>(
        &'a self,
        client: Client,
        parts: Vec<GroupPart<'a>>,
        then: Vec<Statement<'a>>,
    ) -> Result<GroupCommitted, PostgresError> {
        let counts: Vec<usize> = parts.iter().map(|p| p.ops.len()).collect();
        let arrays = OpArrays::new(
            parts
                .iter()
                .flat_map(|p| p.ops.iter().map(move |op| (p.scope, op))),
            true,
        );
        let any_ops = !arrays.ops.is_empty();
        let mut statements: Vec<Statement<'_>> = Vec::new();
        statements.extend(any_ops.then(|| self.apply_statement(&arrays, "a group of flow steps")));
        statements.extend(then);
        let answers = match Pipelined::commit(client, &statements).await {
            Ok(answers) => answers,
            // Nothing of the group was committed.
            Err(Failed { index: Some(_), .. }) => return Ok(GroupCommitted::Split),
            Err(f) => return Err(f.named(&statements, (&self.name, "a group of flow steps"))),
        };
        let rows = if any_ops {
            answers.first().map_or(&[][..], Vec::as_slice)
        } else {
            &[][..]
        };
        let mut outcomes = self.outcomes(&arrays, rows)?;
        if outcomes.len() != arrays.ops.len() {
            return Err(query_err(
                &self.name,
                "a group of flow steps",
                "the apply function answered too few operations (the transaction committed)",
            ));
        }
        let mut rest = outcomes.drain(..);
        Ok(GroupCommitted::Ok(
            counts
                .iter()
                .map(|&n| rest.by_ref().take(n).collect())
                .collect(),
        ))
    }
}

/// One flow step of a group (see [`DurableTable::commit_group`]): its journal operations in
/// `scope`.
pub(crate) struct GroupPart<'a> {
    /// The journals' scope id.
    pub(crate) scope: &'a str,
    /// The journal operations, all or none.
    pub(crate) ops: &'a [KvOp],
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

/// Operations as the apply function takes them (see [`apply_function`]): one array per
/// parameter, one element per operation, the key, index values and ranges escaped (a NUL
/// byte, which `text` cannot hold, see [`order_escape`]), an expected version as the
/// column's `i64`.
struct OpArrays<'a> {
    ops: Vec<&'a KvOp>,
    scope: Vec<&'a str>,
    kind: Vec<i16>,
    key: Vec<Cow<'a, str>>,
    version: Vec<i64>,
    value: Vec<&'a [u8]>,
    idx1: Vec<Option<Cow<'a, str>>>,
    idx2: Vec<Option<Cow<'a, str>>>,
    from: Vec<Cow<'a, str>>,
    to: Vec<Cow<'a, str>>,
    /// All or none: the first conflict raises (see [`apply_function`]).
    all: bool,
}

impl<'a> OpArrays<'a> {
    fn new(ops: impl IntoIterator<Item = (&'a str, &'a KvOp)>, all: bool) -> Self {
        let mut arrays = OpArrays {
            ops: Vec::new(),
            scope: Vec::new(),
            kind: Vec::new(),
            key: Vec::new(),
            version: Vec::new(),
            value: Vec::new(),
            idx1: Vec::new(),
            idx2: Vec::new(),
            from: Vec::new(),
            to: Vec::new(),
            all,
        };
        for (scope, op) in ops {
            let entry = op.entry();
            let (from, to) = op
                .guard()
                .map_or((Cow::Borrowed(""), Cow::Borrowed("")), |(_, from, to)| {
                    (order_escape(from), order_escape(to))
                });
            arrays.kind.push(match op {
                KvOp::Cas { expected: None, .. } => kind::CREATE,
                KvOp::Cas { .. } => kind::UPDATE,
                KvOp::Delete { .. } => kind::DELETE,
                KvOp::CreateIfNoneIn {
                    index: Index::One, ..
                } => kind::CREATE_UNLESS_IDX1,
                KvOp::CreateIfNoneIn {
                    index: Index::Two, ..
                } => kind::CREATE_UNLESS_IDX2,
            });
            arrays.ops.push(op);
            arrays.scope.push(scope);
            arrays.key.push(order_escape(op.key()));
            // No stored version is beyond `i64` (nor negative): such an expectation matches
            // no row, and the function still reports the version found.
            arrays
                .version
                .push(op.expected().map_or(0, |v| i64::try_from(v).unwrap_or(-1)));
            arrays
                .value
                .push(entry.map_or(&[][..], |e| e.value.as_slice()));
            arrays
                .idx1
                .push(entry.and_then(|e| e.idx1.as_deref()).map(order_escape));
            arrays
                .idx2
                .push(entry.and_then(|e| e.idx2.as_deref()).map(order_escape));
            arrays.from.push(from);
            arrays.to.push(to);
        }
        arrays
    }

    /// The function's parameters, in order.
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.scope,
            &self.kind,
            &self.key,
            &self.version,
            &self.value,
            &self.idx1,
            &self.idx2,
            &self.from,
            &self.to,
            &self.all,
        ]
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
