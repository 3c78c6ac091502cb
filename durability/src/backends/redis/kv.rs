//! [`RedisKv`]: the [`DurableKv`] on Redis, one hash per entry and two sorted sets per scope.
//!
//! | operation | Redis |
//! | --- | --- |
//! | `get` | `HMGET {tag}:r:<key> v d i1 i2` |
//! | `cas`, `delete`, `CreateIfNoneIn`, `batch` | the write script (one `EVALSHA`, atomic; a batch is one call; a guarded create checks its range with `ZRANGEBYLEX … LIMIT 0 1` in it) |
//! | `range` | the range script: `ZRANGEBYLEX` on `{tag}:i1`/`{tag}:i2`, then the entries |
//!
//! `{tag}` is `{prefix}:{durable:<scope>}` (the scope id with `%`, `{` and `}` percent-escaped),
//! so every key of a scope hashes to one slot and two scopes never share a key. Index members
//! are `escaped value \0 key` with score 0: lexicographic order is (value, key) in byte order,
//! and the order-preserving escape keeps values holding a NUL in place. Versions come from the
//! scope's counter `{tag}:v` (`INCR`), never reset, so a version is never reused.
//!
//! It does not expire anything (no TTL) and does not decode records: that is the journals' job.
//! See the [module](super) documentation for persistence (AOF) and reconnection.

use async_trait::async_trait;
use redis::aio::ConnectionManager;

use super::scripts::{RANGE_SCRIPT, WRITE_SCRIPT};
use super::{
    Conn, Keyspace, RedisConfig, RedisError, client, connect, is_connection_lost, keyspace,
    own_keyspace,
};
use crate::backends::order_escape;
use crate::kv::{
    CasOutcome, DurableKv, Index, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned,
};

/// The [`DurableKv`] on Redis; cheap to clone (clones share the connection).
///
/// ```no_run
/// # use botmesh_durability::backends::redis::{RedisConfig, RedisKv};
/// # async fn demo() -> Result<(), botmesh_durability::backends::redis::RedisError> {
/// let kv = RedisKv::open_with("redis://cache.internal:6379/", RedisConfig::new().prefix("shop")).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisKv {
    conn: Conn,
    prefix: String,
    target: String,
    keyspace: Keyspace,
}

impl std::fmt::Debug for RedisKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisKv")
            .field("server", &self.target)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// An operation prepared for the write script (and the step script of
/// [`RedisStore`](super::RedisStore)).
pub(super) struct Prepared {
    /// The entry's key.
    pub(super) record: String,
    /// The script's 10 arguments of the operation.
    pub(super) args: [Vec<u8>; 10],
}

impl RedisKv {
    /// Connects to `url` (`redis://[:password@]host:port/db`) with the default [`RedisConfig`].
    pub async fn open(url: &str) -> Result<Self, RedisError> {
        Self::open_with(url, RedisConfig::default()).await
    }

    /// Connects to `url` with `config`.
    pub async fn open_with(url: &str, config: RedisConfig) -> Result<Self, RedisError> {
        Self::with_client(client(url)?, config).await
    }

    /// Connects through `client` with `config`.
    pub async fn with_client(
        client: redis::Client,
        config: RedisConfig,
    ) -> Result<Self, RedisError> {
        let prefix = config.checked_prefix()?.to_owned();
        let target = super::target(&client);
        let keyspace = keyspace(&client);
        let conn = connect(client, &config).await?;
        Ok(RedisKv {
            conn,
            prefix,
            target,
            keyspace,
        })
    }

    /// Connects to the Redis Cluster whose seed nodes are `nodes` (feature `redis-cluster`).
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub async fn open_cluster(nodes: &[&str], config: RedisConfig) -> Result<Self, RedisError> {
        let prefix = config.checked_prefix()?.to_owned();
        let (conn, target) = super::connect_cluster(nodes, &config).await?;
        Ok(RedisKv {
            conn,
            prefix,
            target,
            keyspace: None,
        })
    }

    /// Uses a connection manager you opened (with your own reconnect settings or TLS).
    pub fn with_connection(
        conn: ConnectionManager,
        config: &RedisConfig,
    ) -> Result<Self, RedisError> {
        Ok(RedisKv {
            conn: Conn::Single(conn),
            prefix: config.checked_prefix()?.to_owned(),
            target: "an injected connection".to_owned(),
            keyspace: own_keyspace(),
        })
    }

    /// The journals on a [`RedisStore`](super::RedisStore)'s connection, keyspace and prefix.
    pub(super) fn sharing(conn: Conn, prefix: &str, keyspace: Keyspace) -> Self {
        RedisKv {
            conn,
            prefix: prefix.to_owned(),
            target: "the store's connection".to_owned(),
            keyspace,
        }
    }

