//! Redis backends (feature `redis`): [`RedisKv`], the [`DurableKv`](crate::DurableKv) of the journals, and
//! [`RedisStore`], the [`Store`](crate::Store); both through the `redis` crate's auto-reconnecting
//! `ConnectionManager`.
//!
//! | backend | keys (prefix defaults to `botmesh`) |
//! | --- | --- |
//! | [`RedisKv`] | `{prefix}:{durable:<scope>}:r:<key>` (a hash per entry), `…:i1` and `…:i2` (sorted sets), `…:v` (the scope's version counter) |
//! | [`RedisStore`] | `{prefix}:store:…` (meta, chats, contacts, ledger lists, checkpoint, handoff and value hashes) |
//!
//! Every key of one scope carries the hash tag `{durable:<scope>}`, so a scope lives on one
//! cluster slot and each write is one Lua script over keys of that slot. Neither backend
//! touches the other's keys.
//!
//! **Durability needs Redis persistence.** A write answered `Ok` is in Redis' memory; it
//! survives a Redis crash or restart only with the append-only file on (`appendonly yes`, and
//! `appendfsync always` to lose nothing, `everysec` to lose at most about a second). Without
//! persistence, a Redis restart loses the journals: use PostgreSQL then.
//!
//! Connections: built from a URL or a `redis::Client`, a backend opens its own
//! `ConnectionManager` (no TLS is compiled in by this crate: enable the `redis` crate's
//! `tokio-rustls-comp` feature in your own `Cargo.toml` for `rediss://` URLs); a
//! `ConnectionManager` you pass in is used as it is. A lost connection (server restart,
//! `CLIENT KILL`) is reported with `tracing::error!`, reconnected, and the command retried once:
//! reads freely, writes safely because each write carries a nonce that the script recognises
//! when the first attempt had already landed. A URL that cannot connect fails with
//! [`RedisError::Connect`], which names the host and port, never the password.
//!
//! With the `redis-cluster` feature, `open_cluster` talks to a Redis Cluster through the
//! `redis` crate's async cluster connection (it follows `MOVED`/`ASK` and reconnects by itself);
//! every script's keys share one hash tag, so each script runs on the one node owning the
//! scope's slot.

mod kv;
mod scripts;
mod store;

pub use kv::RedisKv;
pub use store::RedisStore;

/// The `redis` crate this crate links, to build a client or a connection manager.
pub use ::redis as redis_crate;

use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::{Cmd, Pipeline, RedisFuture, Value};
use derive_setters::Setters;

/// Errors of the Redis backends. None of them carries the password.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// The URL could not be parsed.
    #[error("invalid Redis URL ({reason}); the URL is not shown because it may hold a password")]
    InvalidUrl {
        /// What is wrong.
        reason: String,
    },
    /// The key prefix holds a character that would break the keys' hash tags.
    #[error(
        "invalid Redis key prefix `{prefix}`: it must be non-empty and hold no `{{`, `}}` or space"
    )]
    InvalidPrefix {
        /// The prefix refused.
        prefix: String,
    },
    /// No connection could be made; the message says why (refused, authentication failed,
    /// …).
    #[error("cannot connect to Redis at {target}: {}", connect_reason(.source))]
    Connect {
        /// `host:port` (or the socket path).
        target: String,
        /// The underlying error.
        #[source]
        source: ::redis::RedisError,
    },
    /// A command failed.
    #[error("Redis key `{key}`: {source}")]
    Command {
        /// The key (or key pattern) the command was about.
        key: String,
        /// The underlying error.
        #[source]
        source: ::redis::RedisError,
    },
    /// A reply had an unexpected shape.
    #[error("Redis key `{key}`: unexpected reply: {reason}")]
    Reply {
        /// The key.
        key: String,
        /// What was wrong.
        reason: String,
    },
    /// The store keys were written by a newer botmesh.
    #[error(
        "Redis key `{key}` holds schema version {found}, newer than the {supported} this botmesh supports"
    )]
    SchemaTooNew {
        /// The meta key.
        key: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
}

/// Options shared by [`RedisKv`] and [`RedisStore`], set builder-style.
#[derive(Debug, Clone, PartialEq, Eq, Setters)]
pub struct RedisConfig {
    /// The first part of every key (default `botmesh`).
    #[setters(into)]
    prefix: String,
    /// How long a (re)connection may take (default 5 s).
    connect_timeout: Duration,
    /// How long a command may wait for its reply (default 10 s).
    response_timeout: Duration,
    /// How many times a lost connection is retried, with exponential backoff (default 3).
    reconnect_attempts: usize,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            prefix: "botmesh".to_owned(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
            reconnect_attempts: 3,
        }
    }
}

