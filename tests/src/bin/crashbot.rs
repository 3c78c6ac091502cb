//! `crashbot`: a small durable bot on the JSON-lines interface, for tests that SIGKILL a real
//! process in the middle of handlers and sends and start it again on the same file.
//!
//! ```text
//! crashbot --db PATH [--backend sqlite|file|file-snapshot|events-shared|postgres|redis] [--url URL] [--bot-id ID]
//!          [--instance ID] [--lease-ms N] [--work-ms N] [--defaults]
//! ```
//!
//! `--defaults` builds the bot as a user would, with nothing but its SQLite store: the
//! journals, their options and the instance id are the defaults.
//!
//! Every message `T` is answered by `T:one`, then (after `--work-ms` of "work") `T:two`;
//! `/order` starts a persistent flow instead (`What would you like?` → `How many?` →
//! `Ordered <qty> x <item>`), whose checkpoints live in the same SQLite file.
//! Data lives in the SQLite store at `--db`; the journals in its `durable` table (`sqlite`) or
//! in `<db>.journal` with an append log (`file`), in a `SharedFileEventJournal` at
//! `<db>.events` with an append log (`events-shared`), or on a server (`postgres`, `redis`, with
//! `--url`). The instance id is `crashbot` unless `--instance` says otherwise: a restart with
//! the same id reclaims the killed process's leases at once; replicas with their own ids claim
//! them once the leases (`--lease-ms`) expired.

#![allow(clippy::print_stderr)] // usage errors of a command-line tool

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use botmesh::durability::retries::Backoff;
use botmesh::durability::{DurabilityConfig, FileDurability, FileOptions, SqliteStore};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh_providers::jsonl::JsonlProvider;
use botmesh_tests::flows::order;

struct Args {
    db: PathBuf,
    backend: String,
    url: Option<String>,
    bot_id: String,
    instance: String,
    lease_ms: Option<u64>,
    work_ms: u64,
    defaults: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut db = None;
    let mut backend = "sqlite".to_owned();
    let mut work_ms = 20;
    let mut url = None;
    let mut bot_id = "crashbot".to_owned();
    let mut instance = "crashbot".to_owned();
    let mut lease_ms = None;
    let mut defaults = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => db = args.next().map(PathBuf::from),
            "--backend" => backend = args.next().ok_or("--backend needs a value")?,
            "--url" => url = Some(args.next().ok_or("--url needs a value")?),
            "--bot-id" => bot_id = args.next().ok_or("--bot-id needs a value")?,
            "--instance" => instance = args.next().ok_or("--instance needs a value")?,
            "--lease-ms" => {
                lease_ms = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--lease-ms needs a number")?,
                )
            }
            "--work-ms" => {
                work_ms = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--work-ms needs a number")?
            }
            "--defaults" => defaults = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Args {
        db: db.ok_or("--db PATH is required")?,
        backend,
        url,
        bot_id,
        instance,
        lease_ms,
        work_ms,
        defaults,
    })
}

/// The `--url` of a server backend (required).
fn server_url(args: &Args) -> Result<&str, BotError> {
    args.url
        .as_deref()
        .ok_or_else(|| BotError::config("--url", "required"))
}

/// A server backend that the `--url` did not open.
fn url_error(e: impl std::fmt::Display) -> BotError {
    BotError::config("--url", e.to_string())
}

async fn run(args: Args) -> Result<(), BotError> {
    let store = SqliteStore::open(&args.db);
    let mut config = DurabilityConfig::default();
    config.instance_id = Some(args.instance.clone());
    if let Some(ms) = args.lease_ms {
        config.inbox.lease = Duration::from_millis(ms);
        config.outbox.lease = Duration::from_millis(ms);
    }
    config.poll = Duration::from_millis(50);
    config.outbox.backoff = Backoff::fixed(Duration::from_millis(20), Duration::from_millis(20));
    config.inbox.backoff = Backoff::fixed(Duration::from_millis(20), Duration::from_millis(20));
    let durability = match args.backend.as_str() {
        "sqlite" => DurabilityOptions::backend(store.durability_kv()),
        // The append log, or (`file-snapshot`) the default: a snapshot replaced at each write.
        mode @ ("file" | "file-snapshot") => {
            let path = args.db.with_extension("journal");
            let options = FileOptions::new().append_log(mode == "file");
            let file = FileDurability::open(&path, options)
                .await
                .map_err(|e| BotError::config("--backend", e.to_string()))?;
            DurabilityOptions::backend(file)
        }
        // The app's events journal shared by processes: a kill may leave its mutex behind.
        "events-shared" => {
            use botmesh::durability::events::{
                SharedFileEventJournal, SharedFileOptions, events_durability,
            };
            let path = args.db.with_extension("events");
            let options = SharedFileOptions::new().append_log(true).compact_every(7);
            let journal = SharedFileEventJournal::open(&path, options)
                .await
                .map_err(|e| BotError::config("--backend", e.to_string()))?;
            DurabilityOptions::backend(events_durability(&journal))
        }
        "postgres" => {
            let kv = botmesh::durability::PostgresKv::connect(server_url(&args)?).await;
            DurabilityOptions::backend(kv.map_err(url_error)?)
        }
        "redis" => {
            let kv = botmesh::durability::RedisKv::open(server_url(&args)?).await;
            DurabilityOptions::backend(kv.map_err(url_error)?)
        }
        other => {
            return Err(BotError::config(
                "--backend",
                format!("unknown backend `{other}`"),
            ));
        }
    };
    let provider = JsonlProvider::stdio();
    let builder = Bot::builder(provider.clone())
        .bot_id(args.bot_id.clone())
        .store(store);
    let bot = if args.defaults {
        builder.build()?
    } else {
        builder.durability(durability.config(config)).build()?
    };
    provider.attach(&bot);
    bot.flow(order);
    let work = Duration::from_millis(args.work_ms);
    bot.catch_all(move |ctx: Ctx| async move {
        let t = ctx.text().to_owned();
        ctx.reply(format!("{t}:one")).await?;
        tokio::time::sleep(work).await;
        ctx.reply(format!("{t}:two")).await?;
        Ok(())
    });
    bot.run().await
}

fn main() -> ExitCode {
    botmesh_tests::log_to_stderr();
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "crashbot: {e}\nusage: crashbot --db PATH [--backend sqlite|file|file-snapshot|postgres|redis] [--url URL] [--bot-id ID] [--instance ID] [--lease-ms N] [--work-ms N] [--defaults]"
            );
            return ExitCode::from(2);
        }
    };
    // As the shop demo: the SQLite store's writer thread gets a core of its own (see
    // `SqliteStore::worker_threads_beside_writer`).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SqliteStore::worker_threads_beside_writer())
        .enable_all()
        .build();
    let result = match runtime {
        Ok(rt) => rt.block_on(run(args)).map_err(|e| e.to_string()),
        Err(e) => Err(format!("tokio runtime: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crashbot: {e}");
            ExitCode::FAILURE
        }
    }
}
