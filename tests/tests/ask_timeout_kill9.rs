//! A durable ask timeout (an ask that times out with no new message) is a job of the
//! scheduler: armed by a real process that is then killed with SIGKILL, it fires once after
//! the restart; an ask answered before the kill fires none. On SQLite, and with the journals
//! (and so the job) on PostgreSQL when `BOTMESH_TEST_POSTGRES_URL` is set.
//!
//! `schedbot`'s `/confirm` flow asks `Confirm?` with an idle timeout of 10 s. The first
//! process is killed while the ask waits; the second starts with its wall clock 2 minutes
//! ahead (a restart after the deadline, without waiting for it).

#![allow(clippy::unwrap_used, clippy::print_stdout)] // the outcome of each case is printed

use crate::common;
use std::path::Path;
use std::time::Duration;

use botmesh_tests::process::{Crashbot, spawn_schedbot, texts, unique_bot_id};

const TIMED_OUT: &str = "No answer: cancelled.";

fn spawn(db: &Path, server: Option<(&str, &str)>, bot_id: &str, offset_ms: i64) -> Crashbot {
    spawn_schedbot(
        env!("CARGO_BIN_EXE_schedbot"),
        db,
        server,
        bot_id,
        offset_ms,
        &[],
    )
}

/// The texts sent to `alice`.
fn to_alice(lines: &[serde_json::Value]) -> Vec<String> {
    let alice: Vec<serde_json::Value> = lines
        .iter()
        .filter(|l| l["chat"] == "alice")
        .cloned()
        .collect();
    texts(&alice, "send", "text")
}

fn says(chat: &str, id: &str, text: &str) -> String {
    format!("{{\"id\":\"{id}\",\"chat\":\"{chat}\",\"text\":\"{text}\"}}\n")
}

/// `answer`: whether alice answers the ask before the kill.
fn run(server: Option<(&str, &str)>, answer: bool) {
    let name = server.map_or("sqlite", |(b, _)| b);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db");
    let bot_id = unique_bot_id(&format!("ask-{answer}"));

    let mut first = spawn(&db, server, &bot_id, 0);
    first.feed([says("alice", "m1", "/confirm")]);
    assert!(
        first.wait_until(Duration::from_secs(30), |l| to_alice(l)
            .contains(&"Confirm?".to_owned())),
        "{name}: the flow did not ask"
    );
    if answer {
        first.feed([says("alice", "m2", "yes")]);
        assert!(
            first.wait_until(Duration::from_secs(30), |l| to_alice(l)
                .contains(&"Confirmed.".to_owned())),
            "{name}: the answer was not taken"
        );
    }
    // Time for the send's record and the timeout's job to be written (killed right after
    // the provider call, the send would be ambiguous and go out again after the restart).
    first.wait_until(Duration::from_secs(1), |_| false);
    let before = to_alice(&first.kill()); // SIGKILL, before the deadline (10 s)
    assert!(
        !before.contains(&TIMED_OUT.to_owned()),
        "{name}: {before:?}"
    );

    let second = spawn(&db, server, &bot_id, 120_000);
    let fired = second.wait_until(Duration::from_secs(if answer { 3 } else { 30 }), |l| {
        to_alice(l).contains(&TIMED_OUT.to_owned())
    });
    if fired {
        // Time for a second firing, if there were one.
        second.wait_until(Duration::from_secs(2), |_| false);
    }
    let after = to_alice(&second.kill());
    if answer {
        assert!(!fired, "{name}: an answered ask timed out: {after:?}");
        assert!(after.is_empty(), "{name}: {after:?}");
    } else {
        assert!(fired, "{name}: the timeout never fired: {after:?}");
        assert_eq!(after, [TIMED_OUT], "{name}: the timeout fired once");
    }
    println!("{name} answered={answer}: before {before:?}, after {after:?}");
}

#[test]
fn sqlite_an_ask_timeout_armed_before_a_kill_fires_once_after_the_restart() {
    run(None, false);
}

#[test]
fn sqlite_an_ask_answered_before_a_kill_never_times_out() {
    run(None, true);
}

#[test]
fn postgres_an_ask_timeout_armed_before_a_kill_fires_once_after_the_restart() {
    if let Some((url, _server)) = common::server("BOTMESH_TEST_POSTGRES_URL") {
        run(Some(("postgres", &url)), false);
        run(Some(("postgres", &url)), true);
    }
}
