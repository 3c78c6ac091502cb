//! A flow with parameters started by a trigger: `args = build` makes them from the starting
//! message, and they are kept in the checkpoint across a restart.

use botmesh::prelude::*;
use botmesh::testing::Transcript;

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
