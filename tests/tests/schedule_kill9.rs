//! A job scheduled by a real process that is then killed with SIGKILL runs after the restart
//! as its missed-run policy says, each occurrence once; on SQLite, and on PostgreSQL and Redis
//! when `BOTMESH_TEST_POSTGRES_URL` / `BOTMESH_TEST_REDIS_URL` are set.
//!
//! The job runs every 4 s from its creation. The first process schedules it and is killed
//! before its first occurrence; the second starts with its wall clock 14 s ahead (a restart
//! 14 s later, without waiting for it): occurrences 1, 2 and 3 were missed, the latest 2 s
//! late with a grace of 1 s, and occurrence 4 is due 2 s after the restart.
//!
//! | policy | what the restart sends |
//! | --- | --- |
//! | skip | `tick 4` only |
//! | run-once | `tick 3`, then `tick 4` |
//! | run-all | `tick 1`, `tick 2`, `tick 3`, then `tick 4` |

#![allow(clippy::unwrap_used, clippy::print_stdout)] // the outcome of each case is printed

use crate::common;
use std::path::Path;
use std::time::Duration;

use botmesh_tests::process::{Crashbot, spawn_schedbot, texts, unique_bot_id};

fn spawn(
    db: &Path,
    server: Option<(&str, &str)>,
    bot_id: &str,
    policy: &str,
    offset_ms: i64,
) -> Crashbot {
    let exe = env!("CARGO_BIN_EXE_schedbot");
    spawn_schedbot(exe, db, server, bot_id, offset_ms, &["--missed", policy])
}

fn sent(lines: &[serde_json::Value]) -> Vec<String> {
    texts(lines, "send", "text")
}

fn run(server: Option<(&str, &str)>) {
    let name = server.map_or("sqlite", |(b, _)| b);
    for (policy, expected) in [
        ("skip", &["tick 4"][..]),
        ("run-once", &["tick 3", "tick 4"]),
        ("run-all", &["tick 1", "tick 2", "tick 3", "tick 4"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("bot.db");
        let bot_id = unique_bot_id(&format!("sched-{policy}"));

        let first = spawn(&db, server, &bot_id, policy, 0);
        assert!(
            first.wait_until(Duration::from_secs(30), |l| sent(l)
                .contains(&"scheduled".to_owned())),
            "{name} {policy}: the job was not scheduled"
        );
        let before = sent(&first.kill()); // SIGKILL, before the first occurrence (4 s)
        assert_eq!(before, ["scheduled"], "{name} {policy}");

        let second = spawn(&db, server, &bot_id, policy, 14_000);
        let done = second.wait_until(Duration::from_secs(30), |l| {
            sent(l).iter().any(|t| t == "tick 4")
        });
        let after = sent(&second.kill());
        assert!(done, "{name} {policy}: occurrence 4 never ran: {after:?}");
        assert_eq!(
            after, expected,
            "{name} {policy}: the missed occurrences as the policy says, each once (and `scheduled` answered from the outbox)"
        );
        println!("{name} {policy}: {after:?}");
    }
}

#[test]
fn sqlite_a_job_runs_after_a_kill_as_its_policy_says() {
    run(None);
}

#[test]
fn postgres_a_job_runs_after_a_kill_as_its_policy_says() {
    if let Some((url, _server)) = common::server("BOTMESH_TEST_POSTGRES_URL") {
        run(Some(("postgres", &url)));
    }
}

#[test]
fn redis_a_job_runs_after_a_kill_as_its_policy_says() {
    if let Some((url, _server)) = common::server("BOTMESH_TEST_REDIS_URL") {
        run(Some(("redis", &url)));
    }
}
