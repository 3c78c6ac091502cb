//! The crate's integration tests, one test binary: each file of `tests/` is a module (a test's
//! name is `file::test`), and the helpers they share are declared once here: `fakes` (the
//! channels' fake servers, also run by the examples' crash tests) and `support`.

// Helpers.
mod fakes;
mod support;

// Test files.
mod ambiguous_sends;
mod console;
mod discord_provider;
mod email_imap;
mod email_provider;
mod evolution_provider;
mod gohighlevel_provider;
mod gupshup_provider;
mod jsonl;
mod meta_messaging;
mod metrics_on_webhook;
mod public_api;
mod ssrf;
mod telegram_provider;
mod telegram_shop;
mod telegram_webhook;
mod tiktok_provider;
mod twilio_provider;
mod whatsapp_provider;
mod whatsapp_web_provider;
mod wppconnect_provider;
