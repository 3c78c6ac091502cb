//! `shop`: the README's demo bot on any channel: the console (default), JSON lines, Telegram,
//! WhatsApp Cloud, WhatsApp Web, Messenger, Instagram, Twilio, Gupshup, Evolution API,
//! WPPConnect, Discord, GoHighLevel, TikTok or email (`--channel`), with its data and its journals
//! in one SQLite file (`./data/shop.db` unless `--db PATH` or `SHOP_DB`), or on a shared
//! Postgres or Redis (`--store-url`, behind the `postgres` / `redis` features) as one of
//! several replicas (`--replica ID`: chat turns, the send fence, and on Telegram long polling
//! only the elected leader polls; see `docs/replicas.md`).
//!
//! This file only parses arguments (clap), sets up logging (stderr, `RUST_LOG`) and picks the
//! provider and the store; the bot itself is `botmesh_examples::shop`. The network channels are
//! behind this crate's cargo features (`telegram`, `whatsapp-cloud`, `whatsapp-web`,
//! `messenger`, `instagram`, `twilio`, `gupshup`, `evolution`, `wppconnect`, `discord`,
//! `gohighlevel`, `tiktok`, `email`) and read their
//! configuration from the environment (`--help` lists the variables). Durable processing is the
//! default: nothing here turns it on. Exit codes: 0 once the input ended or a stop signal
//! (Ctrl-C, SIGTERM, SIGHUP) was handled with a drain, 1 when the bot failed, 2 on bad
//! arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use botmesh::coordination::Coordination;
use botmesh::durability::{DurableKv, SqliteStore, Store};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::provider::Provider;
use botmesh_examples::shop::{self, BOT_ID};
use botmesh_providers::{ConsoleProvider, JsonlProvider, LineOutput};
use clap::{CommandFactory, Parser, ValueEnum};

