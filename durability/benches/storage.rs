//! Storage ceilings on this disk, and what the durable backends reach under load.
//!
//! `cargo bench -p botmesh-durability --bench storage` prints one table:
//!
//! | row | what is measured |
//! | --- | --- |
//! | rusqlite, 1 row per commit | `INSERT` + `COMMIT`, WAL, `synchronous = FULL`: fsync'd commits/s |
//! | rusqlite, 64 rows per commit | the same with 64 rows per transaction: commits/s and rows/s |
//! | file append + fdatasync | 100-byte append then `sync_data`: the raw fsync ceiling |
//! | DurableKv cas, 200 writers | 200 tokio tasks each creating keys by `cas` on memory, file (append log, fsync on; also a `FileEventJournal`'s storage), SQLite, and a `SharedFileEventJournal`'s storage (append log, then snapshot mode: every write under the cross-process mutex, rereading the file) |
//!
//! Files live under cargo's target temp folder (the real disk, not a tmpfs). Set
//! `BOTMESH_BENCH_SECS` to change the time per row (default 2 s). The bot-level benchmark
//! is elsewhere; this one only measures storage.
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]
#![allow(missing_docs)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_durability::events::SharedFileKv;
use botmesh_durability::kv::{Entry, Scope};
use botmesh_durability::store::rusqlite::{self, Connection};
use botmesh_durability::{
    DurableKv, FileDurability, FileOptions, MemoryKv, SharedFileOptions, SqliteStore,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Row {
    name: &'static str,
    ops: u64,
    per_sec: f64,
    note: String,
}

fn budget() -> Duration {
    let secs = std::env::var("BOTMESH_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

/// Runs `step` until the time budget is spent; returns (steps, per second).
fn timed(mut step: impl FnMut(u64) -> Result<(), BoxError>) -> Result<(u64, f64), BoxError> {
    let limit = budget();
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < limit {
        step(n)?;
        n += 1;
    }
    Ok((n, n as f64 / start.elapsed().as_secs_f64()))
}

fn sqlite_conn(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")?;
    Ok(conn)
}

fn sqlite_rows(dir: &Path, rows_per_commit: u64) -> Result<(u64, f64), BoxError> {
    let conn = sqlite_conn(&dir.join(format!("raw-{rows_per_commit}.db")))?;
    let value = vec![7u8; 200];
    timed(|_| {
        let tx = conn.unchecked_transaction()?;
        {
            let mut insert = tx.prepare_cached("INSERT INTO t (v) VALUES (?1)")?;
            for _ in 0..rows_per_commit {
                insert.execute([&value])?;
            }
        }
        tx.commit()?;
        Ok(())
    })
}

fn file_appends(dir: &Path) -> Result<(u64, f64), BoxError> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("raw.log"))?;
    let line = [b'x'; 100];
    timed(|_| {
        file.write_all(&line)?;
        file.sync_data()?;
        Ok(())
    })
}

/// 200 tasks each creating keys until the budget is spent; returns (ops, ops/s).
async fn cas_load(kv: Arc<dyn DurableKv>) -> Result<(u64, f64), BoxError> {
    let limit = budget();
    let start = Instant::now();
    let tasks: Vec<_> = (0..200)
        .map(|w| {
            let kv = Arc::clone(&kv);
            tokio::spawn(async move {
                let scope = Scope::custom("bench");
                let mut n = 0u64;
                while start.elapsed() < limit {
                    let entry = Entry {
                        value: format!("{{\"state\":\"pending\",\"n\":{n}}}").into_bytes(),
                        idx1: Some(format!("due/{n:010}")),
                        idx2: Some(format!("chat/{w}")),
                    };
                    let outcome = kv.cas(&scope, &format!("w{w}/{n}"), None, entry).await?;
                    if !outcome.is_ok() {
                        return Err::<u64, BoxError>("unexpected conflict".into());
                    }
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();
    let mut ops = 0;
    for task in tasks {
        ops += task.await??;
    }
    Ok((ops, ops as f64 / start.elapsed().as_secs_f64()))
}

fn main() -> Result<(), BoxError> {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let dir = root.path();
    let mut rows = Vec::new();

    let (ops, per_sec) = sqlite_rows(dir, 1)?;
    rows.push(Row {
        name: "rusqlite, 1 row per commit (FULL, WAL)",
        ops,
        per_sec,
        note: "commits/s".into(),
    });
    let (ops, per_sec) = sqlite_rows(dir, 64)?;
    rows.push(Row {
        name: "rusqlite, 64 rows per commit (FULL, WAL)",
        ops,
        per_sec,
        note: format!("commits/s = {:.0} rows/s", per_sec * 64.0),
    });
    let (ops, per_sec) = file_appends(dir)?;
    rows.push(Row {
        name: "file append 100 B + fdatasync",
        ops,
        per_sec,
        note: "appends/s".into(),
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (ops, per_sec) = cas_load(Arc::new(MemoryKv::new())).await?;
        rows.push(Row {
            name: "DurableKv cas ×200 writers: memory",
            ops,
            per_sec,
            note: "no disk".into(),
        });

        let file = FileDurability::open(
            dir.join("journal.json"),
            FileOptions::new().append_log(true),
        )
        .await?;
        let (ops, per_sec) = cas_load(Arc::new(file.clone())).await?;
        let stats = file.stats();
        rows.push(Row {
            name: "DurableKv cas ×200 writers: file (append log, fsync)",
            ops,
            per_sec,
            note: format!(
                "{} fsyncs, {:.1} writes/fsync, {} compactions",
                stats.fsyncs,
                stats.writes as f64 / stats.fsyncs.max(1) as f64,
                stats.compactions
            ),
        });
        file.close().await?;

        let store = SqliteStore::connect(dir.join("bot.db")).await?;
        let before = store.write_stats();
        let (ops, per_sec) = cas_load(Arc::new(store.durability_kv())).await?;
        let after = store.write_stats();
        let transactions = after.transactions - before.transactions;
        rows.push(Row {
            name: "DurableKv cas ×200 writers: SQLite (FULL)",
            ops,
            per_sec,
            note: format!(
                "{transactions} transactions, {:.1} writes/transaction",
                ops as f64 / transactions.max(1) as f64
            ),
        });
        botmesh_durability::Store::close(&store).await?;

        for (name, options, file) in [
            (
                "DurableKv cas ×200 writers: shared events, log",
                SharedFileOptions::new().append_log(true),
                "shared-log.json",
            ),
            (
                "DurableKv cas ×200 writers: shared events, snapshot",
                SharedFileOptions::new(),
                "shared-snapshot.json",
            ),
        ] {
            let shared = SharedFileKv::open(dir.join(file), options).await?;
            let (ops, per_sec) = cas_load(Arc::new(shared.clone())).await?;
            rows.push(Row {
                name,
                ops,
                per_sec,
                note: "one mutex, one reread and one fsync'd write per op".into(),
            });
            shared.close().await;
        }
        Ok::<(), BoxError>(())
    })?;

    println!(
        "storage ceilings ({} s per row, files in {})",
        budget().as_secs_f64(),
        dir.display()
    );
    println!(
        "| {:<52} | {:>8} | {:>10} | note",
        "measure", "ops", "per second"
    );
    println!("| {:-<52} | {:->8} | {:->10} | ----", "", "", "");
    for row in rows {
        println!(
            "| {:<52} | {:>8} | {:>10.0} | {}",
            row.name, row.ops, row.per_sec, row.note
        );
    }
    Ok(())
}
