//! Time as the journals see it: Unix milliseconds from a [`Clock`].
//!
//! Every due time, lease expiry and retention cutoff is computed from the clock given to
//! [`KvDurability`](crate::KvDurability), never from the backend: the [`DurableKv`](crate::DurableKv)
//! SPI has no notion of time. Tests use [`ManualClock`] to move time without sleeping, or
//! [`TokioClock`] to have it follow tokio's paused clock. The journals never sleep themselves;
//! waiting is the runtime's job.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time in Unix milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Now, in Unix milliseconds.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now_ms()).finish()
    }
}

impl ManualClock {
    /// A clock standing at `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start_ms)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// A wall clock that follows tokio's clock from `start_ms`: under a paused tokio clock
/// (`#[tokio::test(start_paused = true)]`) it moves with virtual time, so lease expiries and
/// retry due times come as the test's timers advance, without waiting in real time.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start_ms: i64,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock standing at `start_ms` now, moving as tokio's clock does.
    pub fn new(start_ms: i64) -> Self {
        TokioClock {
            start_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.start_ms.saturating_add(elapsed)
    }
}

impl<F> Clock for F
where
    F: Fn() -> i64 + Send + Sync + 'static,
{
    fn now_ms(&self) -> i64 {
        self()
    }
}