/// mimalloc instead of glibc's malloc: the async threads spend a third of their time in
/// glibc's allocator on a bot's workload (see the README's performance section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CHANNELS: &str = "\
Channels and their environment variables:
  console    an interactive chat in this terminal (no variables)
  jsonl      JSON lines on stdin and stdout, the black-box interface (no variables)
  telegram   [feature `telegram`] TELEGRAM_BOT_TOKEN (required), TELEGRAM_API_BASE,
             TELEGRAM_POLL_TIMEOUT_SECS; long polling unless TELEGRAM_WEBHOOK_SECRET is set,
             then a webhook on --listen at TELEGRAM_WEBHOOK_PATH [/telegram], registered at
             TELEGRAM_WEBHOOK_URL when given
  whatsapp   [feature `whatsapp-cloud`] WHATSAPP_ACCESS_TOKEN, WHATSAPP_PHONE_NUMBER_ID,
             WHATSAPP_APP_SECRET, WHATSAPP_VERIFY_TOKEN (required), WHATSAPP_API_BASE,
             WHATSAPP_API_VERSION, WHATSAPP_WEBHOOK_PATH [/whatsapp],
             WHATSAPP_WINDOW_TEMPLATE (sent outside the 24-hour window, the text as {{1}}),
             WHATSAPP_WINDOW_TEMPLATE_LANGUAGE [en_US]; a webhook on --listen
  whatsapp-web
             [feature `whatsapp-web`; the real client with `whatsapp-web-native`, without it
             only the fake session] WhatsApp Web as a linked device: a QR code on stderr
             (and a pair code with WHATSAPP_WEB_PAIR_PHONE), the session in the shop's store
             (no pairing after a restart); WHATSAPP_WEB_SESSION [default],
             WHATSAPP_WEB_SESSION_LEASE [15s] (one process per session),
             WHATSAPP_WEB_REPLAY_DIR (a fake session replaying recorded events from that
             directory instead of WhatsApp: tests and demos)
  messenger  [feature `messenger`] MESSENGER_ACCESS_TOKEN (the Page token), MESSENGER_APP_SECRET,
             MESSENGER_VERIFY_TOKEN (required), MESSENGER_PAGE_ID, MESSENGER_API_BASE,
             MESSENGER_API_VERSION, MESSENGER_WEBHOOK_PATH [/messenger], MESSENGER_WINDOW_TAG
             (sends after the 24-hour window), MESSENGER_MEDIA_HOSTS; a webhook on --listen
  instagram  [feature `instagram`] INSTAGRAM_ACCESS_TOKEN, INSTAGRAM_APP_SECRET,
             INSTAGRAM_VERIFY_TOKEN (required), INSTAGRAM_ACCOUNT_ID, INSTAGRAM_API_BASE
             [https://graph.facebook.com; https://graph.instagram.com for Instagram Login],
             INSTAGRAM_API_VERSION, INSTAGRAM_WEBHOOK_PATH [/instagram], INSTAGRAM_WINDOW_TAG
             (HUMAN_AGENT only), INSTAGRAM_MEDIA_HOSTS; a webhook on --listen
  twilio     [feature `twilio`] TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN (required), TWILIO_FROM or
             TWILIO_MESSAGING_SERVICE_SID (one required), TWILIO_WEBHOOK_BASE_URL,
             TWILIO_WEBHOOK_PATH [/twilio], TWILIO_STATUS_PATH [/twilio/status],
             TWILIO_STATUS_CALLBACK_URL, TWILIO_API_BASE; a webhook on --listen
  gupshup    [feature `gupshup`] GUPSHUP_API_KEY, GUPSHUP_APP_NAME, GUPSHUP_SOURCE,
             GUPSHUP_WEBHOOK_SECRET (required; the callback URL is <public>/gupshup/<secret>),
             GUPSHUP_APP_ID, GUPSHUP_WEBHOOK_PATH [/gupshup], GUPSHUP_API_BASE; a webhook on
             --listen
  evolution  [feature `evolution`] EVOLUTION_API_URL, EVOLUTION_API_KEY, EVOLUTION_INSTANCE,
             EVOLUTION_WEBHOOK_SECRET (required; header X-Webhook-Secret or the webhook URL
             <public>/evolution/<secret>), EVOLUTION_WEBHOOK_PATH [/evolution],
             EVOLUTION_HISTORY_SECS [1800]; a webhook on --listen
  wppconnect [feature `wppconnect`] WPPCONNECT_API_URL, WPPCONNECT_SESSION, WPPCONNECT_TOKEN,
             WPPCONNECT_WEBHOOK_SECRET (required; the webhook URL <public>/wppconnect/<secret>),
             WPPCONNECT_WEBHOOK_PATH [/wppconnect], WPPCONNECT_HISTORY_SECS [1800]; a webhook
             on --listen
  discord    [feature `discord`] DISCORD_BOT_TOKEN (required), DISCORD_PUBLIC_KEY (turns on the
             interactions endpoint on --listen at DISCORD_INTERACTIONS_PATH
             [/discord/interactions]), DISCORD_API_BASE, DISCORD_GATEWAY_URL, DISCORD_INTENTS
             [37377], DISCORD_GATEWAY [on]; messages over the gateway
  gohighlevel
             [feature `gohighlevel`] GHL_ACCESS_TOKEN, GHL_LOCATION_ID, GHL_WEBHOOK_PUBLIC_KEY
             (HighLevel's PEM key; required), GHL_WEBHOOK_LEGACY_PUBLIC_KEY, GHL_API_BASE,
             GHL_API_VERSION [2021-04-15], GHL_WEBHOOK_PATH [/gohighlevel], GHL_MEDIA_HOSTS;
             a webhook on --listen (the Marketplace app's InboundMessage events)
  tiktok     [feature `tiktok`] TIKTOK_ACCESS_TOKEN, TIKTOK_BUSINESS_ID, TIKTOK_APP_SECRET
             (required), TIKTOK_API_BASE, TIKTOK_WEBHOOK_PATH [/tiktok],
             TIKTOK_SIGNATURE_TOLERANCE_SECS [300]; a webhook on --listen
  email      [feature `email`] EMAIL_FROM, EMAIL_SMTP_URL (required), EMAIL_SUBJECT; inbound by
             IMAP IDLE with EMAIL_IMAP_HOST, EMAIL_IMAP_USER, EMAIL_IMAP_PASSWORD, EMAIL_IMAP_PORT
             [993], EMAIL_IMAP_TLS [on], EMAIL_IMAP_MAILBOX [INBOX]; and/or webhooks on --listen:
             EMAIL_MAILGUN_SIGNING_KEY (EMAIL_MAILGUN_PATH [/email/mailgun]),
             EMAIL_SENDGRID_SECRET (EMAIL_SENDGRID_PATH [/email/sendgrid], the URL
             <public>/email/sendgrid/<secret>); threads, attachments and the IMAP position in
             the shop's store

A network channel needs its feature, e.g.
  cargo run -p botmesh-examples --features telegram --bin shop -- --channel telegram

Several replicas share one Postgres or Redis (features `postgres`, `redis`), each started
with its own stable id, e.g.
  SHOP_STORE_URL=postgres://localhost/shop SHOP_REPLICA=shop-1 shop --channel telegram

Logs go to stderr; set RUST_LOG to change their level [default: warn on the console and
jsonl, info on the network channels].";

/// The botmesh demo shop.
#[derive(Debug, Parser)]
#[command(name = "shop", about = "shop: the botmesh demo shop", after_help = CHANNELS)]
struct Cli {
    /// The channel the shop talks on.
    #[arg(long, value_enum, default_value_t = Channel::Console)]
    channel: Channel,
    /// Same as `--channel jsonl`.
    #[arg(long, conflicts_with = "channel")]
    jsonl: bool,
    /// The SQLite database (data and journals); its directory is created.
    #[arg(long, env = "SHOP_DB", default_value = "data/shop.db")]
    db: PathBuf,
    /// The console's chat id [default: you].
    #[arg(long)]
    chat: Option<String>,
    /// Where a webhook channel's server listens.
    #[arg(long, env = "WEBHOOK_ADDR", default_value = "0.0.0.0:8080")]
    listen: String,
    /// How long a stop (end of input, Ctrl-C, SIGTERM, SIGHUP) waits for the accepted
    /// messages to be answered.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    drain_timeout: Duration,
    /// A shared store instead of `--db`: a `postgres://` or `redis://` URL (data and journals
    /// there; features `postgres` / `redis`).
    #[arg(long, env = "SHOP_STORE_URL")]
    store_url: Option<String>,
    /// The table prefix (Postgres) or key prefix (Redis) in the shared store [default: the
    /// backend's].
    #[arg(long, env = "SHOP_STORE_PREFIX", requires = "store_url")]
    store_prefix: Option<String>,
    /// Runs as one of several replicas on the shared store, under this instance id (stable
    /// across restarts, unique per replica): chat turns and the send fence, and on Telegram
    /// long polling only the elected leader polls.
    #[arg(long, env = "SHOP_REPLICA", requires = "store_url")]
    replica: Option<String>,
    /// How long a chat's turn lasts unless renewed (replicas).
    #[arg(long, value_parser = parse_duration, default_value = "30s", requires = "replica")]
    turn_lease: Duration,
    /// How long the leader lease lasts unless renewed: a standby takes over the transport
    /// within it when the leader dies (replicas).
    #[arg(long, value_parser = parse_duration, default_value = "15s", requires = "replica")]
    leader_lease: Duration,
}

/// The channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Channel {
    /// An interactive chat in this terminal.
    Console,
    /// JSON lines on stdin and stdout.
    Jsonl,
    /// Telegram's Bot API (long polling or a webhook).
    Telegram,
    /// The WhatsApp Cloud API (a webhook).
    Whatsapp,
    /// WhatsApp Web as a linked device (one process per session).
    WhatsappWeb,
    /// The Messenger Platform, a Facebook Page (a webhook).
    Messenger,
    /// Instagram Messaging (a webhook).
    Instagram,
    /// Twilio Messaging, SMS or WhatsApp (a webhook).
    Twilio,
    /// WhatsApp through Gupshup (a webhook).
    Gupshup,
    /// WhatsApp Web through an Evolution API server (a webhook).
    Evolution,
    /// WhatsApp Web through a WPPConnect Server (a webhook).
    Wppconnect,
    /// Discord: the gateway, and the interactions endpoint (a webhook).
    Discord,
    /// GoHighLevel conversations of a location: SMS, WhatsApp, Messenger, … (a webhook).
    Gohighlevel,
    /// TikTok Business Messaging, direct messages (a webhook).
    Tiktok,
    /// Email: SMTP out; IMAP IDLE, Mailgun or SendGrid webhooks in.
    Email,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    botmesh::config::parse_duration(text).map_err(|e| e.to_string())
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
    #[error(
        "this shop was built without the `{feature}` feature; run it with \
             `cargo run -p botmesh-examples --features {feature} --bin shop -- --store-url …`"
    )]
    #[cfg_attr(all(feature = "postgres", feature = "redis"), allow(dead_code))]
    StoreNotBuiltIn { feature: &'static str },
    #[error("cannot open the shared store {url}: {reason}")]
    Store { url: String, reason: String },
    #[error(
        "the store URL {url} is neither postgres:// nor redis://; a single shop keeps its \
             data in --db (SQLite)"
    )]
    StoreScheme { url: String },
    #[error(
        "this shop was built without the `{feature}` feature; run it with \
             `cargo run -p botmesh-examples --features {feature} --bin shop -- --channel {channel}`"
    )]
    NotBuiltIn {
        feature: &'static str,
        channel: &'static str,
    },
    #[cfg(network_channel)]
    #[error("{0}")]
    Channel(String),
    #[error(
        "cannot write to stdout ({0}): the replies not written stay in the database and \
             go out at the next start"
    )]
    Output(String),
}

