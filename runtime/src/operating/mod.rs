//! Operating a bot from outside its code: the bot's counters as Prometheus text
//! ([`prometheus`]), the HTTP endpoint that serves them (`http`, feature `http`), the admin
//! page (`admin`, feature `http`) and the `botmesh` command line (`cli`, feature `cli`).
//!
//! Everything here reads and acts through the public operator API (`Bot::metrics`,
//! `Bot::durability`, [`KvDurability`](botmesh_durability::KvDurability) and the
//! [`Store`](botmesh_durability::Store) trait); nothing reads a backend's tables directly.

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod admin;
#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod prometheus;
#[cfg(any(feature = "cli", feature = "http"))]
mod views;
