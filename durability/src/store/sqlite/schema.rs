//! Opening the SQLite file: connection settings, the botmesh check, migrations, read pool.
//!
//! A file is accepted when it is empty (it is then initialised) or when it holds a
//! `botmesh_meta` table with `application = botmesh` and a `schema_version` this build
//! knows. Anything else is refused before a single byte is written to it:
//!
//! | the file | read-write open | read-only open |
//! | --- | --- | --- |
//! | missing or empty | created, migrated to [`SUPPORTED`] | `NotABotmeshDatabase` (or `Open` if missing) |
//! | not SQLite (random bytes, text) | `NotABotmeshDatabase` | `NotABotmeshDatabase` |
//! | SQLite with objects but no botmesh `botmesh_meta` | `NotABotmeshDatabase` | `NotABotmeshDatabase` |
//! | `schema_version` < [`SUPPORTED`] | missing migrations applied in one transaction | `Open` (open it read-write once) |
//! | `schema_version` > [`SUPPORTED`] | `SchemaTooNew` | `SchemaTooNew` |
//!
//! Migrations are an ordered list of SQL scripts; migration `n` (1-based) moves the schema
//! from version `n - 1` to `n`. They are only ever appended to, never edited.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use super::SqliteStoreOptions;
use crate::store::StoreError;

/// The value of `application` in `botmesh_meta`.
const APPLICATION: &str = "botmesh";