// The argument errors and the bot's final error are the only things this binary prints.
#[allow(clippy::print_stderr)]
fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if cli.jsonl {
        cli.channel = Channel::Jsonl;
    }
    if cli.chat.is_some() && cli.channel != Channel::Console {
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "`--chat` applies to the console channel only",
            )
            .exit();
    }
    let network = !matches!(cli.channel, Channel::Console | Channel::Jsonl);
    init_logs(if network { "info" } else { "warn" });
    // The shop writes through SQLite: its writer thread keeps a core of its own.
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SqliteStore::worker_threads_beside_writer())
        .enable_all()
        .build()
        .map_err(ShopError::Runtime)
        .and_then(|rt| rt.block_on(run(cli)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "the shop failed");
            eprintln!("shop: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs on stderr, one `key=value` line per event. Colours only on a terminal (and not with
/// `NO_COLOR`): redirected to a file, journald or a log collector, a line carries no escape
/// codes, so `chat=1008` in it is found by a plain search.
fn init_logs(default: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .init();
}

async fn run(cli: Cli) -> Result<(), ShopError> {
    let (store, journals, session_kv) = open_store(&cli).await?;
    let drain = cli.drain_timeout;
    let coordination = cli.replica.is_some().then(|| {
        // A step cut short on one replica is finished on the next one that gets the chat.
        Coordination::replicas()
            .handover()
            .turn_lease(cli.turn_lease)
            .leader_lease(cli.leader_lease)
    });
    let replica = cli.replica.clone();
    // `exclusive`: the transport may run in one process only (Telegram long polling).
    let builder = move |p: Arc<dyn Provider>, exclusive: bool| {
        let mut builder = Bot::builder_arc(p)
            .bot_id(BOT_ID)
            .store_arc(Arc::clone(&store))
            .drain_timeout(drain);
        if let Some(kv) = &journals {
            let mut durability = DurabilityOptions::shared(Arc::clone(kv));
            if let Some(id) = &replica {
                durability = durability.instance_id(id.clone());
            }
            builder = builder.durability(durability);
        }
        if let Some(coordination) = &coordination {
            let coordination = if exclusive {
                coordination.clone().leader_only_transport()
            } else {
                coordination.clone()
            };
            builder = builder.coordination(coordination);
        }
        builder
    };
    match cli.channel {
        Channel::Jsonl => on_lines(JsonlProvider::new(), |p| builder(p, false)).await,
        Channel::Console => {
            let chat = cli.chat.unwrap_or_else(|| "you".to_owned());
            let provider = ConsoleProvider::new()
                .chat(chat)
                .banner("botmesh shop: type /start for the menu, Ctrl-D to quit.");
            on_lines(provider, |p| builder(p, false)).await
        }
        network => on_network(network, builder, &cli.listen, session_kv).await,
    }
}

/// The shop's store, the journals when they live apart from it, and the durable backend a
/// channel keeps its session in (WhatsApp Web): the SQLite file of `--db` (its directory
/// created; the journals in the same file, durable by default), or the shared Postgres /
/// Redis of `--store-url` (data and journals under `--store-prefix`).
async fn open_store(cli: &Cli) -> Result<Stores, ShopError> {
    let Some(url) = &cli.store_url else {
        if let Some(dir) = cli.db.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| ShopError::DataDir {
                dir: dir.to_owned(),
                source,
            })?;
        }
        let sqlite = SqliteStore::open(&cli.db);
        let kv: Arc<dyn DurableKv> = Arc::new(sqlite.durability_kv());
        return Ok((Arc::new(sqlite), None, kv));
    };
    // Unused when the shop is built with neither server backend.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "redis")),
        allow(unused_variables)
    )]
    let failed = |e: &dyn std::fmt::Display| ShopError::Store {
        url: url.clone(),
        reason: e.to_string(),
    };
    let prefix = cli.store_prefix.clone();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            use botmesh::durability::PostgresStore;
            use botmesh::durability::backends::postgres::PostgresConfig;
            let mut config = PostgresConfig::new();
            if let Some(prefix) = prefix {
                config = config.table_prefix(prefix);
            }
            let store = PostgresStore::connect_with(url, config)
                .await
                .map_err(|e| failed(&e))?;
            let kv: Arc<dyn DurableKv> = Arc::new(store.durability_kv());
            return Ok((Arc::new(store), Some(Arc::clone(&kv)), kv));
        }
        #[cfg(not(feature = "postgres"))]
        return Err(ShopError::StoreNotBuiltIn {
            feature: "postgres",
        });
    }
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        #[cfg(feature = "redis")]
        {
            use botmesh::durability::backends::redis::RedisConfig;
            use botmesh::durability::{RedisKv, RedisStore};
            let mut config = RedisConfig::new();
            if let Some(prefix) = prefix {
                config = config.prefix(prefix);
            }
            let kv = RedisKv::open_with(url, config.clone())
                .await
                .map_err(|e| failed(&e))?;
            let store = RedisStore::open_with(url, config)
                .await
                .map_err(|e| failed(&e))?;
            let kv: Arc<dyn DurableKv> = Arc::new(kv);
            return Ok((Arc::new(store), Some(Arc::clone(&kv)), kv));
        }
        #[cfg(not(feature = "redis"))]
        return Err(ShopError::StoreNotBuiltIn { feature: "redis" });
    }
    let _ = prefix;
    Err(ShopError::StoreScheme { url: url.clone() })
}

