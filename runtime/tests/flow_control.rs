//! Every lowered construct in a running flow: if/else, match, while, labelled loops with
//! break values and continue, early return, blocks, `?`, sub-flow calls, validation with a
//! re-ask, buttons, idle timeouts, cancellation, non-persistent flows and flows with arguments.

use std::time::Duration;

use botmesh::flow::Interrupt;
use botmesh::prelude::*;
use botmesh::testing::Transcript;

use crate::common::{across_a_restart, fresh};

/// A survey: labelled loops, while, continue, break values, early return.
#[flow(start = keyword("survey"))]
#[persistent]
async fn survey(cx: &mut FlowCx) -> FlowResult {
    let mut answers: Vec<String> = Vec::new();
    let mut round: u32 = 0;
    let total: u32 = 'outer: loop {
        round += 1;
        let a = cx.ask(format!("Question {round}: colour?")).await?;
        if a.text() == "quit" {
            cx.send("Bye early.").await?;
            return Ok(());
        } else if a.text() == "skip" {
            continue 'outer;
        }
        answers.push(a.text().to_owned());
        while answers.len() < 2 {
            let more = cx.ask("Another colour?").await?;
            if more.text() == "none" {
                break 'outer round;
            }
            answers.push(more.text().to_owned());
        }
        break round * 10;
    };
    {
        let summary = answers.join(", ");
        cx.send(format!("Rounds: {total}; colours: {summary}"))
            .await?;
    }
    Ok(())
}

/// Asks for a number with parse + re-ask, then a confirmation with buttons and a timeout.
#[flow(start = command("pay"))]
#[persistent]
async fn pay(cx: &mut FlowCx) -> FlowResult {
    let amount: u32 = cx
        .ask("How much?")
        .parse::<u32>("That is not a number, try again.")
        .await?;
    match cx
        .ask(format!("Pay {amount}?"))
        .buttons(["yes", "no"])
        .idle(Duration::from_secs(60))
        .await
    {
        Ok(a) if a.is_yes() => {
            let receipt: String = cx
                .effect(async move { format!("receipt-{amount}") })
                .await?;
            cx.send(format!("Paid: {receipt}")).await?;
        }
        Ok(_) => cx.send("Not paid.").await?,
        Err(Interrupt::Timeout) => cx.send("Too slow: not paid.").await?,
        Err(Interrupt::Cancelled) => {
            cx.send("Payment cancelled.").await?;
            return cx.cancel();
        }
    }
    Ok(())
}

/// A sub-flow with an argument, returning a value.
#[flow]
#[persistent]
async fn ask_name(cx: &mut FlowCx, greeting: String) -> FlowResult<String> {
    let name: String = cx
        .ask(format!("{greeting} What is your name?"))
        .await?
        .text()
        .to_owned();
    Ok(name.to_uppercase())
}

/// Calls `ask_name` twice.
#[flow(start = command("names"))]
#[persistent]
async fn names(cx: &mut FlowCx) -> FlowResult {
    let first: String = cx.call(ask_name("Hi!".to_owned())).await?;
    let second: String = cx.call(ask_name(format!("And after {first}?"))).await?;
    if first == second {
        cx.send("Same names.").await?;
    } else {
        cx.send(format!("{first} and {second}")).await?;
    }
    Ok(())
}

/// Not persistent: the state holds a non-serializable type.
#[flow(start = command("memo"))]
async fn memo(cx: &mut FlowCx) -> FlowResult {
    let started: std::time::Instant = std::time::Instant::now();
    let n: u32 = cx
        .ask("Pick a number")
        .parse::<u32>("A number, please.")
        .await?;
    let _ = started.elapsed();
    cx.send(format!("You picked {n}")).await?;
    Ok(())
}

/// An ask in a `while` condition, and recorded randomness.
#[flow(start = command("more"))]
#[persistent]
async fn more(cx: &mut FlowCx) -> FlowResult {
    let mut n: u32 = 0;
    while cx.ask(format!("{n} so far. More?")).await?.is_yes() {
        n += 1;
    }
    let dice: u64 = cx.random().await % 6 + 1;
    let _ = dice;
    cx.send(format!("Total {n}")).await?;
    Ok(())
}

async fn transcript() -> Transcript {
    Transcript::new(|b| {
        let bot = b.build()?;
        bot.flow(survey).flow(pay).flow(names).flow(memo).flow(more);
        let cancel = bot.clone();
        bot.command("cancel", move |ctx: Ctx| {
            let bot = cancel.clone();
            async move {
                let was = bot.cancel_flow(ctx.chat().clone()).await;
                let _ = was;
                Ok(())
            }
        });
        Ok(bot)
    })
    .await
    .expect("bot starts")
}

