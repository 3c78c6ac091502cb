//! `crashbot`: a small durable bot on the JSON-lines interface, for tests that SIGKILL a real
//! process in the middle of handlers and sends and start it again on the same file.
//!
//! ```text
//! crashbot --db PATH [--backend sqlite|file] [--work-ms N]
//! ```
//!
//! Every message `T` is answered by `T:one`, then (after `--work-ms` of "work") `T:two`.
//! Data lives in the SQLite store at `--db`; the journals in its `durable` table (`sqlite`) or
//! in `<db>.journal` with an append log (`file`). The instance id is fixed, so a restart
//! reclaims the killed process's leases at once.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use botmesh::durability::{Backoff, DurabilityConfig, FileDurability, FileOptions, SqliteStore};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh_providers::jsonl::JsonlProvider;

struct Args {
    db: PathBuf,
    backend: String,
    work_ms: u64,
}

fn parse() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut db = None;
    let mut backend = "sqlite".to_owned();
    let mut work_ms = 20;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => db = args.next().map(PathBuf::from),
            "--backend" => backend = args.next().ok_or("--backend needs a value")?,
            "--work-ms" => {
                work_ms = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--work-ms needs a number")?
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Args { db: db.ok_or("--db PATH is required")?, backend, work_ms })
}

async fn run(args: Args) -> Result<(), BotError> {
    let store = SqliteStore::open(&args.db);
    let mut config = DurabilityConfig::default();
    config.instance_id = Some("crashbot".into());
    config.poll = Duration::from_millis(50);
    config.outbox.backoff = Backoff::fixed(Duration::from_millis(20), Duration::from_millis(20));
    config.inbox.backoff = Backoff::fixed(Duration::from_millis(20), Duration::from_millis(20));
    let durability = match args.backend.as_str() {
        "sqlite" => DurabilityOptions::backend(store.durability_kv()),
        "file" => {
            let path = args.db.with_extension("journal");
            let file = FileDurability::open(&path, FileOptions::new().append_log(true))
                .await
                .map_err(|e| BotError::config("--backend file", e.to_string()))?;
            DurabilityOptions::backend(file)
        }
        other => return Err(BotError::config("--backend", format!("unknown backend `{other}`"))),
    };
    let provider = JsonlProvider::stdio();
    let bot = Bot::builder(provider.clone())
        .bot_id("crashbot")
        .store(store)
        .durability(durability.config(config))
        .build()?;
    provider.attach(&bot);
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

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber_init();
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("crashbot: {e}\nusage: crashbot --db PATH [--backend sqlite|file] [--work-ms N]");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crashbot: {e}");
            ExitCode::FAILURE
        }
    }
}

fn tracing_subscriber_init() {
    // Logs go to stderr only; stdout is the channel.
    let _ = tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .finish(),
    );
}
