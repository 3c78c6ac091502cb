//! The crash matrix: every journal write point × before/after × both ambiguity policies, plus
//! seeded random points (with a second crash during recovery).
//!
//! A scripted "process" runs a day of work on a crashable backend: an old record to purge, an
//! inbound whose handler sends a two-part reply (the first part fails once) and a reply whose
//! provider call times out, an inbound that fails before its handler, is released, abandoned,
//! dead-lettered and replayed, a discarded inbound, a send dead-lettered with its part and
//! retried by an operator, a discarded send, and one poison record in each journal. It dies
//! at the armed point; a new incarnation with the same instance id then recovers (the channel
//! redelivers the first message, the sweeper runs until idle). The table printed by
//! `crash_matrix` shows what each crash leaves; the assertions are the guide's guarantees.
#![cfg(feature = "testing")]
#![allow(clippy::print_stdout, reason = "the crash matrix prints its table")]

mod crash_script;

use botmesh_durability::OnAmbiguous;
use botmesh_durability::kv::WritePhase;
use botmesh_durability::testing::crash::{CRASH_POINTS, CrashSite, crashable_durability};
use crash_script::{Harness, Observed, Switch, check_guarantees};

/// Runs the script on a crashable incarnation armed by `arm`, then recovers.
async fn run(policy: OnAmbiguous, arm: impl FnOnce(&Switch)) -> (Option<CrashSite>, Observed) {
    let h = Harness::new(policy).await;
    let (switch, live) = crashable_durability(&h.base).expect("crashable durability");
    arm(&switch);
    let outcome = h.script(&live).await;
    let crashed = switch.crashed();
    match (&outcome, crashed) {
        (Err(_), Some(_)) | (Ok(()), None) => {}
        (Err(e), None) => panic!("the script failed without a crash: {e}"),
        (Ok(()), Some(site)) => panic!("crashed at {site} but the script went on"),
    }
    let restarted = h.base.reopen().expect("reopen");
    h.recover(&restarted).await.expect("recovery");
    (crashed, h.observe(&restarted).await)
}

#[tokio::test]
async fn script_passes_every_crash_point() {
    for policy in [OnAmbiguous::Skip, OnAmbiguous::Resend] {
        let h = Harness::new(policy).await;
        let (switch, live) = crashable_durability(&h.base).expect("crashable durability");
        h.script(&live)
            .await
            .expect("the script runs without a crash");
        let passed = switch.passed();
        for point in CRASH_POINTS {
            for phase in [WritePhase::Before, WritePhase::After] {
                assert!(
                    passed.contains(&CrashSite { point, phase }),
                    "the script never passes {phase} {point}"
                );
            }
        }
        let o = h.observe(&live).await;
        assert!(o.m0_purged, "the old record must be purged");
        check_guarantees(policy, "no crash", &o, false);
    }
}

#[tokio::test]
async fn crash_matrix() {
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
                let (crashed, o) = run(policy, |s| match phase {
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
    println!("{}", table.join("\n"));
}

#[tokio::test]
async fn seeded_random_crash_points() {
    let mut rows = Vec::new();
    for seed in 0..24u64 {
        for policy in [OnAmbiguous::Skip, OnAmbiguous::Resend] {
            let h = Harness::new(policy).await;
            let (switch, live) = crashable_durability(&h.base).expect("crashable durability");
            switch.crash_randomly(seed, 0.03);
            let first = h.script(&live).await;
            assert_eq!(
                first.is_err(),
                switch.is_crashed(),
                "seed {seed}: errors only come from the crash"
            );
            // The first recovery may crash too (same seed, another stream of draws).
            let (switch2, second) = crashable_durability(&h.base).expect("crashable durability");
            switch2.crash_randomly(seed.wrapping_mul(7919).wrapping_add(1), 0.03);
            let recovered = h.recover(&second).await;
            assert_eq!(
                recovered.is_err(),
                switch2.is_crashed(),
                "seed {seed}: recovery errors only come from the crash"
            );
            let third = h.base.reopen().expect("reopen");
            h.recover(&third).await.expect("final recovery");
            let o = h.observe(&third).await;
            let label = format!("seed {seed} ({policy:?})");
            check_guarantees(
                policy,
                &label,
                &o,
                switch.is_crashed() && switch2.is_crashed(),
            );
            rows.push(format!(
                "seed {seed:>2} {policy:?}: first crash {}, recovery crash {}",
                switch.crashed().map_or("none".into(), |s| s.to_string()),
                switch2.crashed().map_or("none".into(), |s| s.to_string()),
            ));
        }
    }
    println!("{}", rows.join("\n"));
}