#[tokio::test]
async fn loops_and_early_returns() {
    let mut t = transcript().await;
    t.says_all("ann", &["survey", "skip", "red", "blue"]).await;
    t.says_all("bob", &["survey", "green", "none"]).await;
    t.says_all("cat", &["survey", "quit"]).await;
    insta::assert_snapshot!(t.render());
}

#[tokio::test]
async fn ask_in_a_while_condition() {
    let mut t = transcript().await;
    across_a_restart(&mut t, "ann", &["/more", "yes"], &["y", "no"]).await;
    insta::assert_snapshot!(t.render());
}

#[tokio::test]
async fn parse_buttons_timeout_and_cancel() {
    let mut t = transcript().await;
    t.says_all("ann", &["/pay", "lots", "12"]).await;
    t.press("ann", "yes").await;
    t.says_all("bob", &["/pay", "5"]).await;
    t.advance(Duration::from_secs(61)).await;
    t.says_all("cat", &["/pay", "7", "/cancel"]).await;
    insta::assert_snapshot!(t.render());
}

#[tokio::test]
async fn sub_flows() {
    let mut t = transcript().await;
    across_a_restart(&mut t, "ann", &["/names", "ada"], &["bob"]).await;
    insta::assert_snapshot!(t.render());
}

#[tokio::test]
async fn non_persistent_flows_live_in_memory() {
    let mut t = transcript().await;
    t.says_all("ann", &["/memo", "x"]).await;
    assert!(t.checkpoint("ann").await.expect("store").is_none());
    t.says("ann", "4").await;
    t.says("bob", "/memo").await;
    t.restart().await.expect("restart");
    t.says("bob", "4").await;
    insta::assert_snapshot!(t.render());
}

#[tokio::test]
async fn a_non_persistent_flow_lost_on_restart_is_reported_and_the_message_is_fresh() {
    let mut t = Transcript::new(|b| fresh::with_flow(b, memo))
        .await
        .expect("bot starts");
    t.says("bob", "/memo").await;
    t.restart().await.expect("restart");
    t.says("bob", "4").await;
    // The flow ended normally elsewhere leaves no note: the next restart reports nothing.
    t.says("bob", "/memo").await;
    t.says("bob", "5").await;
    t.restart().await.expect("restart");
    let lines = t.lines();
    let lost: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("lost:restart"))
        .collect();
    assert_eq!(lost, ["· flow memo lost:restart"], "{}", t.render());
    assert!(
        lines.iter().any(|l| l.ends_with("(a fresh message: 4)")),
        "{}",
        t.render()
    );
    assert!(
        !lines.iter().any(|l| l.ends_with("You picked 4")),
        "{}",
        t.render()
    );
    insta::assert_snapshot!(t.render());
}

#[tokio::test]
async fn started_from_code_and_blocked() {
    let t = transcript().await;
    t.bot().start_flow("dan", names).await.expect("start");
    t.bot().idle().await;
    assert_eq!(t.bot().active_flow(&"dan".into()), Some("ask_name"));
    t.provider()
        .deliver(ProviderEvent::Blocked { chat: "dan".into() })
        .await
        .expect("delivered");
    t.bot().idle().await;
    assert_eq!(t.bot().active_flow(&"dan".into()), None);
    assert!(t.store().checkpoint("dan").await.expect("store").is_none());
    insta::assert_snapshot!(t.render());
}

#[tokio::test]
async fn a_flow_moves_between_replicas() {
    let store: std::sync::Arc<dyn botmesh::durability::Store> =
        std::sync::Arc::new(botmesh::durability::MemoryStore::new());
    let setup = |b: BotBuilder| {
        let bot = b.build()?;
        bot.flow(survey);
        Ok(bot)
    };
    let mut a = Transcript::with_store(store.clone(), setup)
        .await
        .expect("replica a");
    let mut b = Transcript::with_store(store.clone(), setup)
        .await
        .expect("replica b");
    a.says_id("ann", "m1", "survey").await;
    b.says_id("ann", "m2", "red").await;
    a.says_id("ann", "m3", "blue").await;
    assert!(store.checkpoint("ann").await.expect("store").is_none());
    insta::assert_snapshot!(format!(
        "replica a:\n{}replica b:\n{}",
        a.render(),
        b.render()
    ));
}
