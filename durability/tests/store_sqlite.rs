//! [`SqliteStore`]: the shared store behaviour, and what only a file can do: reopening,
//! a second process reading it, refusing foreign files and newer schemas, group commit,
//! read-only stores, corrupt rows, and bad files (a full disk, a truncated database, an
//! unwritable folder), whose errors name the file.
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use botmesh_durability::store::{ACTIVITY_RESOLUTION_MS, SqliteSynchronous, rusqlite};
use botmesh_durability::{SqliteStore, SqliteStoreOptions, Store, StoreError};
use serde_json::json;
use tempfile::TempDir;

/// A store in a fresh temporary folder, in a subfolder that does not exist yet.
async fn new_store() -> (SqliteStore, TempDir) {
    support::sqlite_store("nested/folder/bot.db").await
}

/// The first column of the first row `sql` selects, read through `store` as `operation`.
async fn read_one<T: rusqlite::types::FromSql + Send + 'static>(
    store: &SqliteStore,
    operation: &'static str,
    sql: &'static str,
) -> T {
    store
        .read(operation, move |conn| {
            conn.query_row(sql, [], |row| row.get(0))
        })
        .await
        .unwrap()
}

/// A store in a fresh temporary folder (`bot.db`, its path beside it) holding `values` in
/// scope `s`.
async fn store_holding(
    values: impl IntoIterator<Item = (String, serde_json::Value)>,
) -> (SqliteStore, PathBuf, TempDir) {
    let (store, dir) = support::sqlite_store("bot.db").await;
    for (key, value) in values {
        store.set_value("s", &key, &value).await.unwrap();
    }
    (store, dir.path().join("bot.db"), dir)
}

fn read_only() -> SqliteStoreOptions {
    SqliteStoreOptions::default().read_only(true)
}

store_behaviour_tests!(async { Some(new_store().await) });

/// Asserts that `error` refuses `file` as not a botmesh database, and names it.
fn assert_refused(error: &StoreError, file: &Path) {
    match error {
        StoreError::NotABotmeshDatabase { file: refused, .. } => assert_eq!(refused, file),
        other => panic!("expected NotABotmeshDatabase, got {other:?}"),
    }
    assert!(
        error.to_string().contains(&file.display().to_string()),
        "{error}"
    );
}

#[tokio::test]
async fn reopening_the_file_finds_what_was_written() {
    let (first, _dir) = new_store().await;
    let second = SqliteStore::open(first.path());
    common::restart(&first, &second).await;
    // The same handle reopens too.
    first.open().await.unwrap();
    assert_eq!(first.chat("c1").await.unwrap(), Some(common::chat("c1", 1)));
}

#[tokio::test]
async fn a_store_is_closed_until_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bot.db");
    let store = SqliteStore::with_options(
        &path,
        SqliteStoreOptions::new()
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(std::time::Duration::from_millis(100)),
    );
    assert!(matches!(store.chat("c").await, Err(StoreError::Closed)));
    assert!(!path.exists());
    store.open().await.unwrap();
    assert!(path.exists());
    store.upsert_chat(&common::chat("c", 0)).await.unwrap();
    assert_eq!(store.chat("c").await.unwrap(), Some(common::chat("c", 0)));
}

const CHILD_ENV: &str = "BOTMESH_STORE_CHILD_DB";
const CHILD_MARK: &str = "BOTMESH-CHILD ";

/// Not a test of its own: `a_second_process_reads_the_file` runs this test binary again with
/// `BOTMESH_STORE_CHILD_DB` set, and this reads that file read-only and prints what it finds.
#[tokio::test]
#[allow(clippy::print_stdout)]
async fn child_reads_the_file() {
    let Some(path) = support::child_path(CHILD_ENV) else {
        return;
    };
    let store = SqliteStore::connect_with(path, read_only()).await.unwrap();
    let chat = store.chat("c1").await.unwrap();
    let ledger = store.ledger("c1", 10).await.unwrap();
    let value = store.get_value("user:1", "k").await.unwrap();
    let write = store.set_value("user:1", "k", &json!("child")).await;
    let report = json!({
        "title": chat.and_then(|c| c.title),
        "ledger": ledger.iter().map(|e| e.text.clone()).collect::<Vec<_>>(),
        "value": value,
        "write_refused": matches!(write, Err(StoreError::ReadOnly { .. })),
    });
    println!("{CHILD_MARK}{report}");
}

