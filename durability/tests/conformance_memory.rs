//! The conformance suite itself: it runs every case, a crash wrapper left unarmed passes it,
//! and it catches broken backends. Every backend runs it in `backends.rs`.
#![cfg(feature = "testing")]
#![allow(clippy::print_stdout, reason = "prints the conformance report")]

use std::sync::Arc;

use async_trait::async_trait;
use botmesh_durability::kv::{CasOutcome, Entry, Index, KvError, KvOp, KvRecord, Scope, Versioned};
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
    async fn cas(
        &self,
        _: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        self.0.cas(&one(), key, expected, entry).await
    }
    async fn delete(&self, _: &Scope, key: &str, expected: u64) -> Result<CasOutcome, KvError> {
        self.0.delete(&one(), key, expected).await
    }
    async fn range(
        &self,
        _: &Scope,
        index: Index,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<KvRecord>, KvError> {
        self.0.range(&one(), index, from, to, limit).await
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
    async fn cas(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        self.0.cas(scope, key, expected, entry).await
    }
    async fn delete(&self, scope: &Scope, key: &str, expected: u64) -> Result<CasOutcome, KvError> {
        self.0.delete(scope, key, expected).await
    }
    async fn range(
        &self,
        scope: &Scope,
        index: Index,
        from: &str,
        _: &str,
        limit: usize,
    ) -> Result<Vec<KvRecord>, KvError> {
        self.0.range(scope, index, from, "\u{10FFFF}", limit).await
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