/// The shop's store, its journals when apart from it, and the durable backend of a
/// channel's session.
type Stores = (
    Arc<dyn Store>,
    Option<Arc<dyn DurableKv>>,
    Arc<dyn DurableKv>,
);

/// The console and jsonl providers: they print the bot's replies, and the output may close
/// under them.
trait LinesProvider: Provider + Clone {
    fn attach(&self, bot: &Bot);
    fn output(&self) -> &LineOutput;
}

macro_rules! lines_provider {
    ($($provider:ty),*) => {$(
        impl LinesProvider for $provider {
            fn attach(&self, bot: &Bot) {
                <$provider>::attach(self, bot);
            }
            fn output(&self) -> &LineOutput {
                <$provider>::output(self)
            }
        }
    )*};
}

lines_provider!(ConsoleProvider, JsonlProvider);

/// Runs the shop on the console or jsonl: until the input ends or a stop signal, or until
/// nobody reads the replies any more (then it stops at once: the sends not written stay
/// journaled, the messages not answered are replayed at the next start, and it fails).
async fn on_lines(
    provider: impl LinesProvider,
    builder: impl Fn(Arc<dyn Provider>) -> BotBuilder,
) -> Result<(), ShopError> {
    let bot = shop::shop_bot(builder(Arc::new(provider.clone())))?;
    provider.attach(&bot);
    let result = tokio::select! {
        result = bot.run() => result,
        e = provider.output().closed() => {
            if let Err(e) = bot.stop().await {
                tracing::warn!(error = %e, "stopping after the output closed");
            }
            return Err(ShopError::Output(e));
        }
    };
    provider.output().flush().await.map_err(ShopError::Output)?;
    Ok(result?)
}

