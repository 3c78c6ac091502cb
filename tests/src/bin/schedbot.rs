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
//! forward: a restart "later" without waiting for it.
//!
//! It also runs a persistent flow on `/confirm`: it asks `Confirm?` with an idle timeout of
//! 10 s, then sends `Confirmed.` on an answer or `No answer: cancelled.` on the timeout (the
//! durable ask timeout, a job of the scheduler). Data lives in the SQLite store at
//! `--db`; the journals (and the job) in its file (`sqlite`) or on a server (`postgres`,
//! `redis`, with `--url`).

use std::process::ExitCode;
use std::time::Duration;

use botmesh::clock::{Clock, SystemClock};
use botmesh::durability::{DurabilityConfig, SqliteStore};
use botmesh::message::Outgoing;
use botmesh::prelude::*;
use botmesh::schedule::{Job, JobCtx, MissedRuns, SchedulerOptions};
use botmesh_providers::jsonl::JsonlProvider;
use botmesh_tests::bins::StoreArgs;

/// A durable bot with one scheduled job, on JSON lines, for crash tests.
#[derive(Debug, clap::Parser)]
struct Args {
    #[command(flatten)]
    store: StoreArgs,
    /// The job's period, in ms.
    #[arg(long, default_value_t = 4000)]
    every_ms: u64,
    /// The missed-run policy: skip, run-once or run-all.
    #[arg(long, default_value = "run-once", value_parser = missed_runs)]
    missed: MissedRuns,
    /// The scheduler's grace, in ms.
    #[arg(long, default_value_t = 1000)]
    grace_ms: u64,
    /// Moves the bot's wall clock by this many ms.
    #[arg(
        long = "clock-offset-ms",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    offset_ms: i64,
}

fn missed_runs(v: &str) -> Result<MissedRuns, String> {
    match v {
        "skip" => Ok(MissedRuns::Skip),
        "run-once" => Ok(MissedRuns::RunOnce),
        "run-all" => Ok(MissedRuns::RunAll),
        _ => Err("takes skip, run-once or run-all".to_owned()),
    }
}

/// Asks for a confirmation, waiting 10 s for it.
#[flow(start = command("confirm"))]
#[persistent]
async fn confirm(cx: &mut FlowCx) -> FlowResult {
    let said = match cx.ask("Confirm?").idle(Duration::from_secs(10)).await {
        Ok(_) => "Confirmed.",
        Err(Interrupt::Timeout) => "No answer: cancelled.",
        Err(Interrupt::Cancelled) => return cx.cancel(),
    };
    cx.send(said).await?;
    Ok(())
}

async fn run(args: Args) -> Result<(), BotError> {
    let store = SqliteStore::open(&args.store.db);
    let mut config = DurabilityConfig::default();
    config.instance_id = Some(args.store.instance.as_deref().unwrap_or(NAME).to_owned());
    config.poll = Duration::from_millis(50);
    let Some(durability) = args.store.backend(&store).await? else {
        return Err(args.store.unknown_backend());
    };
    let offset = args.offset_ms;
    let provider = JsonlProvider::stdio();
    let bot = Bot::builder(provider.clone())
        .bot_id(args.store.bot_id.as_deref().unwrap_or(NAME))
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
    bot.flow(confirm);
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

const NAME: &str = "schedbot";

fn main() -> ExitCode {
    botmesh_tests::bins::main(NAME, None, run)
}
