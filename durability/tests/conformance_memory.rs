//! The conformance suite itself: it runs every case, a crash wrapper left unarmed passes it,
//! and it catches broken backends. Every backend runs it in `backends.rs`.
#![cfg(feature = "testing")]
#![allow(clippy::print_stdout, reason = "prints the conformance report")]

use std::sync::Arc;

use async_trait::async_trait;
use botmesh_durability::kv::{CasOutcome, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned};
use botmesh_durability::testing::conformance::{ConformanceReport, run_conformance};
use botmesh_durability::testing::crash::crashable;
use botmesh_durability::{DurableKv, MemoryKv};

fn failed(report: &ConformanceReport) -> Vec<&'static str> {
    report.failures().iter().map(|r| r.name).collect()
}

#[tokio::test]
async fn the_suite_runs_every_case() {
    let report =
        run_conformance(|| async { Arc::new(MemoryKv::new()) as Arc<dyn DurableKv> }).await;
    println!("{report}");
    assert!(report.results.len() >= 20, "the suite runs every case");
    report.assert_passed();
}

#[tokio::test]
async fn an_unarmed_crash_wrapper_is_transparent() {
    run_conformance(|| async {
        Arc::new(crashable(Arc::new(MemoryKv::new()))) as Arc<dyn DurableKv>
    })
    .await
    .assert_passed();
}

/// A broken backend: it keeps every scope in one namespace.
struct IgnoresScopes(MemoryKv);

/// Another: its ranges run past their end.
struct OpenEndedRanges(MemoryKv);

fn one() -> Scope {
    Scope::custom("everyone")
}

#[async_trait]
impl DurableKv for IgnoresScopes {
    async fn get(&self, _: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        self.0.get(&one(), key).await
    }
    async fn apply(&self, _: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        self.0.apply(&one(), op).await
    }
    async fn scan(&self, _: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        self.0.scan(&one(), query).await
    }
    async fn batch(&self, _: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        self.0.batch(&one(), ops).await
    }
}

#[async_trait]
impl DurableKv for OpenEndedRanges {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        self.0.get(scope, key).await
    }
    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        self.0.apply(scope, op).await
    }
    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        let to = "\u{10FFFF}";
        self.0.scan(scope, RangeQuery { to, ..query }).await
    }
}

#[tokio::test]
async fn the_suite_catches_a_backend_that_ignores_scopes() {
    let report = run_conformance(|| async {
        Arc::new(IgnoresScopes(MemoryKv::new())) as Arc<dyn DurableKv>
    })
    .await;
    println!("{report}");
    let failed = failed(&report);
    assert!(
        failed.contains(&"scopes_are_isolated"),
        "scoping not caught: {failed:?}"
    );
    assert!(
        failed.contains(&"explicit_keys_are_per_bot"),
        "per-bot keys not caught: {failed:?}"
    );
    let atomicity = report.results.iter().filter(|r| r.group == "atomicity");
    assert!(
        atomicity.clone().all(|r| r.outcome.is_ok()),
        "unrelated cases must still pass"
    );
}

#[tokio::test]
async fn the_suite_catches_ranges_that_ignore_their_end() {
    let report = run_conformance(|| async {
        Arc::new(OpenEndedRanges(MemoryKv::new())) as Arc<dyn DurableKv>
    })
    .await;
    let failed = failed(&report);
    assert!(
        failed.contains(&"range_is_half_open_and_limited"),
        "open-ended ranges not caught: {failed:?}"
    );
    assert!(
        report.to_string().contains("FAIL"),
        "the report names the failures"
    );
}
