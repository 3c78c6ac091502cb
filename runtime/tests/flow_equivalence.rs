//! Checkpoint equivalence (property test): driving flows straight through, and driving them
//! with a restart (serialize → drop the bot → deserialize into a new bot on the same store)
//! after every message, give identical transcripts and identical send keys.

use crate::common::order;
use botmesh::prelude::*;
use botmesh::testing::Transcript;
use proptest::prelude::*;

/// Labelled loops, while, continue, early return.
#[flow(start = command("survey"))]
#[persistent]
async fn survey(cx: &mut FlowCx) -> FlowResult {
    let mut colours: Vec<String> = Vec::new();
    let rounds: u32 = 'outer: loop {
        let a = cx.ask(format!("Colour #{}?", colours.len() + 1)).await?;
        match a.text() {
            "quit" => {
                cx.send("Bye.").await?;
                return Ok(());
            }
            "skip" => continue 'outer,
            c => colours.push(c.to_owned()),
        }
        while colours.len() < 3 {
            let more = cx.ask("More?").await?;
            if more.text() == "none" {
                break 'outer colours.len() as u32;
            }
            if more.text() == "skip" {
                continue;
            }
            colours.push(more.text().to_owned());
            cx.send(format!("Got {}", colours.len())).await?;
        }
        break 3;
    };
    cx.send(format!("{rounds}: {}", colours.join("+"))).await?;
    Ok(())
}

/// A sub-flow.
#[flow]
#[persistent]
async fn pick(cx: &mut FlowCx, question: String) -> FlowResult<String> {
    let a: String = cx.ask(question).parse::<String>("?").await?;
    if a == "quit" {
        return cx.cancel();
    }
    Ok(a)
}

/// Calls the sub-flow in a loop.
#[flow(start = command("roster"))]
#[persistent]
async fn roster(cx: &mut FlowCx) -> FlowResult {
    let mut all: Vec<String> = Vec::new();
    loop {
        let name: String = match cx.call(pick(format!("Name #{}?", all.len() + 1))).await {
            Ok(n) => n,
            Err(_) => {
                cx.send("Stopped.").await?;
                break;
            }
        };
        if name == "none" {
            break;
        }
        all.push(name);
    }
    cx.send(format!("Names: {}", all.join(", "))).await?;
    Ok(())
}

fn setup(b: BotBuilder) -> Result<Bot, BotError> {
    let bot = b.build()?;
    bot.flow(order).flow(survey).flow(roster);
    Ok(bot)
}

async fn drive(script: &[String], restart_every_step: bool) -> (Vec<String>, Vec<String>) {
    let mut t = Transcript::new(setup).await.expect("bot starts");
    for line in script {
        t.says("ann", line).await;
        if restart_every_step {
            t.restart().await.expect("restart");
        }
    }
    let lines: Vec<String> = t.lines().into_iter().filter(|l| l != "· restart").collect();
    (lines, t.keys())
}

fn answer() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/order".to_owned()),
        Just("/survey".to_owned()),
        Just("/roster".to_owned()),
        Just("0".to_owned()),
        Just("2".to_owned()),
        Just("x".to_owned()),
        Just("red".to_owned()),
        Just("skip".to_owned()),
        Just("none".to_owned()),
        Just("quit".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn checkpoints_change_nothing(start in 0usize..3, answers in proptest::collection::vec(answer(), 1..12)) {
        let mut script = vec![["/order", "/survey", "/roster"][start].to_owned()];
        script.extend(answers);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let (straight, straight_keys) = rt.block_on(drive(&script, false));
        let (restarted, restarted_keys) = rt.block_on(drive(&script, true));
        prop_assert_eq!(straight, restarted);
        prop_assert_eq!(straight_keys, restarted_keys);
    }
}

#[tokio::test]
async fn a_script_with_restarts() {
    let script: Vec<String> = [
        "/roster", "ada", "bob", "none", "/survey", "red", "skip", "blue", "none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (lines, _) = drive(&script, true).await;
    let (straight, _) = drive(&script, false).await;
    assert_eq!(lines, straight);
    insta::assert_snapshot!(lines.join("\n"));
}
