//! The Messenger Platform: a Facebook Page's conversations, over the Send API and the Page's
//! webhook ([`MessengerProvider`]; how it works is in [`crate::meta::messaging`]).
//!
//! Chats are PSIDs (page-scoped user ids: one person has a different PSID per Page). Texts
//! are cut at 2000 characters; 1–3 buttons are a button template, 4–13 quick replies, a list
//! a generic template. Outside the 24-hour window a send needs a tag: `ACCOUNT_UPDATE`,
//! `CONFIRMED_EVENT_UPDATE`, `POST_PURCHASE_UPDATE`, or `HUMAN_AGENT` (7 days).
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `MESSENGER_ACCESS_TOKEN` | the Page access token (`pages_messaging`) (required) | — |
//! | `MESSENGER_APP_SECRET` | the app secret that signs webhooks (`X-Hub-Signature-256`) (required) | — |
//! | `MESSENGER_VERIFY_TOKEN` | the token of the `hub.challenge` handshake (required) | — |
//! | `MESSENGER_PAGE_ID` | the Page: sends go to `/<id>/messages`, other Pages' events are skipped | `me` (the token's Page), every event |
//! | `MESSENGER_API_BASE` | the Graph base URL | `https://graph.facebook.com` |
//! | `MESSENGER_API_VERSION` | the Graph version | `v21.0` |
//! | `MESSENGER_WEBHOOK_PATH` | the route on the webhook server | `/messenger` |
//! | `MESSENGER_WINDOW_TAG` | the tag of sends after the 24-hour window (`POST_PURCHASE_UPDATE`, …) | none: such a send fails with `OutsideSessionWindow` |
//! | `MESSENGER_MEDIA_HOSTS` | the CDN hosts whose attachment URLs are journaled and downloaded, comma-separated | `fbcdn.net,fbsbx.com,cdninstagram.com` |
//!
//! ```no_run
//! use botmesh::prelude::*;
//! use botmesh_providers::messenger::{MessengerConfig, MessengerProvider};
//! use botmesh_providers::webhook::WebhookServer;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let messenger = MessengerProvider::new(MessengerConfig::from_env()?)?;
//! let server = WebhookServer::new().mount(messenger.webhook_routes()).bind("0.0.0.0:8080").await?;
//! Bot::builder(messenger).build()?.run().await?;
//! server.shutdown().await;
//! # Ok(()) }
//! ```

use crate::meta::messaging::{self, Channel, TextLimit};

pub use crate::meta::MetaConfigError as MessengerConfigError;
pub use crate::meta::messaging::MessageTag;

/// The provider's name, as media refs carry it.
pub const NAME: &str = "messenger";

/// Messenger's text limit, in characters.
pub const TEXT_LIMIT: usize = 2000;

/// The Messenger channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Messenger;

impl messaging::sealed::Sealed for Messenger {}

impl Channel for Messenger {
    const NAME: &'static str = NAME;
    const OBJECT: &'static str = "page";
    const DEFAULT_PATH: &'static str = "/messenger";
    const TAGS: &'static [MessageTag] = &[
        MessageTag::AccountUpdate,
        MessageTag::ConfirmedEventUpdate,
        MessageTag::PostPurchaseUpdate,
        MessageTag::HumanAgent,
    ];
    const ENV: [&'static str; 9] = [
        "MESSENGER_ACCESS_TOKEN",
        "MESSENGER_APP_SECRET",
        "MESSENGER_VERIFY_TOKEN",
        "MESSENGER_API_BASE",
        "MESSENGER_API_VERSION",
        "MESSENGER_WEBHOOK_PATH",
        "MESSENGER_PAGE_ID",
        "MESSENGER_WINDOW_TAG",
        "MESSENGER_MEDIA_HOSTS",
    ];
    const TEXT_LIMIT: TextLimit = TextLimit::Chars(TEXT_LIMIT);
}

/// A Facebook Page on Messenger. Cheap to clone.
pub type MessengerProvider = messaging::MessagingProvider<Messenger>;

/// The Messenger provider's settings.
pub type MessengerConfig = messaging::MessagingConfig<Messenger>;
