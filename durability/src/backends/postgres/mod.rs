//! PostgreSQL backends (feature `postgres`): [`PostgresKv`], the [`DurableKv`] of the journals,
//! and [`PostgresStore`], the [`Store`]; both through `tokio-postgres` and a `deadpool-postgres`
//! pool.
//!
//! | backend | tables (created idempotently on open, under an advisory lock) |
//! | --- | --- |
//! | [`PostgresKv`] | `{prefix}durable(scope, key, version, value, idx1, idx2)`, its two indexes, the sequence `{prefix}durable_version` |
//! | [`PostgresStore`] | `{prefix}meta` (schema version), `{prefix}chats`, `{prefix}contacts`, `{prefix}ledger`, `{prefix}checkpoints`, `{prefix}handoffs`, `{prefix}kv` |
//!
//! The table prefix defaults to `botmesh_`. One database (and one pool) can hold both, and
//! several bots (scopes) share one durable table. The store reads and writes the durable table
//! only in [`Store::commit_step`] (below).
//!
//! Connections:
//!
//! | constructor | I/O at construction | connects and creates tables |
//! | --- | --- | --- |
//! | [`PostgresKv::new`], [`PostgresStore::new`] (and `new_with`) | none: the string is only parsed | [`DurableKv::open`] / [`Store::open`], i.e. the bot's `start()` (a `PostgresKv` also on its first call) |
//! | [`PostgresKv::connect`], [`PostgresStore::connect`] (and `connect_with`) | connects, creates tables | at construction |
//! | `with_pool` | creates tables | at construction |
//! | [`PostgresStore::durability_kv`] | none (the store's pool) | on `open` or first use |
//!
//! - A malformed connection string fails at once with [`PostgresError::InvalidConnectionString`],
//!   whose reason names the offending option, never a value. A string that cannot connect
//!   fails (`open`, or `connect`) with [`PostgresError::Connect`], which names the host and
//!   port, never the password (a [`StoreError::Query`] of operation `open`, or a
//!   [`KvError::Unavailable`] of operation `open`, with it as the source).
//! - Built from a connection string, a backend creates its own pool (no TLS: `NoTls`) and
//!   closes it in `close()`. Built from a pool ([`PostgresConfig`] + `with_pool`), the pool
//!   stays yours: it is never closed here. Build it with your own TLS connector if the server
//!   needs TLS.
//! - A connection the server drops (restart, failover) is reported with `tracing::error!` (for
//!   pools this module creates) and replaced on the next query: the pool recycles closed
//!   connections. Reads are retried once on a fresh connection; a write whose connection died is
//!   reported as failed, because it may or may not have committed (the journals re-read and
//!   re-decide).
//!
//! # Flow steps in one transaction
//!
//! A [`PostgresStore`] commits a `#[persistent]` flow step ([`Store::commit_step`]) in one
//! transaction on its own pool: the step's journal operations on its **journal table**, with
//! the statements `PostgresKv` runs itself (the same compare-and-set, the same version
//! sequence), then the checkpoint change and the value removals on its own tables. The first
//! conflicting operation rolls everything back and is returned as
//! [`StepCommitOutcome::Conflict`].
//!
//! Steps (and the store's value writes) committed at the same moment by concurrent chats share
//! one transaction: a group commit, as SQLite's writer thread does it. A few writer tasks (a
//! quarter of the pool, at least one) each take every write queued and commit them together,
//! so one WAL flush and two round trips serve the whole group; a group where anything
//! conflicts or fails is rolled back and each of its writes runs alone, so every write gets
//! the answer it would get alone. `synchronous_commit` is the server's: a write is answered
//! after the `COMMIT` of its group. The journal table is `{store prefix}durable` (what a
//! `PostgresKv` with the same [`PostgresConfig`] uses), or the table of the kv given to
//! [`PostgresStore::with_journals`] when the kv has its own prefix.
//!
//! [`Store::shares_transactions_with`] answers `true` only for a `PostgresKv` (also behind `Arc`
//! or the crash harness) whose table is the journal table and whose pool reaches the store's
//! database. "Same database" is decided, first answer wins:
//!
//! 1. the same `deadpool` pool (clones of one [`deadpool_postgres::Pool`], compared by
//!    identity): yes. [`PostgresStore::durability_kv`], or `with_pool` with one pool for both,
//!    always shares;
//! 2. else, when both pools have opened (created their tables), what the server told each:
//!    the cluster's `system_identifier` (`pg_control_system()`), the database, the role and the
//!    `search_path` (so an unqualified table name resolves to the same table) must all match.
//!    This also recognises two injected pools, or `localhost` and `127.0.0.1`;
//! 3. else, both built from connection strings: the same hosts and ports, database, user and
//!    `options` (no I/O, so it answers before `open`; spellings of one host differ).
//!
//! An injected pool that has not opened yet, a different table or another backend answers
//! `false`: the runtime then writes the step's pieces one after the other, as for any store.
//!
//! This module does not run migrations beyond creating missing tables, and does not speak TLS
//! itself.
//!
//! [`DurableKv`]: crate::DurableKv
//! [`DurableKv::open`]: crate::DurableKv::open
//! [`KvError::Unavailable`]: crate::kv::KvError::Unavailable
//! [`Store`]: crate::Store
//! [`Store::open`]: crate::Store::open
//! [`Store::commit_step`]: crate::Store::commit_step
//! [`Store::shares_transactions_with`]: crate::Store::shares_transactions_with
//! [`StoreError::Query`]: crate::StoreError::Query
//! [`StepCommitOutcome::Conflict`]: crate::store::StepCommitOutcome::Conflict