/// Runs `child_reads_the_file` in a new process on `path`; returns what it printed.
fn run_child(path: &Path) -> serde_json::Value {
    let child = support::spawn_child("store_sqlite::child_reads_the_file", CHILD_ENV, path);
    support::child_report(child, CHILD_MARK)
}

#[tokio::test]
async fn a_second_process_reads_the_file() {
    let (store, _dir) = new_store().await;
    store.upsert_chat(&common::chat("c1", 1)).await.unwrap();
    for n in 0..3 {
        store.append_ledger(&common::entry("c1", n)).await.unwrap();
    }
    store
        .set_value("user:1", "k", &json!({"a": 1}))
        .await
        .unwrap();
    let expected = json!({
        "title": "title 1",
        "ledger": ["text 0", "text 1", "text 2"],
        "value": {"a": 1},
        "write_refused": true,
    });
    // While this process holds the file open (the data may still be in the WAL)…
    assert_eq!(run_child(store.path()), expected);
    // …and after it closed it (the WAL checkpointed and removed).
    store.close().await.unwrap();
    assert_eq!(run_child(store.path()), expected);
    // The child changed nothing.
    store.open().await.unwrap();
    assert_eq!(
        store.get_value("user:1", "k").await.unwrap(),
        Some(json!({"a": 1}))
    );
}

#[tokio::test]
async fn random_bytes_are_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("random.db");
    let mut rng = fastrand::Rng::with_seed(7);
    let bytes: Vec<u8> = (0..8192).map(|_| rng.u8(..)).collect();
    std::fs::write(&path, &bytes).unwrap();
    let error = SqliteStore::connect(&path).await.unwrap_err();
    assert_refused(&error, &path);
    let error = SqliteStore::connect_with(&path, read_only())
        .await
        .unwrap_err();
    assert_refused(&error, &path);
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[tokio::test]
async fn a_text_file_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("short.txt", "not a database\n".to_owned()),
        ("long.txt", "a line of notes\n".repeat(500)),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &text).unwrap();
        let error = SqliteStore::connect(&path).await.unwrap_err();
        assert_refused(&error, &path);
        assert!(
            error.to_string().contains("not an SQLite database"),
            "{error}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}

/// Makes an SQLite file with `sql` in it, outside botmesh.
fn foreign_db(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(sql).unwrap();
}

/// The names of the tables of an SQLite file.
fn tables(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let names = stmt.query_map([], |row| row.get(0)).unwrap();
    names.collect::<Result<_, _>>().unwrap()
}

#[tokio::test]
async fn a_foreign_sqlite_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    foreign_db(
        &path,
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO users (name) VALUES ('ada');",
    );
    let error = SqliteStore::connect(&path).await.unwrap_err();
    assert_refused(&error, &path);
    assert!(error.to_string().contains("users"), "{error}");
    assert_eq!(tables(&path), ["users"]);

    // A botmesh_meta of another application is refused too.
    let other = dir.path().join("other.db");
    foreign_db(
        &other,
        "CREATE TABLE botmesh_meta (key TEXT PRIMARY KEY, value TEXT);
         INSERT INTO botmesh_meta VALUES ('application', 'otherbot'), ('schema_version', '1');",
    );
    let error = SqliteStore::connect(&other).await.unwrap_err();
    assert_refused(&error, &other);
    assert!(error.to_string().contains("otherbot"), "{error}");
}

#[tokio::test]
async fn a_newer_schema_is_refused_naming_the_file() {
    let (store, _dir) = new_store().await;
    let path = store.path().to_path_buf();
    store.close().await.unwrap();
    foreign_db(
        &path,
        "UPDATE botmesh_meta SET value = '999' WHERE key = 'schema_version';",
    );
    for options in [SqliteStoreOptions::default(), read_only()] {
        let error = SqliteStore::connect_with(&path, options).await.unwrap_err();
        assert!(
            matches!(&error, StoreError::SchemaTooNew { file, found: 999, supported }
                if file == &path && *supported == SqliteStore::SCHEMA_VERSION),
            "expected SchemaTooNew (999, not {}): {error:?}",
            SqliteStore::SCHEMA_VERSION
        );
        assert!(error.to_string().contains(&path.display().to_string()));
    }
    // The store that wrote it cannot reopen it either, and says so again.
    assert!(matches!(
        store.open().await,
        Err(StoreError::SchemaTooNew { found: 999, .. })
    ));
}

