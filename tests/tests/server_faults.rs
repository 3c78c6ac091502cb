//! Server faults at the bot level, against the real servers: Postgres restarted and Redis's
//! client connections killed in the middle of a run. The bot reconnects; what the channel was
//! told was not accepted (a `nack`) is redelivered; every reply is delivered exactly once (a
//! send of unknown outcome is reported by `durability:ambiguous`, never duplicated).

#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh_tests::{ambiguous_reply, server_url};
use serde_json::Value;

fn message(i: usize) -> String {
    format!(
        "{{\"id\":\"m{i}\",\"chat\":\"c{}\",\"text\":\"t{i}\"}}\n",
        i % 4
    )
}

/// Feeds `n` messages slowly, runs `fault` half-way, then redelivers what was not acknowledged
/// until everything is accepted; checks every reply went out once.
fn run(backend: &str, url: &str, fault: impl FnOnce() + Send + 'static) {
    let dir = tempfile::tempdir().unwrap();
    let bot = format!("faults-{backend}-{}", std::process::id());
    let db = dir.path().join("bot.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_crashbot"))
        .args([
            "--db",
            db.to_str().unwrap(),
            "--backend",
            backend,
            "--url",
            url,
            "--bot-id",
            &bot,
        ])
        .args(["--work-ms", "5"])
        .env("RUST_LOG", "botmesh=debug,botmesh_durability=debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("bot.log")).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::<Value>::new()));
    let l = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                l.lock().unwrap().push(v);
            }
        }
    });
    let acked = || -> HashSet<String> {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v["type"] == "ack")
            .filter_map(|v| v["id"].as_str().map(str::to_owned))
            .collect()
    };
    let n = 24;
    let mut fault = Some(fault);
    let mut faulting = None;
    {
        let stdin = child.stdin.as_mut().unwrap();
        for i in 0..n {
            if i == n / 2 {
                // The fault runs while messages keep arriving.
                if let Some(f) = fault.take() {
                    faulting = Some(std::thread::spawn(f));
                }
            }
            stdin.write_all(message(i).as_bytes()).unwrap();
            stdin.flush().unwrap();
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    if let Some(f) = faulting {
        f.join().unwrap();
    }
    // The channel redelivers what was not acknowledged (nacked while the server was away).
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let missing: Vec<usize> = (0..n)
            .filter(|i| !acked().contains(&format!("m{i}")))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{backend}: {missing:?} never accepted after the fault"
        );
        let stdin = child.stdin.as_mut().unwrap();
        for i in missing {
            stdin.write_all(message(i).as_bytes()).unwrap();
        }
        stdin.flush().unwrap();
    }
    // Wait until every reply went out (or was reported ambiguous), up to 40 s: a message whose
    // handler met the server down is retried once the server is back.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let done = {
            let lines = lines.lock().unwrap();
            let sent: HashSet<&str> = lines
                .iter()
                .filter(|v| v["type"] == "send")
                .filter_map(|v| v["text"].as_str())
                .collect();
            let ambiguous = lines
                .iter()
                .filter(|v| v["type"] == "event" && v["name"] == "durability:ambiguous")
                .count();
            (0..n)
                .flat_map(|i| [format!("t{i}:one"), format!("t{i}:two")])
                .filter(|t| !sent.contains(t.as_str()))
                .count()
                <= ambiguous
        };
        if done || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "{backend}: the bot did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    reader.join().unwrap();
    let lines = lines.lock().unwrap().clone();
    let sends: Vec<String> = lines
        .iter()
        .filter(|v| v["type"] == "send")
        .filter_map(|v| v["text"].as_str().map(str::to_owned))
        .collect();
    let ambiguous: HashSet<String> = lines.iter().filter_map(ambiguous_reply).collect();
    let nacks = lines.iter().filter(|v| v["type"] == "nack").count();
    for i in 0..n {
        for part in ["one", "two"] {
            let text = format!("t{i}:{part}");
            let count = sends.iter().filter(|s| **s == text).count();
            if ambiguous.contains(&text) {
                assert!(count <= 1, "{backend}: ambiguous {text} sent {count} times");
            } else {
                let log = std::fs::read_to_string(dir.path().join("bot.log")).unwrap_or_default();
                let id = format!("/m{i}");
                let related: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains(&id) || l.contains("ERROR") || l.contains("WARN"))
                    .collect();
                assert_eq!(
                    count,
                    1,
                    "{backend}: {text} sent {count} times\n{}",
                    related.join("\n")
                );
            }
        }
    }
    println!(
        "{backend}: {nacks} deliveries refused during the fault and redelivered; {} ambiguous",
        ambiguous.len()
    );
}

#[test]
fn postgres_restarted_mid_run() {
    let Some(url) = server_url("BOTMESH_TEST_POSTGRES_URL") else {
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
    let Some(url) = server_url("BOTMESH_TEST_REDIS_URL") else {
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
