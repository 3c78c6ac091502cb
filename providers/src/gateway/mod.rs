//! What the HTTP-gateway channels share (Gupshup, Evolution API, WPPConnect): their webhooks
//! are not signed, so a route takes a request only with the shared secret; their REST calls
//! answer with an HTTP status and a JSON (or text) body, classed here for the outbox.
//!
//! | part | what it does |
//! | --- | --- |
//! | [`GatewaySettings`] | the API base URL and credential, the webhook route and its secret, the timeout and media client, read from the environment under each channel's names ([`GatewayEnv`]) |
//! | `secret` | the webhook's shared secret: the header `X-Webhook-Secret`, or the first path segment after the route (`/gupshup/<secret>`); missing 401, wrong 403 (constant time) |
//! | `call` | one REST call and the class of its failure (below) |
//! | `Rest`, `RestConfig` | a REST channel with signed webhooks (GoHighLevel, TikTok): its settings and clients, its webhook route checked and read as its config says |
//! | [`Gateway`] | a channel's state (settings, clients) and its webhook route: the secret checked, the body parsed by the channel's [`GatewayConfig`], delivered to its [`WebhookProvider`](crate::webhook::WebhookProvider)'s slot |
//!
//! | gateway answer | class |
//! | --- | --- |
//! | 2xx | success (a channel may still read an error in its body) |
//! | 429 | `RateLimited` (with `Retry-After` when given) |
//! | 5xx (the gateway answered: nothing was sent) | retryable `Api` |
//! | no connection | `Network` (retryable) |
//! | a timeout or a connection lost after a send was written | `Ambiguous` (`crate::http::call_error`) |
//! | any other status (401 key, 400 body, 404 instance) | final `Api` with the status (dead-lettered), unless the channel's own table says otherwise |
//!
//! GoHighLevel and TikTok, whose webhooks are signed, check no shared secret and hold no
//! `Gateway`: they use `Rest` (their clients and their webhook route), the REST call (`call`)
//! and the parsers' and senders' helpers (`inbound`, `outbound`).
//!
//! It does not sign anything, manage gateway sessions (QR pairing, instance creation), or
//! retry (the runtime's outbox does).

mod call;
#[cfg(gateway_channel)]
mod core;
pub(crate) mod inbound;
pub(crate) mod outbound;
#[cfg(any(feature = "gohighlevel", feature = "tiktok"))]
mod rest;
#[cfg(gateway_channel)]
mod secret;
#[cfg(gateway_channel)]
mod settings;
#[cfg(any(feature = "evolution", feature = "wppconnect"))]
pub(crate) mod web;

pub(crate) use call::call;
#[cfg(any(feature = "gupshup", feature = "gohighlevel", feature = "tiktok"))]
pub(crate) use call::message_of;
#[cfg(any(feature = "evolution", feature = "wppconnect"))]
pub(crate) use core::edit_text;
#[cfg(gateway_channel)]
pub(crate) use core::{Gateway, GatewayConfig};
#[cfg(any(feature = "gohighlevel", feature = "tiktok"))]
pub(crate) use rest::{Rest, RestConfig};
#[cfg(gateway_channel)]
pub(crate) use secret::{Secret, routes};
#[cfg(gateway_channel)]
pub(crate) use settings::{GatewayEnv, GatewaySettings};