#[tokio::test]
async fn a_new_file_is_initialised_with_the_schema() {
    let (store, _dir) = new_store().await;
    let meta = store
        .read("meta", |conn| {
            let mut stmt = conn.prepare("SELECT key, value FROM botmesh_meta ORDER BY key")?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect::<Result<Vec<(String, String)>, _>>()
        })
        .await
        .unwrap();
    assert_eq!(
        meta,
        [
            ("application".to_owned(), "botmesh".to_owned()),
            (
                "schema_version".to_owned(),
                SqliteStore::SCHEMA_VERSION.to_string()
            ),
        ]
    );
    let mode: String = read_one(&store, "journal_mode", "PRAGMA journal_mode").await;
    assert_eq!(mode, "wal");
    for table in [
        "botmesh_meta",
        "chats",
        "checkpoints",
        "contacts",
        "durable",
        "durable_scopes",
        "handoffs",
        "kv",
        "ledger",
    ] {
        assert!(tables(store.path()).iter().any(|t| t == table), "{table}");
    }
}

#[tokio::test]
async fn write_and_read_closures_reach_the_durable_table() {
    let (store, _dir) = new_store().await;
    let version = store
        .write("durable_put", |tx| {
            tx.execute(
                "INSERT INTO durable (scope_id, key, version, value, idx1) VALUES (?1, ?2, 1, ?3, ?4)",
                rusqlite::params![7, "inbox/1", b"payload".to_vec(), "0001"],
            )?;
            tx.query_row(
                "SELECT version FROM durable WHERE scope_id = 7 AND key = 'inbox/1'",
                [],
                |row| row.get::<_, i64>(0),
            )
        })
        .await
        .unwrap();
    assert_eq!(version, 1);
    let sql = "SELECT value FROM durable WHERE scope_id = 7 AND idx1 = '0001'";
    let value: Vec<u8> = read_one(&store, "durable_get", sql).await;
    assert_eq!(value, b"payload");
    // A failing closure names its operation.
    let error = store
        .read("durable_missing", |conn| {
            conn.query_row("SELECT nope FROM durable", [], |row| row.get::<_, i64>(0))
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Query {
                operation: "durable_missing",
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_read_only_store_sees_what_the_writer_writes() {
    let (writer, _dir) = new_store().await;
    writer.set_value("s", "a", &json!(1)).await.unwrap();
    let reader = SqliteStore::connect_with(writer.path(), read_only())
        .await
        .unwrap();
    assert!(reader.options().is_read_only());
    assert_eq!(reader.get_value("s", "a").await.unwrap(), Some(json!(1)));
    writer.set_value("s", "b", &json!(2)).await.unwrap();
    writer
        .save_checkpoint(&common::checkpoint("c", 3))
        .await
        .unwrap();
    assert_eq!(reader.values("s").await.unwrap().len(), 2);
    assert_eq!(
        reader.checkpoints().await.unwrap(),
        vec![common::checkpoint("c", 3)]
    );
    // Writes are refused, naming the file.
    match reader.set_value("s", "c", &json!(3)).await {
        Err(StoreError::ReadOnly { file }) => assert_eq!(file, writer.path()),
        other => panic!("expected ReadOnly, got {other:?}"),
    }
    assert!(matches!(
        reader.write("raw", |_tx| Ok(())).await,
        Err(StoreError::ReadOnly { .. })
    ));
    // The reader outlives the writer.
    writer.close().await.unwrap();
    assert_eq!(reader.values("s").await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_read_only_store_does_not_create_or_initialise() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let error = SqliteStore::connect_with(&missing, read_only())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, StoreError::Open { file, .. } if file == &missing),
        "{error:?}"
    );
    assert!(!missing.exists());
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let error = SqliteStore::connect_with(&empty, read_only())
        .await
        .unwrap_err();
    assert_refused(&error, &empty);
    assert_eq!(std::fs::read(&empty).unwrap(), b"");
}

#[tokio::test]
async fn corrupt_rows_are_reported_not_panicked_on() {
    let (store, _dir) = new_store().await;
    store.append_ledger(&common::entry("c", 0)).await.unwrap();
    store
        .write("corrupt", |tx| {
            tx.execute_batch(
                "INSERT INTO kv (scope, key, value) VALUES ('user:1', 'bad', '{not json');
                 INSERT INTO checkpoints (chat, flow, layout_hash, state, step, updated_ms)
                     VALUES ('c9', 'f', 1, '[1,', 1, 1);
                 INSERT INTO ledger (chat, direction, status, content, at_ms)
                     VALUES ('c', 'sideways', 'sent', '{}', 1);
                 INSERT INTO ledger (chat, direction, status, content, at_ms)
                     VALUES ('d', 'inbound', 'sent', 'nope', 1);",
            )
        })
        .await
        .unwrap();
    let corrupt = |result: Result<_, StoreError>| match result {
        Err(StoreError::Corrupt { what, key, reason }) => (what, key, reason),
        other => panic!("expected Corrupt, got {:?}", other.map(|_: ()| ())),
    };
    let (what, key, _) = corrupt(store.get_value("user:1", "bad").await.map(|_| ()));
    assert_eq!((what, key.as_str()), ("kv", "user:1/bad"));
    let (what, key, _) = corrupt(store.values("user:1").await.map(|_| ()));
    assert_eq!((what, key.as_str()), ("kv", "user:1/bad"));
    let (what, key, reason) = corrupt(store.checkpoint("c9").await.map(|_| ()));
    assert_eq!((what, key.as_str()), ("checkpoint", "c9"));
    assert!(reason.contains("JSON"), "{reason}");
    let (what, ..) = corrupt(store.checkpoints().await.map(|_| ()));
    assert_eq!(what, "checkpoint");
    let (what, key, reason) = corrupt(store.ledger("c", 10).await.map(|_| ()));
    assert_eq!((what, key.as_str()), ("ledger", "c#2"));
    assert!(reason.contains("sideways"), "{reason}");
    let (what, ..) = corrupt(store.ledger("d", 10).await.map(|_| ()));
    assert_eq!(what, "ledger");
}

#[tokio::test]
async fn record_inbound_writes_chat_contact_and_ledger_in_one_transaction() {
    use botmesh_durability::store::ChatRecord;
    use botmesh_durability::store::ContactRecord;
    use botmesh_durability::store::Direction;
    use botmesh_durability::store::LedgerEntry;
    use botmesh_durability::store::LedgerStatus;
    let (store, _dir) = new_store().await;
    let chat = |now: i64| ChatRecord {
        id: "c".into(),
        is_group: false,
        title: None,
        lang: None,
        first_seen_ms: now,
        last_activity_ms: now,
    };
    let contact = ContactRecord {
        id: "u".into(),
        name: Some("Ann".into()),
        last_seen_ms: 1,
    };
    let entry = LedgerEntry {
        chat: "c".into(),
        message_id: Some("m1".into()),
        direction: Direction::Inbound,
        status: LedgerStatus::Received,
        text: Some("hi".into()),
        content: json!({"kind": "text", "data": "hi"}),
        key: None,
        error: None,
        at_ms: 1,
    };
    let before = store.write_stats().transactions;
    store
        .record_inbound(&chat(10), &contact, &entry)
        .await
        .unwrap();
    assert_eq!(
        store.write_stats().transactions,
        before + 1,
        "one transaction"
    );
    let mut with_lang = chat(10);
    with_lang.lang = Some("de".into());
    with_lang.title = Some("Ann's chat".into());
    store.upsert_chat(&with_lang).await.unwrap();
    let later = 10 + ACTIVITY_RESOLUTION_MS;
    store
        .record_inbound(&chat(later), &contact, &entry)
        .await
        .unwrap();
    let c = store.chat("c").await.unwrap().unwrap();
    assert_eq!((c.first_seen_ms, c.last_activity_ms), (10, later));
    assert_eq!(c.lang.as_deref(), Some("de"), "the language is kept");
    assert_eq!(c.title.as_deref(), Some("Ann's chat"), "the title is kept");
    assert_eq!(store.ledger("c", 10).await.unwrap().len(), 2);
    assert_eq!(
        store.contact("u").await.unwrap().unwrap().name.as_deref(),
        Some("Ann")
    );

    // Sooner than the resolution after the stored times, with the same group flag and name:
    // neither row is rewritten (the ledger row is written).
    let soon = ContactRecord {
        last_seen_ms: ACTIVITY_RESOLUTION_MS,
        ..contact.clone()
    };
    store
        .record_inbound(&chat(later + ACTIVITY_RESOLUTION_MS - 1), &soon, &entry)
        .await
        .unwrap();
    let stored = async |store: &SqliteStore| {
        let chat = store.chat("c").await.unwrap().unwrap();
        let contact = store.contact("u").await.unwrap().unwrap();
        (chat.last_activity_ms, contact.last_seen_ms)
    };
    assert_eq!(stored(&store).await, (later, 1), "both rows as they were");
    assert_eq!(store.ledger("c", 10).await.unwrap().len(), 3);
    // At the resolution, both move.
    let seen = ContactRecord {
        last_seen_ms: 1 + ACTIVITY_RESOLUTION_MS,
        ..contact
    };
    store
        .record_inbound(&chat(later + ACTIVITY_RESOLUTION_MS), &seen, &entry)
        .await
        .unwrap();
    assert_eq!(
        stored(&store).await,
        (later + ACTIVITY_RESOLUTION_MS, 1 + ACTIVITY_RESOLUTION_MS)
    );
}

/// The schema of version 1 (migration 1 as it shipped), with a chat, journal rows of two
/// scopes and the version counter in it.
fn schema_1_file(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE botmesh_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
         INSERT INTO botmesh_meta (key, value) VALUES ('application', 'botmesh'), ('schema_version', '1');
         CREATE TABLE chats (id TEXT PRIMARY KEY NOT NULL, is_group INTEGER NOT NULL, title TEXT,
             lang TEXT, first_seen_ms INTEGER NOT NULL, last_activity_ms INTEGER NOT NULL);
         CREATE TABLE contacts (id TEXT PRIMARY KEY NOT NULL, name TEXT, last_seen_ms INTEGER NOT NULL);
         CREATE TABLE ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, chat TEXT NOT NULL,
             message_id TEXT, direction TEXT NOT NULL, status TEXT NOT NULL, text TEXT,
             content TEXT NOT NULL, key TEXT, error TEXT, at_ms INTEGER NOT NULL);
         CREATE INDEX ledger_chat_id ON ledger (chat, id);
         CREATE TABLE checkpoints (chat TEXT PRIMARY KEY NOT NULL, flow TEXT NOT NULL,
             layout_hash INTEGER NOT NULL, state TEXT NOT NULL, inbound_id TEXT,
             step INTEGER NOT NULL, updated_ms INTEGER NOT NULL);
         CREATE TABLE handoffs (chat TEXT PRIMARY KEY NOT NULL, agent TEXT, reason TEXT,
             since_ms INTEGER NOT NULL);
         CREATE TABLE kv (scope TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
             PRIMARY KEY (scope, key));
         CREATE TABLE durable (scope TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL,
             value BLOB NOT NULL, idx1 TEXT, idx2 TEXT, PRIMARY KEY (scope, key));
         CREATE INDEX durable_scope_idx1 ON durable (scope, idx1);
         CREATE INDEX durable_scope_idx2 ON durable (scope, idx2);
         INSERT INTO chats VALUES ('c1', 0, 'Shop', 'en', 1, 2);
         INSERT INTO durable VALUES ('s', 'o/open', 3, x'01', 'o/pending/1', 'o/chat:1');
         INSERT INTO durable VALUES ('s', 'o/sent', 4, x'02', 'o/sent/1', NULL);
         INSERT INTO durable VALUES ('t', 'o/sent', 2, x'03', 'o/sent/2', NULL);
         INSERT INTO durable VALUES (char(0) || 'botmesh:versions', 'last_version', 64, x'', NULL, NULL);",
    )
    .unwrap();
}

#[tokio::test]
async fn a_schema_1_file_is_migrated_and_keeps_its_rows() {
    use botmesh_durability::kv::{CasOutcome, DurableKv, Entry, Index, Scope};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    schema_1_file(&path);
    // A read-only store does not migrate: it asks for one read-write open first.
    let refused = SqliteStore::with_options(&path, read_only()).open().await;
    assert!(
        matches!(&refused, Err(StoreError::Open { source, .. }) if source.to_string().contains("open it read-write once")),
        "{refused:?}"
    );
    let store = SqliteStore::connect(&path).await.unwrap();
    let sql = "SELECT value FROM botmesh_meta WHERE key = 'schema_version'";
    let version: String = read_one(&store, "meta", sql).await;
    assert_eq!(version, SqliteStore::SCHEMA_VERSION.to_string());
    let indexes: Vec<String> = store
        .read("indexes", |conn| {
            let mut stmt = conn.prepare(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'durable' \
                 AND sql IS NOT NULL ORDER BY name",
            )?;
            let rows = stmt.query_map([], |row| row.get(0))?;
            rows.collect()
        })
        .await
        .unwrap();
    assert_eq!(indexes.len(), 2, "{indexes:?}");
    assert!(
        indexes[0].contains("(scope_id, idx1, key) WHERE idx1 IS NOT NULL"),
        "{indexes:?}"
    );
    assert!(
        indexes[1].contains("(scope_id, idx2, key) WHERE idx2 IS NOT NULL"),
        "{indexes:?}"
    );
    // The rows are still there and found through the new indexes.
    assert_eq!(
        store.chat("c1").await.unwrap().unwrap().title.as_deref(),
        Some("Shop")
    );
    let kv = store.durability_kv();
    let scope = Scope::custom("s");
    let open = kv.range(&scope, Index::Two, "o/", "o0", 10).await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].key, "o/open");
    let all = kv.range(&scope, Index::One, "o/", "o0", 10).await.unwrap();
    let keys: Vec<&str> = all.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["o/open", "o/sent"]);
    // Each scope keeps its own rows, under its own id.
    let other = kv
        .get(&Scope::custom("t"), "o/sent")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((other.version, other.value), (2, vec![3]));
    assert_eq!(kv.get(&scope, "o/sent").await.unwrap().unwrap().value, [2]);
    // The version counter kept its place (id 0): new versions come after every stored one,
    // from the same row.
    let new = Entry {
        value: vec![4],
        idx1: None,
        idx2: None,
    };
    let written = kv.cas(&scope, "o/new", None, new.clone()).await.unwrap();
    assert!(
        matches!(written, CasOutcome::Ok { version } if version > 64),
        "{written:?}"
    );
    // A scope the old file never had is registered at its first write.
    let fresh = Scope::custom("u");
    assert!(kv.get(&fresh, "o/new").await.unwrap().is_none());
    kv.cas(&fresh, "o/new", None, new).await.unwrap();
    assert_eq!(kv.get(&fresh, "o/new").await.unwrap().unwrap().value, [4]);
    let (counters, scopes): (i64, Vec<(i64, String)>) = store
        .read("scopes", |conn| {
            let counters = conn.query_row(
                "SELECT count(*) FROM durable WHERE key = 'last_version' AND scope_id = 0",
                [],
                |row| row.get(0),
            )?;
            let mut stmt = conn.prepare("SELECT id, scope FROM durable_scopes ORDER BY id")?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok((counters, rows.collect::<Result<_, _>>()?))
        })
        .await
        .unwrap();
    assert_eq!(counters, 1);
    let named: Vec<(i64, &str)> = scopes.iter().map(|(id, s)| (*id, s.as_str())).collect();
    assert_eq!(
        named,
        [(0, "\0botmesh:versions"), (1, "s"), (2, "t"), (3, "u")]
    );
    // A second open finds the schema current and changes nothing.
    store.close().await.unwrap();
    let again = SqliteStore::connect(&path).await.unwrap();
    assert_eq!(again.chat("c1").await.unwrap().unwrap().id, "c1");
    let kv = again.durability_kv();
    assert_eq!(kv.get(&fresh, "o/new").await.unwrap().unwrap().value, [4]);
}

