//! [`RedisStore`]: the [`Store`] on Redis, under `{prefix}:store:`.
//!
//! | records | key | type |
//! | --- | --- | --- |
//! | schema marker | `{prefix}:store:meta` (`application = botmesh`, `schema_version = 1`) | hash |
//! | a chat | `{prefix}:store:chat:<id>` | string (JSON) |
//! | a contact | `{prefix}:store:contact:<id>` | string (JSON) |
//! | a chat's ledger | `{prefix}:store:ledger:<chat>` (`RPUSH`, read with `LRANGE -n -1`) | list of JSON |
//! | checkpoints | `{prefix}:store:checkpoints` (field: chat) | hash of JSON |
//! | handoffs | `{prefix}:store:handoffs` (field: chat) | hash of JSON |
//! | per-scope values | `{prefix}:store:kv:<scope>` (field: key; listed sorted by key bytes) | hash of JSON |
//!
//! `open()` writes the schema marker if missing and refuses a newer schema version; `close()`
//! makes every call fail with [`StoreError::Closed`] until the next `open()`. Each call is one
//! command, retried once after a lost connection (every command here is idempotent except
//! `RPUSH`, which is not retried). It needs Redis persistence (AOF) to survive a Redis
//! restart, like the journals.
//!
//! On one server (not a cluster), the store shares its transactions with a [`RedisKv`] on the
//! same server, database and prefix (its own journal backend, or one opened with the same URL
//! and prefix): [`Store::commit_step`] writes a flow step's journal operations
//! (`{prefix}:{durable:…}`) and its store writes in one Lua script, atomic on the server, so
//! an inbound message is journaled with its ledger row, chat and contact in one round trip,
//! a step's checkpoint with its sends and the inbound's completion in another, and a send
//! marked sent with its ledger row in a third. On a cluster the store's keys and a scope's
//! journal keys hash to different slots, so each is written on its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::{Cmd, FromRedisValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::kv::RedisKv;
use super::scripts::STEP_SCRIPT;
use super::{
    Conn, Keyspace, RedisConfig, RedisError, client, connect, is_connection_lost, keyspace,
    own_keyspace,
};
use crate::kv::{CasOutcome, DurableKv, KvOp};
use crate::store::{
    ChatRecord, CheckpointWrite, ContactRecord, FlowCheckpoint, HandoffRecord, LedgerEntry,
    StepCommit, StepCommitOutcome, Store, StoreError,
};
use serde_json::Value;

/// The schema version this build writes and reads.
const SCHEMA_VERSION: i64 = 1;

/// A [`Store`] on Redis; clones share the connection and the open/closed state.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    prefix: Arc<str>,
    keyspace: Keyspace,
    closed: Arc<AtomicBool>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn store_err(operation: &'static str, e: RedisError) -> StoreError {
    StoreError::Query {
        operation,
        source: Box::new(e),
    }
}