    /// Whether this backend's keys live where a store on `keyspace` with `prefix` keeps its
    /// own (the same server and database, the same prefix, not a cluster).
    pub(super) fn same_keyspace(&self, keyspace: &Keyspace, prefix: &str) -> bool {
        self.keyspace.is_some() && self.keyspace == *keyspace && self.prefix == prefix
    }

    /// The version counter key of a scope.
    pub(super) fn counter_key(&self, scope: &Scope) -> String {
        format!("{}:v", self.scope_tag(scope))
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The hash-tagged key prefix of a scope: `{prefix}:{durable:<scope>}`.
    pub fn scope_tag(&self, scope: &Scope) -> String {
        let id = scope
            .id()
            .replace('%', "%25")
            .replace('{', "%7B")
            .replace('}', "%7D");
        format!("{}:{{durable:{id}}}", self.prefix)
    }

    /// The key of one entry: `{prefix}:{durable:<scope>}:r:<key>`.
    pub fn record_key(&self, scope: &Scope, key: &str) -> String {
        format!("{}:r:{key}", self.scope_tag(scope))
    }

    /// The sorted set of one index: `{prefix}:{durable:<scope>}:i1` (or `:i2`).
    pub fn index_key(&self, scope: &Scope, index: Index) -> String {
        let n = match index {
            Index::One => 1,
            Index::Two => 2,
        };
        format!("{}:i{n}", self.scope_tag(scope))
    }

    /// The member of `key` in an index set, for a value: `escaped value \0 key`.
    pub fn index_member(value: &str, key: &str) -> Vec<u8> {
        let mut m = order_escape(value).into_owned().into_bytes();
        m.push(0);
        m.extend_from_slice(key.as_bytes());
        m
    }

    fn fail(&self, operation: &'static str, key: &str, source: redis::RedisError) -> KvError {
        KvError::Unavailable {
            operation,
            source: Box::new(RedisError::Command {
                key: key.to_owned(),
                source,
            }),
        }
    }

    fn bad_reply(&self, operation: &'static str, key: &str, reason: &str) -> KvError {
        KvError::Unavailable {
            operation,
            source: Box::new(RedisError::Reply {
                key: key.to_owned(),
                reason: reason.to_owned(),
            }),
        }
    }

    /// Runs `call` on a handle of the connection, and once more when the connection was lost
    /// (the connection reconnects); a failure names `operation` and `key`.
    async fn retried<T, Fut>(
        &self,
        operation: &'static str,
        key: &str,
        call: impl Fn(Conn) -> Fut,
    ) -> Result<T, KvError>
    where
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match call(self.conn.clone()).await {
            Ok(r) => Ok(r),
            Err(e) if is_connection_lost(&e) => {
                self.lost(operation, &e);
                call(self.conn.clone())
                    .await
                    .map_err(|e| self.fail(operation, key, e))
            }
            Err(e) => Err(self.fail(operation, key, e)),
        }
    }

    fn lost(&self, operation: &'static str, error: &redis::RedisError) {
        tracing::error!(
            target: "botmesh_durability::redis",
            server = %self.target,
            operation,
            %error,
            "Redis connection lost; reconnecting and retrying once"
        );
    }

    pub(super) fn prepare(&self, scope: &Scope, op: &KvOp) -> Prepared {
        let nonce = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let index = |v: &Option<String>, key: &str| match v {
            Some(v) => (v.clone().into_bytes(), Self::index_member(v, key)),
            None => (Vec::new(), Vec::new()),
        };
        let key = op.key();
        let expected = op.expected().map(|v| v.to_string()).unwrap_or_default();
        // A guarded create names its index in its kind and its range as `ZRANGEBYLEX` takes
        // it (`[from`, `(to`).
        let (kind, min, max) = match op.guard() {
            Some((guarded, from, to)) => {
                let kind = match guarded {
                    Index::One => b"g1".to_vec(),
                    Index::Two => b"g2".to_vec(),
                };
                let mut min = b"[".to_vec();
                min.extend_from_slice(order_escape(from).as_bytes());
                let mut max = b"(".to_vec();
                max.extend_from_slice(order_escape(to).as_bytes());
                (kind, min, max)
            }
            None if matches!(op, KvOp::Delete { .. }) => (b"d".to_vec(), Vec::new(), Vec::new()),
            None => (b"c".to_vec(), Vec::new(), Vec::new()),
        };
        let (value, (i1, m1), (i2, m2)) = match op.entry() {
            Some(entry) => (
                entry.value.clone(),
                index(&entry.idx1, key),
                index(&entry.idx2, key),
            ),
            None => Default::default(),
        };
        Prepared {
            record: self.record_key(scope, key),
            args: [
                kind,
                expected.into_bytes(),
                nonce.into_bytes(),
                value,
                i1,
                m1,
                i2,
                m2,
                min,
                max,
            ],
        }
    }