#[tokio::test]
async fn reads_run_inline_or_on_the_blocking_pool_alike() {
    use botmesh_durability::kv::{DurableKv, Entry, Scope};
    let dir = tempfile::tempdir().unwrap();
    for inline in [true, false] {
        let path = dir.path().join(format!("inline-{inline}.db"));
        let store =
            SqliteStore::with_options(&path, SqliteStoreOptions::new().inline_reads(inline));
        store.open().await.unwrap();
        let kv = store.durability_kv();
        let scope = Scope::custom("s");
        let entry = Entry {
            value: vec![7; 10],
            idx1: Some("a".into()),
            idx2: None,
        };
        kv.cas(&scope, "k", None, entry).await.unwrap();
        // More reads at once than reader connections: the ones without an idle connection
        // wait for one (inline or not), and all see the write.
        let reads = (0..32).map(|_| {
            let kv = kv.clone();
            let scope = scope.clone();
            tokio::spawn(async move { kv.get(&scope, "k").await })
        });
        for read in reads {
            let found = read.await.unwrap().unwrap().unwrap();
            assert_eq!(found.value, vec![7; 10], "inline_reads({inline})");
        }
        // A failing read names its operation either way.
        let error = store
            .read("probe", |conn| {
                conn.query_row("SELECT * FROM missing", [], |_| Ok(()))
            })
            .await
            .unwrap_err();
        assert!(error.to_string().contains("probe"), "{error}");
        // A failed read leaves no connection inside its transaction: the reads after it (on
        // whichever connection) begin their own and see the rows.
        for _ in 0..16 {
            let failed = store
                .read("probe", |conn| {
                    conn.query_row("SELECT * FROM missing", [], |_| Ok(()))
                })
                .await;
            assert!(failed.is_err());
            let open = store
                .read("autocommit", |conn| Ok(conn.is_autocommit()))
                .await
                .unwrap();
            assert!(!open, "a read runs inside its own read transaction");
            assert!(
                kv.get(&scope, "k").await.unwrap().is_some(),
                "inline_reads({inline})"
            );
        }
        store
            .read_on_pool("autocommit", |conn| {
                assert!(!conn.is_autocommit());
                Ok(())
            })
            .await
            .unwrap();
        store.close().await.unwrap();
    }
}