impl RedisStore {
    /// Connects to `url` with the default [`RedisConfig`] and opens the store.
    pub async fn open_url(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, RedisConfig::default()).await
    }

    /// Connects to `url` with `config` and opens the store.
    pub async fn open_with(url: &str, config: RedisConfig) -> Result<Self, StoreError> {
        let client = client(url).map_err(|e| store_err("open", e))?;
        Self::with_client(client, config).await
    }

    /// Connects through `client` with `config` and opens the store.
    pub async fn with_client(
        client: redis::Client,
        config: RedisConfig,
    ) -> Result<Self, StoreError> {
        let prefix = config
            .checked_prefix()
            .map_err(|e| store_err("open", e))?
            .to_owned();
        let keyspace = keyspace(&client);
        let conn = connect(client, &config)
            .await
            .map_err(|e| store_err("open", e))?;
        Self::start(conn, prefix, keyspace).await
    }

    /// Connects to the Redis Cluster whose seed nodes are `nodes` and opens the store (feature
    /// `redis-cluster`).
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub async fn open_cluster(nodes: &[&str], config: RedisConfig) -> Result<Self, StoreError> {
        let prefix = config
            .checked_prefix()
            .map_err(|e| store_err("open", e))?
            .to_owned();
        let (conn, _) = super::connect_cluster(nodes, &config)
            .await
            .map_err(|e| store_err("open", e))?;
        Self::start(conn, prefix, None).await
    }

    /// Uses a connection manager you opened, and opens the store.
    pub async fn with_connection(
        conn: ConnectionManager,
        config: &RedisConfig,
    ) -> Result<Self, StoreError> {
        let prefix = config
            .checked_prefix()
            .map_err(|e| store_err("open", e))?
            .to_owned();
        Self::start(Conn::Single(conn), prefix, own_keyspace()).await
    }

    async fn start(conn: Conn, prefix: String, keyspace: Keyspace) -> Result<Self, StoreError> {
        let store = RedisStore {
            conn,
            prefix: prefix.into(),
            keyspace,
            closed: Arc::new(AtomicBool::new(true)),
        };
        store.open().await?;
        Ok(store)
    }

    /// The journals' backend on this store's connection, keyspace and prefix.
    fn journals(&self) -> RedisKv {
        RedisKv::sharing(self.conn.clone(), &self.prefix, self.keyspace.clone())
    }

    /// `{prefix}:store:<rest>`.
    fn key(&self, rest: &str) -> String {
        format!("{}:store:{rest}", self.prefix)
    }

    /// Runs one command on an open store; retried once after a lost connection if `retry`.
    async fn run<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        cmd: &Cmd,
        retry: bool,
    ) -> Result<T, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        self.run_open(operation, key, cmd, retry).await
    }

    async fn run_open<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        cmd: &Cmd,
        retry: bool,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        let fail = |source| {
            store_err(
                operation,
                RedisError::Command {
                    key: key.to_owned(),
                    source,
                },
            )
        };
        match cmd.query_async(&mut conn).await {
            Ok(v) => Ok(v),
            Err(e) if retry && is_connection_lost(&e) => {
                tracing::error!(
                    target: "botmesh_durability::redis",
                    operation, error = %e,
                    "Redis connection lost; reconnecting and retrying once"
                );
                cmd.query_async(&mut conn).await.map_err(fail)
            }
            Err(e) => Err(fail(e)),
        }
    }

    fn encode(what: &'static str, key: &str, value: &impl Serialize) -> Result<String, StoreError> {
        serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
            what,
            key: key.to_owned(),
            reason: e.to_string(),
        })
    }

    fn decode<T: DeserializeOwned>(
        what: &'static str,
        key: &str,
        json: &str,
    ) -> Result<T, StoreError> {
        serde_json::from_str(json).map_err(|e| StoreError::Corrupt {
            what,
            key: key.to_owned(),
            reason: e.to_string(),
        })
    }

    /// Runs a write command on `key` (retried once after a lost connection).
    async fn write(&self, operation: &'static str, key: &str, cmd: &Cmd) -> Result<(), StoreError> {
        self.run::<()>(operation, key, cmd, true).await
    }

    async fn put(
        &self,
        operation: &'static str,
        key: String,
        json: String,
    ) -> Result<(), StoreError> {
        self.write(operation, &key, redis::cmd("SET").arg(&key).arg(json))
            .await
    }

    /// The JSON value read by `cmd` on `key`, decoded as `what` named `name`.
    async fn read<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        (what, name): (&'static str, &str),
        key: &str,
        cmd: &Cmd,
    ) -> Result<Option<T>, StoreError> {
        let json: Option<String> = self.run(operation, key, cmd, true).await?;
        json.map(|j| Self::decode(what, name, &j)).transpose()
    }

    async fn fetch<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        what: &'static str,
        key: String,
    ) -> Result<Option<T>, StoreError> {
        self.read(operation, (what, &key), &key, redis::cmd("GET").arg(&key))
            .await
    }

    async fn hset(
        &self,
        operation: &'static str,
        hash: String,
        field: &str,
        json: String,
    ) -> Result<(), StoreError> {
        let cmd = redis::cmd("HSET")
            .arg(&hash)
            .arg(field)
            .arg(json)
            .to_owned();
        self.write(operation, &hash, &cmd).await
    }

    /// The field of a hash, decoded as `what`.
    async fn hget<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        what: &'static str,
        hash: String,
        field: &str,
    ) -> Result<Option<T>, StoreError> {
        let cmd = redis::cmd("HGET").arg(&hash).arg(field).to_owned();
        self.read(operation, (what, field), &hash, &cmd).await
    }

    async fn hdel(
        &self,
        operation: &'static str,
        hash: String,
        field: &str,
    ) -> Result<(), StoreError> {
        self.write(operation, &hash, redis::cmd("HDEL").arg(&hash).arg(field))
            .await
    }

    async fn hall<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        what: &'static str,
        hash: String,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(&hash);
        let mut pairs: Vec<(String, String)> = self.run(operation, &hash, &cmd, true).await?;
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs
            .into_iter()
            .map(|(field, json)| {
                let value = Self::decode(what, &field, &json)?;
                Ok((field, value))
            })
            .collect()
    }
}

