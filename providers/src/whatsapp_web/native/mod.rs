//! WhatsApp Web's real client: the session seam ([`WaSession`](super::WaSession)) over the
//! [`whatsapp-rust`](https://crates.io/crates/whatsapp-rust) crate (feature
//! `whatsapp-web-native`, off by default).
//!
//! - [`NativeSession`]: connects (QR code always, pair code when the config names the phone
//!   number), maps the client's events to the seam's, sends under the provider's message ids,
//!   downloads media (the provider asks for a re-upload when the CDN copy expired), and starts
//!   a new client with a backoff should one stop otherwise than by a logout, a replaced stream
//!   or a stop.
//! - [`NativeStore`]: the client's storage backend (identity, Signal sessions and keys,
//!   app-state keys, LID mappings, device) in the session's [`SessionStore`](super::SessionStore),
//!   i.e. in the bot's durable store: a restart does not pair again. The session's lock (the
//!   provider's) keeps a second process off the same session.
//!
//! What is tested without a phone: the store (every method's data across a reopen of SQLite,
//! and in memory), the mapping of the crate's events, the message ids and the error classes.
//! A live pairing needs a phone with WhatsApp and the network; it is not run in CI.
//!
//! Why the feature is off by default and pulled by no other: the crate and its protocol
//! crates (`wacore`, `waproto`, a Signal implementation, rustls on `ring` for the socket,
//! `ureq` for media) add a second major version of a few crates the workspace already
//! has (`darling`, `foldhash`, `hashbrown`, `prettyplease`, `getrandom`). They are accepted
//! here because only a build that asks for this feature compiles them; the rest of the
//! workspace does not pay for them.

mod client;
mod events;
mod store;

pub use client::NativeSession;
pub use store::{NativeStore, NativeStoreError};

#[cfg(test)]
mod tests;
