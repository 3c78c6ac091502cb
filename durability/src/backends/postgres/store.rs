//! [`PostgresStore`]: the [`Store`] in PostgreSQL tables.
//!
//! | records | table | key |
//! | --- | --- | --- |
//! | schema marker | `{prefix}meta(name, value)`: `application = botmesh`, `schema_version = 1` | `name` |
//! | chats | `{prefix}chats` | `id` |
//! | contacts | `{prefix}contacts` | `id` |
//! | ledger | `{prefix}ledger` (append-only, ordered by a `bigserial`) | `seq` |
//! | flow checkpoints | `{prefix}checkpoints` (`layout_hash` and `step` stored as the bits of a `bigint`) | `chat` |
//! | handoffs | `{prefix}handoffs` | `chat` |
//! | per-scope values | `{prefix}kv` (`key` in byte order, `COLLATE "C"`) | `(scope, key)` |
//!
//! `open()` connects (for a store built with [`PostgresStore::new`], the first connection is
//! made there), creates missing tables (idempotently, under an advisory lock) and refuses a
//! schema version newer than this build's. JSON is kept as `text`, unparsed.
//!
//! The store touches the durable table of [`PostgresKv`] in one call only:
//! [`Store::commit_step`], which applies a flow step's journal operations to its *journal
//! table* (`{prefix}durable` of this store's prefix, or the table of the kv given to
//! [`PostgresStore::with_journals`]) in the same transaction as the checkpoint and value
//! writes, with the statements `PostgresKv` runs itself (same compare-and-set, same version
//! sequence). [`Store::shares_transactions_with`] answers `true` for a `PostgresKv` whose table
//! is that journal table and whose pool reaches the same database (see
//! [`super`]'s module documentation for how that is decided).
//!
//! Writes that concurrent chats make at the same moment share one transaction ([`group`]);
//! their point reads (a checkpoint's head, a checkpoint, a value) share one statement
//! ([`reads`]).
//!
//! `close()` makes every call fail with [`StoreError::Closed`] until the next `open()`, and
//! drops the idle connections of a pool created here (an injected pool is left as it is). It
//! does not migrate data from older schemas (there is only version 1) and does not retry.

mod group;
mod reads;
mod rows;
mod schema;
mod table_writes;
mod writes;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::kv::DurableTable;
use super::pipeline::{Pipelined, Statement};
use super::{PgPool, PostgresConfig, PostgresError, PostgresKv, query_err};
use crate::config::DurabilityConfig;
use crate::error::DurabilityError;
use crate::journal::KvDurability;
use crate::kv::{DurableKv, Scope};
use crate::store::{
    ChatRecord, CheckpointHead, ContactRecord, FlowCheckpoint, HandoffRecord, LedgerEntry,
    StepCommit, StepCommitOutcome, Store, StoreError,
};
use group::{Committer, GroupCommit, Write};
use reads::{BoxedRead, Decoded, ReadGroup, decoded};
use serde_json::Value;
use table_writes::TableWrites;
use writes::{CHECKPOINT_COLUMNS, Writes};

/// A [`Store`] on PostgreSQL; clones share the pool and the open/closed state.
///
/// Built with [`new`](Self::new) it only parses the connection string; [`Store::open`] (the
/// bot's `start()`) connects and creates the tables, so an unreachable server fails there
/// with an error naming host and port, never the password.
///
/// ```no_run
/// # use botmesh_durability::{DurabilityConfig, Store, kv::Scope};
/// # use botmesh_durability::backends::postgres::PostgresStore;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::new("postgres://bot@db.internal:5432/bots")?;
/// store.open().await?;
/// // The journals in the same database, on the same pool: flow steps commit atomically.
/// let durability = store.durability(Scope::new("t", "prod", "shop", "wa"), DurabilityConfig::default())?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    prefix: Arc<str>,
    closed: Arc<AtomicBool>,
    /// The durable table [`Store::commit_step`] writes the journal operations to.
    journals: Arc<DurableTable>,
    /// The write statements of `prefix`.
    writes: Arc<Writes>,
    /// The group commit of flow steps and value writes (see [`group`]).
    groups: Arc<GroupCommit>,
    /// The point reads grouped (see [`reads`]): checkpoint heads, checkpoints, values.
    reads: Arc<Reads>,
}