/// Runs the shop on a network channel: its webhook (if it takes one) served on `listen`, the
/// bot until it stops, then the server closed (after the drain: the replies of the accepted
/// messages went out while the server answered 503 to new ones). A channel this binary was
/// built without is an error naming its feature.
async fn on_network(
    channel: Channel,
    builder: impl Fn(Arc<dyn Provider>, bool) -> BotBuilder,
    listen: &str,
    session_kv: Arc<dyn DurableKv>,
) -> Result<(), ShopError> {
    #[cfg(network_channel)]
    {
        #[cfg(not(any(feature = "whatsapp-web", feature = "email")))]
        let _ = session_kv;
        let (provider, routes) = match channel {
            #[cfg(feature = "telegram")]
            Channel::Telegram => network::telegram()?,
            #[cfg(feature = "whatsapp-cloud")]
            Channel::Whatsapp => network::whatsapp()?,
            #[cfg(feature = "whatsapp-web")]
            Channel::WhatsappWeb => network::whatsapp_web(Arc::clone(&session_kv))?,
            #[cfg(feature = "messenger")]
            Channel::Messenger => {
                network::meta_messaging::<botmesh_providers::messenger::Messenger>()?
            }
            #[cfg(feature = "instagram")]
            Channel::Instagram => {
                network::meta_messaging::<botmesh_providers::instagram::Instagram>()?
            }
            #[cfg(feature = "twilio")]
            Channel::Twilio => network::twilio()?,
            #[cfg(feature = "gupshup")]
            Channel::Gupshup => network::gupshup()?,
            #[cfg(feature = "evolution")]
            Channel::Evolution => network::evolution()?,
            #[cfg(feature = "wppconnect")]
            Channel::Wppconnect => network::wppconnect()?,
            #[cfg(feature = "discord")]
            Channel::Discord => network::discord()?,
            #[cfg(feature = "gohighlevel")]
            Channel::Gohighlevel => network::gohighlevel()?,
            #[cfg(feature = "tiktok")]
            Channel::Tiktok => network::tiktok()?,
            #[cfg(feature = "email")]
            Channel::Email => network::email(Arc::clone(&session_kv))?,
            _ => return Err(not_built_in(channel)),
        };
        let server = match routes {
            Some(routes) => {
                let server = routes
                    .bind(listen)
                    .await
                    .map_err(|e| ShopError::Channel(e.to_string()))?;
                tracing::info!(addr = %server.local_addr(), ?channel, "webhook listening");
                Some(server)
            }
            None => None,
        };
        // Without a webhook, the channel is polled (Telegram): one process at a time; so is
        // Discord's gateway (every connection of a bot gets every message), and email's IMAP
        // connection (one read position).
        let exclusive =
            server.is_none() || channel == Channel::Discord || channel == Channel::Email;
        let bot = shop::shop_bot(builder(provider, exclusive))?;
        tracing::info!(?channel, "shop running; Ctrl-C or SIGTERM stops it");
        let result = bot.run().await;
        if let Some(server) = server {
            server.shutdown().await;
        }
        Ok(result?)
    }
    #[cfg(not(any(
        feature = "telegram",
        feature = "whatsapp-cloud",
        feature = "whatsapp-web",
        feature = "messenger",
        feature = "instagram",
        feature = "twilio",
        feature = "gupshup",
        feature = "evolution",
        feature = "wppconnect",
        feature = "discord",
        feature = "gohighlevel",
        feature = "tiktok",
        feature = "email"
    )))]
    {
        let _ = (builder, listen, session_kv);
        Err(not_built_in(channel))
    }
}

