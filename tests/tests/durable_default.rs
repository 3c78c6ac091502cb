//! Durable is the default: a bot built with nothing but its SQLite store runs the inbox and
//! outbox journals in it, and a restart after a SIGKILL reclaims the killed run's leases at once
//! (its default instance id is the same), instead of waiting out the 60 s lease.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use botmesh::durability::SqliteStore;
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use serde_json::Value;

struct Running {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

fn spawn(db: &Path, work_ms: u64) -> Running {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(db.with_extension("log"))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_crashbot"))
        .args(["--db", db.to_str().unwrap(), "--defaults", "--work-ms"])
        .arg(work_ms.to_string())
        .env("RUST_LOG", "botmesh=debug,botmesh_durability=debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("crashbot starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if tx.send(v).is_err() {
                    break;
                }
            }
        }
    });
    Running { child, lines }
}

/// Waits for a `send` line whose text is `text`; panics after `within`.
fn wait_send(r: &Running, text: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match r.lines.recv_timeout(left) {
            Ok(v) if v["type"] == "send" && v["text"] == text => return,
            Ok(_) => {}
            Err(_) => panic!("no `{text}` within {within:?}"),
        }
    }
}

#[test]
fn a_restarted_bot_built_with_the_defaults_reclaims_its_work_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db");
    // The handler answers `t:one`, then works 30 s before `t:two`: killed in between, it
    // holds the inbound record's lease.
    let mut first = spawn(&db, 30_000);
    first
        .child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"{\"id\":\"m1\",\"chat\":\"c\",\"text\":\"t\"}\n")
        .unwrap();
    wait_send(&first, "t:one", Duration::from_secs(30));
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();

    // The restart replays the record at once: `t:one` comes from the outbox (not sent again),
    // `t:two` follows without waiting for the lease to expire.
    let started = Instant::now();
    let mut second = spawn(&db, 0);
    wait_send(&second, "t:two", Duration::from_secs(30));
    let took = started.elapsed();
    println!("first reply after the restart: {took:?} (process start included)");
    drop(second.child.stdin.take());
    let status = second.child.wait().unwrap();
    assert!(status.success());
    let again: Vec<Value> = second.lines.try_iter().collect();
    assert!(
        !again.iter().any(|v| v["text"] == "t:one"),
        "t:one sent twice: {again:?}"
    );
    // Well under the 60 s lease a new instance id would have waited for (the bound leaves
    // room for a loaded machine; the figure is printed above).
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[tokio::test]
async fn a_durable_store_runs_the_journals_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let bot = Bot::builder(MockProvider::new())
        .bot_id("b")
        .store(store.clone())
        .build()
        .unwrap();
    assert!(bot.durability().is_some(), "journals on by default");
    let off = Bot::builder(MockProvider::new())
        .bot_id("b")
        .store(store.clone())
        .durability(DurabilityOptions::off())
        .build()
        .unwrap();
    assert!(off.durability().is_none(), "turned off explicitly");
    let memory = Bot::builder(MockProvider::new()).build().unwrap();
    assert!(
        memory.durability().is_none(),
        "a memory store keeps nothing: no journals unless asked"
    );
}

#[tokio::test]
async fn the_default_instance_id_is_stable_across_runs_and_unique_among_live_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bot.db"));
    let build = || {
        Bot::builder(MockProvider::new())
            .bot_id("b")
            .store(store.clone())
            .build()
            .unwrap()
    };
    let first = build();
    let id = first.durability().unwrap().instance_id().to_owned();
    // A second live bot of the same id on the same file gets its own.
    let second = build();
    let other = second.durability().unwrap().instance_id().to_owned();
    assert_ne!(id, other);
    drop(first);
    drop(second);
    // The next run gets the first id again.
    let again = build();
    assert_eq!(again.durability().unwrap().instance_id(), id);
    assert!(id.ends_with("/b/default"), "{id}");
}