/// The store's [`ReadGroup`]s, one a statement.
#[derive(Debug)]
struct Reads {
    heads: ReadGroup<String, Decoded<CheckpointHead>>,
    checkpoints: ReadGroup<String, Decoded<FlowCheckpoint>>,
    values: ReadGroup<(String, String), Decoded<Value>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.pool.target)
            .field("prefix", &self.prefix)
            .field("journals", &self.journals.name())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Parses `url` with the default [`PostgresConfig`], without connecting: [`Store::open`]
    /// connects and creates the tables. A malformed `url` fails here (without the password).
    pub fn new(url: &str) -> Result<Self, StoreError> {
        Self::new_with(url, PostgresConfig::default())
    }

    /// [`new`](Self::new) with `config` (its own pool, no TLS). Until [`Store::open`], every
    /// call fails with [`StoreError::Closed`].
    pub fn new_with(url: &str, config: PostgresConfig) -> Result<Self, StoreError> {
        let prefix = config.checked_prefix().map_err(open_err)?.to_owned();
        let pool = PgPool::from_url(url, &config).map_err(open_err)?;
        Ok(Self::closed(pool, prefix))
    }

    /// Connects with the default [`PostgresConfig`] and opens the store (creates the tables).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Connects with `config` (its own pool, no TLS) and opens the store.
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<Self, StoreError> {
        let prefix = config.checked_prefix().map_err(open_err)?.to_owned();
        let pool = PgPool::connect(url, &config).await.map_err(open_err)?;
        Self::start(pool, prefix).await
    }

    /// Uses `pool` (yours: never closed here) and opens the store.
    pub async fn with_pool(pool: Pool, config: PostgresConfig) -> Result<Self, StoreError> {
        let prefix = config.checked_prefix().map_err(open_err)?.to_owned();
        Self::start(PgPool::injected(pool), prefix).await
    }

    async fn start(pool: PgPool, prefix: String) -> Result<Self, StoreError> {
        let store = Self::closed(pool, prefix);
        store.open().await?;
        Ok(store)
    }

    /// A store on `pool`, not opened yet (`prefix` already checked).
    fn closed(pool: PgPool, prefix: String) -> Self {
        PostgresStore {
            journals: Arc::new(DurableTable::new(&prefix)),
            writes: Arc::new(Writes::new(&prefix)),
            groups: Arc::default(),
            reads: Arc::new(Reads {
                heads: ReadGroup::new("checkpoint_head", quarter_of(&pool)),
                checkpoints: ReadGroup::new("checkpoint", quarter_of(&pool)),
                values: ReadGroup::new("get_value", quarter_of(&pool)),
            }),
            pool,
            prefix: prefix.into(),
            closed: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Commits flow steps into `kv`'s durable table instead of `{this store's prefix}durable`:
    /// for a [`PostgresKv`] built with another table prefix. [`Store::shares_transactions_with`]
    /// still answers `true` only when `kv`'s pool reaches this store's database.
    pub fn with_journals(mut self, kv: &PostgresKv) -> Self {
        self.journals = Arc::new(kv.durable_table().for_another_pool());
        self.groups = Arc::new(self.groups.successor());
        self
    }

    /// The durable table [`Store::commit_step`] writes to (`{prefix}durable` unless
    /// [`with_journals`](Self::with_journals) chose another).
    pub fn journal_table(&self) -> &str {
        self.journals.name()
    }

    /// The durable journals' backend on this store's pool and journal table (the table is
    /// created by [`DurableKv::open`] or the first call). It shares transactions with this
    /// store. The pool stays the store's: the kv's `close()` leaves it open.
    pub fn durability_kv(&self) -> PostgresKv {
        PostgresKv::lazy(self.pool.borrowed(), self.journals.prefix())
    }

    /// The inbox and outbox journals of `scope` on [`durability_kv`](Self::durability_kv).
    pub fn durability(
        &self,
        scope: Scope,
        config: DurabilityConfig,
    ) -> Result<KvDurability<PostgresKv>, DurabilityError> {
        KvDurability::new(Arc::new(self.durability_kv()), scope, config)
    }

    /// The table prefix.
    pub fn table_prefix(&self) -> &str {
        &self.prefix
    }

    /// The pool (the one given to [`with_pool`](Self::with_pool), or the one created here).
    pub fn pool(&self) -> &Pool {
        &self.pool.pool
    }

    fn t(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn check_open(&self) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        Ok(())
    }

    /// Commits `write` on an open store with the other writes of the moment (see [`group`]).
    async fn write(&self, write: Write) -> Result<StepCommitOutcome, StoreError> {
        self.check_open()?;
        let writers = quarter_of(&self.pool);
        let committer = || Committer {
            pool: self.pool.clone(),
            journals: Arc::clone(&self.journals),
            writes: Arc::clone(&self.writes),
        };
        self.groups.commit(write, committer, writers).await
    }

    /// Runs one statement on an open store.
    async fn query(
        &self,
        operation: &'static str,
        table: &str,
        key: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let table = self.t(table);
        let statement = Statement {
            sql,
            params: params.to_vec(),
            table: &table,
            key,
        };
        self.run(operation, &statement).await
    }

    /// Runs `statement` on an open store, on its own.
    async fn run(
        &self,
        operation: &'static str,
        statement: &Statement<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        self.check_open()?;
        let client = self.pool.client().await.map_err(|e| StoreError::Query {
            operation,
            source: Box::new(e),
        })?;
        let fail = |e: tokio_postgres::Error| StoreError::Query {
            operation,
            source: Box::new(query_err(statement.table, statement.key, e)),
        };
        let prepared = client.prepare_cached(statement.sql).await.map_err(fail)?;
        client
            .query(&prepared, &statement.params)
            .await
            .map_err(fail)
    }
}

impl PostgresStore {
    /// The read of a group of chats' checkpoints (`columns`, the chat first), each row decoded
    /// by `decode` (see [`reads`]).
    fn by_chat<'a, T: Send + 'static>(
        &'a self,
        operation: &'static str,
        columns: &str,
        decode: impl Fn(&Row) -> Result<T, StoreError> + Send + Sync + 'static,
    ) -> impl Fn(Vec<String>) -> BoxedRead<'a, String, T> + 'a {
        let sql = format!(
            "SELECT {columns} FROM {} WHERE chat = ANY($1)",
            self.t("checkpoints")
        );
        let (sql, decode) = (Arc::new(sql), Arc::new(decode));
        move |chats: Vec<String>| {
            let (sql, decode) = (Arc::clone(&sql), Arc::clone(&decode));
            Box::pin(async move {
                let key = chats.first().map_or("", String::as_str);
                let rows = self
                    .query(operation, "checkpoints", key, &sql, &[&chats])
                    .await?;
                let mut found = HashMap::with_capacity(rows.len());
                for row in &rows {
                    let chat: String = row
                        .try_get(0)
                        .map_err(|e| rows::corrupt("checkpoint", key, e))?;
                    found.insert(chat, decode(row).map_err(Arc::new));
                }
                Ok(found)
            })
        }
    }

    /// Writes `rows` (see [`table_writes`]): one statement a table, in one transaction when
    /// there are several.
    async fn write_rows(
        &self,
        operation: &'static str,
        mut rows: TableWrites<'_>,
    ) -> Result<(), StoreError> {
        rows.finish();
        let statements = rows.statements(&self.writes);
        if let [statement] = &statements[..] {
            return self.run(operation, statement).await.map(drop);
        }
        self.check_open()?;
        let fail = |source: PostgresError| StoreError::Query {
            operation,
            source: Box::new(source),
        };
        let client = self.pool.write_client().await.map_err(fail)?;
        Pipelined::run(client, &statements).await.map_err(fail)
    }
}

/// How many group commits, and how many group reads of each kind, run at once: a quarter of
/// the pool's connections (at least one), so that neither takes the whole pool.
fn quarter_of(pool: &PgPool) -> usize {
    (pool.pool.status().max_size / 4).max(1)
}

fn open_err(e: PostgresError) -> StoreError {
    StoreError::Query {
        operation: "open",
        source: Box::new(e),
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn open(&self) -> Result<(), StoreError> {
        self.create_schema().await.map_err(open_err)?;
        self.groups.open();
        self.closed.store(false, Ordering::Release);
        Ok(())
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        self.groups.close();
        if self.pool.owned {
            // Idle connections are dropped; a later `open()` makes new ones.
            let _ = self.pool.pool.retain(|_, _| false);
        }
        Ok(())
    }

    async fn upsert_chat(&self, c: &ChatRecord) -> Result<(), StoreError> {
        let mut rows = TableWrites::default();
        rows.replace_chat(c);
        self.write_rows("upsert_chat", rows).await
    }

    /// The chat, the contact and the ledger row in one transaction: all of them or none (the
    /// trait's default makes three separate writes after reading the chat).
    async fn record_inbound(
        &self,
        chat: &ChatRecord,
        contact: &ContactRecord,
        entry: &LedgerEntry,
    ) -> Result<(), StoreError> {
        let mut rows = TableWrites::default();
        rows.chat(chat);
        rows.contact(contact);
        rows.ledger(entry);
        self.write_rows("record_inbound", rows).await
    }

    async fn chat(&self, id: &str) -> Result<Option<ChatRecord>, StoreError> {
        let sql = format!(
            "SELECT is_group, title, lang, first_seen_ms, last_activity_ms FROM {} WHERE id = $1",
            self.t("chats")
        );
        let rows = self.query("chat", "chats", id, &sql, &[&id]).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let bad = |e: tokio_postgres::Error| rows::corrupt("chat", id, e);
        Ok(Some(ChatRecord {
            id: id.to_owned(),
            is_group: row.try_get(0).map_err(bad)?,
            title: row.try_get(1).map_err(bad)?,
            lang: row.try_get(2).map_err(bad)?,
            first_seen_ms: row.try_get(3).map_err(bad)?,
            last_activity_ms: row.try_get(4).map_err(bad)?,
        }))
    }

    async fn upsert_contact(&self, c: &ContactRecord) -> Result<(), StoreError> {
        let mut rows = TableWrites::default();
        rows.replace_contact(c);
        self.write_rows("upsert_contact", rows).await
    }

    async fn contact(&self, id: &str) -> Result<Option<ContactRecord>, StoreError> {
        let sql = format!(
            "SELECT name, last_seen_ms FROM {} WHERE id = $1",
            self.t("contacts")
        );
        let rows = self.query("contact", "contacts", id, &sql, &[&id]).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let bad = |e: tokio_postgres::Error| rows::corrupt("contact", id, e);
        Ok(Some(ContactRecord {
            id: id.to_owned(),
            name: row.try_get(0).map_err(bad)?,
            last_seen_ms: row.try_get(1).map_err(bad)?,
        }))
    }

    async fn append_ledger(&self, e: &LedgerEntry) -> Result<(), StoreError> {
        let mut rows = TableWrites::default();
        rows.ledger(e);
        self.write_rows("append_ledger", rows).await
    }

    async fn ledger(&self, chat: &str, limit: usize) -> Result<Vec<LedgerEntry>, StoreError> {
        if limit == 0 {
            self.check_open()?;
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT chat, message_id, direction, status, text, content, key, error, at_ms FROM \
             (SELECT * FROM {} WHERE chat = $1 ORDER BY seq DESC LIMIT $2) last ORDER BY seq",
            self.t("ledger")
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query("ledger", "ledger", chat, &sql, &[&chat, &limit])
            .await?;
        rows.iter().map(rows::ledger_entry).collect()
    }

    async fn save_checkpoint(&self, c: &FlowCheckpoint) -> Result<(), StoreError> {
        let mut rows = TableWrites::default();
        rows.save_checkpoint(c);
        self.write_rows("save_checkpoint", rows).await
    }

    /// Read with the reads other chats make at the same moment, in one statement.
    async fn checkpoint(&self, chat: &str) -> Result<Option<FlowCheckpoint>, StoreError> {
        self.check_open()?;
        let read = self.by_chat("checkpoint", CHECKPOINT_COLUMNS, rows::checkpoint_row);
        decoded(
            "checkpoint",
            self.reads.checkpoints.read(&chat.to_owned(), read).await,
        )
    }

    /// Read with the reads other chats make at the same moment, in one statement.
    async fn checkpoint_head(&self, chat: &str) -> Result<Option<CheckpointHead>, StoreError> {
        self.check_open()?;
        let head = |row: &Row| {
            let chat: String = row
                .try_get(0)
                .map_err(|e| rows::corrupt("checkpoint", "?", e))?;
            let bad = |e| rows::corrupt("checkpoint", &chat, e);
            Ok(CheckpointHead {
                step: rows::bits_u64(row.try_get(1).map_err(bad)?),
                inbound_id: row.try_get(2).map_err(bad)?,
            })
        };
        let read = self.by_chat("checkpoint_head", "chat, step, inbound_id", head);
        decoded(
            "checkpoint_head",
            self.reads.heads.read(&chat.to_owned(), read).await,
        )
    }

    async fn delete_checkpoint(&self, chat: &str) -> Result<(), StoreError> {
        let mut rows = TableWrites::default();
        rows.remove_checkpoint(chat);
        self.write_rows("delete_checkpoint", rows).await
    }

    async fn checkpoints(&self) -> Result<Vec<FlowCheckpoint>, StoreError> {
        let sql = format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM {} ORDER BY chat",
            self.t("checkpoints")
        );
        let rows = self
            .query("checkpoints", "checkpoints", "*", &sql, &[])
            .await?;
        rows.iter().map(rows::checkpoint_row).collect()
    }

    async fn set_handoff(&self, h: &HandoffRecord) -> Result<(), StoreError> {
        let sql = format!(
            "INSERT INTO {} (chat, agent, reason, since_ms) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (chat) DO UPDATE SET agent = $2, reason = $3, since_ms = $4",
            self.t("handoffs")
        );
        let params: [&(dyn ToSql + Sync); 4] = [&h.chat, &h.agent, &h.reason, &h.since_ms];
        self.query("set_handoff", "handoffs", &h.chat, &sql, &params)
            .await?;
        Ok(())
    }

    async fn clear_handoff(&self, chat: &str) -> Result<(), StoreError> {
        let sql = format!("DELETE FROM {} WHERE chat = $1", self.t("handoffs"));
        self.query("clear_handoff", "handoffs", chat, &sql, &[&chat])
            .await?;
        Ok(())
    }

    async fn handoffs(&self) -> Result<Vec<HandoffRecord>, StoreError> {
        let sql = format!(
            "SELECT chat, agent, reason, since_ms FROM {} ORDER BY chat",
            self.t("handoffs")
        );
        let rows = self.query("handoffs", "handoffs", "*", &sql, &[]).await?;
        rows.iter().map(rows::handoff_row).collect()
    }

    /// Read with the reads other chats make at the same moment, in one statement: a probe of
    /// the primary key per key (the `LIMIT 1` keeps the subquery a probe: joined instead, the
    /// plan a prepared statement keeps can be a scan of the whole table, made while it was
    /// small, for as long as the connection lives).
    async fn get_value(&self, scope: &str, key: &str) -> Result<Option<Value>, StoreError> {
        self.check_open()?;
        let sql = format!(
            "SELECT r.scope, r.key, v.value FROM unnest($1::text[], $2::text[]) AS r(scope, key) \
             CROSS JOIN LATERAL (SELECT value FROM {} WHERE scope = r.scope AND key = r.key \
             LIMIT 1) v",
            self.t("kv")
        );
        let read = |keys: Vec<(String, String)>| async {
            let (scopes, names): (Vec<String>, Vec<String>) = keys.into_iter().unzip();
            let first = names.first().map_or("", String::as_str);
            let rows = self
                .query("get_value", "kv", first, &sql, &[&scopes, &names])
                .await?;
            let mut found = HashMap::with_capacity(rows.len());
            for row in &rows {
                let scope: String = row
                    .try_get(0)
                    .map_err(|e| rows::corrupt("value", first, e))?;
                let key: String = row
                    .try_get(1)
                    .map_err(|e| rows::corrupt("value", first, e))?;
                let value = row
                    .try_get::<_, String>(2)
                    .map_err(|e| rows::corrupt("value", &key, e))
                    .and_then(|text| rows::json("value", &key, &text))
                    .map_err(Arc::new);
                found.insert((scope, key), value);
            }
            Ok(found)
        };
        let read = self
            .reads
            .values
            .read(&(scope.to_owned(), key.to_owned()), read)
            .await;
        decoded("get_value", read)
    }

    /// Committed with the other writes of the moment (see `group`).
    async fn set_value(&self, scope: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        self.write(Write::Value {
            operation: "set_value",
            scope: scope.to_owned(),
            key: key.to_owned(),
            value: Some(value.to_string()),
        })
        .await
        .map(drop)
    }

    /// Committed with the other writes of the moment (see `group`).
    async fn delete_value(&self, scope: &str, key: &str) -> Result<(), StoreError> {
        self.write(Write::Value {
            operation: "delete_value",
            scope: scope.to_owned(),
            key: key.to_owned(),
            value: None,
        })
        .await
        .map(drop)
    }

    async fn values(&self, scope: &str) -> Result<Vec<(String, Value)>, StoreError> {
        let sql = format!(
            "SELECT key, value FROM {} WHERE scope = $1 ORDER BY key",
            self.t("kv")
        );
        let rows = self.query("values", "kv", scope, &sql, &[&scope]).await?;
        rows.iter()
            .map(|row| {
                let key: String = row
                    .try_get(0)
                    .map_err(|e| rows::corrupt("value", scope, e))?;
                let text: String = row
                    .try_get(1)
                    .map_err(|e| rows::corrupt("value", &key, e))?;
                let value = rows::json("value", &key, &text)?;
                Ok((key, value))
            })
            .collect()
    }

    /// `true` when `kv` is a [`PostgresKv`] (also behind `Arc` or the crash harness) whose
    /// table is this store's [`journal_table`](PostgresStore::journal_table) and whose pool
    /// reaches this store's database: the same pool, or the same server identity once both
    /// have connected, or else the same hosts, ports, database, user and options in their
    /// connection strings (see the [module documentation](super)).
    fn journal_backend(&self) -> Option<Arc<dyn DurableKv>> {
        Some(Arc::new(self.durability_kv()))
    }

    fn shares_transactions_with(&self, kv: &dyn DurableKv) -> bool {
        let Some(kv) = kv.as_any().and_then(|a| a.downcast_ref::<PostgresKv>()) else {
            return false;
        };
        if !kv.pg_pool().same_database(&self.pool) {
            return false;
        }
        if kv.table() != self.journals.name() {
            tracing::debug!(
                target: "botmesh_durability::postgres",
                kv_table = kv.table(),
                journal_table = self.journals.name(),
                "the PostgresKv is on the store's database but not in its journal table \
                 (see PostgresStore::with_journals): flow steps are not committed atomically"
            );
            return false;
        }
        true
    }

    /// One transaction on the store's pool, its statements sent together (the journal
    /// operations on the journal table, then the checkpoint change, the value removals, the
    /// chat, the contact and the ledger rows): the first conflict rolls everything back and is
    /// returned. Steps committed at the same moment share one transaction (group commit, see
    /// `group`), with the answers of the steps run one by one. The journal table is created
    /// first if it is missing.
    async fn commit_step(&self, step: &StepCommit) -> Result<StepCommitOutcome, StoreError> {
        self.write(Write::Step(Box::new(step.clone()))).await
    }
}