/// The error of a network channel this binary was built without: its name and feature.
fn not_built_in(channel: Channel) -> ShopError {
    let (channel, feature) = match channel {
        Channel::Whatsapp => ("whatsapp", "whatsapp-cloud"),
        Channel::WhatsappWeb => ("whatsapp-web", "whatsapp-web"),
        Channel::Messenger => ("messenger", "messenger"),
        Channel::Instagram => ("instagram", "instagram"),
        Channel::Twilio => ("twilio", "twilio"),
        Channel::Gupshup => ("gupshup", "gupshup"),
        Channel::Evolution => ("evolution", "evolution"),
        Channel::Wppconnect => ("wppconnect", "wppconnect"),
        Channel::Discord => ("discord", "discord"),
        Channel::Gohighlevel => ("gohighlevel", "gohighlevel"),
        Channel::Tiktok => ("tiktok", "tiktok"),
        Channel::Email => ("email", "email"),
        _ => ("telegram", "telegram"),
    };
    ShopError::NotBuiltIn { feature, channel }
}

/// The network channels' providers, from their environment variables, with the webhook
/// server to bind (`None`: Telegram long polling).
#[cfg(network_channel)]
mod network {
    use std::sync::Arc;

    use botmesh::provider::Provider;
    use botmesh_providers::webhook::WebhookServer;

