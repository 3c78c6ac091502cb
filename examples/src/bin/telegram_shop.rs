//! `telegram_shop`: the README's demo shop on Telegram, configured by environment variables.
//!
//! ```text
//! TELEGRAM_BOT_TOKEN=123:abc cargo run -p botmesh-examples --features telegram --bin telegram_shop
//! ```
//!
//! Long polling by default. With `TELEGRAM_WEBHOOK_SECRET` set it serves a webhook on
//! `WEBHOOK_ADDR` (default `0.0.0.0:8080`, path `TELEGRAM_WEBHOOK_PATH`, default `/telegram`)
//! and registers `TELEGRAM_WEBHOOK_URL` with Telegram when given. The other variables are
//! those of `botmesh_providers::telegram::TelegramConfig::from_env`; `SHOP_DB` is the SQLite
//! file (default `data/telegram-shop.db`), `RUST_LOG` the log level (default `info`). The bot
//! itself is `botmesh_examples::shop`. Exit codes: 0 after Ctrl-C, 1 on any error.

use std::path::PathBuf;
use std::process::ExitCode;

use botmesh::durability::SqliteStore;
use botmesh::prelude::*;
use botmesh_examples::shop::{self, BOT_ID};
use botmesh_providers::telegram::{TelegramConfig, TelegramMode, TelegramProvider};
use botmesh_providers::webhook::WebhookServer;

#[tokio::main]
async fn main() -> ExitCode {
    init_logs();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "telegram_shop failed");
            ExitCode::FAILURE
        }
    }
}

fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = TelegramConfig::from_env()?;
    let webhook = matches!(config.mode(), TelegramMode::Webhook { .. });
    let telegram = TelegramProvider::new(config)?;
    let server = if webhook {
        let addr = std::env::var("WEBHOOK_ADDR").unwrap_or_else(|_| "0.0.0.0:8080".to_owned());
        Some(
            WebhookServer::new()
                .mount(telegram.webhook_routes())
                .bind(addr)
                .await?,
        )
    } else {
        None
    };
    let db = std::env::var("SHOP_DB")
        .map_or_else(|_| PathBuf::from("data/telegram-shop.db"), PathBuf::from);
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let bot = shop::shop_bot(
        Bot::builder(telegram)
            .bot_id(BOT_ID)
            .store(SqliteStore::open(&db)),
    )?;
    tracing::info!("telegram shop running; Ctrl-C to stop");
    let result = bot.run().await;
    if let Some(server) = server {
        server.shutdown().await;
    }
    Ok(result?)
}
