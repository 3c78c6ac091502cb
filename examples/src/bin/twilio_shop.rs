//! `twilio_shop`: the README's demo shop over Twilio (SMS or WhatsApp), configured by
//! environment variables.
//!
//! ```text
//! TWILIO_ACCOUNT_SID=AC… TWILIO_AUTH_TOKEN=… TWILIO_FROM=+15557654321 \
//!   TWILIO_WEBHOOK_BASE_URL=https://bot.example \
//!   cargo run -p botmesh-examples --features twilio --bin twilio_shop
//! ```
//!
//! It serves the inbound webhook (`TWILIO_WEBHOOK_PATH`, default `/twilio`) and the status
//! callback (`TWILIO_STATUS_PATH`, default `/twilio/status`) on `WEBHOOK_ADDR` (default
//! `0.0.0.0:8080`). Configure `https://bot.example/twilio#rc=3&rp=ct,rt,5xx` as the number's
//! webhook so Twilio retries what was not acknowledged. Buttons arrive as numbered options:
//! reply with the number or the title. The other variables are those of
//! `botmesh_providers::twilio::TwilioConfig::from_env`; `SHOP_DB` is the SQLite file
//! (default `data/twilio-shop.db`), `RUST_LOG` the log level (default `info`). The bot itself
//! is `botmesh_examples::shop`. Exit codes: 0 after Ctrl-C, 1 on any error.

use std::path::PathBuf;
use std::process::ExitCode;

use botmesh::durability::SqliteStore;
use botmesh::prelude::*;
use botmesh_examples::shop::{self, BOT_ID};
use botmesh_providers::twilio::{TwilioConfig, TwilioProvider};
use botmesh_providers::webhook::WebhookServer;

#[tokio::main]
async fn main() -> ExitCode {
    init_logs();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "twilio_shop failed");
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
    let twilio = TwilioProvider::new(TwilioConfig::from_env()?)?;
    let addr = std::env::var("WEBHOOK_ADDR").unwrap_or_else(|_| "0.0.0.0:8080".to_owned());
    let server = WebhookServer::new()
        .mount(twilio.webhook_routes())
        .bind(addr)
        .await?;
    let db = std::env::var("SHOP_DB")
        .map_or_else(|_| PathBuf::from("data/twilio-shop.db"), PathBuf::from);
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let bot = shop::shop_bot(
        Bot::builder(twilio)
            .bot_id(BOT_ID)
            .store(SqliteStore::open(&db)),
    )?;
    tracing::info!(addr = %server.local_addr(), "twilio shop running; Ctrl-C to stop");
    let result = bot.run().await;
    server.shutdown().await;
    Ok(result?)
}