    use super::ShopError;

    type Channel = (Arc<dyn Provider>, Option<WebhookServer>);

    fn failed(e: impl std::fmt::Display) -> ShopError {
        ShopError::Channel(e.to_string())
    }

    #[cfg(feature = "telegram")]
    pub(super) fn telegram() -> Result<Channel, ShopError> {
        use botmesh_providers::telegram::{TelegramConfig, TelegramMode, TelegramProvider};
        let config = TelegramConfig::from_env().map_err(failed)?;
        let webhook = matches!(config.mode(), TelegramMode::Webhook { .. });
        let telegram = TelegramProvider::new(config).map_err(failed)?;
        let routes = webhook.then(|| WebhookServer::new().mount(telegram.webhook_routes()));
        Ok((Arc::new(telegram), routes))
    }

    /// Messenger or Instagram (`C`), from the channel's variables.
    #[cfg(any(feature = "messenger", feature = "instagram"))]
    pub(super) fn meta_messaging<C: botmesh_providers::meta::messaging::Channel>()
    -> Result<Channel, ShopError> {
        use botmesh_providers::meta::messaging::{MessagingConfig, MessagingProvider};
        let config = MessagingConfig::<C>::from_env().map_err(failed)?;
        let p = MessagingProvider::new(config).map_err(failed)?;
        let server = WebhookServer::new().mount(p.webhook_routes());
        Ok((Arc::new(p), Some(server)))
    }

    /// WhatsApp Web: the session in the shop's store; a fake session replaying
    /// `WHATSAPP_WEB_REPLAY_DIR` when set, else the real client (feature
    /// `whatsapp-web-native`; without it `connect` says it is missing). No webhook: one
    /// process holds the session.
    #[cfg(feature = "whatsapp-web")]
    pub(super) fn whatsapp_web(
        kv: Arc<dyn botmesh::durability::DurableKv>,
    ) -> Result<Channel, ShopError> {
        use botmesh_providers::whatsapp_web::{
            FakeSession, WhatsAppWebConfig as Config, WhatsAppWebProvider as P,
        };
        let config = Config::from_env(kv).map_err(failed)?;
        let p = match std::env::var_os("WHATSAPP_WEB_REPLAY_DIR") {
            Some(dir) => P::new(config, Arc::new(FakeSession::new(dir).map_err(failed)?)),
            None => P::connect(config),
        }
        .map_err(failed)?;
        Ok((Arc::new(p), None))
    }

