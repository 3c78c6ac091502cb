//! The crate's integration tests, one test binary: each file of `tests/` is a module (a test's
//! name is `file::test`), and the helpers they share are declared once here: the channels' fake
//! servers of the providers' tests, the crash harness (`channels`) and the channel benchmark's
//! harness.

// Helpers.
#[cfg(network_channel)]
mod channels;
// The fakes' helpers behind the providers crate's `webhook` feature are not used here, nor
// (with `whatsapp-web` alone, whose fake is a session, not a server) their server's.
#[cfg(network_channel)]
#[allow(unexpected_cfgs, unused_imports)]
#[path = "../../providers/tests/fakes/mod.rs"]
mod fakes;
#[cfg(feature = "telegram")]
#[path = "../benches/channel/harness.rs"]
mod harness;

// Test files.
mod channel_bench;
mod channel_crash;
// Three replicas on Postgres and on Redis (servers).
#[cfg(all(feature = "telegram", feature = "postgres", feature = "redis"))]
mod replicas_crash;
mod shop_bin;
mod shop_bot;
mod shop_flow;
