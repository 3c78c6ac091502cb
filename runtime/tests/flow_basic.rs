//! The DESIGN.md order flow, end to end: straight through, with a re-ask loop, and across a
//! restart of the bot.

use crate::common::{across_a_restart, order};
use botmesh::testing::Transcript;

async fn transcript() -> Transcript {
    Transcript::of(|bot| {
        bot.flow(order);
    })
    .await
    .expect("bot starts")
}

#[tokio::test]
async fn order_straight_through() {
    let mut t = transcript().await;
    t.says_all("alice", &["/order", "apples", "many", "3", "hello?"])
        .await;
    insta::assert_snapshot!(t.render());
    assert_eq!(t.bot().active_flow(&"alice".into()), None);
    assert!(t.checkpoint("alice").await.expect("store").is_none());
}

#[tokio::test]
async fn order_across_a_restart() {
    let mut t = transcript().await;
    across_a_restart(&mut t, "alice", &["/order", "pears"], &["2"]).await;
    insta::assert_snapshot!(t.render());
}

#[test]
fn order_graph() {
    insta::assert_snapshot!(botmesh::flow::mermaid(order));
}