    /// A webhook channel: `$provider` built from `$config::from_env()`, its routes mounted.
    macro_rules! webhook_channel {
        ($($feature:literal $name:ident $config:ty, $provider:ty;)*) => {$(
            #[cfg(feature = $feature)]
            pub(super) fn $name() -> Result<Channel, ShopError> {
                let p = <$provider>::new(<$config>::from_env().map_err(failed)?).map_err(failed)?;
                let server = WebhookServer::new().mount(p.webhook_routes());
                Ok((Arc::new(p), Some(server)))
            }
        )*};
    }

    webhook_channel! {
        "whatsapp-cloud" whatsapp
            botmesh_providers::whatsapp::WhatsAppConfig, botmesh_providers::whatsapp::WhatsAppProvider;
        "twilio" twilio
            botmesh_providers::twilio::TwilioConfig, botmesh_providers::twilio::TwilioProvider;
        "gupshup" gupshup
            botmesh_providers::gupshup::GupshupConfig, botmesh_providers::gupshup::GupshupProvider;
        "evolution" evolution
            botmesh_providers::evolution::EvolutionConfig, botmesh_providers::evolution::EvolutionProvider;
        "wppconnect" wppconnect
            botmesh_providers::wppconnect::WppConnectConfig, botmesh_providers::wppconnect::WppConnectProvider;
        "gohighlevel" gohighlevel
            botmesh_providers::gohighlevel::GoHighLevelConfig, botmesh_providers::gohighlevel::GoHighLevelProvider;
        "tiktok" tiktok
            botmesh_providers::tiktok::TikTokConfig, botmesh_providers::tiktok::TikTokProvider;
    }

    /// Email: the store is the shop's; the webhook routes of the inbound paths configured.
    #[cfg(feature = "email")]
    pub(super) fn email(kv: Arc<dyn botmesh::durability::DurableKv>) -> Result<Channel, ShopError> {
        use botmesh_providers::email::{EmailConfig, EmailProvider};
        let p = EmailProvider::new(EmailConfig::from_env(kv).map_err(failed)?).map_err(failed)?;
        let server = WebhookServer::new().mount(p.webhook_routes());
        Ok((Arc::new(p), Some(server)))
    }

    /// Discord: the gateway, and the interactions endpoint when a public key is set.
    #[cfg(feature = "discord")]
    pub(super) fn discord() -> Result<Channel, ShopError> {
        use botmesh_providers::discord::{DiscordConfig as Config, DiscordProvider as P};
        let p = P::new(Config::from_env().map_err(failed)?).map_err(failed)?;
        let server = WebhookServer::new().mount(p.interactions_routes());
        Ok((Arc::new(p), Some(server)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_command_line() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["shop"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cli.channel, Channel::Console);
        let cli = Cli::try_parse_from(["shop", "--channel", "telegram", "--db=/tmp/x.db"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (cli.channel, cli.db),
            (Channel::Telegram, PathBuf::from("/tmp/x.db"))
        );
        let cli = Cli::try_parse_from(["shop", "--jsonl"]).unwrap_or_else(|e| panic!("{e}"));
        assert!(cli.jsonl);
        assert!(Cli::try_parse_from(["shop", "--channel", "fax"]).is_err());
        for (name, channel) in [
            ("messenger", Channel::Messenger),
            ("instagram", Channel::Instagram),
            ("gupshup", Channel::Gupshup),
            ("evolution", Channel::Evolution),
            ("wppconnect", Channel::Wppconnect),
            ("whatsapp-web", Channel::WhatsappWeb),
            ("gohighlevel", Channel::Gohighlevel),
            ("tiktok", Channel::Tiktok),
            ("email", Channel::Email),
        ] {
            let cli =
                Cli::try_parse_from(["shop", "--channel", name]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(cli.channel, channel);
        }
        assert!(Cli::try_parse_from(["shop", "--jsonl", "--channel", "twilio"]).is_err());
        let cli = Cli::try_parse_from(["shop", "--drain-timeout", "5s"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cli.drain_timeout, Duration::from_secs(5));
    }
}
