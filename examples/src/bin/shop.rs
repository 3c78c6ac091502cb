//! `shop`: the README's demo bot, on the console (default) or on JSON lines (`--jsonl`), with
//! its data in a SQLite file (`./data/shop.db` unless `--db PATH`).
//!
//! This file only parses arguments, sets up logging (stderr, `RUST_LOG`, default `warn`) and
//! picks the provider and the store; the bot itself is `botmesh_examples::shop`. Exit codes:
//! 0 once the input ended and the accepted work settled, 1 when the bot failed, 2 on bad
//! arguments.

use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::Arc;

use botmesh::durability::SqliteStore;
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::provider::Provider;
use botmesh_examples::shop::{self, BOT_ID};
use botmesh_providers::{ConsoleProvider, JsonlProvider};

/// mimalloc instead of glibc's malloc: the async threads spend a third of their time in
/// glibc's allocator on a bot's workload (see the README's performance section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "\
shop: the botmesh demo shop

Usage: shop [--jsonl] [--db PATH] [--chat ID]

Options:
  --jsonl      speak JSON lines on stdin and stdout (the black-box interface)
               instead of the interactive console
  --db PATH    the SQLite database [default: ./data/shop.db]; its directory is created
  --chat ID    the console's chat id [default: you]
  -h, --help   print this help

Logs go to stderr; set RUST_LOG to change their level [default: warn].";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    jsonl: bool,
    db: PathBuf,
    chat: Option<String>,
}

/// A command line that cannot be understood.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum ArgsError {
    #[error("unknown argument `{0}`")]
    Unknown(String),
    #[error("`{0}` needs a value")]
    MissingValue(&'static str),
    #[error("`{0}` was given twice")]
    Twice(&'static str),
    #[error("`--chat` applies to the console only, not with `--jsonl`")]
    ChatWithJsonl,
}

/// Why the shop stopped with an error.
#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error("cannot create the database directory {dir}: {source}")]
    DataDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Bot(#[from] BotError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// `None` means "print the usage".
fn parse_args(args: &[String]) -> Result<Option<Options>, ArgsError> {
    let mut jsonl = false;
    let mut db: Option<PathBuf> = None;
    let mut chat: Option<String> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &'static str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or(ArgsError::MissingValue(name))
        };
        match flag {
            "-h" | "--help" => return Ok(None),
            "--jsonl" if inline.is_none() => jsonl = true,
            "--db" => {
                let v = value("--db")?;
                if v.is_empty() {
                    return Err(ArgsError::MissingValue("--db"));
                }
                if db.replace(PathBuf::from(v)).is_some() {
                    return Err(ArgsError::Twice("--db"));
                }
            }
            "--chat" => {
                let v = value("--chat")?;
                if v.is_empty() {
                    return Err(ArgsError::MissingValue("--chat"));
                }
                if chat.replace(v).is_some() {
                    return Err(ArgsError::Twice("--chat"));
                }
            }
            _ => return Err(ArgsError::Unknown(arg.clone())),
        }
    }
    if jsonl && chat.is_some() {
        return Err(ArgsError::ChatWithJsonl);
    }
    let db = db.unwrap_or_else(|| PathBuf::from("data").join("shop.db"));
    Ok(Some(Options { jsonl, db, chat }))
}

// The usage text and argument errors are the only things this binary prints itself.
#[allow(clippy::print_stdout, clippy::print_stderr)]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse_args(&args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("shop: error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    init_logs();
    // The shop writes through SQLite: its writer thread keeps a core of its own.
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SqliteStore::worker_threads_beside_writer())
        .enable_all()
        .build()
        .map_err(ShopError::Runtime)
        .and_then(|rt| rt.block_on(run(options)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "the shop failed");
            eprintln!("shop: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn run(options: Options) -> Result<(), ShopError> {
    if let Some(dir) = options.db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ShopError::DataDir {
            dir: dir.to_owned(),
            source,
        })?;
    }
    let store = SqliteStore::open(&options.db);
    // The journals live in the same SQLite file: a crash loses no accepted message and never
    // sends a reply twice. The instance id is stable, so a restart reclaims its work at once.
    let durability = DurabilityOptions::backend(store.durability_kv()).instance_id(BOT_ID);
    let builder = |p: Arc<dyn Provider>| {
        Bot::builder_arc(p)
            .bot_id(BOT_ID)
            .store(store.clone())
            .durability(durability.clone())
    };
    if options.jsonl {
        let provider = JsonlProvider::new();
        let bot = shop::shop_bot(builder(Arc::new(provider.clone())))?;
        provider.attach(&bot);
        let result = bot.run().await;
        provider.flush().await;
        Ok(result?)
    } else {
        let chat = options.chat.unwrap_or_else(|| "you".to_owned());
        let provider = ConsoleProvider::new()
            .chat(chat)
            .banner("botmesh shop: type /start for the menu, Ctrl-D to quit.");
        let bot = shop::shop_bot(builder(Arc::new(provider.clone())))?;
        provider.attach(&bot);
        let result = bot.run().await;
        provider.flush().await;
        Ok(result?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_the_command_line() {
        let default = parse_args(&args(&[])).ok().flatten();
        assert_eq!(
            default.map(|o| (o.jsonl, o.db)),
            Some((false, PathBuf::from("data/shop.db")))
        );
        let o = parse_args(&args(&["--jsonl", "--db", "/tmp/x.db"]))
            .ok()
            .flatten();
        assert_eq!(
            o.map(|o| (o.jsonl, o.db)),
            Some((true, PathBuf::from("/tmp/x.db")))
        );
        let o = parse_args(&args(&["--db=/a.db", "--chat", "ann"]))
            .ok()
            .flatten();
        assert_eq!(o.and_then(|o| o.chat), Some("ann".to_owned()));
        assert_eq!(parse_args(&args(&["-h"])), Ok(None));
        assert_eq!(
            parse_args(&args(&["--nope"])),
            Err(ArgsError::Unknown("--nope".into()))
        );
        assert_eq!(
            parse_args(&args(&["--db"])),
            Err(ArgsError::MissingValue("--db"))
        );
        assert_eq!(
            parse_args(&args(&["--db", "a", "--db", "b"])),
            Err(ArgsError::Twice("--db"))
        );
        assert_eq!(
            parse_args(&args(&["--jsonl", "--chat", "x"])),
            Err(ArgsError::ChatWithJsonl)
        );
    }
}
