//! Several replicas on one shared backend (Postgres, Redis), against the real servers: three
//! `crashbot` processes share one bot's journals; the one that received the messages is
//! SIGKILLed in the middle of its handlers; the other two claim its records once their leases
//! expire and replay them, and every reply is delivered exactly once across the three (a send
//! of unknown outcome is reported by `durability:ambiguous`, never duplicated).
//!
//! Needs `BOTMESH_TEST_POSTGRES_URL` / `BOTMESH_TEST_REDIS_URL`; without them the suite says it
//! was skipped, and under `CI=true` a missing server fails it.

#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh_tests::{ambiguous_reply, server_url};
use serde_json::Value;

struct Replica {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

fn spawn(dir: &std::path::Path, backend: &str, url: &str, bot: &str, instance: &str) -> Replica {
    let db = dir.join(format!("{instance}.db"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_crashbot"))
        .args([
            "--db",
            db.to_str().unwrap(),
            "--backend",
            backend,
            "--url",
            url,
        ])
        .args([
            "--bot-id",
            bot,
            "--instance",
            instance,
            "--lease-ms",
            "700",
            "--work-ms",
            "400",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("crashbot starts");
    let stdout = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                l.lock().unwrap().push(v);
            }
        }
    });
    Replica {
        child,
        lines,
        reader: Some(reader),
    }
}

impl Replica {
    fn feed(&mut self, ids: &[usize]) {
        let stdin = self.child.stdin.as_mut().unwrap();
        for i in ids {
            let line = format!(
                "{{\"id\":\"m{i}\",\"chat\":\"c{}\",\"text\":\"t{i}\"}}\n",
                i % 3
            );
            stdin.write_all(line.as_bytes()).unwrap();
        }
        stdin.flush().unwrap();
    }

    fn count(&self, t: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v["type"] == t)
            .count()
    }

    fn finish(mut self) -> Vec<Value> {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "a replica did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.lines.lock().unwrap().clone()
    }

    fn kill(mut self) -> Vec<Value> {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.lines.lock().unwrap().clone()
    }
}

fn run(backend: &str, url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let bot = format!("failover-{}", std::process::id());
    let n = 9;
    let all: Vec<usize> = (0..n).collect();
    let mut a = spawn(dir.path(), backend, url, &bot, "replica-a");
    let b = spawn(dir.path(), backend, url, &bot, "replica-b");
    let c = spawn(dir.path(), backend, url, &bot, "replica-c");
    a.feed(&all);
    // Let A acknowledge and start its handlers (each takes 400 ms between its two replies).
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.count("ack") < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(150));
    let lines_a = a.kill(); // SIGKILL in the middle of the handlers
    let acked: HashSet<String> = lines_a
        .iter()
        .filter(|v| v["type"] == "ack")
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect();
    // The others claim A's records once the leases (700 ms) expired; give them time to replay.
    let mut b = b;
    let unacked: Vec<usize> = all
        .iter()
        .copied()
        .filter(|i| !acked.contains(&format!("m{i}")))
        .collect();
    b.feed(&unacked);
    std::thread::sleep(Duration::from_millis(4000));
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
    for i in 0..n {
        for part in ["one", "two"] {
            let text = format!("t{i}:{part}");
            let count = sends.iter().filter(|s| **s == text).count();
            if ambiguous.contains(&text) {
                assert!(count <= 1, "{backend}: ambiguous {text} sent {count} times");
            } else {
                assert_eq!(count, 1, "{backend}: {text} sent {count} times: {sends:?}");
            }
        }
    }
    println!(
        "{backend}: A acknowledged {}/{n} and was killed; B and C sent {replayed_elsewhere} replies of A's messages; {} ambiguous",
        acked.len(),
        ambiguous.len()
    );
}

#[test]
fn postgres_replicas_take_over_a_killed_one() {
    if let Some(url) = server_url("BOTMESH_TEST_POSTGRES_URL") {
        run("postgres", &url);
    }
}

#[test]
fn redis_replicas_take_over_a_killed_one() {
    if let Some(url) = server_url("BOTMESH_TEST_REDIS_URL") {
        run("redis", &url);
    }
}
