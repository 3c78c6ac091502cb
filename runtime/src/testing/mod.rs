//! Test helpers: [`MockProvider`], a provider that records what the bot does and lets a test
//! inject events and failures, [`Transcript`], scripted users and readable transcripts, and
//! [`upgrade`], the test that a deploy carries the conversations in flight on.
//!
//! Everything here is real runtime code driven from a test: the bot under test runs its whole
//! pipeline; only the channel is simulated.

mod mock;
mod transcript;
pub mod upgrade;

pub use mock::{MockProvider, SentRecord};
pub use transcript::Transcript;

#[cfg(feature = "testing")]
mod crashable;
#[cfg(feature = "testing")]
pub use botmesh_durability::testing::crash::{CRASH_POINTS, Crashable, crashable};
#[cfg(feature = "testing")]
pub use crashable::CrashableProvider;
