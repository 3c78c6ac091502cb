//! The `botmesh` operator command line: point it at a bot's store by URL and act on what the
//! bot could not do by itself, through the operator API (the journals' [`KvDurability`](botmesh_durability::KvDurability) and
//! the [`Store`](botmesh_durability::Store) trait), never by reading tables.
//!
//! | command | what it does |
//! | --- | --- |
//! | `dead list [--kind inbound\|outbound]` | the dead-letter queues |
//! | `dead show ID` | one dead letter (an inbound id or an outbox key), with its error and payload |
//! | `dead replay ID` | processes a dead inbound record again (the bot's sweeper picks it up) |
//! | `dead retry KEY` | sends a dead, failed or unknown send again |
//! | `dead discard ID` | forgets a dead letter |
//! | `quarantine list` / `show KIND ID` / `discard KIND ID` | records that cannot be decoded |
//! | `conversations list` / `show CHAT` / `cancel CHAT` | persistent flows waiting for an answer, the ask each waits at |
//! | `jobs list` / `jobs cancel ID` | the scheduled jobs (next occurrence, runs, last error); cancelling deletes one |
//! | `metrics` | what the store holds, per journal and state |
//!
//! `--json` prints any listing or record as JSON. The process counters of a running bot
//! (`received`, `sent`, the durability counters) live in its memory, not in the store: scrape
//! its `/metrics` ([`crate::operating::http`]) for those.
//!
//! Errors are [`CliError`]s naming what went wrong: the URL's scheme, the missing file, the
//! refused connection, the unknown id.

mod commands;
mod output;
mod target;

use std::io::Write;
use std::path::PathBuf;

use botmesh_durability::{DurabilityError, Scope, StoreError};
use clap::{Args, Parser, Subcommand, ValueEnum};

