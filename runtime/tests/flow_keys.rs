//! Key stability, pinned with insta: a send's key does not move when a send is added to
//! another step, differs per loop iteration, and does not depend on the completion order of
//! `join!`-ed sends.

use std::time::Duration;

use botmesh::prelude::*;
use botmesh::testing::Transcript;

flow_builds! {
    /// Two steps, one send each.
    mod v1: #[flow(start = command("order"))] fn order(cx) {
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        cx.send(format!("Noted: {item}")).await?;
        Ok(())
    }

    /// Same flow, with a send added to the first step.
    mod v2: #[flow(start = command("order"))] fn order(cx) {
        cx.send("Welcome to the shop!").await?;
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        cx.send(format!("Noted: {item}")).await?;
        Ok(())
    }
}

/// Sends in a loop, within one step.
#[flow(start = command("count"))]
async fn count(cx: &mut FlowCx) -> FlowResult {
    let n: u32 = cx.ask("Up to?").parse::<u32>("A number.").await?;
    let mut i: u32 = 0;
    while i < n {
        i += 1;
        cx.send(format!("tick {i}")).await?;
    }
    Ok(())
}

/// Two sends joined.
#[flow(start = command("both"))]
async fn both(cx: &mut FlowCx) -> FlowResult {
    let (a, b) = tokio::join!(cx.send("left"), cx.send("right"));
    a?;
    b?;
    Ok(())
}

async fn keys_of(setup: impl Fn(&Bot) + Send + Sync + 'static, script: &[&str]) -> Vec<String> {
    let mut t = Transcript::of(setup).await.expect("bot starts");
    t.says_all("ann", script).await;
    t.lines()
        .into_iter()
        .filter(|l| l.starts_with("bot →"))
        .collect()
}

#[tokio::test]
async fn adding_a_send_to_another_step_keeps_keys() {
    let before = keys_of(
        |b| {
            b.flow(v1::order);
        },
        &["/order", "tea"],
    )
    .await;
    let after = keys_of(
        |b| {
            b.flow(v2::order);
        },
        &["/order", "tea"],
    )
    .await;
    let noted = |v: &[String]| v.iter().find(|l| l.contains("Noted")).cloned();
    assert_eq!(noted(&before), noted(&after));
    insta::assert_snapshot!(format!(
        "v1:\n{}\nv2:\n{}",
        before.join("\n"),
        after.join("\n")
    ));
}

#[tokio::test]
async fn loop_iterations_get_distinct_keys() {
    let keys = keys_of(
        |b| {
            b.flow(count);
        },
        &["/count", "3"],
    )
    .await;
    insta::assert_snapshot!(keys.join("\n"));
}

// Paused time: the slow send's 30 ms pass on tokio's clock, in order.
#[tokio::test(start_paused = true)]
async fn joined_sends_keep_their_keys_whatever_completes_first() {
    async fn run(slow: &'static str) -> Vec<String> {
        let mut keys = keys_of(
            move |b| {
                b.flow(both);
                b.before_send(move |d| async move {
                    if d.outgoing.content.text() == slow {
                        tokio::time::sleep(Duration::from_millis(30)).await;
                    }
                    SendDecision::Proceed(d)
                });
            },
            &["/both"],
        )
        .await;
        let order = keys
            .iter()
            .map(|l| if l.ends_with("left") { "left" } else { "right" })
            .collect::<Vec<_>>()
            .join(",");
        keys.sort_by_key(|l| l.rsplit(": ").next().map(str::to_owned));
        keys.push(format!("(completed: {order})"));
        keys
    }
    let left_slow = run("left").await;
    let right_slow = run("right").await;
    assert_eq!(left_slow[..2], right_slow[..2]);
    assert_ne!(
        left_slow[2], right_slow[2],
        "the completion order did change"
    );
    insta::assert_snapshot!(format!(
        "{}\n{}",
        left_slow.join("\n"),
        right_slow.join("\n")
    ));
}
