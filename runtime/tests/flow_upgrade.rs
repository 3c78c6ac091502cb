//! The upgrade test of `botmesh::testing::upgrade`: the checkpoints and keys the first build
//! of a flow recorded (committed in `tests/upgrade/order.v1.json`) are loaded into later
//! builds; a compatible build passes, one that would restart conversations fails with a
//! readable report.

use botmesh::prelude::*;
use botmesh::testing::upgrade;

const RECORDING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upgrade/order.v1.json");

/// The conversations the recording covers.
const SCRIPTS: &[&[&str]] = &[&["/order", "tea", "2"], &["/order", "coffee", "many", "3"]];

// The build deployed when the recording was made.
use crate::common::order_v1 as v1;

flow_builds! {
    /// A compatible build: a send and a question added after the ones in flight.
    mod v2: #[flow(start = command("order"))] fn order(cx) {
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        let qty: u32 = cx.ask("How many?").parse::<u32>("A number.").await?;
        cx.send(format!("{qty} x {item}")).await?;
        let _note: String = cx.ask("Any note?").await?.text().to_owned();
        cx.send("Thanks!").await?;
        Ok(())
    }

    /// An incompatible build: "How many?" reworded, and the confirmation changed.
    mod v3: #[flow(start = command("order"))] fn order(cx) {
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        let qty: u32 = cx.ask("How many cups?").parse::<u32>("A number.").await?;
        cx.send(format!("{qty} × {item}")).await?;
        Ok(())
    }
}

fn build(flow: fn(&Bot)) -> impl Fn(BotBuilder) -> Result<Bot, BotError> + Clone + Send + Sync {
    move |b| {
        let bot = b.build()?;
        flow(&bot);
        Ok(bot)
    }
}

#[tokio::test]
async fn the_recorded_build_checks_against_itself() {
    upgrade::assert_upgrade(
        RECORDING,
        build(|b| {
            b.flow(v1::order);
        }),
        SCRIPTS,
    )
    .await;
}

/// The committed recording checked against the build whose flow `flow` registers.
async fn check_recording(flow: fn(&Bot)) -> Result<(), upgrade::UpgradeFailure> {
    let recorded = std::fs::read_to_string(RECORDING).expect("the committed recording");
    upgrade::check(build(flow), &recorded).await
}

#[tokio::test]
async fn a_compatible_build_passes() {
    let checked = check_recording(|b| {
        b.flow(v2::order);
    })
    .await;
    assert!(
        checked.is_ok(),
        "{}",
        checked.err().map(|e| e.report).unwrap_or_default()
    );
}

#[tokio::test]
async fn a_build_that_would_restart_or_rekey_fails_with_a_report() {
    let report = check_recording(|b| {
        b.flow(v3::order);
    })
    .await
    .expect_err("v3 restarts the conversations waiting at How many?")
    .report;
    assert!(
        report.contains("restarted: the new build has no ask `ask-ceaffdef`"),
        "{report}"
    );
    insta::assert_snapshot!(report);
}