/// Migration 1: the store's tables, and the `durable` table reserved for the durable journal
/// (its scope became an id in migration 3).
///
/// `durable` belongs to the journal (`KvDurability` over this file), not to the `Store`: one
/// row per `(scope, key)` with a compare-and-set `version`, an opaque `value` and two
/// optional sort keys `idx1`, `idx2`, each indexed within its scope.
const MIGRATION_1: &str = "
CREATE TABLE chats (
    id               TEXT PRIMARY KEY NOT NULL,
    is_group         INTEGER NOT NULL,
    title            TEXT,
    lang             TEXT,
    first_seen_ms    INTEGER NOT NULL,
    last_activity_ms INTEGER NOT NULL
);
CREATE TABLE contacts (
    id           TEXT PRIMARY KEY NOT NULL,
    name         TEXT,
    last_seen_ms INTEGER NOT NULL
);
CREATE TABLE ledger (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    chat       TEXT NOT NULL,
    message_id TEXT,
    direction  TEXT NOT NULL,
    status     TEXT NOT NULL,
    text       TEXT,
    content    TEXT NOT NULL,
    key        TEXT,
    error      TEXT,
    at_ms      INTEGER NOT NULL
);
CREATE INDEX ledger_chat_id ON ledger (chat, id);
CREATE TABLE checkpoints (
    chat        TEXT PRIMARY KEY NOT NULL,
    flow        TEXT NOT NULL,
    layout_hash INTEGER NOT NULL,
    state       TEXT NOT NULL,
    inbound_id  TEXT,
    step        INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL
);
CREATE TABLE handoffs (
    chat     TEXT PRIMARY KEY NOT NULL,
    agent    TEXT,
    reason   TEXT,
    since_ms INTEGER NOT NULL
);
CREATE TABLE kv (
    scope TEXT NOT NULL,
    key   TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE TABLE durable (
    scope   TEXT NOT NULL,
    key     TEXT NOT NULL,
    version INTEGER NOT NULL,
    value   BLOB NOT NULL,
    idx1    TEXT,
    idx2    TEXT,
    PRIMARY KEY (scope, key)
);
CREATE INDEX durable_scope_idx1 ON durable (scope, idx1);
CREATE INDEX durable_scope_idx2 ON durable (scope, idx2);
";

/// Migration 2: the `durable` table's sort-key indexes also hold the key, and only the rows
/// that have the sort key.
///
/// A range read orders by `(idx, key)`: with the key in the index, SQLite reads the rows in
/// that order instead of sorting them in a temporary B-tree at every read (the journal's
/// "is an earlier send of this chat still open?" read runs at every send).
/// `idx2` is set only on open records: rows without it (most of them: settled records) no
/// longer sit in that index, so settling a record removes its `idx2` entry instead of
/// moving it, and inserting a settled record writes nothing there. A range read's
/// `idx >= ? AND idx < ?` implies `idx IS NOT NULL`, so it still uses the index.
const MIGRATION_2: &str = "
DROP INDEX durable_scope_idx1;
DROP INDEX durable_scope_idx2;
CREATE INDEX durable_scope_idx1 ON durable (scope, idx1, key) WHERE idx1 IS NOT NULL;
CREATE INDEX durable_scope_idx2 ON durable (scope, idx2, key) WHERE idx2 IS NOT NULL;
";

/// Migration 3: the `durable` table names its scope by a small integer, `scope_id`, given
/// by the new `durable_scopes` table, instead of repeating the scope's text (28 bytes for a
/// bot's default scope) in every row and in every entry of its three indexes.
///
/// The key index and the `idx1` index take their inserts at random places, so a group
/// commit rewrites most of their leaf pages: halving their entries halves the pages a
/// commit writes for them. Id 0 is the version counter's reserved scope; the others are given in order of
/// first use ([`SqliteDurableKv`](super::SqliteDurableKv) registers a scope, in a write of its
/// own, before its first write).
const MIGRATION_3: &str = "
CREATE TABLE durable_scopes (
    id    INTEGER PRIMARY KEY NOT NULL,
    scope TEXT NOT NULL UNIQUE
);
INSERT INTO durable_scopes (id, scope) VALUES (0, char(0) || 'botmesh:versions');
INSERT INTO durable_scopes (scope)
    SELECT DISTINCT scope FROM durable WHERE scope <> char(0) || 'botmesh:versions' ORDER BY scope;
CREATE TABLE durable_by_scope_id (
    scope_id INTEGER NOT NULL,
    key      TEXT NOT NULL,
    version  INTEGER NOT NULL,
    value    BLOB NOT NULL,
    idx1     TEXT,
    idx2     TEXT,
    PRIMARY KEY (scope_id, key)
);
INSERT INTO durable_by_scope_id (scope_id, key, version, value, idx1, idx2)
    SELECT s.id, d.key, d.version, d.value, d.idx1, d.idx2
    FROM durable d JOIN durable_scopes s ON s.scope = d.scope ORDER BY d.rowid;
DROP TABLE durable;
ALTER TABLE durable_by_scope_id RENAME TO durable;
CREATE INDEX durable_scope_idx1 ON durable (scope_id, idx1, key) WHERE idx1 IS NOT NULL;
CREATE INDEX durable_scope_idx2 ON durable (scope_id, idx2, key) WHERE idx2 IS NOT NULL;
";

/// Every migration, in order.
const MIGRATIONS: &[&str] = &[MIGRATION_1, MIGRATION_2, MIGRATION_3];

/// The schema version this build writes: the number of migrations.
pub(super) const SUPPORTED: i64 = MIGRATIONS.len() as i64;

/// What a file holds, as far as opening is concerned.
enum Found {
    /// No schema object at all: a new file.
    Empty,
    /// A botmesh database at this schema version.
    Version(i64),
}

fn open_error(
    file: &Path,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> StoreError {
    StoreError::Open {
        file: file.to_path_buf(),
        source: source.into(),
    }
}

fn refuse(file: &Path, reason: impl Into<String>) -> StoreError {
    StoreError::NotABotmeshDatabase {
        file: file.to_path_buf(),
        reason: reason.into(),
    }
}

/// Maps an error met while reading the file: "not a database" is a refusal, not an I/O error.
fn read_error(file: &Path, error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => {
            refuse(file, format!("it is not an SQLite database: {error}"))
        }
        _ => open_error(file, error),
    }
}

/// The writer's page cache, in KiB (as `PRAGMA cache_size` takes it: negative).
const WRITER_CACHE_KIB: i64 = -16 * 1024;

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 128;

/// Opens a connection with `flags` and the settings every connection shares.
fn connect(
    path: &Path,
    flags: OpenFlags,
    options: &SqliteStoreOptions,
) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(path, flags).map_err(|e| read_error(path, e))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(|e| open_error(path, e))?;
    // Every statement the store and the journal run stays prepared (rusqlite keeps 16 by
    // default, fewer than they use: the cache would evict and parse them again).
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The journal's range reads (`idx >= ?2 AND idx < ?3`) would otherwise be planned again
    // at every run: with STAT4 compiled in, a bound range marks the statement for
    // re-preparation whenever its values change. The plan does not depend on them here.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// Reads what the file holds, without writing to it.
fn inspect(conn: &Connection, file: &Path) -> Result<Found, StoreError> {
    let objects: Vec<String> = (|| {
        let mut stmt = conn.prepare(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             ORDER BY name",
        )?;
        let names = stmt.query_map([], |row| row.get(0))?;
        names.collect::<Result<Vec<String>, _>>()
    })()
    .map_err(|e| read_error(file, e))?;
    if objects.is_empty() {
        return Ok(Found::Empty);
    }
    if !objects.iter().any(|name| name == "botmesh_meta") {
        let mut listed = objects
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if objects.len() > 5 {
            listed.push_str(", …");
        }
        return Err(refuse(
            file,
            format!("it holds other tables ({listed}) and no botmesh_meta table"),
        ));
    }
    let meta = |key: &str| -> Result<Option<String>, StoreError> {
        conn.query_row(
            "SELECT CAST(value AS TEXT) FROM botmesh_meta WHERE key = ?1",
            [key],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| read_error(file, e))
    };
    match meta("application")? {
        Some(app) if app == APPLICATION => {}
        Some(other) => {
            return Err(refuse(
                file,
                format!("botmesh_meta names application `{other}`, not `{APPLICATION}`"),
            ));
        }
        None => return Err(refuse(file, "botmesh_meta has no application row")),
    }
    let Some(version) = meta("schema_version")? else {
        return Err(refuse(file, "botmesh_meta has no schema_version row"));
    };
    let found: i64 = version.trim().parse().map_err(|_| {
        refuse(
            file,
            format!("botmesh_meta.schema_version `{version}` is not a number"),
        )
    })?;
    if found > SUPPORTED {
        return Err(StoreError::SchemaTooNew {
            file: file.to_path_buf(),
            found,
            supported: SUPPORTED,
        });
    }
    Ok(Found::Version(found))
}

/// Opens the write connection: creates the file and its folder, checks it, switches it to
/// WAL, applies the missing migrations.
pub(super) fn open_writer(
    path: &Path,
    options: &SqliteStoreOptions,
) -> Result<Connection, StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| open_error(path, e))?;
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = connect(path, flags, options)?;
    // Refuse a foreign file before any pragma below writes to it.
    inspect(&conn, path)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| read_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(file = %path.display(), mode, "sqlite store: WAL journal mode refused");
    }
    conn.pragma_update(None, "synchronous", options.synchronous.as_str())
        .map_err(|e| open_error(path, e))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| open_error(path, e))?;
    // A group run again after a failed request runs each request in a savepoint (and a flow
    // step writing one key twice takes one of its own), whose undo copies of the pages it
    // changes go to a statement journal: in memory, not a temporary file written and read
    // back. A larger page cache keeps the tables' and indexes' hot pages across group commits.
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(|e| open_error(path, e))?;
    conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)
        .map_err(|e| open_error(path, e))?;
    conn.pragma_update(None, "wal_autocheckpoint", options.wal_autocheckpoint)
        .map_err(|e| open_error(path, e))?;
    migrate(&mut conn, path)?;
    Ok(conn)
}