/// Which thread a read ran on, against the calling one.
async fn read_thread(store: &SqliteStore, on_pool: bool) -> bool {
    let here = std::thread::current().id();
    let probe = |_: &rusqlite::Connection| Ok(std::thread::current().id());
    let there = if on_pool {
        store.read_on_pool("thread", probe).await.unwrap()
    } else {
        store.read("thread", probe).await.unwrap()
    };
    there == here
}

#[tokio::test]
async fn short_reads_run_on_the_calling_thread_and_listings_on_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let inline = SqliteStore::connect(dir.path().join("a.db")).await.unwrap();
    // The first read opens the reader connection (on the pool); once idle, reads stay here.
    inline.chat("none").await.unwrap();
    assert!(
        read_thread(&inline, false).await,
        "a short read ran on the pool"
    );
    assert!(!read_thread(&inline, true).await, "a listing ran inline");
    let pooled = SqliteStore::connect_with(
        dir.path().join("b.db"),
        SqliteStoreOptions::new().inline_reads(false),
    )
    .await
    .unwrap();
    pooled.chat("none").await.unwrap();
    assert!(
        !read_thread(&pooled, false).await,
        "inline_reads(false): a read ran on the calling thread"
    );
}

/// Whether `error`'s whole chain (its message and every source's) mentions `file`.
fn names(error: &dyn std::error::Error, file: &Path) -> bool {
    let file = file.display().to_string();
    let mut next = Some(error);
    while let Some(e) = next {
        if e.to_string().contains(&file) {
            return true;
        }
        next = e.source();
    }
    false
}

