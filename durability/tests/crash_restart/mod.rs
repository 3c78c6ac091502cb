//! The crash matrix on any backend that can be reopened, run by `backends.rs` on each: each
//! crashed incarnation's backend is abandoned ([`Restartable::kill`]) and the next
//! incarnation runs on the backend reopened (from disk, or a new connection to the server),
//! so recovery sees only what was made durable.
//!
//! | test | what it runs |
//! | --- | --- |
//! | [`script_passes_every_crash_point`] | the script without a crash, on a reopened backend afterwards |
//! | [`crash_matrix`] | every write point × before/after × both ambiguity policies |
//! | [`seeded_random_crash_points`] | seeded random points, with a second crash during recovery |

use std::future::Future;
use std::sync::Arc;

use botmesh_durability::kv::WritePhase;
use botmesh_durability::testing::crash::{CRASH_POINTS, CrashSite, crashable_durability};
use botmesh_durability::{DurableKv, OnAmbiguous};

use crate::crash_script::{Harness, Observed, Switch, check_guarantees};

/// A backend under a crash test: opened from its files, killed, opened again.
pub(crate) trait Restartable {
    /// The backend.
    type Kv: DurableKv;
    /// Opens the backend from its files (empty on the first call).
    fn open(&self) -> impl Future<Output = Arc<Self::Kv>>;
    /// The process dies: the backend is abandoned without a clean close (by default dropped).
    fn kill(&self, kv: Arc<Self::Kv>) -> impl Future<Output = ()> {
        async move { drop(kv) }
    }
    /// A clean shutdown at the end of a test (by default as a kill: a backend whose close is
    /// no cleaner than that).
    fn close(&self, kv: Arc<Self::Kv>) -> impl Future<Output = ()> {
        self.kill(kv)
    }
}

/// Runs the script armed by `arm`, kills the process, recovers on the reopened backend.
async fn run<R: Restartable>(
    backend: &R,
    policy: OnAmbiguous,
    arm: impl FnOnce(&Switch<R::Kv>),
) -> (Option<CrashSite>, Observed) {
    let kv = backend.open().await;
    let h = Harness::on(policy, Arc::clone(&kv)).await;
    let (switch, live) = crashable_durability(&h.base).expect("crashable durability");
    arm(&switch);
    let outcome = h.script(&live).await;
    let crashed = switch.crashed();
    match (&outcome, crashed) {
        (Err(_), Some(_)) | (Ok(()), None) => {}
        (Err(e), None) => panic!("the script failed without a crash: {e}"),
        (Ok(()), Some(site)) => panic!("crashed at {site} but the script went on"),
    }
    drop(live);
    backend.kill(kv).await;
    let reopened = backend.open().await;
    let restarted = h.incarnation_on(Arc::clone(&reopened));
    h.recover(&restarted).await.expect("recovery");
    let observed = h.observe(&restarted).await;
    backend.close(reopened).await;
    (crashed, observed)
}

/// The script passes every point, and a reopened backend sees its end state.
pub(crate) async fn script_passes_every_crash_point<R: Restartable>(make: impl AsyncFn() -> R) {
    for policy in [OnAmbiguous::Skip, OnAmbiguous::Resend] {
        let (crashed, o) = run(&make().await, policy, |_| {}).await;
        assert_eq!(crashed, None);
        assert!(o.m0_purged, "the old record must be purged");
        check_guarantees(policy, "no crash", &o, false);
    }
    // And every point is passed (the memory matrix checks the same script in detail).
    let backend = make().await;
    let kv = backend.open().await;
    let h = Harness::on(OnAmbiguous::Skip, Arc::clone(&kv)).await;
    let (switch, live) = crashable_durability(&h.base).expect("crashable durability");
    h.script(&live).await.expect("the script runs");
    for point in CRASH_POINTS {
        for phase in [WritePhase::Before, WritePhase::After] {
            assert!(
                switch.passed().contains(&CrashSite { point, phase }),
                "the script never passes {phase} {point}"
            );
        }
    }
    backend.close(kv).await;
}

/// Every point × phase × policy; returns the printed table.
pub(crate) async fn crash_matrix<R: Restartable>(make: impl AsyncFn() -> R) -> String {
    let mut table = vec![format!(
        "| {:<22} | {:<6} | {:<6} | {:<10} | {:<34} | {:<10} | {:<13} | {:<9} |",
        "point",
        "phase",
        "policy",
        "m1",
        "replies (state×provider calls)",
        "m2",
        "notice:1, #2",
        "recovery events"
    )];
    for point in CRASH_POINTS {
        for phase in [WritePhase::Before, WritePhase::After] {
            for policy in [OnAmbiguous::Skip, OnAmbiguous::Resend] {
                let (crashed, o) = run(&make().await, policy, |s| match phase {
                    WritePhase::Before => s.crash_before(point),
                    WritePhase::After => s.crash_after(point),
                })
                .await;
                let label = format!("{phase} {point} ({policy:?})");
                assert_eq!(
                    crashed,
                    Some(CrashSite { point, phase }),
                    "{label}: the crash point was not reached"
                );
                check_guarantees(policy, &label, &o, false);
                table.push(o.row(&point.to_string(), &phase.to_string(), policy));
            }
        }
    }
    table.join("\n")
}

/// Seeded random points, with a second crash during the first recovery; each incarnation
/// reopens the backend. Returns one line per run.
pub(crate) async fn seeded_random_crash_points<R: Restartable>(
    make: impl AsyncFn() -> R,
    seeds: u64,
) -> String {
    let mut rows = Vec::new();
    for seed in 0..seeds {
        for policy in [OnAmbiguous::Skip, OnAmbiguous::Resend] {
            let backend = make().await;
            let kv = backend.open().await;
            let h = Harness::on(policy, Arc::clone(&kv)).await;
            let (switch, live) = crashable_durability(&h.base).expect("crashable durability");
            switch.crash_randomly(seed, 0.03);
            let first = h.script(&live).await;
            assert_eq!(
                first.is_err(),
                switch.is_crashed(),
                "seed {seed}: errors only come from the crash"
            );
            drop(live);
            backend.kill(kv).await;

            let kv2 = backend.open().await;
            let base2 = h.incarnation_on(Arc::clone(&kv2));
            let (switch2, second) = crashable_durability(&base2).expect("crashable durability");
            switch2.crash_randomly(seed.wrapping_mul(7919).wrapping_add(1), 0.03);
            let recovered = h.recover(&second).await;
            assert_eq!(
                recovered.is_err(),
                switch2.is_crashed(),
                "seed {seed}: recovery errors only come from the crash"
            );
            drop((second, base2));
            backend.kill(kv2).await;

            let kv3 = backend.open().await;
            let third = h.incarnation_on(Arc::clone(&kv3));
            h.recover(&third).await.expect("final recovery");
            let o = h.observe(&third).await;
            let label = format!("seed {seed} ({policy:?})");
            check_guarantees(
                policy,
                &label,
                &o,
                switch.is_crashed() && switch2.is_crashed(),
            );
            backend.close(kv3).await;
            rows.push(format!(
                "seed {seed:>2} {policy:?}: first crash {}, recovery crash {}",
                switch.crashed().map_or("none".into(), |s| s.to_string()),
                switch2.crashed().map_or("none".into(), |s| s.to_string()),
            ));
        }
    }
    rows.join("\n")
}
