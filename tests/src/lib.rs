//! botmesh-tests: tests that cross crates or processes.
//!
//! - `tests/crash_matrix.rs`: every journal crash point under both ambiguity policies, at the
//!   bot level, against the table "What is guaranteed" of `docs/durability-and-backends.md`.
//! - `tests/kill9.rs`: the `crashbot` binary (this crate's `[[bin]]`) killed with SIGKILL in the
//!   middle of handlers and sends, restarted on the same file, with redelivery of what was not
//!   acknowledged.
//!
//! The library holds what several of them use: [`server_url`], [`FlakyStore`], the
//! [`process::Crashbot`] harness, the shared [`flows`] and [`settle`]. Its doc
//! tests are the code blocks of the README and of the user's book in `docs/`: each block
//! compiles (and runs, unless marked `no_run`) as a user's program would.

pub mod bins;
mod flaky_store;
pub mod flows;
pub mod process;

/// The README's code blocks, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct Readme;

/// The code blocks of the book in `docs/`.
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../../docs/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../../docs/flows.md")]
    struct Flows;
    #[doc = include_str!("../../docs/durability-and-backends.md")]
    struct DurabilityAndBackends;
    #[doc = include_str!("../../docs/channels.md")]
    struct Channels;
    #[doc = include_str!("../../docs/operating.md")]
    struct Operating;
    #[doc = include_str!("../../docs/replicas.md")]
    struct Replicas;

    /// The channel pages: their code needs their channel's feature of `botmesh-providers`,
    /// which this crate's dev-dependencies turn on (all of them but `whatsapp-web-native`: the
    /// WhatsApp Web page's code runs on the fake session).
    mod channels {
        #[doc = include_str!("../../docs/telegram.md")]
        struct Telegram;
        #[doc = include_str!("../../docs/whatsapp-cloud.md")]
        struct WhatsAppCloud;
        #[doc = include_str!("../../docs/messenger.md")]
        struct Messenger;
        #[doc = include_str!("../../docs/instagram.md")]
        struct Instagram;
        #[doc = include_str!("../../docs/twilio.md")]
        struct Twilio;
        #[doc = include_str!("../../docs/gupshup.md")]
        struct Gupshup;
        #[doc = include_str!("../../docs/evolution.md")]
        struct Evolution;
        #[doc = include_str!("../../docs/wppconnect.md")]
        struct WppConnect;
        #[doc = include_str!("../../docs/whatsapp-web.md")]
        struct WhatsAppWeb;
        #[doc = include_str!("../../docs/discord.md")]
        struct Discord;
        #[doc = include_str!("../../docs/email.md")]
        struct Email;
        #[doc = include_str!("../../docs/gohighlevel.md")]
        struct GoHighLevel;
        #[doc = include_str!("../../docs/tiktok.md")]
        struct TikTok;
    }
}

pub use flaky_store::{FlakyStore, away};

use serde_json::Value;

/// Sends the logs of a test binary (`crashbot`, `schedbot`) to stderr, filtered by `RUST_LOG`
/// (`warn` without it): stdout is their channel.
pub fn log_to_stderr() {
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

/// The URL of a test server from `var`: `None` (the suite says it skipped) when unset, a
/// panic under `CI=true`, where a missing server must fail the run.
pub fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{var} is not set and CI=true: the server suite cannot run")
        }
        _ => {
            #[allow(clippy::print_stderr)] // the skip must be visible in `cargo test` output
            {
                eprintln!("SKIPPED: {var} is not set; this suite needs a real server");
            }
            None
        }
    }
}

/// The `crashbot` reply (`t<i>:one` / `t<i>:two`) of a `durability:ambiguous` event line of the
/// jsonl output (its key is `c<chat>/m<i>:<n>`), or `None` for another line. A send of chat
/// `f` (the persistent flow) is reported as `"flow"`.
pub fn ambiguous_reply(line: &Value) -> Option<String> {
    if line["type"] != "event" || line["name"] != "durability:ambiguous" {
        return None;
    }
    if line["detail"]["chat"] == "f" {
        return Some("flow".to_owned());
    }
    let key = line["detail"]["key"].as_str().unwrap_or_default();
    let (msg, n) = key.rsplit_once(':').unwrap_or_default();
    let i = msg.rsplit_once("/m").map(|(_, i)| i).unwrap_or_default();
    Some(format!("t{i}:{}", if n == "1" { "one" } else { "two" }))
}

/// Lets a durable bot's background work finish: its queued work settles
/// ([`Bot::idle`](botmesh::prelude::Bot::idle), up to 2 s: a bot cut by a simulated crash never
/// does), then its journal pollers and retries get 60 ms to run (the suites' poll interval is
/// 20 ms, their backoff 10 ms), three times over.
///
/// A real-time wait, on purpose: the suites that use it run the journals on SQLite, files and
/// servers, whose I/O runs on blocking threads and sockets that tokio's paused clock would
/// skip past, and a crashed bot's work never signals an end to wait for.
pub async fn settle(bot: &botmesh::prelude::Bot) {
    for _ in 0..3 {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), bot.idle()).await;
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    }
}