mod kv;
mod pipeline;
mod store;

pub use kv::PostgresKv;
pub use store::PostgresStore;

/// The `deadpool-postgres` this crate links, to build a pool for `with_pool`.
pub use deadpool_postgres;
/// The `tokio-postgres` this crate links.
pub use tokio_postgres;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use derive_setters::Setters;
use tokio_postgres::NoTls;
use tokio_postgres::config::Host;

/// A boxed error, as the underlying crates return them.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the PostgreSQL backends. None of them carries the password.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    /// The connection string could not be parsed.
    #[error("invalid PostgreSQL connection string: {reason}")]
    InvalidConnectionString {
        /// What is wrong (never the string itself, which may hold a password).
        reason: String,
    },
    /// The table prefix is not a plain SQL identifier.
    #[error(
        "invalid table prefix `{prefix}`: use ASCII letters, digits and `_`, starting with a \
         letter or `_`, at most 40 characters"
    )]
    InvalidTablePrefix {
        /// The prefix refused.
        prefix: String,
    },
    /// No connection could be made; the message says why (refused, authentication failed,
    /// database missing, …).
    #[error("cannot connect to PostgreSQL at {target}: {}", connect_reason(.source.as_ref()))]
    Connect {
        /// `host:port` (or the socket path, or "an injected pool").
        target: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// A table could not be created or checked.
    #[error("PostgreSQL at {target}: cannot create or check table `{table}`: {source}")]
    Schema {
        /// `host:port`.
        target: String,
        /// The table.
        table: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// The store tables were written by a newer botmesh.
    #[error(
        "table `{table}` holds schema version {found}, newer than the {supported} this botmesh supports"
    )]
    SchemaTooNew {
        /// The meta table.
        table: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A query failed.
    #[error("PostgreSQL table `{table}`, key `{key}`: {source}")]
    Query {
        /// The table.
        table: String,
        /// The key (or scope, or chat) the query was about.
        key: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

/// The default size of a pool created here (see [`PostgresConfig::max_connections`]).
const DEFAULT_MAX_CONNECTIONS: usize = 8;

/// Options shared by [`PostgresKv`] and [`PostgresStore`], set builder-style.
#[derive(Debug, Clone, PartialEq, Eq, Setters)]
pub struct PostgresConfig {
    /// The prefix of every table name (default `botmesh_`): ASCII letters, digits and `_`.
    #[setters(into)]
    table_prefix: String,
    #[setters(skip)]
    max_connections: usize,
    /// How long a new connection may take (default 10 s), for pools created here.
    connect_timeout: Duration,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            table_prefix: "botmesh_".to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl PostgresConfig {
    /// The defaults: prefix `botmesh_`, 8 connections, 10 s connect timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// The size of a pool created from a connection string (default 8). A quarter of it
    /// commits the group commits and a quarter of it runs each kind of group read; a larger
    /// pool adds server backends that compete for the server's cores more than it adds
    /// throughput (measured in `docs/performance.md`, the shop on a channel).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// The configured prefix, validated.
    pub(crate) fn checked_prefix(&self) -> Result<&str, PostgresError> {
        let p = &self.table_prefix;
        let mut chars = p.chars();
        let first_ok = chars
            .next()
            .is_none_or(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if first_ok && rest_ok && p.len() <= 40 {
            Ok(p)
        } else {
            Err(PostgresError::InvalidTablePrefix { prefix: p.clone() })
        }
    }
}

/// Where a connection string points, without its password: what two pools created from
/// connection strings must agree on to reach the same database (see [`PgPool::same_database`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerAddress {
    endpoints: Vec<String>,
    dbname: Option<String>,
    user: Option<String>,
    options: Option<String>,
}

impl ServerAddress {
    fn of(pg: &tokio_postgres::Config) -> Self {
        let user = pg.get_user().map(str::to_owned);
        ServerAddress {
            endpoints: endpoints(pg),
            // The server's default database is the user's name.
            dbname: pg.get_dbname().map(str::to_owned).or_else(|| user.clone()),
            user,
            options: pg.get_options().map(str::to_owned),
        }
    }
}

/// Who the server says a connection talks to: its cluster, database, role and `search_path`
/// (which decide what an unqualified table name resolves to). Learned once per pool, when it
/// creates its tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerIdentity {
    system_identifier: String,
    database: String,
    user: String,
    search_path: String,
}

impl ServerIdentity {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, tokio_postgres::Error> {
        Ok(ServerIdentity {
            system_identifier: row.try_get::<_, Option<String>>(0)?.unwrap_or_default(),
            database: row.try_get(1)?,
            user: row.try_get(2)?,
            search_path: row.try_get(3)?,
        })
    }
}

/// A pool with who owns it and where it points (for errors, logs and
/// [`same_database`](Self::same_database)).
#[derive(Clone)]
pub(crate) struct PgPool {
    pub(crate) pool: Pool,
    pub(crate) owned: bool,
    pub(crate) target: Arc<str>,
    /// Where the connection string points (`None` for an injected pool).
    address: Option<Arc<ServerAddress>>,
    /// What the server reported once connected (shared by clones).
    identity: Arc<OnceLock<ServerIdentity>>,
}

impl PgPool {
    /// A pool created from `url` (no TLS), without connecting: only the string is checked
    /// (a malformed one fails here, without the password in the error).
    pub(crate) fn from_url(url: &str, config: &PostgresConfig) -> Result<Self, PostgresError> {
        let mut pg = parse_url(url)?;
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(config.connect_timeout);
        }
        let target: Arc<str> = describe(&pg).into();
        let address = Arc::new(ServerAddress::of(&pg));
        let manager = Manager::from_connect(
            pg,
            LoggingConnect {
                target: Arc::clone(&target),
            },
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.max_connections)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(config.connect_timeout))
            .wait_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(|e| PostgresError::Connect {
                target: target.to_string(),
                source: Box::new(e),
            })?;
        Ok(PgPool {
            pool,
            owned: true,
            target,
            address: Some(address),
            identity: Arc::default(),
        })
    }

    /// A pool created from `url` (no TLS); checks that one connection can be made.
    pub(crate) async fn connect(url: &str, config: &PostgresConfig) -> Result<Self, PostgresError> {
        let pg_pool = Self::from_url(url, config)?;
        drop(pg_pool.client().await?);
        Ok(pg_pool)
    }

    /// Wraps a pool given by the user (never closed here).
    pub(crate) fn injected(pool: Pool) -> Self {
        PgPool {
            pool,
            owned: false,
            target: "an injected pool".into(),
            address: None,
            identity: Arc::default(),
        }
    }

    /// The same pool, borrowed: a backend built on it never closes it.
    pub(crate) fn borrowed(&self) -> Self {
        PgPool {
            owned: false,
            ..self.clone()
        }
    }

    /// Whether a connection of `self` and one of `other` reach the same database, where an
    /// unqualified table name resolves to the same table:
    ///
    /// 1. the same `deadpool` pool (clones of one [`Pool`]): yes;
    /// 2. else, when both pools have created their tables (so the server told each of them its
    ///    cluster's `system_identifier`, database, role and `search_path`): those must match;
    /// 3. else, both built from connection strings: the same hosts, ports, database, user and
    ///    `options` (no I/O; `localhost` and `127.0.0.1` count as different).
    ///
    /// Anything else (an injected pool not yet used) answers `false`.
    pub(crate) fn same_database(&self, other: &PgPool) -> bool {
        if std::ptr::eq(self.pool.manager(), other.pool.manager()) {
            return true;
        }
        if let (Some(a), Some(b)) = (self.identity.get(), other.identity.get()) {
            return a == b;
        }
        match (&self.address, &other.address) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// A connection, or a [`PostgresError::Connect`] naming the target.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Client, PostgresError> {
        self.pool.get().await.map_err(|e| PostgresError::Connect {
            target: self.target.to_string(),
            source: Box::new(e),
        })
    }

    /// A connection for a write: one found closed while idle (nothing was sent on it yet) is
    /// replaced by another.
    pub(crate) async fn write_client(&self) -> Result<deadpool_postgres::Client, PostgresError> {
        let client = self.client().await?;
        if client.is_closed() {
            return self.client().await;
        }
        Ok(client)
    }

    /// Closes the pool if this crate created it; an injected pool stays open.
    pub(crate) fn close(&self) {
        if self.owned {
            self.pool.close();
        }
    }

    /// Creates tables with `ddl` in one transaction under an advisory lock named after `table`,
    /// so that processes starting together do not race on `CREATE … IF NOT EXISTS`. The first
    /// time, it also asks the server who it is (see [`same_database`](Self::same_database)).
    pub(crate) async fn create_schema(&self, table: &str, ddl: &str) -> Result<(), PostgresError> {
        let schema_err = |e: tokio_postgres::Error| PostgresError::Schema {
            target: self.target.to_string(),
            table: table.to_owned(),
            source: Box::new(e),
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(schema_err)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key(table)])
            .await
            .map_err(schema_err)?;
        tx.batch_execute(ddl).await.map_err(schema_err)?;
        tx.commit().await.map_err(schema_err)?;
        if self.identity.get().is_none() {
            self.learn_identity(&client).await;
        }
        Ok(())
    }

    /// Asks the server who it is. A server that refuses (`pg_control_system()` not granted)
    /// leaves the identity unknown: [`same_database`](Self::same_database) then compares
    /// connection strings.
    async fn learn_identity(&self, client: &deadpool_postgres::Client) {
        let sql = "SELECT (SELECT system_identifier FROM pg_control_system())::text, \
                   current_database()::text, current_user::text, current_setting('search_path')";
        let identity = client
            .query_one(sql, &[])
            .await
            .and_then(|row| ServerIdentity::from_row(&row));
        match identity {
            Ok(identity) if !identity.system_identifier.is_empty() => {
                let _ = self.identity.set(identity);
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(
                target: "botmesh_durability::postgres",
                server = %self.target,
                %error,
                "cannot read the server's identity; pools are compared by connection string"
            ),
        }
    }
}

