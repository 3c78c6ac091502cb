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

use std::process::ExitCode;
use std::time::Duration;

use botmesh::durability::retries::Backoff;
use botmesh::durability::{DurabilityConfig, FileDurability, FileOptions, SqliteStore};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh_providers::jsonl::JsonlProvider;
use botmesh_tests::bins::StoreArgs;
use botmesh_tests::flows::order;

/// A durable bot on JSON lines, for crash tests.
#[derive(Debug, clap::Parser)]
struct Args {
    #[command(flatten)]
    store: StoreArgs,
    /// The leases of the inbox and outbox, in ms (the default's otherwise).
    #[arg(long)]
    lease_ms: Option<u64>,
    /// The "work" between a message's two replies, in ms.
    #[arg(long, default_value_t = 20)]
    work_ms: u64,
    /// Builds the bot with nothing but its SQLite store (the default journals and options).
    #[arg(long)]
    defaults: bool,
}

async fn run(args: Args) -> Result<(), BotError> {
    let store = SqliteStore::open(&args.store.db);
    let mut config = DurabilityConfig::default();
    config.instance_id = Some(args.store.instance.as_deref().unwrap_or(NAME).to_owned());
    if let Some(ms) = args.lease_ms {
        config.inbox.lease = Duration::from_millis(ms);
        config.outbox.lease = Duration::from_millis(ms);
    }
    config.poll = Duration::from_millis(50);
    config.outbox.backoff = Backoff::fixed(Duration::from_millis(20), Duration::from_millis(20));
    config.inbox.backoff = Backoff::fixed(Duration::from_millis(20), Duration::from_millis(20));
    let durability = match (
        args.store.backend(&store).await?,
        args.store.backend.as_str(),
    ) {
        (Some(server_or_sqlite), _) => server_or_sqlite,
        // The append log, or (`file-snapshot`) the default: a snapshot replaced at each write.
        (None, mode @ ("file" | "file-snapshot")) => {
            let path = args.store.db.with_extension("journal");
            let options = FileOptions::new().append_log(mode == "file");
            let file = FileDurability::open(&path, options)
                .await
                .map_err(|e| BotError::config("--backend", e.to_string()))?;
            DurabilityOptions::backend(file)
        }
        // The app's events journal shared by processes: a kill may leave its mutex behind.
        (None, "events-shared") => {
            use botmesh::durability::events::{
                SharedFileEventJournal, SharedFileOptions, events_durability,
            };
            let path = args.store.db.with_extension("events");
            let options = SharedFileOptions::new().append_log(true).compact_every(7);
            let journal = SharedFileEventJournal::open(&path, options)
                .await
                .map_err(|e| BotError::config("--backend", e.to_string()))?;
            DurabilityOptions::backend(events_durability(&journal))
        }
        (None, _) => return Err(args.store.unknown_backend()),
    };
    let provider = JsonlProvider::stdio();
    let builder = Bot::builder(provider.clone())
        .bot_id(args.store.bot_id.as_deref().unwrap_or(NAME))
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
        // Real time, on purpose: the handler's work in a real process, which the crash tests
        // kill with SIGKILL at a moment of the wall clock, between the two replies.
        tokio::time::sleep(work).await;
        ctx.reply(format!("{t}:two")).await?;
        Ok(())
    });
    bot.run().await
}

const NAME: &str = "crashbot";

fn main() -> ExitCode {
    // As the shop demo: the SQLite store's writer thread gets a core of its own (see
    // `SqliteStore::worker_threads_beside_writer`).
    let workers = SqliteStore::worker_threads_beside_writer();
    botmesh_tests::bins::main(NAME, Some(workers), run)
}
