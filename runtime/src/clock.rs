//! Time as the bot sees it: a [`Clock`] that tests replace with a [`ManualClock`] that jumps,
//! or a [`TokioClock`] that follows tokio's paused clock.
//!
//! The clock types are the durability crate's, so the bot, its flows and its journals read
//! one clock. Only wall-clock readings go through here (timestamps, idle timeouts, leases,
//! retention); sleeping still uses tokio's time, which tests pause with `tokio::time::pause`.
//!
//! ```
//! use botmesh::clock::{Clock, ManualClock};
//! use std::time::Duration;
//! let clock = ManualClock::new(1_000);
//! clock.advance(Duration::from_secs(2));
//! assert_eq!(clock.now_ms(), 3_000);
//! ```

pub use botmesh_durability::clock::{Clock, ManualClock, SystemClock, TokioClock};

/// The current Unix time in milliseconds from the system clock.
pub fn now_ms() -> i64 {
    SystemClock.now_ms()
}
