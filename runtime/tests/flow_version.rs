//! Version policies, one test per outcome: a checkpoint written by one build of a flow
//! (waiting at "How many?" with `item = tea`) meets another build, and the user's pending
//! answer `2` arrives. It resumes at the same ask when the new code still has it; otherwise it
//! is restarted (with a notice), abandoned or migrated, each with its event, and the `2`
//! never answers a different question.

use std::sync::Arc;

use botmesh::durability::{MemoryStore, Store};
use botmesh::testing::Transcript;

use crate::common::fresh;
// The build that wrote the checkpoint.
use crate::common::order_v1 as v1;

flow_builds! {
    /// Sends and an ask added around "How many?": it still waits there.
    mod added_around: #[flow(start = command("order"))] fn order(cx) {
        cx.send("Welcome back!").await?;
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        let qty: u32 = cx.ask("How many?").parse::<u32>("A number.").await?;
        let wrap: bool = cx.ask("Gift wrap?").await?.is_yes();
        cx.send(format!("{qty} x {item}, wrapped: {wrap}")).await?;
        Ok(())
    }
}

macro_rules! reworded {
    ($m:ident, $($policy:tt)*) => {
        flow_builds! {
            /// "How many?" is now "How many cups?": the ask the checkpoint waits at is gone.
            mod $m: #[flow(start = command("order"), on_version_mismatch = $($policy)*)]
            fn order(cx) {
                let item: String = cx.ask("What would you like?").await?.text().to_owned();
                let qty: u32 = cx
                    .ask("How many cups?")
                    .id("qty")
                    .parse::<u32>("A number.")
                    .await?;
                cx.send(format!("{qty} x {item}")).await?;
                Ok(())
            }
        }
    };
}

reworded!(restarting, restart);
reworded!(restarting_quietly, restart(notice = none));
reworded!(
    restarting_with_a_notice,
    restart(notice = "We changed the menu: from the top.")
);
reworded!(abandoning, abandon);
reworded!(migrating, migrate(super::to_qty));

flow_builds! {
    /// "How many?" now parses its answer as a `u8`: an answer is read differently.
    mod parses_differently: #[flow(start = command("order"))] fn order(cx) {
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        let qty: u8 = cx.ask("How many?").parse::<u8>("A number.").await?;
        cx.send(format!("{qty} x {item}")).await?;
        Ok(())
    }

    /// "How many?" now also keeps `shop`, which the old checkpoint does not hold.
    mod keeps_more: #[flow(start = command("order"))] fn order(cx) {
        let shop: String = "main".to_owned();
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        let qty: u32 = cx.ask("How many?").parse::<u32>("A number.").await?;
        cx.send(format!("{qty} x {item} from {shop}")).await?;
        Ok(())
    }
}

/// The migration: the old "How many?" (its identity, stable across builds) is the new `qty`.
fn to_qty(old: serde_json::Value, _old_hash: u64) -> Result<serde_json::Value, String> {
    let (name, fields) = old
        .as_object()
        .and_then(|m| m.iter().next())
        .ok_or("a state is a one-key object")?;
    match name.as_str() {
        "ask-ceaffdef" => Ok(serde_json::json!({ "qty": fields })),
        other => Err(format!("no migration from `{other}`")),
    }
}

async fn written_by_v1(store: Arc<dyn Store>) -> String {
    let mut t = fresh::flow_alone(store, v1::order).await;
    t.says_all("ann", &["/order", "tea"]).await;
    t.bot().stop().await.expect("stop");
    t.render()
}

/// The v1 transcript, then the new build's after the user answers `2` and then `5`.
async fn read_by<F, T>(flow: F) -> (String, String)
where
    F: Fn() -> T + Copy + Send + Sync + 'static,
    T: botmesh::flow::Flow,
{
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let before = written_by_v1(store.clone()).await;
    let mut t = Transcript::with_store(store.clone(), move |b| fresh::with_flow(b, flow))
        .await
        .expect("bot starts");
    t.bot().idle().await;
    t.says_id("ann", "m3", "2").await;
    t.says_id("ann", "m4", "5").await;
    (before, t.render())
}

