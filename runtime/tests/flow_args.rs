//! A flow with parameters started by a trigger: `args = build` makes them from the starting
//! message, and they are kept in the checkpoint across a restart.

use botmesh::prelude::*;
use botmesh::testing::Transcript;

use crate::common::fresh;

/// `/quiz 2` asks two questions (three without a number).
fn rounds(ctx: &Ctx) -> u32 {
    ctx.text()
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// Asks `rounds` questions, then says how many answers were "yes".
#[flow(start = command("quiz"), args = rounds)]
#[persistent]
async fn quiz(cx: &mut FlowCx, rounds: u32) -> FlowResult {
    let mut yes: u32 = 0;
    let mut asked: u32 = 0;
    while asked < rounds {
        asked += 1;
        let a = cx
            .ask(format!("Question {asked} of {rounds}?"))
            .id("q")
            .await?;
        if a.text() == "yes" {
            yes += 1;
        }
    }
    cx.send(format!("{yes} of {rounds}")).await?;
    Ok(())
}

#[tokio::test]
async fn the_trigger_builds_the_arguments_and_the_checkpoint_keeps_them() {
    let mut t = Transcript::of(|bot| {
        bot.flow(quiz);
    })
    .await
    .expect("bot starts");
    t.says("ann", "/quiz 2").await;
    let cp = t
        .checkpoint("ann")
        .await
        .expect("store")
        .expect("a checkpoint");
    assert!(
        cp.state.to_string().contains(r#""rounds":2"#),
        "{}",
        cp.state
    );
    t.restart().await.expect("restart");
    t.says("ann", "yes").await;
    t.restart().await.expect("restart");
    t.says("ann", "no").await;
    let lines = t.lines();
    assert!(
        lines.iter().any(|l| l.ends_with("Question 2 of 2?")),
        "{}",
        t.render()
    );
    assert!(
        lines.iter().any(|l| l.ends_with("1 of 2")),
        "{}",
        t.render()
    );
}

flow_builds! {
    /// The quiz of another build: its question is now `question`, so a checkpoint waiting at `q`
    /// meets the version policy (restart).
    mod reworded: #[flow(start = command("quiz"), args = super::rounds)] fn quiz(cx, rounds: u32) {
        let mut yes: u32 = 0;
        let all: Vec<u32> = (1..=rounds).collect();
        for asked in all {
            let a = cx
                .ask(format!("Round {asked} of {rounds}: yes or no?"))
                .id("question")
                .await?;
            if a.text() == "yes" {
                yes += 1;
            }
        }
        cx.send(format!("{yes} yes of {rounds}")).await?;
        Ok(())
    }
}

#[tokio::test]
async fn a_restarted_flow_starts_again_with_the_arguments_it_was_started_with() {
    let store: std::sync::Arc<dyn botmesh::durability::Store> =
        std::sync::Arc::new(botmesh::durability::MemoryStore::new());
    let mut old = fresh::flow_alone(store.clone(), quiz).await;
    old.says_id("ann", "m1", "/quiz 2").await;
    old.says_id("ann", "m2", "yes").await;
    old.bot().stop().await.expect("stop");

    let mut new = fresh::flow_alone(store, reworded::quiz).await;
    new.says_id("ann", "m3", "no").await;
    new.says_id("ann", "m4", "yes").await;
    new.says_id("ann", "m5", "yes").await;
    let after = new.render();
    assert!(after.contains("version_mismatch:restarted"), "{after}");
    assert!(!after.contains("abandoned"), "{after}");
    // Two rounds, as `/quiz 2` said (not the three of a quiz without a number), and the `no`
    // that restarted it is not an answer.
    assert!(after.contains("Round 1 of 2: yes or no?"), "{after}");
    assert!(after.contains("2 yes of 2"), "{after}");
    insta::assert_snapshot!(format!("{}· new code\n{after}", old.render()));
}