/// Parses a connection string; the error names what is wrong (an option's name, a byte
/// offset), never a value, so never the password.
pub(crate) fn parse_url(url: &str) -> Result<tokio_postgres::Config, PostgresError> {
    url.parse().map_err(|e: tokio_postgres::Error| {
        let mut reason = match std::error::Error::source(&e) {
            Some(cause) => cause.to_string(),
            None => e.to_string(),
        };
        // "unexpected character at byte N: expected `=` but got `x`": `x` may be a password's.
        if let Some(at) = reason.find(" but got ") {
            reason.truncate(at);
        }
        PostgresError::InvalidConnectionString { reason }
    })
}

/// A stable 64-bit advisory lock key for a table name (FNV-1a).
fn lock_key(table: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "botmesh:schema:".bytes().chain(table.bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// `host:port[,host:port…]` of a config, without user or password.
fn describe(pg: &tokio_postgres::Config) -> String {
    endpoints(pg).join(",")
}

/// Each `host:port` (or socket path, or `hostaddr:port`) of a config.
fn endpoints(pg: &tokio_postgres::Config) -> Vec<String> {
    let ports = pg.get_ports();
    let port = |i: usize| {
        ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(5432)
    };
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) => format!("{name}:{}", port(i)),
            Host::Unix(path) => format!("{}/.s.PGSQL.{}", path.display(), port(i)),
        })
        .collect();
    if !hosts.is_empty() {
        return hosts;
    }
    let addrs: Vec<String> = pg
        .get_hostaddrs()
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{a}:{}", port(i)))
        .collect();
    if addrs.is_empty() {
        return vec![format!("localhost:{}", port(0))];
    }
    addrs
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Connects without TLS and drives the connection in a task that reports its end with
/// `tracing::error!` (the pool then replaces the connection on the next query).
struct LoggingConnect {
    target: Arc<str>,
}