/// What the bot said after the user's `2`, up to the user's next message.
fn reply_to_2(after: &str) -> Vec<&str> {
    after
        .lines()
        .skip_while(|l| *l != "ann: 2")
        .skip(1)
        .take_while(|l| !l.starts_with("ann:"))
        .filter(|l| l.starts_with("bot →"))
        .collect()
}

fn snapshot(before: &str, after: &str) -> String {
    format!("{before}· new code\n{after}")
}

/// [`read_by`], checked: the new build logged `version_mismatch:{outcome}`, and the first thing
/// it said after the `2` ends with `first`.
async fn read_with<F, T>(flow: F, outcome: &str, first: &str) -> (String, String)
where
    F: Fn() -> T + Copy + Send + Sync + 'static,
    T: botmesh::flow::Flow,
{
    let (before, after) = read_by(flow).await;
    assert!(
        after.contains(&format!("version_mismatch:{outcome}")),
        "not {outcome}: {after}"
    );
    let said = reply_to_2(&after);
    assert!(
        said.first().is_some_and(|l| l.ends_with(first)),
        "the reply to 2 is not {first:?}: {after}"
    );
    (before, after)
}

#[tokio::test]
async fn the_same_ask_resumes_where_it_waited() {
    // `2` answered How many?
    let (before, after) = read_with(added_around::order, "resumed", "Gift wrap?").await;
    assert!(after.contains("2 x tea, wrapped: false"), "{after}");
    insta::assert_snapshot!(snapshot(&before, &after));
}

#[tokio::test]
async fn a_gone_ask_restarts_with_a_notice_and_the_answer_is_not_taken() {
    let notice = botmesh::flow::DEFAULT_RESTART_NOTICE;
    let (before, after) = read_with(restarting::order, "restarted", notice).await;
    assert!(
        reply_to_2(&after)[1].ends_with("What would you like?"),
        "{after}"
    );
    // `2` was not the item: the next answer is.
    assert!(after.contains("How many cups?"), "{after}");
    assert!(!after.contains("x 2"), "{after}");
    insta::assert_snapshot!(snapshot(&before, &after));
}

#[tokio::test]
async fn the_notice_is_the_flows_own_or_none() {
    let notice = "We changed the menu: from the top.";
    read_with(restarting_with_a_notice::order, "restarted", notice).await;
    let first = "What would you like?";
    let (_, after) = read_with(restarting_quietly::order, "restarted", first).await;
    assert!(!after.contains("x 2"), "{after}");
}

/// Checks that the build's transcript after v1's shows a restart (and no resume), the `2`
/// answered by the first question again, and never read as an answer (`unsaid`).
fn assert_restarted_without_reading_2(after: &str, unsaid: &str) {
    assert!(after.contains("version_mismatch:restarted"), "{after}");
    assert!(!after.contains("version_mismatch:resumed"), "{after}");
    assert!(
        reply_to_2(after)[1].ends_with("What would you like?"),
        "{after}"
    );
    assert!(!after.contains(unsaid), "{after}");
}

#[tokio::test]
async fn an_answer_read_differently_restarts() {
    let (_, after) = read_by(parses_differently::order).await;
    assert_restarted_without_reading_2(&after, "2 x");
}

#[tokio::test]
async fn locals_that_do_not_decode_restart() {
    let (_, after) = read_by(keeps_more::order).await;
    assert_restarted_without_reading_2(&after, "from main");
}

#[tokio::test]
async fn abandon_policy() {
    let (before, after) = read_by(abandoning::order).await;
    assert!(after.contains("version_mismatch:abandoned"), "{after}");
    assert_eq!(
        reply_to_2(&after),
        ["bot → ann [key=ann/m3:1]: (a fresh message: 2)"],
        "{after}"
    );
    insta::assert_snapshot!(snapshot(&before, &after));
}

#[tokio::test]
async fn migrate_policy_maps_by_ask_identity() {
    let (before, after) = read_with(migrating::order, "migrated", "2 x tea").await;
    insta::assert_snapshot!(snapshot(&before, &after));
}
