//! A flow's step killed between its sends and its commit, in the transcript harness: the
//! process dies right after the step's send is journaled (before the checkpoint and the
//! inbound's completion), the bot restarts on the same store and journals, the channel
//! redelivers the message, and the transcript shows every reply once: none twice, none lost.

use botmesh::durability::kv::{WritePhase, WritePoint};
use botmesh::prelude::*;
use botmesh::testing::Transcript;

/// Takes an order in two questions.
#[flow(start = command("order"))]
#[persistent]
async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx
        .ask("What would you like?")
        .id("item")
        .await?
        .text()
        .to_owned();
    let qty: u32 = cx
        .ask(format!("How many {item}?"))
        .id("qty")
        .parse::<u32>("A number, please.")
        .await?;
    cx.send(format!("Ordered {qty} x {item}")).await?;
    Ok(())
}

async fn transcript() -> Transcript {
    Transcript::durable(|b| {
        let bot = b.build()?;
        bot.flow(order);
        Ok(bot)
    })
    .await
    .expect("bot starts")
}

/// How many lines end with `text`.
fn count(t: &Transcript, text: &str) -> usize {
    t.lines().iter().filter(|l| l.ends_with(text)).count()
}

/// Plays `/order`, `tea` (killed at `point`), a restart, the channel's redelivery of `tea`,
/// and `2`; checks the crash happened and that each reply went out once. Returns the render.
async fn order_killed_at(point: WritePoint, phase: WritePhase) -> (Transcript, String) {
    let mut t = transcript().await;
    t.says_id("ann", "m1", "/order").await;
    t.crash_at(point, phase, 1);
    t.says_id("ann", "m2", "tea").await;
    t.restart().await.expect("restart");
    // The channel redelivers what the dead process did not finish.
    t.says_id("ann", "m2", "tea").await;
    t.says_id("ann", "m3", "2").await;
    let render = t.render();
    assert!(render.contains("· crash at"), "{render}");
    for reply in ["What would you like?", "How many tea?", "Ordered 2 x tea"] {
        assert_eq!(count(&t, reply), 1, "{reply:?}: {render}");
    }
    (t, render)
}

#[tokio::test]
async fn a_step_killed_between_its_send_and_its_commit_replies_once() {
    // The step of `tea` journals "How many tea?" (the first send from now on), then dies.
    let (_, render) = order_killed_at(WritePoint::OutboxJournal, WritePhase::After).await;
    // The cut step names its flow (the step emptied the stack, its end names the flow).
    assert!(
        render.contains("· flow order interrupted:journal"),
        "{render}"
    );
    insta::assert_snapshot!(render);
}

#[tokio::test]
async fn a_step_killed_after_its_checkpoint_before_its_ack_replies_once() {
    // The step of `tea` is committed (its send journaled, its checkpoint written), and the
    // process dies before the inbound is completed: the redelivery must not answer the
    // next question with `tea`.
    let (t, render) = order_killed_at(WritePoint::InboxComplete, WritePhase::Before).await;
    assert_eq!(count(&t, "A number, please."), 0, "{render}");
    insta::assert_snapshot!(render);
}