impl deadpool_postgres::Connect for LoggingConnect {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> BoxFuture<
        '_,
        Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
    > {
        let pg_config = pg_config.clone();
        let target = Arc::clone(&self.target);
        Box::pin(async move {
            let (client, connection) = pg_config.connect(NoTls).await?;
            let task = tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::error!(
                        target: "botmesh_durability::postgres",
                        server = %target,
                        %error,
                        "PostgreSQL connection lost; it is replaced on the next query"
                    );
                }
            });
            Ok((client, task))
        })
    }
}

/// Whether an error means the connection is gone (the query may be retried on a new one).
pub(crate) fn is_connection_lost(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    error.as_db_error().is_some_and(|db| {
        // admin_shutdown, crash_shutdown, cannot_connect_now
        matches!(db.code().code(), "57P01" | "57P02" | "57P03")
    })
}

/// A [`PostgresError::Query`] for `table` and `key`.
pub(crate) fn query_err(table: &str, key: &str, e: impl Into<BoxError>) -> PostgresError {
    PostgresError::Query {
        table: table.to_owned(),
        key: key.to_owned(),
        source: e.into(),
    }
}

/// Why a connection failed, in words a user can act on: the server's own message (an
/// authentication failure, a missing database, …) rather than tokio-postgres' "db error",
/// or the I/O error (refused, timed out, unknown host).
fn connect_reason(source: &(dyn std::error::Error + 'static)) -> String {
    let mut e: Option<&(dyn std::error::Error + 'static)> = Some(source);
    while let Some(err) = e {
        if let Some(db) = err.downcast_ref::<tokio_postgres::error::DbError>() {
            let hint = match db.code().code() {
                "28P01" | "28000" => " (check the user and password of the connection string)",
                "3D000" => " (create the database, or name another in the connection string)",
                _ => "",
            };
            return format!("{}{hint}", db.message());
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            let hint = match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    " (is the server running and listening on that host and port?)"
                }
                _ => "",
            };
            return format!("{io}{hint}");
        }
        e = err.source();
    }
    source.to_string()
}

