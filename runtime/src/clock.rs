//! Time as the bot sees it: a [`Clock`] that tests can replace with a [`ManualClock`] that jumps.
//!
//! Only wall-clock readings go through here (timestamps, idle timeouts, retention); sleeping
//! and timers still use tokio's time, which tests pause with `tokio::time::pause`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The current Unix time in milliseconds from the system clock.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// The current Unix time in milliseconds.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }
}

/// A clock that only moves when told to; clones share the same time.
///
/// ```
/// use botmesh::clock::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(start_ms)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
