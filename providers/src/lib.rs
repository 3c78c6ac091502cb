//! Channel providers for botmesh: one module per channel, each behind its cargo feature.
//!
//! | feature | module | what it is |
//! | --- | --- | --- |
//! | `console` (default) | [`console`] | an interactive chat in the terminal |
//! | `jsonl` (default) | [`jsonl`] | the black-box interface: JSON lines in, JSON lines out |
//! | `telegram` | `telegram` | the Telegram Bot API: long polling or webhooks |
//! | `whatsapp-cloud` | `whatsapp` | the WhatsApp Business Cloud API (Meta Graph), webhooks |
//! | `messenger` | `messenger` | the Messenger Platform (Facebook Pages), webhooks |
//! | `instagram` | `instagram` | Instagram Messaging (via a Page or Instagram Login), webhooks |
//! | `twilio` | `twilio` | Twilio Programmable Messaging: SMS, MMS, WhatsApp, webhooks |
//! | `gupshup` (pulls in `whatsapp-cloud`, whose parser reads Gupshup's Meta format) | `gupshup` | Gupshup's WhatsApp API (both callback formats), webhooks |
//! | `evolution` | `evolution` | an Evolution API v2 server (a WhatsApp-Web gateway), webhooks |
//! | `wppconnect` | `wppconnect` | a WPPConnect Server (a WhatsApp-Web gateway), webhooks |
//! | `whatsapp-web` | `whatsapp_web` | WhatsApp Web as a linked device: QR or pair code, the session in the bot's durable store, one process per session (the provider, its session seam and a fake session) |
//! | `whatsapp-web-native` (pulls in `whatsapp-web`; off by default, pulled by nothing else) | `whatsapp_web::native` | the real WhatsApp Web client over the `whatsapp-rust` crate, its keys in the bot's durable store |
//! | `discord` | `discord` | Discord: the gateway (messages) and the interactions endpoint (slash commands, components) |
//! | `gohighlevel` | `gohighlevel` | GoHighLevel (LeadConnector) Conversations: SMS, WhatsApp, Messenger, Instagram, live chat, email of a location, signed webhooks |
//! | `tiktok` | `tiktok` | TikTok Business Messaging: direct messages to a TikTok Business Account, signed webhooks |
//! | `email` | `email` | email: SMTP out; IMAP IDLE, Mailgun Routes or SendGrid Inbound Parse in; a chat is a thread |
//! | any of the three Meta channels | `meta` | the Meta Graph core: webhook handshake and signature, Graph client and error classes, the session window, Meta's media hosts |
//! | any HTTP-gateway channel, `gohighlevel`, `tiktok` | `gateway` (private) | the unsigned webhooks' shared secret, the REST error classes |
//! | `webhook` (pulled in by every network channel) | `http`, `webhook` | the SSRF-guarded media client; the shared axum webhook server |
//!
//! The network channels (`telegram`, `whatsapp-cloud`, `messenger`, `instagram`, `twilio`,
//! `gupshup`, `evolution`, `wppconnect`, `discord`, `gohighlevel`, `tiktok`, `email`), the shared webhook server
//! and the SSRF-guarded HTTP client (`webhook`) sit behind their own features, off by
//! default. A provider turns its channel's wire protocol into
//! [`botmesh::provider::ProviderEvent`]s and carries sends back; it never routes, retries or
//! journals (the runtime does).

#[cfg(any(feature = "whatsapp-web", feature = "email"))]
mod kv_write;
#[cfg(any(feature = "console", feature = "jsonl"))]
mod lines;

#[cfg(feature = "console")]
pub mod console;
#[cfg(feature = "jsonl")]
pub mod jsonl;

#[cfg(feature = "console")]
pub use console::ConsoleProvider;
#[cfg(feature = "jsonl")]
pub use jsonl::JsonlProvider;
#[cfg(any(feature = "console", feature = "jsonl"))]
pub use lines::LineOutput;

#[cfg(any(
    rest_channel,
    meta_channel,
    feature = "email",
    feature = "discord",
    feature = "telegram"
))]
mod capabilities;
#[cfg(feature = "discord")]
#[cfg_attr(docsrs, doc(cfg(feature = "discord")))]
pub mod discord;
#[cfg(feature = "email")]
#[cfg_attr(docsrs, doc(cfg(feature = "email")))]
pub mod email;
// WhatsApp Web (no webhook, not a network channel here) uses `unsupported` only.
#[cfg(any(network_channel, feature = "whatsapp-web"))]
#[cfg_attr(not(network_channel), allow(dead_code))]
mod errors;
#[cfg(feature = "evolution")]
#[cfg_attr(docsrs, doc(cfg(feature = "evolution")))]
pub mod evolution;
#[cfg(any(meta_channel, gateway_channel, feature = "whatsapp-web"))]
mod files;
#[cfg(rest_channel)]
mod gateway;
#[cfg(feature = "gohighlevel")]
#[cfg_attr(docsrs, doc(cfg(feature = "gohighlevel")))]
pub mod gohighlevel;
#[cfg(feature = "gupshup")]
#[cfg_attr(docsrs, doc(cfg(feature = "gupshup")))]
pub mod gupshup;
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod http;
#[cfg(feature = "instagram")]
#[cfg_attr(docsrs, doc(cfg(feature = "instagram")))]
pub mod instagram;
#[cfg(network_channel)]
mod media;
#[cfg(feature = "messenger")]
#[cfg_attr(docsrs, doc(cfg(feature = "messenger")))]
pub mod messenger;
#[cfg(meta_channel)]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        feature = "whatsapp-cloud",
        feature = "messenger",
        feature = "instagram"
    )))
)]
pub mod meta;
#[cfg(any(feature = "twilio", feature = "email", feature = "whatsapp-web"))]
mod readable;
#[cfg(network_channel)]
pub mod settings;
#[cfg(background_task)]
mod task;
#[cfg(feature = "telegram")]
#[cfg_attr(docsrs, doc(cfg(feature = "telegram")))]
pub mod telegram;
#[cfg(feature = "tiktok")]
#[cfg_attr(docsrs, doc(cfg(feature = "tiktok")))]
pub mod tiktok;
#[cfg(feature = "twilio")]
#[cfg_attr(docsrs, doc(cfg(feature = "twilio")))]
pub mod twilio;
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod webhook;
#[cfg(feature = "whatsapp-cloud")]
#[cfg_attr(docsrs, doc(cfg(feature = "whatsapp-cloud")))]
pub mod whatsapp;
#[cfg(feature = "whatsapp-web")]
#[cfg_attr(docsrs, doc(cfg(feature = "whatsapp-web")))]
pub mod whatsapp_web;
#[cfg(feature = "wppconnect")]
#[cfg_attr(docsrs, doc(cfg(feature = "wppconnect")))]
pub mod wppconnect;