#[cfg(test)]
mod tests {
    use super::{PostgresConfig, PostgresError, ServerAddress, describe, parse_url};

    #[test]
    fn the_target_names_host_and_port_without_the_password() {
        let pg: tokio_postgres::Config = "postgres://ada:s3cret@db.example:6543/bots"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let target = describe(&pg);
        assert_eq!(target, "db.example:6543");
        assert!(!target.contains("s3cret"));
    }

    #[test]
    fn prefixes_are_plain_identifiers() {
        assert!(PostgresConfig::new().checked_prefix().is_ok());
        for bad in ["1x", "a-b", "x;drop", "é"] {
            assert!(
                PostgresConfig::new()
                    .table_prefix(bad)
                    .checked_prefix()
                    .is_err()
            );
        }
    }

    #[test]
    fn a_malformed_string_names_the_problem_not_a_value() {
        for (url, expected) in [
            (
                "postgres://ada:s3cret@db:notaport/bots",
                "invalid value for option `port`",
            ),
            (
                "host=db x s3cret",
                "unexpected character at byte 10: expected `=`",
            ),
        ] {
            match parse_url(url) {
                Err(PostgresError::InvalidConnectionString { reason }) => {
                    assert_eq!(reason, expected, "{url}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn addresses_compare_what_reaches_a_database() {
        let address =
            |url: &str| ServerAddress::of(&parse_url(url).unwrap_or_else(|e| panic!("{e}")));
        let url = address("postgres://ada:s3cret@db:5432/ada");
        assert_eq!(url, address("host=db user=ada password=other"));
        assert_eq!(url, address("postgres://ada@db"));
        assert_ne!(url, address("postgres://ada@db/bots"));
        assert_ne!(url, address("postgres://ada@db:5433/ada"));
        assert_ne!(url, address("postgres://bob@db/ada"));
        assert_ne!(
            url,
            address("postgres://ada@db/ada?options=-csearch_path%3Dx")
        );
    }
}
