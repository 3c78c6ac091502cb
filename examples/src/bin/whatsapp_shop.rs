//! `whatsapp_shop`: the README's demo shop on the WhatsApp Cloud API, configured by
//! environment variables.
//!
//! ```text
//! WHATSAPP_ACCESS_TOKEN=… WHATSAPP_PHONE_NUMBER_ID=… WHATSAPP_APP_SECRET=… WHATSAPP_VERIFY_TOKEN=… \
//!   cargo run -p botmesh-examples --features whatsapp-cloud --bin whatsapp_shop
//! ```
//!
//! It serves the webhook (verification and notifications) on `WEBHOOK_ADDR` (default
//! `0.0.0.0:8080`, path `WHATSAPP_WEBHOOK_PATH`, default `/whatsapp`) behind your HTTPS proxy;
//! point the app's callback URL there. The other variables are those of
//! `botmesh_providers::whatsapp::WhatsAppConfig::from_env`; `SHOP_DB` is the SQLite file
//! (default `data/whatsapp-shop.db`), `RUST_LOG` the log level (default `info`). The bot
//! itself is `botmesh_examples::shop`. Exit codes: 0 after Ctrl-C, 1 on any error.

use std::path::PathBuf;
use std::process::ExitCode;

use botmesh::durability::SqliteStore;
use botmesh::prelude::*;
use botmesh_examples::shop::{self, BOT_ID};
use botmesh_providers::webhook::WebhookServer;
use botmesh_providers::whatsapp::{WhatsAppConfig, WhatsAppProvider};

#[tokio::main]
async fn main() -> ExitCode {
    init_logs();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "whatsapp_shop failed");
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
    let whatsapp = WhatsAppProvider::new(WhatsAppConfig::from_env()?)?;
    let addr = std::env::var("WEBHOOK_ADDR").unwrap_or_else(|_| "0.0.0.0:8080".to_owned());
    let server = WebhookServer::new()
        .mount(whatsapp.webhook_routes())
        .bind(addr)
        .await?;
    let db = std::env::var("SHOP_DB")
        .map_or_else(|_| PathBuf::from("data/whatsapp-shop.db"), PathBuf::from);
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let bot = shop::shop_bot(
        Bot::builder(whatsapp)
            .bot_id(BOT_ID)
            .store(SqliteStore::open(&db)),
    )?;
    tracing::info!(addr = %server.local_addr(), "whatsapp shop running; Ctrl-C to stop");
    let result = bot.run().await;
    server.shutdown().await;
    Ok(result?)
}