/// The `botmesh` command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "botmesh",
    version,
    about = "Operate a botmesh bot through its store"
)]
pub struct Cli {
    /// The bot's store: `sqlite:PATH` (or a path), `postgres://…`, `redis://…`.
    #[arg(long, short = 's', env = "BOTMESH_STORE", global = true)]
    pub store: Option<String>,
    /// The table prefix (PostgreSQL) or key prefix (Redis) the bot was configured with.
    #[arg(long, global = true)]
    pub prefix: Option<String>,
    /// The bot's namespace: `--bot`, `--connection`, `--tenant`, `--environment`.
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The bot whose records the CLI acts on (the bot's `BotConfig` ids; defaults as there).
#[derive(Debug, Clone, Args)]
pub struct ScopeArgs {
    /// The bot id.
    #[arg(long = "bot", default_value = "bot", global = true)]
    pub bot: String,
    /// The connection id.
    #[arg(long, default_value = "default", global = true)]
    pub connection: String,
    /// The tenant id.
    #[arg(long, default_value = "default", global = true)]
    pub tenant: String,
    /// The environment id.
    #[arg(long, default_value = "default", global = true)]
    pub environment: String,
}

impl ScopeArgs {
    fn scope(&self) -> Scope {
        Scope::new(&self.tenant, &self.environment, &self.bot, &self.connection)
    }
}

/// A command of [`Cli`].
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Dead letters: inbound records and sends that ran out of attempts.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Records that cannot be decoded, kept aside.
    #[command(subcommand)]
    Quarantine(QuarantineCommand),
    /// Persistent conversations waiting for an answer.
    #[command(subcommand, alias = "conv")]
    Conversations(ConversationCommand),
    /// Scheduled jobs (`bot.schedule(…)`).
    #[command(subcommand)]
    Jobs(JobCommand),
    /// What the store holds, per journal and state.
    Metrics,
}

/// `botmesh jobs …`.
#[derive(Debug, Clone, Subcommand)]
pub enum JobCommand {
    /// Lists the jobs: running, then scheduled by next occurrence, then done.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Cancels (deletes) a job: it runs no more. A job the bot's code schedules at every
    /// start comes back at its next start.
    Cancel {
        /// The job id.
        id: String,
    },
}

/// `botmesh dead …`.
#[derive(Debug, Clone, Subcommand)]
pub enum DeadCommand {
    /// Lists dead letters, oldest first.
    List {
        /// Only this journal.
        #[arg(long, value_enum)]
        kind: Option<Kind>,
        /// At most this many per journal.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Shows one dead letter with its error and payload.
    Show {
        /// The inbound record id or the outbox key.
        id: String,
    },
    /// Processes a dead inbound record again.
    Replay {
        /// The inbound record id.
        id: String,
    },
    /// Sends a dead, failed or unknown send again.
    Retry {
        /// The outbox key.
        key: String,
    },
    /// Forgets a dead letter.
    Discard {
        /// The inbound record id or the outbox key.
        id: String,
    },
}

/// `botmesh quarantine …`.
#[derive(Debug, Clone, Subcommand)]
pub enum QuarantineCommand {
    /// Lists quarantined records.
    List {
        /// Only this journal.
        #[arg(long, value_enum)]
        kind: Option<Kind>,
        /// At most this many per journal.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Shows a quarantined record's bytes.
    Show {
        /// Its journal.
        #[arg(value_enum)]
        kind: Kind,
        /// Its id or key.
        id: String,
    },
    /// Deletes a quarantined record.
    Discard {
        /// Its journal.
        #[arg(value_enum)]
        kind: Kind,
        /// Its id or key.
        id: String,
    },
}

/// `botmesh conversations …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ConversationCommand {
    /// Lists the conversations waiting for an answer.
    List,
    /// Shows one chat's conversation: its flows and the ask it waits at.
    Show {
        /// The chat id.
        chat: String,
    },
    /// Cancels a chat's conversation: its checkpoint is deleted, so its next message is
    /// routed as a new one.
    Cancel {
        /// The chat id.
        chat: String,
    },
}

/// A journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// The inbox.
    Inbound,
    /// The outbox.
    Outbound,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// No `--store` and no `BOTMESH_STORE`.
    #[error("no store given: pass --store URL or set BOTMESH_STORE")]
    NoStore,
    /// The URL's scheme names no backend.
    #[error(
        "unknown store URL scheme `{scheme}` in `{url}`: use sqlite:PATH (or a path), postgres://… or redis://…"
    )]
    UnknownScheme {
        /// The URL, its password masked.
        url: String,
        /// The scheme found.
        scheme: String,
    },
    /// The SQLite file does not exist.
    #[error("SQLite store file not found: {}", path.display())]
    FileNotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The store could not be opened or reached (connection refused, bad credentials).
    #[error("cannot open the store at {url}: {reason}")]
    Connect {
        /// The URL, its password masked.
        url: String,
        /// What the backend said.
        reason: String,
    },
    /// The store keeps no journals.
    #[error("the store at {url} keeps no journals")]
    NoJournals {
        /// The URL, its password masked.
        url: String,
    },
    /// This binary was built without the backend.
    #[error("{backend} support is not built into this binary (cargo feature `{feature}`)")]
    NotBuilt {
        /// The backend.
        backend: &'static str,
        /// The cargo feature of `botmesh` that adds it.
        feature: &'static str,
    },
    /// No record with this id.
    #[error("no {what} with id `{id}`")]
    NotFound {
        /// What was looked for (`dead letter`, `conversation`, …).
        what: &'static str,
        /// The id given.
        id: String,
    },
    /// The journals refused the operation (a record in another state, a backend failure).
    #[error(transparent)]
    Durability(#[from] DurabilityError),
    /// The store refused the operation.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A scheduled job could not be read or changed.
    #[error(transparent)]
    Schedule(#[from] botmesh_durability::schedule::ScheduleError),
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The process exit code for this error: 2 for a usage or lookup error (unknown scheme,
    /// missing file, unknown id), 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::NoStore
            | CliError::UnknownScheme { .. }
            | CliError::FileNotFound { .. }
            | CliError::NotFound { .. } => 2,
            _ => 1,
        }
    }
}

/// Runs `cli`, writing its output to `out`.
pub async fn execute(cli: &Cli, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    let url = cli.store.as_deref().ok_or(CliError::NoStore)?;
    let target = target::open(url, cli.prefix.as_deref(), cli.scope.scope()).await?;
    let result = commands::run(&target, cli, out).await;
    if let Err(e) = target.journals.kv().close().await {
        tracing::warn!(error = %e, "cannot close the journals");
    }
    if let Err(e) = target.store.close().await {
        tracing::warn!(error = %e, "cannot close the store");
    }
    result
}

/// Parses `args` (the program name first) and runs them: the binary's `main`, callable from
/// a test. Usage errors come back as [`clap::Error`] in `Err(Ok(_))`.
pub async fn run_from<I, T>(
    args: I,
    out: &mut (dyn Write + Send),
) -> Result<(), Result<clap::Error, CliError>>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(Ok)?;
    execute(&cli, out).await.map_err(Err)
}
