//! Several replicas on one shared backend (Postgres, Redis), against the real servers: three
//! `crashbot` processes share one bot's journals; the one that received the messages is
//! SIGKILLed in the middle of its handlers; the other two claim its records once their leases
//! expire and replay them, and every reply is delivered exactly once across the three (a send
//! of unknown outcome is reported by `durability:ambiguous`, never duplicated).
//!
//! Needs `BOTMESH_TEST_POSTGRES_URL` / `BOTMESH_TEST_REDIS_URL`; without them the suite says it
//! was skipped, and under `CI=true` a missing server fails it.

#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use crate::common;
use std::collections::HashSet;
use std::time::Duration;

use botmesh_tests::ambiguous_reply;
use botmesh_tests::process::{
    Crashbot, acked, all_replied, assert_each_reply_once, message_line, on_server, texts, unacked,
    wait_all,
};
use serde_json::Value;

fn spawn(dir: &std::path::Path, backend: &str, url: &str, bot: &str, instance: &str) -> Crashbot {
    let db = dir.join(format!("{instance}.db"));
    let mut args = on_server(&db, backend, url);
    args.extend(
        [
            "--bot-id",
            bot,
            "--instance",
            instance,
            "--lease-ms",
            "700",
            "--work-ms",
            "400",
        ]
        .map(str::to_owned),
    );
    Crashbot::spawn(env!("CARGO_BIN_EXE_crashbot"), &args, None, "")
}

fn run(backend: &str, url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let bot = format!("failover-{}", std::process::id());
    let n = 9;
    let all: Vec<usize> = (0..n).collect();
    let mut a = spawn(dir.path(), backend, url, &bot, "replica-a");
    let b = spawn(dir.path(), backend, url, &bot, "replica-b");
    let c = spawn(dir.path(), backend, url, &bot, "replica-c");
    a.feed(all.iter().map(|i| message_line(*i, 3)));
    // Let A acknowledge every message and start its handlers: kill it at its first reply,
    // each handler then has 400 ms of work before its second.
    a.wait_until(Duration::from_secs(20), |lines| {
        texts(lines, "ack", "id").len() >= n && !texts(lines, "send", "text").is_empty()
    });
    let lines_a = a.kill(); // SIGKILL in the middle of the handlers
    let acked = acked(&lines_a);
    // The others claim A's records once the leases (700 ms) expired; give them time to replay.
    let mut b = b;
    b.feed(unacked(&all, &acked).iter().map(|i| message_line(*i, 3)));
    // Until every reply went out (A's lines are final: it is dead).
    wait_all(&[&b, &c], Duration::from_secs(30), |lines| {
        let all: Vec<Value> = lines_a.iter().chain(lines).cloned().collect();
        all_replied(n, &all)
    });
    let (lines_b, lines_c) = (b.finish(), c.finish());

    let mut sends = Vec::new();
    let mut ambiguous = HashSet::new();
    // Replies B and C sent for messages only A was given (it acknowledged them, so the
    // channel did not redeliver them): those came from taking over A's records.
    let mut replayed_elsewhere = 0;
    for (who, lines) in [("a", &lines_a), ("b", &lines_b), ("c", &lines_c)] {
        for v in lines {
            if v["type"] == "send" {
                let text = v["text"].as_str().unwrap_or_default().to_owned();
                let message = text
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .replacen('t', "m", 1);
                if who != "a" && acked.contains(&message) {
                    replayed_elsewhere += 1;
                }
                sends.push(text);
            }
            ambiguous.extend(ambiguous_reply(v));
        }
    }
    assert!(
        replayed_elsewhere > 0,
        "{backend}: the other replicas took over A's work (acknowledged by A: {acked:?})"
    );
    assert_each_reply_once(backend, n, &sends, &ambiguous, |_| format!("{sends:?}"));
    println!(
        "{backend}: A acknowledged {}/{n} and was killed; B and C sent {replayed_elsewhere} replies of A's messages; {} ambiguous",
        acked.len(),
        ambiguous.len()
    );
}

#[test]
fn postgres_replicas_take_over_a_killed_one() {
    if let Some((url, _server)) = common::server("BOTMESH_TEST_POSTGRES_URL") {
        run("postgres", &url);
    }
}

#[test]
fn redis_replicas_take_over_a_killed_one() {
    if let Some((url, _server)) = common::server("BOTMESH_TEST_REDIS_URL") {
        run("redis", &url);
    }
}
