//! Instagram Messaging: a professional account's direct messages, over the Send API and the
//! webhook ([`InstagramProvider`]; how it works is in [`crate::meta::messaging`]).
//!
//! Two ways in: the Messenger API for Instagram (the account linked to a Page, the Page
//! token, `graph.facebook.com`: the defaults) or Instagram API with Instagram Login (no Page,
//! an Instagram user token, `INSTAGRAM_API_BASE=https://graph.instagram.com` and
//! `INSTAGRAM_ACCOUNT_ID`). Chats are IGSIDs. Texts are cut at 1000 UTF-8 bytes; Instagram
//! sends the account's own messages back as echoes, which are dropped. Outside the 24-hour
//! window only `HUMAN_AGENT` (7 days) is allowed.
//!
//! | env var | meaning | default |
//! | --- | --- | --- |
//! | `INSTAGRAM_ACCESS_TOKEN` | the Page token (`instagram_manage_messages`) or Instagram user token (`instagram_business_manage_messages`) (required) | — |
//! | `INSTAGRAM_APP_SECRET` | the app secret that signs webhooks (`X-Hub-Signature-256`) (required) | — |
//! | `INSTAGRAM_VERIFY_TOKEN` | the token of the `hub.challenge` handshake (required) | — |
//! | `INSTAGRAM_ACCOUNT_ID` | the Instagram account (or its Page): sends go to `/<id>/messages`, other accounts' events are skipped | `me`, every event |
//! | `INSTAGRAM_API_BASE` | the Graph base URL | `https://graph.facebook.com` |
//! | `INSTAGRAM_API_VERSION` | the Graph version | `v21.0` |
//! | `INSTAGRAM_WEBHOOK_PATH` | the route on the webhook server | `/instagram` |
//! | `INSTAGRAM_WINDOW_TAG` | `HUMAN_AGENT`: sends after the 24-hour window go out with it, up to 7 days | none: such a send fails with `OutsideSessionWindow` |
//! | `INSTAGRAM_MEDIA_HOSTS` | the CDN hosts whose attachment URLs are journaled and downloaded, comma-separated | `fbcdn.net,fbsbx.com,cdninstagram.com` |
//!
//! ```no_run
//! use botmesh::prelude::*;
//! use botmesh_providers::instagram::{InstagramConfig, InstagramProvider};
//! use botmesh_providers::webhook::WebhookServer;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let instagram = InstagramProvider::new(InstagramConfig::from_env()?)?;
//! let server = WebhookServer::new().mount(instagram.webhook_routes()).bind("0.0.0.0:8080").await?;
//! Bot::builder(instagram).build()?.run().await?;
//! server.shutdown().await;
//! # Ok(()) }
//! ```

use crate::meta::messaging::{self, Channel, TextLimit};

pub use crate::meta::MetaConfigError as InstagramConfigError;
pub use crate::meta::messaging::MessageTag;

/// The provider's name, as media refs carry it.
pub const NAME: &str = "instagram";

/// Instagram's text limit, in UTF-8 bytes.
pub const TEXT_LIMIT_BYTES: usize = 1000;

/// The Instagram channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instagram;

impl messaging::sealed::Sealed for Instagram {}

impl Channel for Instagram {
    const NAME: &'static str = NAME;
    const OBJECT: &'static str = "instagram";
    const DEFAULT_PATH: &'static str = "/instagram";
    const TAGS: &'static [MessageTag] = &[MessageTag::HumanAgent];
    const ENV: [&'static str; 9] = [
        "INSTAGRAM_ACCESS_TOKEN",
        "INSTAGRAM_APP_SECRET",
        "INSTAGRAM_VERIFY_TOKEN",
        "INSTAGRAM_API_BASE",
        "INSTAGRAM_API_VERSION",
        "INSTAGRAM_WEBHOOK_PATH",
        "INSTAGRAM_ACCOUNT_ID",
        "INSTAGRAM_WINDOW_TAG",
        "INSTAGRAM_MEDIA_HOSTS",
    ];
    const TEXT_LIMIT: TextLimit = TextLimit::Bytes(TEXT_LIMIT_BYTES);
}

/// An Instagram professional account. Cheap to clone.
pub type InstagramProvider = messaging::MessagingProvider<Instagram>;

/// The Instagram provider's settings.
pub type InstagramConfig = messaging::MessagingConfig<Instagram>;
