//! The crate's integration tests, one test binary: each file of `tests/` is a module (a test's
//! name is `file::test`) compiled with the channel features it needs, and the helpers they
//! share are declared once here: `fakes` (the channels' fake servers, also run by the
//! examples' crash tests), `gateway_suite` (the tests every HTTP-gateway channel passes) and
//! `support`.

// Helpers.
mod fakes;
#[cfg(gateway_channel)]
mod gateway_suite;
mod support;

// Test files.
#[cfg(any(feature = "telegram", feature = "whatsapp-cloud", feature = "twilio"))]
mod ambiguous_sends;
mod console;
#[cfg(feature = "discord")]
mod discord_provider;
#[cfg(feature = "email")]
mod email_imap;
#[cfg(feature = "email")]
mod email_provider;
#[cfg(feature = "evolution")]
mod evolution_provider;
#[cfg(feature = "gohighlevel")]
mod gohighlevel_provider;
#[cfg(feature = "gupshup")]
mod gupshup_provider;
mod jsonl;
#[cfg(all(feature = "messenger", feature = "instagram"))]
mod meta_messaging;
#[cfg(feature = "webhook")]
mod metrics_on_webhook;
mod public_api;
#[cfg(feature = "webhook")]
mod ssrf;
#[cfg(feature = "telegram")]
mod telegram_provider;
#[cfg(feature = "telegram")]
mod telegram_shop;
#[cfg(feature = "telegram")]
mod telegram_webhook;
#[cfg(feature = "tiktok")]
mod tiktok_provider;
#[cfg(feature = "twilio")]
mod twilio_provider;
#[cfg(feature = "whatsapp-cloud")]
mod whatsapp_provider;
#[cfg(feature = "whatsapp-web")]
mod whatsapp_web_provider;
#[cfg(feature = "wppconnect")]
mod wppconnect_provider;