/// A full disk (the file may not grow past its size, `PRAGMA max_page_count`): the write
/// that does not fit fails with an error naming the file and SQLite's reason; what was
/// answered before it is in the file when it is opened again.
#[tokio::test]
async fn a_full_disk_fails_the_write_naming_the_file_and_keeps_what_was_answered() {
    let (store, path, _dir) = store_holding((0..5).map(|n| (format!("kept{n}"), json!(n)))).await;
    let pages: i64 = store
        .write("fill the disk", |tx| {
            let pages: i64 = tx.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            tx.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                r.get::<_, i64>(0)
            })
        })
        .await
        .unwrap();
    assert!(pages > 0);
    let big = json!("x".repeat(64 * 1024));
    let error = store.set_value("s", "too big", &big).await.unwrap_err();
    assert!(matches!(error, StoreError::Query { .. }), "{error:?}");
    assert!(names(&error, &path), "the error names the file: {error}");
    let chain = format!("{error}: {:?}", std::error::Error::source(&error));
    assert!(chain.contains("full"), "SQLite's reason: {chain}");
    store.close().await.unwrap();

    let store = SqliteStore::connect(&path).await.unwrap();
    for n in 0..5 {
        assert_eq!(
            store.get_value("s", &format!("kept{n}")).await.unwrap(),
            Some(json!(n))
        );
    }
    assert_eq!(store.get_value("s", "too big").await.unwrap(), None);
    store.close().await.unwrap();
}

