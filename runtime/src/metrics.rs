//! The bot's counters: a set of atomics and the [`BotMetrics`] snapshot `Bot::metrics()` returns.
//!
//! Counters only grow. They are cheap (relaxed atomics) and never block the pipelines.
//! [`BotMetrics::counters`] lists them with their names and descriptions, which is what
//! `/metrics` ([`crate::operating::prometheus`]) renders.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

macro_rules! metrics {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// A snapshot of the bot's counters.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
        pub struct BotMetrics {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl BotMetrics {
            /// Every counter as `(name, description, value)`, in declaration order: the
            /// field's name and the first line of its documentation.
            pub fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
                vec![$((stringify!($name), concat!($($doc),*).trim_ascii(), self.$name),)*]
            }
        }

        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $(pub(crate) $name: AtomicU64,)*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> BotMetrics {
                BotMetrics { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }
    };
}

metrics! {
    /// Events the provider delivered.
    received,
    /// Messages and interactions dispatched to the routes.
    dispatched,
    /// Dropped by the access lists.
    dropped_blocked,
    /// Dropped as duplicates.
    dropped_duplicate,
    /// Not dispatched because of group mode (still persisted).
    dropped_group,
    /// Not dispatched because the chat is handed off.
    dropped_handoff,
    /// Stopped by a `before` message hook.
    dropped_hook,
    /// Not dispatched because older than `inbox.max_age` at admission (`StalePolicy::Skip`).
    dropped_stale,
    /// Messages sent.
    sent,
    /// Sends that failed.
    send_failed,
    /// Sends aborted by a `before` send hook.
    send_skipped,
    /// Sends answered from the outbox (already sent).
    send_deduped,
    /// Edits made.
    edits,
    /// Inline retries of rate-limited replies.
    rate_limit_retries,
    /// Typing indicators and read marks skipped while the transport was not ready.
    presence_skipped,
    /// Typing indicators sent.
    typing_sent,
    /// Interactions acknowledged.
    interactions_acked,
    /// Handlers (and flows) that returned an error or panicked.
    handler_errors,
    /// Text messages split into several parts.
    split_messages,
    /// Provider events other than messages (calls, reactions, polls, …).
    provider_events,
    /// Flow steps run.
    flow_steps,
    /// Checkpoints written.
    checkpoints_written,
    /// Scheduled job occurrences run (successfully or not).
    jobs_run,
    /// Scheduled job occurrences whose task returned an error or panicked.
    jobs_failed,
    /// Scheduled job occurrences not run because of their missed-run policy.
    jobs_missed,
}

impl Counters {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