impl RedisConfig {
    /// The defaults: prefix `botmesh`, 5 s connect timeout, 10 s response timeout, 3 reconnect
    /// attempts per lost connection.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn checked_prefix(&self) -> Result<&str, RedisError> {
        let p = &self.prefix;
        if p.is_empty() || p.contains(['{', '}', ' ']) {
            return Err(RedisError::InvalidPrefix { prefix: p.clone() });
        }
        Ok(p)
    }
}

/// The connection a backend talks through: one server, or (feature `redis-cluster`) a cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server, through an auto-reconnecting manager.
    Single(ConnectionManager),
    /// A Redis Cluster.
    #[cfg(feature = "redis-cluster")]
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Connects to the cluster whose seed nodes are `nodes` (`redis://host:port` each); the error
/// names every seed's `host:port`, never a password.
#[cfg(feature = "redis-cluster")]
pub(crate) async fn connect_cluster(
    nodes: &[&str],
    config: &RedisConfig,
) -> Result<(Conn, String), RedisError> {
    let mut targets = Vec::with_capacity(nodes.len());
    for node in nodes {
        targets.push(target(&client(node)?));
    }
    let target = targets.join(",");
    let cluster = ::redis::cluster::ClusterClientBuilder::new(nodes.iter().copied())
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.response_timeout)
        .retries(u32::try_from(config.reconnect_attempts).unwrap_or(u32::MAX))
        .build()
        .map_err(|e| RedisError::InvalidUrl {
            reason: format!("{:?}", e.kind()),
        })?;
    let conn = cluster
        .get_async_connection()
        .await
        .map_err(|source| RedisError::Connect {
            target: target.clone(),
            source,
        })?;
    Ok((Conn::Cluster(conn), target))
}

/// Parses `url` into a client, without ever echoing the URL.
pub(crate) fn client(url: &str) -> Result<::redis::Client, RedisError> {
    ::redis::Client::open(url).map_err(|e| RedisError::InvalidUrl {
        reason: format!("{:?}", e.kind()),
    })
}

/// `host:port` of a client.
pub(crate) fn target(client: &::redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

/// The keyspace a single-server connection reaches: the server's `host:port` and the database
/// number. A store and a journal backend on the same keyspace and prefix can write in one
/// script (see [`RedisStore`]'s `commit_step`).
pub(crate) fn keyspace(client: &::redis::Client) -> Keyspace {
    let info = client.get_connection_info();
    Some(format!("{}/{}", info.addr(), info.redis_settings().db()).into())
}

/// A keyspace of its own, for a connection passed in (its server is not known here): only
/// the backends sharing that connection share it.
pub(crate) fn own_keyspace() -> Keyspace {
    Some(format!("a connection passed in #{:016x}", fastrand::u64(..)).into())
}

/// The server and database a backend's keys live in; `None` for a Redis Cluster, where a
/// store's keys and a scope's journal keys live on different slots and so cannot be written by
/// one script.
pub(crate) type Keyspace = Option<std::sync::Arc<str>>;

/// Opens a connection manager on `client`, or a [`RedisError::Connect`] naming host and port.
pub(crate) async fn connect(
    client: ::redis::Client,
    config: &RedisConfig,
) -> Result<Conn, RedisError> {
    let target = target(&client);
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
        .set_number_of_retries(config.reconnect_attempts)
        .set_max_delay(Duration::from_secs(2));
    ConnectionManager::new_with_config(client, manager_config)
        .await
        .map(Conn::Single)
        .map_err(|source| RedisError::Connect { target, source })
}

/// Whether an error means the connection was lost (the manager reconnects; retry once).
pub(crate) fn is_connection_lost(e: &::redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()
}

/// Why a connection failed, in words a user can act on.
fn connect_reason(e: &::redis::RedisError) -> String {
    use ::redis::ErrorKind;
    let hint = if e.kind() == ErrorKind::AuthenticationFailed
        || e.code().is_some_and(|c| c == "NOAUTH" || c == "WRONGPASS")
    {
        " (authentication failed: check the user and password in the URL)"
    } else if e.is_connection_refusal() {
        " (connection refused: is the server running and listening on that host and port?)"
    } else if e.is_timeout() {
        " (timed out: is the host reachable?)"
    } else {
        ""
    };
    format!("{e}{hint}")
}

#[cfg(test)]
mod tests {
    use super::{RedisConfig, client, target};

    #[test]
    fn the_target_names_host_and_port_without_the_password() {
        let c = client("redis://:s3cret@cache.example:6380/2").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(target(&c), "cache.example:6380");
    }

    #[test]
    fn prefixes_cannot_break_hash_tags() {
        assert!(RedisConfig::new().checked_prefix().is_ok());
        for bad in ["", "a{b", "a}b", "a b"] {
            assert!(RedisConfig::new().prefix(bad).checked_prefix().is_err());
        }
    }
}
