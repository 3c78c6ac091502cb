//! Test helpers: [`MockProvider`], a provider that records what the bot does and lets a test
//! inject events and failures.
//!
//! Everything here is real runtime code driven from a test: the bot under test runs its whole
//! pipeline; only the channel is simulated.

mod mock;

pub use mock::{MockProvider, SentRecord};
