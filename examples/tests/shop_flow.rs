//! The shop's order flow (`shop::order_flow`) as transcripts: straight through, a bad quantity,
//! `/cancel` mid-way, `no` at the confirmation, and a full order with a restart of the bot
//! between every two messages, which must read exactly like the order without restarts.
//! Also checks that `docs/shop-flow.md` shows the flow's generated state graph.

use botmesh::testing::Transcript;
use botmesh_examples::shop::{self, order_flow, orders};

async fn shop() -> Transcript {
    Transcript::new(|b| shop::shop_bot(b.bot_id(shop::BOT_ID)))
        .await
        .expect("the shop starts")
}

/// The full order, then `/status`; with `restart_between`, the bot restarts (same store)
/// before every message but the first.
async fn full_order(t: &mut Transcript, restart_between: bool) {
    let steps = ["/order", "[coffee]", "2", "[yes]", "/status"];
    for (i, step) in steps.into_iter().enumerate() {
        if restart_between && i > 0 {
            t.restart().await.expect("restart");
        }
        alice_writes(t, &[step]).await;
    }
}

/// Alice writes each of `steps` in turn; `[data]` presses the button `data`.
async fn alice_writes(t: &mut Transcript, steps: &[&str]) {
    for step in steps {
        match step.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            Some(data) => t.press("alice", data).await,
            None => t.says("alice", step).await,
        }
    }
}

async fn stored_orders(t: &Transcript) -> Vec<orders::Order> {
    orders::list(t.store().as_ref(), &"alice".into())
        .await
        .expect("list")
}

#[tokio::test]
async fn an_order_straight_through() {
    let mut t = shop().await;
    full_order(&mut t, false).await;
    insta::assert_snapshot!(t.render());
    let placed = stored_orders(&t).await;
    assert_eq!(placed.len(), 1);
    assert_eq!((placed[0].quantity, placed[0].total_cents), (2, 700));
    assert!(
        t.store()
            .checkpoint("alice")
            .await
            .expect("store")
            .is_none()
    );
}

#[tokio::test]
async fn a_restart_between_every_two_messages_changes_nothing() {
    let mut straight = shop().await;
    full_order(&mut straight, false).await;
    let mut restarted = shop().await;
    full_order(&mut restarted, true).await;
    let rendered = restarted.render();
    insta::assert_snapshot!(rendered);
    let without_restarts: String = rendered
        .lines()
        .filter(|l| *l != "· restart")
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(without_restarts, straight.render());
    assert_eq!(rendered.matches("· restart").count(), 4);
    assert_eq!(stored_orders(&restarted).await.len(), 1);
}

#[tokio::test]
async fn a_bad_quantity_is_asked_again() {
    let mut t = shop().await;
    alice_writes(
        &mut t,
        &[
            "order", "pizza", "[tea]", "a dozen", "100", "3", "maybe", "[yes]",
        ],
    )
    .await;
    insta::assert_snapshot!(t.render());
    let placed = stored_orders(&t).await;
    assert_eq!(placed.len(), 1);
    assert_eq!((placed[0].item.as_str(), placed[0].quantity), ("tea", 3));
}

#[tokio::test]
async fn cancel_mid_way() {
    let mut t = shop().await;
    alice_writes(
        &mut t,
        &["/order", "[cake]", "/status", "/cancel", "/cancel", "4"],
    )
    .await;
    insta::assert_snapshot!(t.render());
    assert!(stored_orders(&t).await.is_empty());
    assert!(
        !order_flow::in_progress(t.store().as_ref(), &"alice".into())
            .await
            .expect("store")
    );
}

#[tokio::test]
async fn no_at_the_confirmation() {
    let mut t = shop().await;
    alice_writes(&mut t, &["/order", "[tea]", "1", "[no]", "/status"]).await;
    insta::assert_snapshot!(t.render());
    assert!(stored_orders(&t).await.is_empty());
}

#[test]
fn the_docs_show_the_generated_state_graph() {
    let mermaid = botmesh::flow::mermaid(order_flow::order);
    insta::assert_snapshot!(mermaid);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/shop-flow.md");
    let docs = std::fs::read_to_string(path).expect("docs/shop-flow.md exists");
    let block = format!("```mermaid\n{}\n```", mermaid.trim_end());
    assert_eq!(
        docs.matches("```mermaid").count(),
        1,
        "docs/shop-flow.md should hold one mermaid block: the generated one"
    );
    assert!(
        docs.contains(&block),
        "docs/shop-flow.md does not show the shop flow's current state graph.\n\
         Regenerate it: replace the ```mermaid block of docs/shop-flow.md with\n\n{block}\n\n\
         (this is `botmesh::flow::mermaid(order_flow::order)`; the snapshot \
         examples/tests/snapshots/shop_flow__the_docs_show_the_generated_state_graph.snap \
         holds the same text)"
    );
}
