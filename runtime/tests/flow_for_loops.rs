//! A `for` loop that asks, over an owned local: the items it has not reached yet are kept in
//! the checkpoint, and the flow resumes at every question across a restart as if none
//! happened.

use botmesh::prelude::*;
use botmesh::testing::Transcript;

const DISHES: [&str; 3] = ["soup", "fish", "cake"];

/// Rates each dish, skipping one on "skip" and stopping on "stop".
#[flow(start = command("rate"))]
#[persistent]
async fn rate(cx: &mut FlowCx) -> FlowResult {
    let dishes: Vec<String> = DISHES.iter().map(|d| (*d).to_owned()).collect();
    let mut notes: Vec<String> = Vec::new();
    for dish in dishes {
        let score: String = cx
            .ask(format!("{dish}: 1-5?"))
            .id("score")
            .await?
            .text()
            .to_owned();
        if score == "skip" {
            continue;
        }
        if score == "stop" {
            break;
        }
        notes.push(format!("{dish} {score}"));
    }
    cx.send(format!("Noted: {}", notes.join(", "))).await?;
    Ok(())
}

async fn transcript() -> Transcript {
    Transcript::of(|bot| {
        bot.flow(rate);
    })
    .await
    .expect("bot starts")
}

/// The sends of a run (its lines without the restarts).
fn sends(t: &Transcript) -> Vec<String> {
    t.lines()
        .into_iter()
        .filter(|l| !l.contains("restart"))
        .collect()
}

async fn run(answers: &[&str], restart_at_every_question: bool) -> Transcript {
    let mut t = transcript().await;
    t.says("ann", "/rate").await;
    for a in answers {
        if restart_at_every_question {
            t.restart().await.expect("restart");
        }
        t.says("ann", a).await;
    }
    t
}

#[tokio::test]
async fn resumes_at_every_question_across_a_restart() {
    for answers in [&["4", "skip", "5"][..], &["2", "stop"][..]] {
        let straight = run(answers, false).await;
        let restarted = run(answers, true).await;
        assert_eq!(sends(&straight), sends(&restarted), "{answers:?}");
    }
    let t = run(&["4", "skip", "5"], true).await;
    assert!(
        t.lines()
            .iter()
            .any(|l| l.ends_with("Noted: soup 4, cake 5")),
        "{}",
        t.render()
    );
}

#[tokio::test]
async fn the_checkpoint_keeps_the_items_not_reached() {
    let t = run(&["4"], false).await;
    let cp = t
        .checkpoint("ann")
        .await
        .expect("store")
        .expect("a checkpoint");
    let text = cp.state.to_string();
    assert!(text.contains(r#"["cake"]"#), "{text}");
    assert!(text.contains(r#""dish":"fish""#), "{text}");
}
