//! The DESIGN.md order flow, end to end: straight through, with a re-ask loop, and across a
//! restart of the bot.

use botmesh::prelude::*;
use botmesh::testing::Transcript;

/// Takes an order in two questions.
#[flow(start = command("order"))]
#[persistent]
async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx.ask("What would you like?").await?.text().to_owned();
    let qty: u32 = loop {
        let answer = cx.ask("How many?").await?;
        match answer.text().trim().parse() {
            Ok(n) if n > 0 => break n,
            _ => cx.send("Please answer with a number.").await?,
        }
    };
    cx.send(format!("Ordered {qty} x {item}")).await?;
    Ok(())
}

async fn transcript() -> Transcript {
    Transcript::new(|b| {
        let bot = b.build()?;
        bot.flow(order);
        Ok(bot)
    })
    .await
    .expect("bot starts")
}

#[tokio::test]
async fn order_straight_through() {
    let mut t = transcript().await;
    t.says("alice", "/order").await;
    t.says("alice", "apples").await;
    t.says("alice", "many").await;
    t.says("alice", "3").await;
    t.says("alice", "hello?").await;
    insta::assert_snapshot!(t.render());
    assert_eq!(t.bot().active_flow(&"alice".into()), None);
    assert!(
        t.store()
            .checkpoint("alice")
            .await
            .expect("store")
            .is_none()
    );
}

#[tokio::test]
async fn order_across_a_restart() {
    let mut t = transcript().await;
    t.says("alice", "/order").await;
    t.says("alice", "pears").await;
    t.restart().await.expect("restart");
    t.says("alice", "2").await;
    insta::assert_snapshot!(t.render());
}

#[test]
fn order_graph() {
    insta::assert_snapshot!(botmesh::flow::mermaid(order));
}
