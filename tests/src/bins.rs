//! What the test binaries (`crashbot`, `schedbot`) share: their store arguments (one clap
//! struct each flattens), the journals' backend those arguments name, and `main`'s runtime and
//! exit codes. It does not build the bots: each binary does.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use botmesh::durability::SqliteStore;
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::BotError;

/// Where a test bot keeps its data, and who it is.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// The SQLite store's file (the bot's store; the journals too with `--backend sqlite`).
    #[arg(long, value_name = "PATH")]
    pub db: PathBuf,
    /// Where the journals live (`sqlite`, `postgres`, `redis`; the binary may take more).
    #[arg(long, default_value = "sqlite")]
    pub backend: String,
    /// The server of `--backend postgres` or `redis`.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The bot id (the binary's name by default).
    #[arg(long, value_name = "ID")]
    pub bot_id: Option<String>,
    /// The instance id (the binary's name by default): a restart with the same id reclaims
    /// the killed process's leases at once.
    #[arg(long, value_name = "ID")]
    pub instance: Option<String>,
}

impl StoreArgs {
    /// The journals of `--backend sqlite` (in `store`), `postgres` or `redis` (at `--url`);
    /// `None` for another backend (the binary's own, or unknown).
    pub async fn backend(
        &self,
        store: &SqliteStore,
    ) -> Result<Option<DurabilityOptions>, BotError> {
        let url = || {
            self.url
                .as_deref()
                .ok_or_else(|| BotError::config("--url", "required by a server backend"))
        };
        Ok(Some(match self.backend.as_str() {
            "sqlite" => DurabilityOptions::backend(store.durability_kv()),
            "postgres" => DurabilityOptions::backend(
                botmesh::durability::PostgresKv::connect(url()?)
                    .await
                    .map_err(url_error)?,
            ),
            "redis" => DurabilityOptions::backend(
                botmesh::durability::RedisKv::open(url()?)
                    .await
                    .map_err(url_error)?,
            ),
            _ => return Ok(None),
        }))
    }

    /// An unknown `--backend`.
    pub fn unknown_backend(&self) -> BotError {
        BotError::config("--backend", format!("unknown backend `{}`", self.backend))
    }
}

/// A server backend that `--url` did not open.
fn url_error(e: impl std::fmt::Display) -> BotError {
    BotError::config("--url", e.to_string())
}

/// A test binary's `main`: logs to stderr, parses `A` (clap exits with 2 on bad arguments),
/// runs `run` on a multi-threaded runtime (`workers` threads, or tokio's default), and exits
/// 0, or 1 with the error on stderr.
pub fn main<A, F>(name: &str, workers: Option<usize>, run: impl FnOnce(A) -> F) -> ExitCode
where
    A: clap::Parser,
    F: Future<Output = Result<(), BotError>>,
{
    crate::log_to_stderr();
    let args = A::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        runtime.worker_threads(n);
    }
    let result = match runtime.enable_all().build() {
        Ok(rt) => rt.block_on(run(args)).map_err(|e| e.to_string()),
        Err(e) => Err(format!("tokio runtime: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            #[allow(clippy::print_stderr)] // the error of a command-line tool
            {
                eprintln!("{name}: {e}");
            }
            ExitCode::FAILURE
        }
    }
}
