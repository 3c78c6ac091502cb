//! The conformance suite every [`DurableKv`] backend passes: memory now, file, SQLite,
//! Postgres, Redis and any user backend later, with one call.
//!
//! ```
//! # use std::sync::Arc;
//! # use botmesh_durability::{DurableKv, MemoryKv};
//! # use botmesh_durability::testing::conformance::run_conformance;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let report = run_conformance(|| async { Arc::new(MemoryKv::new()) as Arc<dyn DurableKv> }).await;
//! report.assert_passed();
//! # }
//! ```
//!
//! The factory is called once per case and must return an empty backend (a fresh file, a
//! fresh table prefix, a fresh Redis prefix). Cases are grouped by concern:
//!
//! | group | what it proves |
//! | --- | --- |
//! | `atomicity` | a write changes value and both indexes together or not at all; batches report per op; concurrent creates have one winner |
//! | `cas` | versions change on every write, are never reused after a delete, conflicts change nothing; a guarded create writes only while its range lists nothing (the batch's earlier ops seen) |
//! | `indexes` | ranges are half-open, bytewise sorted by (value, key), limited, and skip entries without a value |
//! | `leases` | journals on this backend: expired leases are reclaimed under a new token, a stale holder cannot complete, a restart reclaims its own leases at once, two claimers never both win |
//! | `poison` | opaque bytes round-trip; undecodable journal records are quarantined and reported, never crash a sweep |
//! | `scoping` | two bots on one backend see only their own entries and keys |
//! | `retention` | done/sent records are purged after retention, nothing else is |
//! | `coordination` | chat turns are exclusive, taken in ingress order and fenced once lost; a dead waiter blocks nobody; one leader, taken over within the lease |
//!
//! Each case returns an error message instead of panicking, so one report lists every
//! failure. This module does not start servers or create temp files: the factory does.

mod coordination_cases;
mod index_cases;
mod journal_cases;
mod kv_cases;
mod lease_cases;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::kv::DurableKv;

/// The result of one conformance case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    /// The concern (`atomicity`, `cas`, …).
    pub group: &'static str,
    /// The case.
    pub name: &'static str,
    /// `Err` with what went wrong.
    pub outcome: Result<(), String>,
}

/// Every case's result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConformanceReport {
    /// In the order they ran.
    pub results: Vec<CaseResult>,
}

impl ConformanceReport {
    /// The failed cases.
    pub fn failures(&self) -> Vec<&CaseResult> {
        self.results.iter().filter(|r| r.outcome.is_err()).collect()
    }

    /// Whether every case passed.
    pub fn passed(&self) -> bool {
        self.failures().is_empty()
    }

    /// Panics with the list of failures, if any (for a `#[test]`).
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.passed() {
            panic!("durability conformance failed:\n{self}");
        }
    }
}

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.results {
            match &r.outcome {
                Ok(()) => writeln!(f, "ok    {:<10} {}", r.group, r.name)?,
                Err(e) => writeln!(f, "FAIL  {:<10} {}: {e}", r.group, r.name)?,
            }
        }
        let failed = self.failures().len();
        write!(
            f,
            "{} passed, {} failed",
            self.results.len() - failed,
            failed
        )
    }
}

/// Runs every case against fresh backends from `factory`.
pub async fn run_conformance<F, Fut>(factory: F) -> ConformanceReport
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn DurableKv>>,
{
    let mut report = ConformanceReport::default();
    macro_rules! case {
        ($group:literal, $module:ident :: $name:ident) => {{
            let kv = factory().await;
            let outcome = $module::$name(kv).await;
            report.results.push(CaseResult {
                group: $group,
                name: stringify!($name),
                outcome,
            });
        }};
    }
    case!("atomicity", kv_cases::failed_cas_changes_nothing);
    case!("atomicity", kv_cases::write_moves_indexes_together);
    case!("atomicity", kv_cases::batch_reports_each_op);
    case!("atomicity", kv_cases::concurrent_creates_have_one_winner);
    case!("cas", kv_cases::create_only_if_absent);
    case!("cas", kv_cases::guarded_create_checks_its_range);
    case!("cas", kv_cases::guarded_create_sees_its_batch);
    case!("cas", kv_cases::replace_needs_current_version);
    case!("cas", kv_cases::delete_needs_current_version);
    case!("cas", kv_cases::versions_never_reused);
    case!("indexes", index_cases::range_sorted_by_value_then_key);
    case!("indexes", index_cases::range_is_half_open_and_limited);
    case!("indexes", index_cases::range_is_bytewise);
    case!("indexes", index_cases::entries_without_index_not_listed);
    case!("leases", lease_cases::expired_inbox_lease_is_fenced);
    case!("leases", lease_cases::stale_sender_cannot_mark_sent);
    case!("leases", lease_cases::restart_reclaims_own_leases_at_once);
    case!("leases", lease_cases::concurrent_claims_one_winner);
    case!("poison", kv_cases::values_are_opaque_bytes);
    case!("poison", journal_cases::undecodable_inbound_is_quarantined);
    case!("poison", journal_cases::undecodable_send_is_quarantined);
    case!("scoping", kv_cases::scopes_are_isolated);
    case!("scoping", journal_cases::explicit_keys_are_per_bot);
    case!("retention", journal_cases::purge_after_retention);
    case!(
        "indexes",
        journal_cases::open_for_chat_lists_a_chats_open_inbound_in_arrival_order
    );
    case!(
        "coordination",
        coordination_cases::a_chat_turn_is_exclusive_and_a_lost_turn_is_fenced
    );
    case!(
        "coordination",
        coordination_cases::a_check_needs_the_safety_margin
    );
    case!(
        "coordination",
        coordination_cases::turns_are_taken_in_ingress_order
    );
    case!(
        "coordination",
        coordination_cases::a_dead_waiter_blocks_nobody
    );
    case!(
        "coordination",
        coordination_cases::a_restart_takes_its_abandoned_turn_at_once
    );
    case!(
        "coordination",
        coordination_cases::concurrent_turn_takers_have_one_winner
    );
    case!(
        "coordination",
        coordination_cases::one_leader_and_a_takeover_within_the_lease
    );
    case!(
        "coordination",
        coordination_cases::idle_records_are_purged_and_tokens_keep_growing
    );
    report
}

/// Turns any error into the case's message, with context.
pub(crate) trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T, E: fmt::Display> Ctx<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

/// Fails the case with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}
pub(crate) use ensure;

/// Fails the case unless `items` has `n` items; `what` says what they are.
pub(crate) fn ensure_count<T>(items: &[T], n: usize, what: &str) -> Result<(), String> {
    ensure!(
        items.len() == n,
        "{what}: expected {n}, got {}",
        items.len()
    );
    Ok(())
}