/// The journals' settings of the durable suites: the sweeper every 20 ms, retries after
/// 10 ms, a send of unknown outcome skipped (reported, not sent again) unless the test says
/// otherwise.
pub fn fast_durability() -> botmesh::durability::DurabilityConfig {
    use botmesh::durability::retries::Backoff;
    use botmesh::durability::{DurabilityConfig, OnAmbiguous};
    use std::time::Duration;
    let retry = Backoff::fixed(Duration::from_millis(10), Duration::from_millis(10));
    let mut c = DurabilityConfig::default();
    c.poll = Duration::from_millis(20);
    c.outbox.on_ambiguous = OnAmbiguous::Skip;
    c.inbox.backoff = retry;
    c.outbox.backoff = retry;
    c
}

/// A durable bot of instance `i1` on `store`, with its journals in `kv` and the suites'
/// [`fast_durability`] settings.
///
/// # Panics
/// When the bot cannot be built (a test harness: the test fails).
pub fn durable_bot(
    provider: impl botmesh::provider::Provider,
    store: std::sync::Arc<dyn botmesh::durability::Store>,
    kv: std::sync::Arc<dyn botmesh::durability::DurableKv>,
) -> botmesh::prelude::Bot {
    botmesh::prelude::Bot::builder(provider)
        .store_arc(store)
        .durability(
            botmesh::durable::DurabilityOptions::shared(kv)
                .config(fast_durability())
                .instance_id("i1"),
        )
        .build()
        .expect("the bot builds")
}

/// The last line the bot said in transcript `t` (`bot → …`).
///
/// # Panics
/// When the bot said nothing (a test harness: the test fails).
pub fn last_reply(t: &botmesh::testing::Transcript) -> String {
    t.lines()
        .into_iter()
        .rfind(|l| l.starts_with("bot →"))
        .expect("the bot said something")
}

/// A started bot on `store` with memory journals (instance `i1`, [`fast_durability`]), the
/// flows `register` adds, and "Send /order to order." as the answer to anything else; and the
/// mock channel it runs on.
///
/// # Panics
/// When the bot cannot be built or started (a test harness: the test fails).
pub async fn shop_on(
    store: std::sync::Arc<dyn botmesh::durability::Store>,
    register: impl FnOnce(&botmesh::prelude::Bot),
) -> (botmesh::prelude::Bot, botmesh::testing::MockProvider) {
    use botmesh::prelude::*;
    let mock = botmesh::testing::MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .store_arc(store)
        .durability(
            botmesh::durable::DurabilityOptions::memory()
                .config(fast_durability())
                .instance_id("i1"),
        )
        .build()
        .expect("the bot builds");
    register(&bot);
    bot.catch_all(|ctx: Ctx| async move {
        ctx.reply("Send /order to order.").await?;
        Ok(())
    });
    bot.start().await.expect("the bot starts");
    (bot, mock)
}

/// The journal writes a message's handling goes through, where the crash suites cut it: its
/// inbound journaled and completed, its sends journaled, begun and marked sent.
pub const MESSAGE_WRITE_POINTS: [botmesh::durability::kv::WritePoint; 5] = {
    use botmesh::durability::kv::WritePoint;
    [
        WritePoint::InboxJournal,
        WritePoint::InboxComplete,
        WritePoint::OutboxJournal,
        WritePoint::OutboxBeginAttempt,
        WritePoint::OutboxMarkSent,
    ]
};

/// A transcript of a bot running the one flow `flow`, on a fresh memory store.
///
/// # Panics
/// When the bot cannot be built or started (a test harness: the test fails).
pub async fn transcript_of_flow<A>(
    flow: impl botmesh::flow::FlowFn<A>,
) -> botmesh::testing::Transcript {
    transcript_of(None, move |bot| {
        bot.flow(flow);
    })
    .await
}

/// A transcript of a bot on `store` (a fresh memory store when `None`) that `register` sets up
/// (`|bot| { bot.flow(order); }`).
///
/// # Panics
/// When the bot cannot be built or started (a test harness: the test fails).
pub async fn transcript_of(
    store: Option<std::sync::Arc<dyn botmesh::durability::Store>>,
    register: impl Fn(&botmesh::prelude::Bot) + Send + Sync + 'static,
) -> botmesh::testing::Transcript {
    let setup = move |b: botmesh::prelude::BotBuilder| {
        let bot = b.build()?;
        register(&bot);
        Ok(bot)
    };
    let store =
        store.unwrap_or_else(|| std::sync::Arc::new(botmesh::durability::MemoryStore::new()));
    botmesh::testing::Transcript::with_store(store, setup)
        .await
        .expect("the bot starts")
}
