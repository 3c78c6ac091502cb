//! [`SqliteStore`]: the [`Store`] in one SQLite file (WAL mode), through `rusqlite`.
//!
//! Writes, opening and long reads never run on tokio's worker threads; reads use at most four
//! read-only connections:
//!
//! | work | where it runs |
//! | --- | --- |
//! | every write | one dedicated writer thread that owns the only write connection, fed by a channel |
//! | short reads (a row by key, a scope's values, a range of at most 256 rows) | the calling thread when a reader connection is idle ([`SqliteStoreOptions::inline_reads`]: index lookups in a WAL database do not wait for the writer), else `spawn_blocking` |
//! | listings (every checkpoint, every handoff, a longer range) | `spawn_blocking` |
//! | opening, schema check, migrations | the writer thread (read-only stores: `spawn_blocking`) |
//!
//! The writer thread commits in groups: it takes every write request queued at that moment
//! (up to [`SqliteStoreOptions::max_batch`]) and runs them in one transaction; when one of
//! them fails, it runs the group again with each request inside its own `SAVEPOINT`, so a
//! failing request rolls back only its own statements. A request
//! is answered only after `COMMIT` succeeded, so an `Ok` means "on disk" at the configured
//! [`SqliteSynchronous`] level. Other code of the crate (the durable journal) runs its own
//! statements through the same thread with [`SqliteStore::write`] and [`SqliteStore::read`].
//!
//! The file carries a `botmesh_meta` table (`application = botmesh`, `schema_version = N`);
//! opening refuses a file that is not SQLite, a foreign SQLite database and a schema newer
//! than this build, and applies missing migrations (see `schema`). A store opened with
//! [`SqliteStoreOptions::read_only`] (for example in a second process) never writes and
//! never migrates.
//!
//! Besides the store's tables, the migrations create a `durable` table (`scope_id`, `key`,
//! `version`, `value` BLOB, `idx1`, `idx2`) and its `durable_scopes` (`id`, `scope`: the
//! scope's text, stored once) reserved for the durable journal, which reaches them
//! through `write` and `read`; the store's own code touches it only in `commit_step` (a flow
//! step's journal operations in the transaction of its checkpoint, see
//! [`StepCommit`](super::StepCommit)).
//!
//! Connections keep up to 128 prepared statements, plan bound ranges once (the query planner
//! stability guarantee is on), and the writer keeps its statement journal in memory with a
//! 16 MiB page cache; reads run on at most four reader connections at once (more would open
//! and close connections, which costs more than the reads).
//!
//! It does not pool writers, retry failed requests, or cancel a write whose caller stopped
//! waiting: a request handed to the writer runs to its end.

mod durable;
mod records;
mod schema;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use derive_setters::Setters;
use rusqlite::{Connection, Transaction};
use tokio::sync::oneshot;

use super::StoreError;

pub use durable::{SqliteDurableKv, SqliteKvError};
pub use writer::SqliteWriteStats;

/// The default of [`SqliteStoreOptions::wal_autocheckpoint`], in pages.
const DEFAULT_WAL_AUTOCHECKPOINT: u32 = 8000;

/// How hard SQLite syncs to disk (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqliteSynchronous {
    /// No syncs: an OS crash or power loss may lose or corrupt recent commits.
    Off,
    /// Syncs at WAL checkpoints only: a power loss may lose the last commits, never corrupts.
    Normal,
    /// Syncs the WAL at every commit: a commit answered `Ok` survives a power loss (default).
    #[default]
    Full,
    /// As `Full`, and also syncs the directory after the journal changes.
    Extra,
}

impl SqliteSynchronous {
    /// The value given to `PRAGMA synchronous`.
    pub fn as_str(self) -> &'static str {
        match self {
            SqliteSynchronous::Off => "OFF",
            SqliteSynchronous::Normal => "NORMAL",
            SqliteSynchronous::Full => "FULL",
            SqliteSynchronous::Extra => "EXTRA",
        }
    }
}

