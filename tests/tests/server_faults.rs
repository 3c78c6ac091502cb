//! Server faults at the bot level, against the real servers: Postgres restarted and Redis's
//! client connections killed in the middle of a run. The bot reconnects; what the channel was
//! told was not accepted (a `nack`) is redelivered; every reply is delivered exactly once (a
//! send of unknown outcome is reported by `durability:ambiguous`, never duplicated).

#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use crate::common;
use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use botmesh_tests::ambiguous_reply;
use botmesh_tests::process::{
    Crashbot, acked, all_replied, assert_each_reply_once, log_lines, message_line, on_server,
    texts, unacked,
};
use serde_json::Value;

/// Whether message `m<i>` was answered `ack` or `nack` in `lines`.
fn answered(lines: &[Value], i: usize) -> bool {
    let id = format!("m{i}");
    lines
        .iter()
        .any(|v| (v["type"] == "ack" || v["type"] == "nack") && v["id"] == id.as_str())
}

/// Feeds `n` messages one after another (each once the bot answered the one before), runs
/// `fault` half-way, then redelivers what was not acknowledged until everything is accepted;
/// checks every reply went out once.
fn run(backend: &str, url: &str, fault: impl FnOnce() + Send + 'static) {
    let dir = tempfile::tempdir().unwrap();
    let bot = format!("faults-{backend}-{}", std::process::id());
    let db = dir.path().join("bot.db");
    let log = dir.path().join("bot.log");
    let mut args = on_server(&db, backend, url);
    args.extend(["--bot-id", &bot, "--work-ms", "5"].map(str::to_owned));
    let mut child = Crashbot::spawn(
        env!("CARGO_BIN_EXE_crashbot"),
        &args,
        Some(&log),
        "botmesh=debug,botmesh_durability=debug",
    );
    let n = 24;
    let mut fault = Some(fault);
    let mut faulting = None;
    for i in 0..n {
        if i == n / 2 {
            // The fault runs while messages keep arriving.
            if let Some(f) = fault.take() {
                faulting = Some(std::thread::spawn(f));
            }
        }
        child.feed([message_line(i, 4)]);
        child.wait_until(Duration::from_secs(10), |lines| answered(lines, i));
    }
    if let Some(f) = faulting {
        f.join().unwrap();
    }
    // The channel redelivers what was not acknowledged (nacked while the server was away),
    // once the bot answered every delivery it was given.
    let mut rounds = 0;
    loop {
        let lines = child.lines();
        let missing = unacked(&(0..n).collect::<Vec<_>>(), &acked(&lines));
        if missing.is_empty() {
            break;
        }
        rounds += 1;
        assert!(
            rounds <= 100,
            "{backend}: {missing:?} never accepted after the fault"
        );
        let answers = |lines: &[Value]| {
            lines
                .iter()
                .filter(|v| v["type"] == "ack" || v["type"] == "nack")
                .count()
        };
        let before = answers(&lines);
        child.feed(missing.iter().map(|i| message_line(*i, 4)));
        child.wait_until(Duration::from_secs(10), |lines| {
            answers(lines) >= before + missing.len()
        });
    }
    // Wait until every reply went out (or was reported ambiguous), up to 40 s: a message whose
    // handler met the server down is retried once the server is back.
    child.wait_until(Duration::from_secs(40), |lines| all_replied(n, lines));
    let lines = child.finish();
    let sends = texts(&lines, "send", "text");
    let ambiguous: HashSet<String> = lines.iter().filter_map(ambiguous_reply).collect();
    let nacks = lines.iter().filter(|v| v["type"] == "nack").count();
    assert_each_reply_once(backend, n, &sends, &ambiguous, |i| {
        log_lines(&log, &[&format!("/m{i}"), "ERROR", "WARN"])
    });
    println!(
        "{backend}: {nacks} deliveries refused during the fault and redelivered; {} ambiguous",
        ambiguous.len()
    );
}

#[test]
fn postgres_restarted_mid_run() {
    let Some((url, _alone)) = common::server_alone("BOTMESH_TEST_POSTGRES_URL") else {
        return;
    };
    run("postgres", &url, || {
        let command = std::env::var("BOTMESH_TEST_POSTGRES_RESTART").unwrap_or_else(|_| {
            "pg_ctlcluster --skip-systemctl-redirect \"$(ls /etc/postgresql | sort -V | tail -n 1)\" main restart".to_owned()
        });
        let status = Command::new("sh").args(["-c", &command]).status().unwrap();
        assert!(status.success(), "postgres restarted");
    });
}

#[test]
fn redis_connections_killed_mid_run() {
    let Some((url, _alone)) = common::server_alone("BOTMESH_TEST_REDIS_URL") else {
        return;
    };
    let host_port = url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let (host, port) = host_port.split_once(':').unwrap_or((&host_port, "6379"));
    let (host, port) = (host.to_owned(), port.to_owned());
    run("redis", &url, move || {
        let status = Command::new("redis-cli")
            .args(["-h", &host, "-p", &port, "CLIENT", "KILL", "TYPE", "normal"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "connections killed");
    });
}