#[async_trait]
impl Store for RedisStore {
    fn journal_backend(&self) -> Option<Arc<dyn crate::kv::DurableKv>> {
        Some(Arc::new(self.journals()))
    }

    /// `true` when `kv` is a [`RedisKv`] (also behind `Arc` or the crash harness) on this
    /// store's server, database and prefix (this store's own journal backend, or one opened
    /// with the same URL and prefix), not on a Redis Cluster: a flow step's journal operations
    /// and store writes then run as one script.
    fn shares_transactions_with(&self, kv: &dyn DurableKv) -> bool {
        kv.as_any()
            .and_then(|a| a.downcast_ref::<RedisKv>())
            .is_some_and(|kv| kv.same_keyspace(&self.keyspace, &self.prefix))
    }

    /// One script (atomic on the server): every journal operation is checked first and the
    /// first conflict writes nothing; then the operations, the checkpoint change, the value
    /// removals, the chat, the contact and the ledger rows. Retried once after a lost
    /// connection when its first operation is a create/replace, whose nonce tells a script
    /// that already ran (its ledger rows are appends, not written twice); otherwise the error
    /// is returned.
    async fn commit_step(&self, step: &StepCommit) -> Result<StepCommitOutcome, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        let kv = self.journals();
        let scope = &step.scope;
        let prepared: Vec<_> = step
            .journal
            .iter()
            .map(|op| kv.prepare(scope, op))
            .collect();
        let mut tail: Vec<(String, [Vec<u8>; 4])> = Vec::new();
        let mut push = |key: String, kind: &str, a: Vec<u8>, b: Vec<u8>, c: Vec<u8>| {
            tail.push((key, [kind.as_bytes().to_vec(), a, b, c]));
        };
        match &step.checkpoint {
            CheckpointWrite::Save(cp) => {
                let json = Self::encode("checkpoint", &cp.chat, cp)?;
                push(
                    self.key("checkpoints"),
                    "hset",
                    cp.chat.clone().into_bytes(),
                    json.into_bytes(),
                    Vec::new(),
                );
            }
            CheckpointWrite::Delete { chat } => push(
                self.key("checkpoints"),
                "hdel",
                chat.clone().into_bytes(),
                Vec::new(),
                Vec::new(),
            ),
            CheckpointWrite::Keep => {}
        }
        for (scope, key) in &step.delete_values {
            push(
                self.key(&format!("kv:{scope}")),
                "hdel",
                key.clone().into_bytes(),
                Vec::new(),
                Vec::new(),
            );
        }
        if let Some(chat) = &step.chat {
            let json = Self::encode("chat", &chat.id, chat)?;
            push(
                self.key(&format!("chat:{}", chat.id)),
                "chat",
                json.into_bytes(),
                chat.is_group.to_string().into_bytes(),
                chat.last_activity_ms.to_string().into_bytes(),
            );
        }
        if let Some(contact) = &step.contact {
            let json = Self::encode("contact", &contact.id, contact)?;
            push(
                self.key(&format!("contact:{}", contact.id)),
                "set",
                json.into_bytes(),
                Vec::new(),
                Vec::new(),
            );
        }
        for entry in &step.ledger {
            let json = Self::encode("ledger", &entry.chat, entry)?;
            push(
                self.key(&format!("ledger:{}", entry.chat)),
                "rpush",
                json.into_bytes(),
                Vec::new(),
                Vec::new(),
            );
        }
        let mut invocation = STEP_SCRIPT.prepare_invoke();
        invocation
            .key(kv.counter_key(scope))
            .key(kv.index_key(scope, crate::kv::Index::One))
            .key(kv.index_key(scope, crate::kv::Index::Two));
        for p in &prepared {
            invocation.key(&p.record);
        }
        for (key, _) in &tail {
            invocation.key(key);
        }
        invocation.arg(prepared.len());
        for p in &prepared {
            for a in &p.args {
                invocation.arg(a);
            }
        }
        for (_, args) in &tail {
            for a in args {
                invocation.arg(a);
            }
        }
        let first = prepared
            .first()
            .map_or_else(|| self.key("checkpoints"), |p| p.record.clone());
        let fail = |reason: String| {
            store_err(
                "commit_step",
                RedisError::Reply {
                    key: first.clone(),
                    reason,
                },
            )
        };
        let command_err = |source| {
            store_err(
                "commit_step",
                RedisError::Command {
                    key: first.clone(),
                    source,
                },
            )
        };
        // A retry after a lost connection is recognised by the first operation's nonce when it
        // is a create/replace; otherwise the error is returned.
        let retriable = step
            .journal
            .first()
            .is_some_and(|op| matches!(op, KvOp::Cas { .. } | KvOp::CreateIfNoneIn { .. }));
        let mut conn = self.conn.clone();
        let reply: Vec<String> = match invocation.invoke_async(&mut conn).await {
            Ok(reply) => reply,
            Err(e) if retriable && is_connection_lost(&e) => {
                tracing::error!(
                    target: "botmesh_durability::redis",
                    operation = "commit_step", error = %e,
                    "Redis connection lost; reconnecting and retrying once"
                );
                invocation
                    .invoke_async(&mut conn)
                    .await
                    .map_err(command_err)?
            }
            Err(e) => return Err(command_err(e)),
        };
        let parse = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| fail(format!("version `{v}` is not a number")))
        };
        match reply.first().map(String::as_str) {
            Some("ok") if reply.len() == prepared.len() + 1 => {
                let outcomes = reply[1..]
                    .iter()
                    .map(|v| Ok(CasOutcome::Ok { version: parse(v)? }))
                    .collect::<Result<_, StoreError>>()?;
                Ok(StepCommitOutcome::Committed(outcomes))
            }
            Some("conflict") if reply.len() == 3 => {
                let op = reply[1]
                    .parse::<usize>()
                    .map_err(|_| fail("conflict index is not a number".to_owned()))?;
                let current = match reply[2].as_str() {
                    "" => None,
                    v => Some(parse(v)?),
                };
                Ok(StepCommitOutcome::Conflict { op, current })
            }
            _ => Err(fail("unexpected reply to the step script".to_owned())),
        }
    }

    async fn open(&self) -> Result<(), StoreError> {
        let meta = self.key("meta");
        let mut cmd = redis::cmd("HSETNX");
        cmd.arg(&meta).arg("application").arg("botmesh");
        self.run_open::<()>("open", &meta, &cmd, true).await?;
        let mut cmd = redis::cmd("HSETNX");
        cmd.arg(&meta).arg("schema_version").arg(SCHEMA_VERSION);
        self.run_open::<()>("open", &meta, &cmd, true).await?;
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&meta).arg("schema_version");
        let found: Option<i64> = self.run_open("open", &meta, &cmd, true).await?;
        let found = found.unwrap_or(SCHEMA_VERSION);
        if found > SCHEMA_VERSION {
            return Err(store_err(
                "open",
                RedisError::SchemaTooNew {
                    key: meta,
                    found,
                    supported: SCHEMA_VERSION,
                },
            ));
        }
        self.closed.store(false, Ordering::Release);
        Ok(())
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        Ok(())
    }

    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<(), StoreError> {
        let json = Self::encode("chat", &chat.id, chat)?;
        self.put("upsert_chat", self.key(&format!("chat:{}", chat.id)), json)
            .await
    }

    async fn chat(&self, id: &str) -> Result<Option<ChatRecord>, StoreError> {
        self.fetch("chat", "chat", self.key(&format!("chat:{id}")))
            .await
    }

    async fn upsert_contact(&self, contact: &ContactRecord) -> Result<(), StoreError> {
        let json = Self::encode("contact", &contact.id, contact)?;
        let key = self.key(&format!("contact:{}", contact.id));
        self.put("upsert_contact", key, json).await
    }

    async fn contact(&self, id: &str) -> Result<Option<ContactRecord>, StoreError> {
        self.fetch("contact", "contact", self.key(&format!("contact:{id}")))
            .await
    }

    async fn append_ledger(&self, entry: &LedgerEntry) -> Result<(), StoreError> {
        let json = Self::encode("ledger", &entry.chat, entry)?;
        let key = self.key(&format!("ledger:{}", entry.chat));
        let mut cmd = redis::cmd("RPUSH");
        cmd.arg(&key).arg(json);
        // Not retried: a push whose reply was lost may have landed.
        self.run::<()>("append_ledger", &key, &cmd, false).await
    }

    async fn ledger(&self, chat: &str, limit: usize) -> Result<Vec<LedgerEntry>, StoreError> {
        let key = self.key(&format!("ledger:{chat}"));
        if limit == 0 {
            if self.closed.load(Ordering::Acquire) {
                return Err(StoreError::Closed);
            }
            return Ok(Vec::new());
        }
        let start = -i64::try_from(limit).unwrap_or(i64::MAX);
        let mut cmd = redis::cmd("LRANGE");
        cmd.arg(&key).arg(start).arg(-1);
        let items: Vec<String> = self.run("ledger", &key, &cmd, true).await?;
        items
            .iter()
            .map(|j| Self::decode("ledger", chat, j))
            .collect()
    }

    async fn save_checkpoint(&self, checkpoint: &FlowCheckpoint) -> Result<(), StoreError> {
        let json = Self::encode("checkpoint", &checkpoint.chat, checkpoint)?;
        self.hset(
            "save_checkpoint",
            self.key("checkpoints"),
            &checkpoint.chat,
            json,
        )
        .await
    }

    async fn checkpoint(&self, chat: &str) -> Result<Option<FlowCheckpoint>, StoreError> {
        self.hget("checkpoint", "checkpoint", self.key("checkpoints"), chat)
            .await
    }

    async fn delete_checkpoint(&self, chat: &str) -> Result<(), StoreError> {
        self.hdel("delete_checkpoint", self.key("checkpoints"), chat)
            .await
    }

    async fn checkpoints(&self) -> Result<Vec<FlowCheckpoint>, StoreError> {
        let all = self
            .hall("checkpoints", "checkpoint", self.key("checkpoints"))
            .await?;
        Ok(all.into_iter().map(|(_, c)| c).collect())
    }

    async fn set_handoff(&self, handoff: &HandoffRecord) -> Result<(), StoreError> {
        let json = Self::encode("handoff", &handoff.chat, handoff)?;
        self.hset("set_handoff", self.key("handoffs"), &handoff.chat, json)
            .await
    }

    async fn clear_handoff(&self, chat: &str) -> Result<(), StoreError> {
        self.hdel("clear_handoff", self.key("handoffs"), chat).await
    }

    async fn handoffs(&self) -> Result<Vec<HandoffRecord>, StoreError> {
        let all = self
            .hall("handoffs", "handoff", self.key("handoffs"))
            .await?;
        Ok(all.into_iter().map(|(_, h)| h).collect())
    }

    async fn get_value(&self, scope: &str, key: &str) -> Result<Option<Value>, StoreError> {
        self.hget("get_value", "value", self.key(&format!("kv:{scope}")), key)
            .await
    }

    async fn set_value(&self, scope: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        let json = Self::encode("value", key, value)?;
        self.hset("set_value", self.key(&format!("kv:{scope}")), key, json)
            .await
    }

    async fn delete_value(&self, scope: &str, key: &str) -> Result<(), StoreError> {
        self.hdel("delete_value", self.key(&format!("kv:{scope}")), key)
            .await
    }

    async fn values(&self, scope: &str) -> Result<Vec<(String, Value)>, StoreError> {
        self.hall("values", "value", self.key(&format!("kv:{scope}")))
            .await
    }
}
