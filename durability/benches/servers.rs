//! Throughput of the server backends against their raw ceilings (`cargo bench -p
//! botmesh-durability --features postgres,redis --bench servers`).
//!
//! | row | what runs |
//! | --- | --- |
//! | `postgres INSERT commit, 1 conn` | single-row autocommit `INSERT`s, one after the other, through `tokio-postgres` |
//! | `postgres INSERT commit, 16 conns` | the same from 16 connections at once (the server's commit ceiling) |
//! | `PostgresKv cas, 200 writers` | 200 tasks, each updating its own key with `cas` (pool of 16) |
//! | `redis SET, 1 conn` | `SET` round trips, one after the other |
//! | `redis SET, 200 writers` | 200 tasks sharing one multiplexed connection |
//! | `RedisKv cas, 200 writers` | 200 tasks, each updating its own key with `cas` (one `EVALSHA` each) |
//!
//! Reads `BOTMESH_TEST_POSTGRES_URL` and `BOTMESH_TEST_REDIS_URL`; a server without its
//! variable is skipped with a message. Every row runs for a fixed time; tables and keys are
//! created under a random prefix and removed at the end. Nothing here is a correctness test.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark prints its table"
)]

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use botmesh_durability::backends::postgres::PostgresConfig;
use botmesh_durability::backends::postgres::tokio_postgres::{self, NoTls};
use botmesh_durability::backends::redis::RedisConfig;
use botmesh_durability::backends::redis::redis_crate as redis;
use botmesh_durability::kv::{CasOutcome, Entry, Scope};
use botmesh_durability::{DurableKv, PostgresKv, RedisKv};

type Res<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

const RUN: Duration = Duration::from_secs(3);
const WRITERS: usize = 200;

/// Runs `worker` in `tasks` tasks (each given its number and the row's deadline, [`RUN`] from
/// now, at which it stops); returns operations per second.
async fn measure<F, Fut>(tasks: usize, worker: F) -> Res<f64>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Res> + Send + 'static,
{
    OPS.store(0, Ordering::Relaxed);
    let start = Instant::now();
    let deadline = start + RUN;
    let handles: Vec<_> = (0..tasks)
        .map(|t| tokio::spawn(worker(t, deadline)))
        .collect();
    for h in handles {
        h.await??;
    }
    let ops = OPS.swap(0, Ordering::Relaxed);
    Ok(ops as f64 / start.elapsed().as_secs_f64())
}

/// Operations done by the current row.
static OPS: AtomicU64 = AtomicU64::new(0);

fn tick() {
    OPS.fetch_add(1, Ordering::Relaxed);
}

/// Operations per second of [`WRITERS`] writers updating keys of their own in `kv` with `cas`
/// ([`cas_writer`]).
async fn cas_rate(kv: Arc<dyn DurableKv>) -> Res<f64> {
    measure(WRITERS, |who, deadline| {
        cas_writer(Arc::clone(&kv), who, deadline)
    })
    .await
}

fn entry(n: u64) -> Entry {
    Entry {
        value: format!("{{\"n\":{n},\"payload\":\"0123456789abcdef\"}}").into_bytes(),
        idx1: Some(format!("i/pending/{n:016}/x")),
        idx2: None,
    }
}

/// One writer: creates its key, then updates it with `cas` until the time is up.
async fn cas_writer(kv: Arc<dyn DurableKv>, who: usize, deadline: Instant) -> Res {
    let scope = Scope::custom("bench");
    let key = format!("w{who}");
    let mut expected = None;
    let mut n = 0u64;
    while Instant::now() < deadline {
        match kv.cas(&scope, &key, expected, entry(n)).await? {
            CasOutcome::Ok { version } => expected = Some(version),
            CasOutcome::Conflict { current } => expected = current,
        }
        n += 1;
        tick();
    }
    Ok(())
}

async fn postgres(url: &str, rows: &mut Vec<(String, f64)>) -> Res {
    let tail: String = (0..8).map(|_| fastrand::lowercase()).collect();
    let prefix = format!("bmb_{tail}_");
    let (admin, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(conn);
    let raw = format!("{prefix}raw");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {raw} (id bigserial PRIMARY KEY, body text NOT NULL)"
        ))
        .await?;
    for conns in [1usize, 16] {
        let rate = measure(conns, |_, deadline| {
            let (url, raw) = (url.to_owned(), raw.clone());
            async move {
                let (client, conn) = tokio_postgres::connect(&url, NoTls).await?;
                tokio::spawn(conn);
                let st = client
                    .prepare(&format!("INSERT INTO {raw} (body) VALUES ($1)"))
                    .await?;
                while Instant::now() < deadline {
                    client.execute(&st, &[&"0123456789abcdef"]).await?;
                    tick();
                }
                Ok(())
            }
        })
        .await?;
        rows.push((format!("postgres INSERT commit, {conns} conn(s)"), rate));
    }
    let config = PostgresConfig::new().table_prefix(&prefix);
    let kv = PostgresKv::connect_with(url, config).await?;
    let cas = cas_rate(Arc::new(kv)).await?;
    rows.push((format!("PostgresKv cas, {WRITERS} writers (pool 16)"), cas));
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {raw}, {prefix}durable; DROP SEQUENCE IF EXISTS {prefix}durable_version"
        ))
        .await?;
    Ok(())
}

async fn redis_rows(url: &str, rows: &mut Vec<(String, f64)>) -> Res {
    let tail: String = (0..8).map(|_| fastrand::lowercase()).collect();
    let prefix = format!("bmb_{tail}");
    let client = redis::Client::open(url)?;
    let shared = client.get_multiplexed_async_connection().await?;
    for writers in [1usize, WRITERS] {
        let rate = measure(writers, |who, deadline| {
            let mut conn = shared.clone();
            let key = format!("{prefix}:raw:{who}");
            async move {
                while Instant::now() < deadline {
                    let mut set = redis::cmd("SET");
                    set.arg(&key).arg("0123456789abcdef");
                    set.query_async::<()>(&mut conn).await?;
                    tick();
                }
                Ok(())
            }
        })
        .await?;
        rows.push((format!("redis SET, {writers} writer(s), 1 conn"), rate));
    }
    let kv = RedisKv::open_with(url, RedisConfig::new().prefix(&prefix)).await?;
    let cas = cas_rate(Arc::new(kv)).await?;
    rows.push((format!("RedisKv cas, {WRITERS} writers, 1 conn"), cas));
    let mut conn = shared.clone();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await?;
    if !keys.is_empty() {
        let _: () = redis::cmd("UNLINK")
            .arg(&keys)
            .query_async(&mut conn)
            .await?;
    }
    Ok(())
}

fn main() -> Res {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut rows = Vec::new();
        match std::env::var("BOTMESH_TEST_POSTGRES_URL") {
            Ok(url) => postgres(&url, &mut rows).await?,
            Err(_) => eprintln!("PostgreSQL skipped: set BOTMESH_TEST_POSTGRES_URL"),
        }
        match std::env::var("BOTMESH_TEST_REDIS_URL") {
            Ok(url) => redis_rows(&url, &mut rows).await?,
            Err(_) => eprintln!("Redis skipped: set BOTMESH_TEST_REDIS_URL"),
        }
        println!("| {:<44} | {:>10} |", "operation", "ops/s");
        println!("| {:-<44} | {:->10} |", "", "");
        for (name, rate) in rows {
            println!("| {name:<44} | {rate:>10.0} |");
        }
        Ok(())
    })
}
