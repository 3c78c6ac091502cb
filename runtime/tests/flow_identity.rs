//! Site identities across code changes, pinned with insta: inserting a send and an ask into a
//! flow leaves every other site's key and every other state's name as it was, and
//! reformatting a flow changes nothing at all (keys, states, layout fingerprint).

use botmesh::prelude::*;
use botmesh::testing::Transcript;

flow_builds! {
    /// Signs a user up: name, age, confirmation.
    mod v1: #[flow(start = command("signup"))] fn signup(cx) {
        cx.send("Welcome!").await?;
        let name: String = cx.ask("Name?").await?.text().to_owned();
        let age: u32 = cx.ask("Age?").parse::<u32>("A number, please.").await?;
        loop {
            let ok = cx.ask(format!("{name}, {age}: right?")).await?;
            if ok.is_yes() {
                break;
            }
            cx.send("Then again.").await?;
        }
        cx.send(format!("Signed up: {name}")).await?;
        Ok(())
    }

    /// The same flow with a send and an ask inserted (and a send that uses the new answer).
    mod v2: #[flow(start = command("signup"))] fn signup(cx) {
        cx.send("Welcome!").await?;
        let name: String = cx.ask("Name?").await?.text().to_owned();
        cx.send("Nice to meet you.").await?;
        let city: String = cx.ask("City?").await?.text().to_owned();
        let age: u32 = cx.ask("Age?").parse::<u32>("A number, please.").await?;
        loop {
            let ok = cx.ask(format!("{name}, {age}: right?")).await?;
            if ok.is_yes() {
                break;
            }
            cx.send("Then again.").await?;
        }
        cx.send(format!("Signed up: {name}")).await?;
        cx.send(format!("From {city}")).await?;
        Ok(())
    }
}

#[rustfmt::skip]
flow_builds! {
    /// `v1::signup`, laid out differently.
    mod v1_reformatted: #[flow(start = command("signup"))] fn signup(cx) {
        cx.send( "Welcome!" ).await?;
        let name: String = cx
            .ask(r"Name?")
            .await?
            .text()
            .to_owned();
        let age: u32 = cx.ask("Age?").parse::< u32 >("A number, please.",).await?;
        loop { let ok = cx.ask(format!(
                    "{name}, {age}: right?",
                )).await?;
            if ok.is_yes() { break; }
            cx.send("Then again.").await?; }
        cx.send(format!("Signed up: {name}")).await?; Ok(())
    }
}

async fn transcript(setup: fn(&Bot), script: &[&str]) -> Vec<String> {
    let mut t = Transcript::of(setup).await.expect("bot starts");
    t.says_all("ann", script).await;
    t.lines()
}

/// `text → site key` of every send (the key without its inbound record id, which counts the
/// user's messages), and the states checkpointed.
fn sites(lines: &[String]) -> (Vec<(String, String)>, Vec<String>) {
    let mut sends = Vec::new();
    let mut states = Vec::new();
    for l in lines {
        if let Some(rest) = l.strip_prefix("bot → ann [key=") {
            let (key, text) = rest.split_once("]: ").expect("a send line");
            let site = key.split_once(':').map_or(key, |(_, s)| s);
            sends.push((text.to_owned(), site.to_owned()));
        } else if let Some(rest) = l.strip_prefix("· checkpoint ") {
            let state = rest.split(' ').next().unwrap_or_default().to_owned();
            if !states.contains(&state) {
                states.push(state);
            }
        }
    }
    (sends, states)
}

#[tokio::test]
async fn inserting_a_send_and_an_ask_changes_no_other_key_or_state() {
    let old = transcript(
        |b| {
            b.flow(v1::signup);
        },
        &["/signup", "Ann", "30", "no", "yes"],
    )
    .await;
    let new = transcript(
        |b| {
            b.flow(v2::signup);
        },
        &["/signup", "Ann", "Paris", "30", "no", "yes"],
    )
    .await;
    let (old_sends, old_states) = sites(&old);
    let (new_sends, new_states) = sites(&new);
    for (text, site) in &old_sends {
        let now: Vec<&String> = new_sends
            .iter()
            .filter(|(t, _)| t == text)
            .map(|(_, s)| s)
            .collect();
        assert!(
            now.contains(&site),
            "`{text}` was keyed {site}, now {now:?}"
        );
    }
    for state in &old_states {
        assert!(
            new_states.contains(state),
            "{state} is gone: {new_states:?}"
        );
    }
    let names = |i: botmesh::flow::FlowInfo| i.states.iter().map(|s| s.name).collect::<Vec<_>>();
    let (a, b) = (
        names(botmesh::flow::info(v1::signup)),
        names(botmesh::flow::info(v2::signup)),
    );
    assert!(a.iter().all(|s| b.contains(s)), "{a:?} ⊄ {b:?}");
    assert_ne!(
        botmesh::flow::info(v1::signup).layout_hash,
        botmesh::flow::info(v2::signup).layout_hash
    );
    let render = |sends: &[(String, String)], states: &[String]| {
        let mut out: Vec<String> = sends.iter().map(|(t, s)| format!("{s}  {t}")).collect();
        out.extend(states.iter().map(|s| format!("state {s}")));
        out.join("\n")
    };
    insta::assert_snapshot!(format!(
        "v1:\n{}\nv2:\n{}",
        render(&old_sends, &old_states),
        render(&new_sends, &new_states)
    ));
}

#[tokio::test]
async fn reformatting_changes_nothing() {
    let script = ["/signup", "Ann", "30", "no", "yes"];
    let plain = transcript(
        |b| {
            b.flow(v1::signup);
        },
        &script,
    )
    .await;
    let reformatted = transcript(
        |b| {
            b.flow(v1_reformatted::signup);
        },
        &script,
    )
    .await;
    assert_eq!(plain, reformatted);
    let (a, b) = (
        botmesh::flow::info(v1::signup),
        botmesh::flow::info(v1_reformatted::signup),
    );
    assert_eq!(a.layout_hash, b.layout_hash);
    assert_eq!(a.states, b.states);
    insta::assert_snapshot!(plain.join("\n"));
}