/// A database file cut short (a copy interrupted, a disk that lost its tail) is refused at
/// open, or at the first read of what it lost, with an error naming the file; the file is
/// left as it was.
#[tokio::test]
async fn a_truncated_database_is_an_error_naming_the_file() {
    let values = (0..400).map(|n| (format!("k{n:03}"), json!("v".repeat(200))));
    let (store, path, _dir) = store_holding(values).await;
    store.close().await.unwrap();
    // Closing the last connection checkpointed the WAL into the file and removed it.
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 16 * 4096, "{len} bytes");
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len / 2).unwrap();
    drop(file);
    let cut = std::fs::read(&path).unwrap();

    let error = match SqliteStore::connect(&path).await {
        Err(error) => error,
        Ok(store) => {
            let listed = store.values("s").await;
            store.close().await.unwrap();
            listed.unwrap_err()
        }
    };
    assert!(names(&error, &path), "the error names the file: {error}");
    assert!(
        format!("{error:?}").contains("malformed"),
        "SQLite's reason: {error:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), cut, "left as it was");
}

/// A database whose folder cannot be written: opening fails with an error naming the file,
/// and creates nothing. The folder is a regular file (always), then a read-only folder:
/// `chmod 555` for an ordinary user; for root, whom permissions do not stop, an immutable
/// folder (`chattr +i`, where the filesystem has it).
#[cfg(unix)]
#[tokio::test]
async fn an_unwritable_folder_is_an_error_naming_the_file() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, path) = support::under_a_regular_file("bot.db");
    let error = SqliteStore::connect(&path).await.unwrap_err();
    assert!(names(&error, &path), "the error names the file: {error}");

    let folder = dir.path().join("read-only");
    std::fs::create_dir(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o555)).unwrap();
    let chattr = |flag: &str| {
        Command::new("chattr")
            .arg(flag)
            .arg(&folder)
            .output()
            .is_ok_and(|out| out.status.success())
    };
    let mut immutable = false;
    if std::fs::write(folder.join("probe"), "x").is_ok() {
        let _ = std::fs::remove_file(folder.join("probe"));
        immutable = chattr("+i");
    }
    let refuses = std::fs::write(folder.join("probe"), "x").is_err();
    let path = folder.join("bot.db");
    let opened = SqliteStore::connect(&path).await;
    if immutable {
        chattr("-i");
    }
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
    if !refuses {
        eprintln!("SKIPPED (read-only folder part): neither chmod nor chattr stops this user");
        opened.unwrap().close().await.unwrap();
        return;
    }
    let error = opened.unwrap_err();
    assert!(names(&error, &path), "the error names the file: {error}");
    assert_eq!(
        std::fs::read_dir(&folder).unwrap().count(),
        0,
        "nothing created"
    );
}