/// Applies the missing migrations in one `IMMEDIATE` transaction, checking the file again
/// under the write lock (another process may have initialised it meanwhile).
fn migrate(conn: &mut Connection, file: &Path) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| read_error(file, e))?;
    let from = match inspect(&tx, file)? {
        Found::Version(version) => version,
        Found::Empty => {
            tx.execute_batch(
                "CREATE TABLE botmesh_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);",
            )
            .map_err(|e| open_error(file, e))?;
            tx.execute(
                "INSERT INTO botmesh_meta (key, value) VALUES ('application', ?1), \
                 ('schema_version', '0')",
                [APPLICATION],
            )
            .map_err(|e| open_error(file, e))?;
            0
        }
    };
    if from == SUPPORTED {
        return Ok(());
    }
    let start = usize::try_from(from).unwrap_or(0);
    for (index, script) in MIGRATIONS.iter().enumerate().skip(start) {
        let version = index + 1;
        tx.execute_batch(script)
            .map_err(|e| open_error(file, format!("migration {version} failed: {e}")))?;
        tx.execute(
            "UPDATE botmesh_meta SET value = ?1 WHERE key = 'schema_version'",
            [version.to_string()],
        )
        .map_err(|e| open_error(file, e))?;
    }
    tx.commit().map_err(|e| open_error(file, e))?;
    tracing::info!(file = %file.display(), from, to = SUPPORTED, "sqlite store schema migrated");
    Ok(())
}