/// Options of a [`SqliteStore`], set builder-style.
///
/// ```
/// # use std::time::Duration;
/// # use botmesh_durability::store::{SqliteStoreOptions, SqliteSynchronous};
/// let options = SqliteStoreOptions::default()
///     .busy_timeout(Duration::from_secs(10))
///     .synchronous(SqliteSynchronous::Normal);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Setters)]
pub struct SqliteStoreOptions {
    /// How long a statement waits for a lock held by another connection or process before it
    /// fails with `SQLITE_BUSY` (default 5 s).
    busy_timeout: Duration,
    /// How hard commits sync to disk (default [`SqliteSynchronous::Full`]).
    synchronous: SqliteSynchronous,
    /// Opens the file read-only (default `false`): the file must already be a botmesh
    /// database of the current schema; writes fail with [`StoreError::ReadOnly`]. Meant for
    /// a second process that reads what a running bot writes.
    read_only: bool,
    #[setters(skip)]
    max_batch: usize,
    /// Whether a short read may run on the calling task's thread when a reader connection is
    /// idle (default `true`). The hot reads (a chat, a checkpoint, a journal record, a scope's
    /// values, a range of at most 256 rows) are index lookups in a WAL database, which do not
    /// wait for the writer: handing each to tokio's blocking pool (waking a thread, then the
    /// task back) costs more CPU than the read itself. Listings without a small bound (every
    /// checkpoint, every handoff, a long range) always run on the blocking pool. With
    /// `false`, every read does (for a file on a disk so slow that a cold page read would
    /// stall the async threads).
    inline_reads: bool,
    /// How many pages the WAL grows to before a commit copies them back into the database
    /// file (`PRAGMA wal_autocheckpoint`; default 8000 pages, about 32 MiB with 4 KiB pages;
    /// 0 turns automatic checkpoints off, leaving them to you).
    ///
    /// A checkpoint writes each page changed since the last one once, however many commits
    /// changed it, and syncs the database file: the journal rewrites the same hot pages (the
    /// newest rows, the index pages they sit on) in commit after commit, so a longer WAL
    /// writes fewer bytes per message than SQLite's default of 1000 pages. The price is a larger `-wal` file, and reads that look up pages
    /// in a longer WAL index.
    wal_autocheckpoint: u32,
}

impl Default for SqliteStoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            synchronous: SqliteSynchronous::Full,
            read_only: false,
            max_batch: 256,
            inline_reads: true,
            wal_autocheckpoint: DEFAULT_WAL_AUTOCHECKPOINT,
        }
    }
}

impl SqliteStoreOptions {
    /// The defaults: 5 s busy timeout, `synchronous = FULL`, read-write, batches of up to
    /// 256 requests, automatic checkpoints every 8000 WAL pages.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most write requests committed in one transaction (default 256; 0 counts as 1).
    /// A bot's writes are short (a few rows each), so a transaction of 256 still commits in a
    /// few milliseconds, and under load one `fsync` serves more of them.
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(1);
        self
    }

    /// Whether the store is opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
}

/// A [`Store`](super::Store) in one SQLite file; clones share the same connections.
///
/// [`SqliteStore::open`] only records the path: the file is opened by
/// [`Store::open`](super::Store::open) (or at once by [`SqliteStore::connect`]). Until then,
/// and after [`Store::close`](super::Store::close), every call fails with
/// [`StoreError::Closed`].
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    options: SqliteStoreOptions,
    /// Serialises `open` and `close`.
    lifecycle: tokio::sync::Mutex<()>,
    /// The open connections; `None` while closed.
    state: Mutex<Option<Arc<Conns>>>,
    stats: Arc<writer::Stats>,
}

/// The connections of an open store.
struct Conns {
    /// The writer thread; `None` for a read-only store.
    writer: Option<writer::WriterHandle>,
    readers: schema::ReaderPool,
    /// The `durable_scopes` ids seen committed in the file (they never change once given).
    scope_ids: durable::ScopeIds,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .field("options", &self.shared.options)
            .field("open", &self.state().is_some())
            .finish()
    }
}

/// The most rows a bounded read may ask for and still run inline (see
/// [`SqliteStoreOptions::inline_reads`]).
pub(crate) const INLINE_READ_ROWS: usize = 256;

/// What a read runs: several statements that must see one snapshot, or a single statement.
#[derive(Clone, Copy)]
enum ReadKind {
    /// In one explicit read transaction (`BEGIN` … `COMMIT`).
    Transaction,
    /// One statement, which is its own read transaction: no `BEGIN` and `COMMIT` around it
    /// (two statements fewer per read, and reads run several times per message).
    Statement,
}