    /// Runs the write script over `ops` (retried once, with the same nonces, on a lost
    /// connection).
    async fn write(&self, scope: &Scope, ops: &[KvOp]) -> Result<Vec<CasOutcome>, KvError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let prepared: Vec<Prepared> = ops.iter().map(|op| self.prepare(scope, op)).collect();
        let mut invocation = WRITE_SCRIPT.prepare_invoke();
        invocation
            .key(self.counter_key(scope))
            .key(self.index_key(scope, Index::One))
            .key(self.index_key(scope, Index::Two));
        for p in &prepared {
            invocation.key(&p.record);
        }
        for p in &prepared {
            for a in &p.args {
                invocation.arg(a);
            }
        }
        let first = prepared.first().map_or("", |p| p.record.as_str());
        let invocation = &invocation;
        let reply: Vec<(String, String)> = self
            .retried("write", first, |mut conn| async move {
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        if reply.len() != ops.len() {
            return Err(self.bad_reply("write", first, "one answer per operation expected"));
        }
        reply
            .into_iter()
            .zip(&prepared)
            .map(|((status, version), p)| {
                let parse = |v: &str| {
                    v.parse::<u64>()
                        .map_err(|_| self.bad_reply("write", &p.record, "version is not a number"))
                };
                match status.as_str() {
                    "ok" => Ok(CasOutcome::Ok {
                        version: parse(&version)?,
                    }),
                    _ if version.is_empty() => Ok(CasOutcome::Conflict { current: None }),
                    _ => Ok(CasOutcome::Conflict {
                        current: Some(parse(&version)?),
                    }),
                }
            })
            .collect()
    }
}

type RangeRow = (Vec<u8>, String, Vec<u8>, String, Vec<u8>, String, Vec<u8>);

fn text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())
}

#[async_trait]
impl DurableKv for RedisKv {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        let record = self.record_key(scope, key);
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&record).arg("v").arg("d").arg("i1").arg("i2");
        type Fields = (
            Option<String>,
            Option<Vec<u8>>,
            Option<String>,
            Option<String>,
        );
        let cmd = &cmd;
        let fields: Fields = self
            .retried("get", &record, |mut conn| async move {
                cmd.query_async(&mut conn).await
            })
            .await?;
        let (Some(version), value, idx1, idx2) = fields else {
            return Ok(None);
        };
        let version = version
            .parse::<u64>()
            .map_err(|_| self.bad_reply("get", &record, "version is not a number"))?;
        Ok(Some(Versioned {
            version,
            value: value.unwrap_or_default(),
            idx1,
            idx2,
        }))
    }

    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        let mut out = self.write(scope, std::slice::from_ref(&op)).await?;
        out.pop()
            .ok_or_else(|| self.bad_reply("apply", op.key(), "no answer"))
    }

    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        let (index, from, to, limit) = (query.index, query.from, query.to, query.limit);
        if from >= to || limit == 0 {
            return Ok(Vec::new());
        }
        let set = self.index_key(scope, index);
        let mut min = b"[".to_vec();
        min.extend_from_slice(order_escape(from).as_bytes());
        let mut max = b"(".to_vec();
        max.extend_from_slice(order_escape(to).as_bytes());
        let mut invocation = RANGE_SCRIPT.prepare_invoke();
        invocation
            .key(&set)
            .arg(min)
            .arg(max)
            .arg(limit.min(i64::MAX as usize))
            .arg(format!("{}:r:", self.scope_tag(scope)));
        let invocation = &invocation;
        let rows: Vec<RangeRow> = self
            .retried("range", &set, |mut conn| async move {
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        rows.into_iter()
            .map(|(key, version, value, has1, i1, has2, i2)| {
                let bad = |reason: String| self.bad_reply("range", &set, &reason);
                let key = text(key).map_err(bad)?;
                let version = version
                    .parse::<u64>()
                    .map_err(|_| bad(format!("version of `{key}` is not a number")))?;
                let idx1 = if has1 == "1" {
                    Some(text(i1).map_err(bad)?)
                } else {
                    None
                };
                let idx2 = if has2 == "1" {
                    Some(text(i2).map_err(bad)?)
                } else {
                    None
                };
                Ok(KvRecord {
                    key,
                    entry: Versioned {
                        version,
                        value,
                        idx1,
                        idx2,
                    },
                })
            })
            .collect()
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        self.write(scope, &ops).await
    }

    fn shared_between_processes(&self) -> bool {
        true
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