/// A scope's first writes, made at the same moment, register it once: one write of its
/// own before theirs, and one id they all use.
#[tokio::test]
async fn a_scope_is_registered_once_by_its_first_concurrent_writes() {
    use botmesh_durability::kv::{CasOutcome, DurableKv, Entry, Scope};
    let (store, _dir) = new_store().await;
    let kv = store.durability_kv();
    let before = store.write_stats().requests;
    let writes = (0..20).map(|i| {
        let kv = kv.clone();
        tokio::spawn(async move {
            let entry = Entry {
                value: vec![i],
                idx1: Some(format!("i/{i:02}")),
                idx2: None,
            };
            kv.cas(&Scope::custom("bot"), &format!("k{i}"), None, entry)
                .await
        })
    });
    for write in writes.collect::<Vec<_>>() {
        let outcome = write.await.unwrap().unwrap();
        assert!(matches!(outcome, CasOutcome::Ok { .. }), "{outcome:?}");
    }
    assert_eq!(
        store.write_stats().requests - before,
        21,
        "twenty writes and one registration"
    );
    let scope = Scope::custom("bot");
    let listed = kv
        .range(&scope, botmesh_durability::kv::Index::One, "i/", "i0", 100)
        .await
        .unwrap();
    assert_eq!(listed.len(), 20);
    let ids: Vec<i64> = store
        .read("scopes", |conn| {
            let mut stmt = conn.prepare("SELECT id FROM durable_scopes WHERE scope = 'bot'")?;
            let rows = stmt.query_map([], |row| row.get(0))?;
            rows.collect()
        })
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    // Another scope of the same file has its own id and sees none of these rows.
    let other = Scope::custom("other");
    assert!(kv.get(&other, "k1").await.unwrap().is_none());
    assert!(
        kv.range(&other, botmesh_durability::kv::Index::One, "i/", "i0", 100)
            .await
            .unwrap()
            .is_empty()
    );
}