/// Runs `f` in one read transaction of `conn`.
///
/// `BEGIN` and `COMMIT` run through the connection's statement cache (rusqlite's
/// `Transaction` parses them again at every read, and reads run several times per message). A read that fails or panics rolls the transaction back, so its
/// connection can go back to the pool (the pool drops a connection still in a transaction).
/// A [`ReadKind::Statement`] read runs `f` as it is: its one statement reads one snapshot.
fn read_in<T>(
    conn: &Connection,
    kind: ReadKind,
    f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
) -> Result<T, rusqlite::Error> {
    if let ReadKind::Statement = kind {
        return f(conn);
    }
    /// Rolls back the read transaction unless it was committed.
    struct Open<'c>(&'c Connection);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            if !self.0.is_autocommit() {
                let _ = self.0.execute_batch("ROLLBACK");
            }
        }
    }
    conn.prepare_cached("BEGIN")?.execute([])?;
    let open = Open(conn);
    let value = f(conn)?;
    conn.prepare_cached("COMMIT")?.execute([])?;
    drop(open);
    Ok(value)
}

/// What a [`StoreError::Query`] of a [`SqliteStore`] carries: the failed statement's error,
/// with the database file it ran on.
///
/// ```
/// # use botmesh_durability::StoreError;
/// # use botmesh_durability::store::SqliteQueryError;
/// fn file_of(error: &StoreError) -> Option<&std::path::Path> {
///     match error {
///         StoreError::Query { source, .. } => source
///             .downcast_ref::<SqliteQueryError>()
///             .map(|e| e.file.as_path()),
///         _ => None,
///     }
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("`{file}`: {source}")]
pub struct SqliteQueryError {
    /// The database file.
    pub file: PathBuf,
    /// The statement's (or the writer's) error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Names `file` in a [`StoreError::Query`]; other errors already name it or need not.
fn in_file(file: &Path, error: StoreError) -> StoreError {
    match error {
        StoreError::Query { operation, source } => StoreError::Query {
            operation,
            source: Box::new(SqliteQueryError {
                file: file.to_path_buf(),
                source,
            }),
        },
        other => other,
    }
}

/// Wraps a failed statement as [`StoreError::Query`].
fn query_error(
    operation: &'static str,
    source: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::Query {
        operation,
        source: Box::new(source),
    }
}

impl SqliteStore {
    /// The schema version this build writes and reads.
    pub const SCHEMA_VERSION: i64 = schema::SUPPORTED;

    /// A store of the file at `path` with default options; nothing is opened yet.
    pub fn open(path: impl Into<PathBuf>) -> Self {
        Self::with_options(path, SqliteStoreOptions::default())
    }