/// Opens a read-only connection without checking the file (the writer did).
fn open_reader(path: &Path, options: &SqliteStoreOptions) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    connect(path, flags, options)
}

/// Opens a read-only connection of a read-only store: the file must be a botmesh database of
/// exactly the current schema.
pub(super) fn open_read_only_checked(
    path: &Path,
    options: &SqliteStoreOptions,
) -> Result<Connection, StoreError> {
    let conn = open_reader(path, options)?;
    match inspect(&conn, path)? {
        Found::Empty => Err(refuse(
            path,
            "it is empty, and a read-only store cannot initialise it",
        )),
        Found::Version(version) if version < SUPPORTED => Err(open_error(
            path,
            format!(
                "schema version {version} is older than {SUPPORTED}; open it read-write once \
                 to migrate it"
            ),
        )),
        Found::Version(_) => Ok(conn),
    }
}

/// Idle read-only connections, opened on demand and kept up to [`ReaderPool::MAX_IDLE`].
pub(super) struct ReaderPool {
    path: PathBuf,
    options: SqliteStoreOptions,
    idle: Mutex<Vec<Connection>>,
    /// One permit per reader connection: reads beyond that wait for a connection instead of
    /// opening (and soon closing) one each, which costs far more than the read.
    slots: tokio::sync::Semaphore,
}

impl ReaderPool {
    /// The reader connections: reads running at once, and idle connections kept.
    const READERS: usize = 4;

    pub(super) fn new(path: PathBuf, options: SqliteStoreOptions) -> Self {
        Self {
            path,
            options,
            idle: Mutex::new(Vec::new()),
            slots: tokio::sync::Semaphore::new(Self::READERS),
        }
    }

    /// Waits for a free reader slot (held until the read gave its connection back).
    pub(super) async fn slot(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.slots.acquire().await.ok()
    }

    /// A free slot with an idle connection, without waiting or opening one: `None` when every
    /// slot is taken or no connection is idle.
    pub(super) fn try_idle(&self) -> Option<(tokio::sync::SemaphorePermit<'_>, Connection)> {
        let permit = self.slots.try_acquire().ok()?;
        let conn = self.idle().pop()?;
        Some((permit, conn))
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An idle connection, or a new one. Blocking: call it off the async threads.
    pub(super) fn take(&self) -> Result<Connection, StoreError> {
        match self.idle().pop() {
            Some(conn) => Ok(conn),
            None => open_reader(&self.path, &self.options),
        }
    }

    /// Returns a connection to the pool, unless the pool is full or the connection is still
    /// inside a transaction.
    pub(super) fn give_back(&self, conn: Connection) {
        if !conn.is_autocommit() {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < Self::READERS {
            idle.push(conn);
        }
    }

    /// Closes every idle connection.
    pub(super) fn clear(&self) {
        self.idle().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn autocheckpoint(options: &SqliteStoreOptions) -> i64 {
        let dir = tempfile::tempdir().expect("temp dir");
        let conn = open_writer(&dir.path().join("store.db"), options).expect("opens");
        conn.pragma_query_value(None, "wal_autocheckpoint", |row| row.get(0))
            .expect("pragma reads")
    }

    #[test]
    fn the_writer_takes_the_wal_autocheckpoint_option() {
        assert_eq!(autocheckpoint(&SqliteStoreOptions::default()), 8000);
        let options = SqliteStoreOptions::default().wal_autocheckpoint(250);
        assert_eq!(autocheckpoint(&options), 250);
        let off = SqliteStoreOptions::default().wal_autocheckpoint(0);
        assert_eq!(autocheckpoint(&off), 0);
    }
}
