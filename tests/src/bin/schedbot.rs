//! `schedbot`: a durable bot with one scheduled job, on the JSON-lines interface, for tests that
//! SIGKILL a real process and start it again later on the same store.
//!
//! ```text
//! schedbot --db PATH [--backend sqlite|postgres|redis] [--url URL] [--bot-id ID]
//!          [--instance ID] [--every-ms N] [--missed skip|run-once|run-all] [--grace-ms N]
//!          [--clock-offset-ms N]
//! ```
//!
//! At start it schedules the job `tick` every `--every-ms` (default 4000) with the missed-run
//! policy `--missed`, then sends `scheduled` to chat `ops` under the key `scheduled` (once:
//! a restart's send is answered from the outbox). Each occurrence `n` (counted from the job's
//! creation) sends `tick <n>` to `ops`. `--clock-offset-ms` moves the bot's wall clock
//! forward: a restart "later" without waiting for it. Data lives in the SQLite store at
//! `--db`; the journals (and the job) in its file (`sqlite`) or on a server (`postgres`,
//! `redis`, with `--url`).

#![allow(clippy::print_stderr)] // usage errors of a command-line tool

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use botmesh::clock::{Clock, SystemClock};
use botmesh::durability::{DurabilityConfig, SqliteStore};
use botmesh::durable::DurabilityOptions;
use botmesh::message::Outgoing;
use botmesh::prelude::*;
use botmesh::schedule::{Job, JobCtx, MissedRuns, SchedulerOptions};
use botmesh_providers::jsonl::JsonlProvider;

struct Args {
    db: PathBuf,
    backend: String,
    url: Option<String>,
    bot_id: String,
    instance: String,
    every_ms: u64,
    missed: MissedRuns,
    grace_ms: u64,
    offset_ms: i64,
}

fn number<T: std::str::FromStr>(v: Option<String>, name: &str) -> Result<T, String> {
    v.and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{name} needs a number"))
}

fn parse() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut out = Args {
        db: PathBuf::new(),
        backend: "sqlite".to_owned(),
        url: None,
        bot_id: "schedbot".to_owned(),
        instance: "schedbot".to_owned(),
        every_ms: 4000,
        missed: MissedRuns::RunOnce,
        grace_ms: 1000,
        offset_ms: 0,
    };
    let mut db = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => db = args.next().map(PathBuf::from),
            "--backend" => out.backend = args.next().ok_or("--backend needs a value")?,
            "--url" => out.url = Some(args.next().ok_or("--url needs a value")?),
            "--bot-id" => out.bot_id = args.next().ok_or("--bot-id needs a value")?,
            "--instance" => out.instance = args.next().ok_or("--instance needs a value")?,
            "--every-ms" => out.every_ms = number(args.next(), "--every-ms")?,
            "--grace-ms" => out.grace_ms = number(args.next(), "--grace-ms")?,
            "--clock-offset-ms" => out.offset_ms = number(args.next(), "--clock-offset-ms")?,
            "--missed" => {
                out.missed = match args.next().as_deref() {
                    Some("skip") => MissedRuns::Skip,
                    Some("run-once") => MissedRuns::RunOnce,
                    Some("run-all") => MissedRuns::RunAll,
                    _ => return Err("--missed takes skip, run-once or run-all".into()),
                }
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    out.db = db.ok_or("--db PATH is required")?;
    Ok(out)
}

async fn run(args: Args) -> Result<(), BotError> {
    let store = SqliteStore::open(&args.db);
    let mut config = DurabilityConfig::default();
    config.instance_id = Some(args.instance.clone());
    config.poll = Duration::from_millis(50);
    let durability = match (args.backend.as_str(), args.url.as_deref()) {
        ("sqlite", _) => DurabilityOptions::backend(store.durability_kv()),
        ("postgres", Some(url)) => DurabilityOptions::backend(
            botmesh::durability::PostgresKv::connect(url)
                .await
                .map_err(|e| BotError::config("--url", e.to_string()))?,
        ),
        ("redis", Some(url)) => DurabilityOptions::backend(
            botmesh::durability::RedisKv::open(url)
                .await
                .map_err(|e| BotError::config("--url", e.to_string()))?,
        ),
        (other, _) => {
            return Err(BotError::config(
                "--backend",
                format!("`{other}` (a server backend needs --url)"),
            ));
        }
    };
    let offset = args.offset_ms;
    let provider = JsonlProvider::stdio();
    let bot = Bot::builder(provider.clone())
        .bot_id(args.bot_id.clone())
        .store(store)
        .clock(move || SystemClock.now_ms() + offset)
        .durability(durability.config(config))
        .scheduler(SchedulerOptions {
            poll: Duration::from_millis(50),
            lease: Duration::from_secs(10),
            grace: Duration::from_millis(args.grace_ms),
        })
        .build()?;
    provider.attach(&bot);
    let every = i64::try_from(args.every_ms).unwrap_or(i64::MAX).max(1);
    bot.task("tick", move |job: JobCtx| async move {
        let n = (job.occurrence_ms() - job.job().created_ms) / every;
        job.send("ops", format!("tick {n}")).await?;
        Ok(())
    });
    bot.start().await?;
    bot.schedule(Job::every("tick", Duration::from_millis(args.every_ms)).missed(args.missed))
        .await?;
    bot.send("ops", Outgoing::from("scheduled").key("scheduled"))
        .await?;
    // Runs until killed (the tests' way) or interrupted.
    let _ = tokio::signal::ctrl_c().await;
    bot.stop().await
}

fn main() -> ExitCode {
    botmesh_tests::log_to_stderr();
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("schedbot: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(rt) => rt.block_on(run(args)).map_err(|e| e.to_string()),
        Err(e) => Err(format!("tokio runtime: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("schedbot: {e}");
            ExitCode::FAILURE
        }
    }
}