    /// A store of the file at `path` with `options`; nothing is opened yet.
    pub fn with_options(path: impl Into<PathBuf>, options: SqliteStoreOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                path: path.into(),
                options,
                lifecycle: tokio::sync::Mutex::new(()),
                state: Mutex::new(None),
                stats: Arc::default(),
            }),
        }
    }

    /// Opens (creating or migrating) the file at `path` with default options, at once.
    pub async fn connect(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        Self::connect_with(path, SqliteStoreOptions::default()).await
    }

    /// Opens the file at `path` with `options`, at once.
    pub async fn connect_with(
        path: impl Into<PathBuf>,
        options: SqliteStoreOptions,
    ) -> Result<Self, StoreError> {
        let store = Self::with_options(path, options);
        store.open_connections().await?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Whether `other` is this store or a clone of it (the same connections and writer).
    pub(crate) fn is_same_store(&self, other: &SqliteStore) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The options the store was made with.
    pub fn options(&self) -> &SqliteStoreOptions {
        &self.shared.options
    }

    /// Counters of the writer thread (transactions, requests, largest group commit), kept
    /// across `close` and `open`.
    pub fn write_stats(&self) -> SqliteWriteStats {
        self.shared.stats.snapshot()
    }

    /// How many worker threads to give the tokio runtime of a bot that writes through a
    /// SQLite store: one fewer than this machine's cores, and at least one.
    ///
    /// Every write of the store (and of its journal) runs on the store's one writer thread,
    /// which is busy most of the time under load: SQLite's B-tree work, then writing the WAL
    /// and syncing it. A runtime with a worker per core keeps every core busy with the bot's
    /// own work, and the writer then waits for a core at every wake-up, which holds up every
    /// write of the group commit behind it, so the writer gets a core of its own (see
    /// `docs/performance.md` for the figures). Read from [`std::thread::available_parallelism`] (1 when it is unknown).
    ///
    /// ```no_run
    /// use botmesh_durability::SqliteStore;
    ///
    /// let runtime = tokio::runtime::Builder::new_multi_thread()
    ///     .worker_threads(SqliteStore::worker_threads_beside_writer())
    ///     .enable_all()
    ///     .build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn worker_threads_beside_writer() -> usize {
        workers_beside_writer(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Runs `f` on the writer connection, inside a transaction shared with the other
    /// requests queued at the same moment (group commit), and returns its value once that
    /// transaction committed.
    ///
    /// When `f` returns an error (or panics), its statements are rolled back and only this
    /// call fails, with [`StoreError::Query`] naming `operation`. The group first runs without
    /// savepoints; when one of its requests fails, the writer rolls the whole group back and
    /// runs it again with each request in its own savepoint, so **`f` may run twice** (a
    /// request that panicked is not run again). Keep `f` to its statements: no effects
    /// outside the transaction. `f` must not end the transaction itself (`COMMIT`,
    /// `ROLLBACK`, `RELEASE` of an outer savepoint). It runs on the writer thread, so it
    /// should be short: every other write waits for it. Use [`Connection::prepare_cached`]
    /// for statements run often.
    ///
    /// A store opened read-only answers [`StoreError::ReadOnly`]; a closed one
    /// [`StoreError::Closed`]. Dropping the returned future does not cancel the write.
    pub async fn write<T, F>(&self, operation: &'static str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Transaction<'_>) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        let reply = {
            let conns = self.conns()?;
            let Some(writer) = &conns.writer else {
                return Err(StoreError::ReadOnly {
                    file: self.shared.path.clone(),
                });
            };
            let (tx, rx) = oneshot::channel();
            writer.submit(writer::TypedJob::boxed(operation, f, tx))?;
            rx
        };
        // The writer drops the reply sender unanswered only when it stopped (closed store).
        reply
            .await
            .unwrap_or(Err(StoreError::Closed))
            .map_err(|e| in_file(&self.shared.path, e))
    }

    /// Runs `f` on a read-only connection, inside one read transaction (a consistent
    /// snapshot that sees every write answered before this call): on the calling thread when
    /// a reader connection is idle and [`SqliteStoreOptions::inline_reads`] is on, else on
    /// tokio's blocking pool. `f` should be a short read (an index lookup, a small bounded
    /// range); use [`read_on_pool`](Self::read_on_pool) for a listing that may be long.
    ///
    /// An error of `f` becomes [`StoreError::Query`] naming `operation`; a closed store
    /// answers [`StoreError::Closed`].
    pub async fn read<T, F>(&self, operation: &'static str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        self.read_with(
            operation,
            self.shared.options.inline_reads,
            ReadKind::Transaction,
            f,
        )
        .await
    }

    /// As [`read`](Self::read), for `f` that runs one statement (a row by key, a bounded
    /// range): the statement is its own read transaction, without `BEGIN` and `COMMIT`.
    pub(crate) async fn read_statement<T, F>(
        &self,
        operation: &'static str,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        self.read_with(
            operation,
            self.shared.options.inline_reads,
            ReadKind::Statement,
            f,
        )
        .await
    }

    /// As [`read`](Self::read), always on tokio's blocking pool: for reads whose length the
    /// caller does not bound (every checkpoint, a long range), which would hold an async
    /// thread too long.
    pub async fn read_on_pool<T, F>(&self, operation: &'static str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        self.read_with(operation, false, ReadKind::Transaction, f)
            .await
    }

    /// A read of at most `rows` rows by one statement: inline (as [`read`](Self::read)) up
    /// to [`INLINE_READ_ROWS`], on the pool beyond; the statement is its own read
    /// transaction (as [`read_statement`](Self::read_statement)).
    pub(crate) async fn read_rows<T, F>(
        &self,
        operation: &'static str,
        rows: usize,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        let inline = self.shared.options.inline_reads && rows <= INLINE_READ_ROWS;
        self.read_with(operation, inline, ReadKind::Statement, f)
            .await
    }

    async fn read_with<T, F>(
        &self,
        operation: &'static str,
        inline: bool,
        kind: ReadKind,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        self.read_unnamed(operation, inline, kind, f)
            .await
            .map_err(|e| in_file(&self.shared.path, e))
    }

    async fn read_unnamed<T, F>(
        &self,
        operation: &'static str,
        inline: bool,
        kind: ReadKind,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        let conns = self.conns()?;
        if inline {
            if let Some((permit, conn)) = conns.readers.try_idle() {
                let result = read_in(&conn, kind, f);
                conns.readers.give_back(conn);
                drop(permit);
                return result.map_err(|e| query_error(operation, e));
            }
        }
        let permit = conns.readers.slot().await;
        let pool = Arc::clone(&conns);
        let task = tokio::task::spawn_blocking(move || {
            let conns = pool;
            let conn = conns.readers.take()?;
            let result = read_in(&conn, kind, f);
            conns.readers.give_back(conn);
            result.map_err(|e: rusqlite::Error| query_error(operation, e))
        });
        let result = match task.await {
            Ok(result) => result,
            Err(join) => Err(query_error(operation, join)),
        };
        drop(permit);
        result
    }

    fn state(&self) -> MutexGuard<'_, Option<Arc<Conns>>> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connections of the open store, or [`StoreError::Closed`].
    fn conns(&self) -> Result<Arc<Conns>, StoreError> {
        self.state().clone().ok_or(StoreError::Closed)
    }

    /// Opens the connections unless they are open.
    async fn open_connections(&self) -> Result<(), StoreError> {
        let _lifecycle = self.shared.lifecycle.lock().await;
        if self.state().is_some() {
            return Ok(());
        }
        let path = self.shared.path.clone();
        let options = self.shared.options.clone();
        let conns = if options.read_only {
            let file = path.clone();
            let opened = tokio::task::spawn_blocking(move || {
                let conn = schema::open_read_only_checked(&path, &options)?;
                let readers = schema::ReaderPool::new(path, options);
                readers.give_back(conn);
                Ok::<_, StoreError>(readers)
            })
            .await
            .map_err(|e| StoreError::Open {
                file,
                source: Box::new(e),
            })??;
            Conns {
                writer: None,
                readers: opened,
                scope_ids: durable::ScopeIds::default(),
            }
        } else {
            let writer =
                writer::WriterHandle::start(&path, &options, Arc::clone(&self.shared.stats))
                    .await?;
            Conns {
                writer: Some(writer),
                readers: schema::ReaderPool::new(path, options),
                scope_ids: durable::ScopeIds::default(),
            }
        };
        *self.state() = Some(Arc::new(conns));
        tracing::debug!(file = %self.shared.path.display(), "sqlite store opened");
        Ok(())
    }

    /// Stops the writer after it drained every request queued before this call.
    async fn close_connections(&self) -> Result<(), StoreError> {
        let _lifecycle = self.shared.lifecycle.lock().await;
        let Some(conns) = self.state().take() else {
            return Ok(());
        };
        // Idle readers go first, so the writer's connection is the last one and SQLite
        // checkpoints the WAL into the main file when it closes.
        conns.readers.clear();
        if let Some(writer) = &conns.writer {
            writer.stop().await;
        }
        tracing::debug!(file = %self.shared.path.display(), "sqlite store closed");
        Ok(())
    }
}

/// The tokio workers beside the writer thread on a machine of `cores` cores.
fn workers_beside_writer(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

#[cfg(test)]
mod worker_tests {
    use super::workers_beside_writer;

    #[test]
    fn the_writer_keeps_a_core_and_the_runtime_at_least_one() {
        assert_eq!(workers_beside_writer(0), 1);
        assert_eq!(workers_beside_writer(1), 1);
        assert_eq!(workers_beside_writer(2), 1);
        assert_eq!(workers_beside_writer(8), 7);
    }
}
