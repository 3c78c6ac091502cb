//! Retries, deferral, the dead-letter queue and parts: the pure decisions behind them.
//!
//! The journals call these functions; they hold no state and do no I/O, so their rules can be
//! tested alone and the runtime can reuse them (its inline retry loop uses [`InlineBudget`]).
//!
//! | failure | attempts left | decision |
//! | --- | --- | --- |
//! | final error (`retryable: false`, unsupported content, payload too large, …) | any | dead-letter now |
//! | retryable error | yes | retry after `backoff.delay(n)` |
//! | rate limited (`retry_after`) | yes | retry after `max(backoff.delay(n), retry_after)`, the latter rounded up to the next whole millisecond and one more (the clock reads whole milliseconds) |
//! | retryable or rate limited | no | dead-letter |
//!
//! Parts (`key`, `key#2`, …) follow the outbox's part gate: a part waits while its previous
//! part is not settled (waiting is not an attempt), goes once it was sent (or its fate is
//! unknown, or it was discarded), and dies with it when it was dead-lettered.

use std::time::Duration;

pub use crate::config::Backoff;

/// How a failed provider call is classified by the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retrying cannot help (unsupported content, payload too large, outside the session window,
    /// recipient unreachable, any error with `retryable: false`): dead-letter now.
    Final,
    /// A transient failure: retry with backoff.
    Retryable,
    /// The channel asked to wait: retry after at least `retry_after`.
    RateLimited {
        /// The channel's `retryAfterMs`.
        retry_after: Duration,
    },
}

/// A failed provider call as the outbox records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendFailure {
    /// The classification.
    pub class: ErrorClass,
    /// A description for the record's `last_error` and the dead-letter event.
    pub error: String,
}

impl SendFailure {
    /// A final failure.
    pub fn final_error(error: impl Into<String>) -> Self {
        SendFailure {
            class: ErrorClass::Final,
            error: error.into(),
        }
    }

    /// A retryable failure.
    pub fn retryable(error: impl Into<String>) -> Self {
        SendFailure {
            class: ErrorClass::Retryable,
            error: error.into(),
        }
    }

    /// A rate limit.
    pub fn rate_limited(error: impl Into<String>, retry_after: Duration) -> Self {
        SendFailure {
            class: ErrorClass::RateLimited { retry_after },
            error: error.into(),
        }
    }
}

/// What became of a failed attempt (inbound or outbound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Scheduled for another attempt at `at_ms`.
    Retrying {
        /// When the record becomes due again (Unix ms).
        at_ms: i64,
    },
    /// Moved to the dead-letter queue (a `Dead` event was emitted).
    DeadLettered,
}

/// Decides the fate of a failure after `attempts` charged attempts out of `max_attempts`.
pub fn decide(
    attempts: u32,
    max_attempts: u32,
    backoff: &Backoff,
    class: ErrorClass,
    now_ms: i64,
    unit: f64,
) -> FailOutcome {
    let retry_after = match class {
        ErrorClass::Final => return FailOutcome::DeadLettered,
        ErrorClass::Retryable => Duration::ZERO,
        ErrorClass::RateLimited { retry_after } => retry_after,
    };
    if attempts >= max_attempts {
        return FailOutcome::DeadLettered;
    }
    // A channel's `retry_after` is a floor, and `now_ms` is the clock's whole millisecond, up
    // to one behind the real moment: its due time rounds up (a fraction of a millisecond
    // included), one millisecond past `now_ms + retry_after`, so that no retry comes early.
    let floor_ms = if retry_after.is_zero() {
        0
    } else {
        i64::try_from(retry_after.as_nanos().div_ceil(1_000_000))
            .unwrap_or(i64::MAX)
            .saturating_add(1)
    };
    let delay_ms = duration_ms(backoff.delay(attempts, unit)).max(floor_ms);
    FailOutcome::Retrying {
        at_ms: now_ms.saturating_add(delay_ms),
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The inline retry budget of `ctx.reply` / `bot.send` (`outbox.inline_max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineBudget {
    deadline_ms: i64,
}

/// The next step of an inline send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineStep {
    /// Wait until `at_ms` and try again inline.
    WaitUntil {
        /// When to try again (Unix ms).
        at_ms: i64,
    },
    /// Stop waiting: reject with a deferral carrying the key; the sweeper keeps retrying.
    Defer,
}

impl InlineBudget {
    /// Starts the budget of a send made at `now_ms`.
    pub fn start(now_ms: i64, inline_max: Duration) -> Self {
        InlineBudget {
            deadline_ms: now_ms.saturating_add(duration_ms(inline_max)),
        }
    }

    /// Whether a retry due at `next_attempt_ms` still fits in the budget.
    pub fn next(&self, next_attempt_ms: i64) -> InlineStep {
        if next_attempt_ms <= self.deadline_ms {
            InlineStep::WaitUntil {
                at_ms: next_attempt_ms,
            }
        } else {
            InlineStep::Defer
        }
    }

    /// When the budget ends (Unix ms).
    pub fn deadline_ms(&self) -> i64 {
        self.deadline_ms
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Backoff, ErrorClass, FailOutcome, decide};

    fn due(class: ErrorClass) -> FailOutcome {
        let backoff = Backoff::fixed(Duration::from_millis(100), Duration::from_secs(1));
        decide(1, 5, &backoff, class, 1_000, 0.5)
    }

    /// A channel's `retry_after` is a floor: its due time is rounded up past the clock's
    /// millisecond, a fraction of a millisecond included; a plain retry keeps its backoff.
    #[test]
    fn a_retry_after_is_never_cut_short() {
        let limited = |ms: u64, extra_ns: u32| ErrorClass::RateLimited {
            retry_after: Duration::from_millis(ms) + Duration::from_nanos(u64::from(extra_ns)),
        };
        assert_eq!(due(limited(300, 0)), FailOutcome::Retrying { at_ms: 1_301 });
        assert_eq!(
            due(limited(299, 500_000)),
            FailOutcome::Retrying { at_ms: 1_301 }
        );
        let backoff_ms = match due(ErrorClass::Retryable) {
            FailOutcome::Retrying { at_ms } => at_ms - 1_000,
            FailOutcome::DeadLettered => panic!("retried"),
        };
        // A retry_after below the backoff: the backoff decides, as for a plain retry.
        assert_eq!(
            due(limited(1, 0)),
            FailOutcome::Retrying {
                at_ms: 1_000 + backoff_ms.max(2)
            }
        );
    }
}
