//! SIGTERM (what `docker stop`, systemd and Kubernetes send) stops a bot with a drain, as
//! Ctrl-C does: every accepted message is answered before the process exits 0, and what it
//! had not accepted is answered after a restart. No reply is lost, none is sent twice.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Running {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    reader: std::thread::JoinHandle<()>,
}

fn spawn(db: &Path) -> Running {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(db.with_extension("log"))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_crashbot"))
        .args([
            "--db",
            db.to_str().unwrap(),
            "--defaults",
            "--work-ms",
            "150",
        ])
        .env("RUST_LOG", "botmesh=info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("crashbot starts");
    let stdout = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                l.lock().unwrap().push(v);
            }
        }
    });
    Running {
        child,
        lines,
        reader,
    }
}

fn feed(r: &mut Running, ids: &[usize]) {
    let stdin = r.child.stdin.as_mut().unwrap();
    for i in ids {
        let line = format!(
            "{{\"id\":\"m{i}\",\"chat\":\"c{}\",\"text\":\"t{i}\"}}\n",
            i % 4
        );
        stdin.write_all(line.as_bytes()).unwrap();
    }
    stdin.flush().unwrap();
}

fn texts(lines: &[Value], kind: &str, field: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|v| v["type"] == kind)
        .filter_map(|v| v[field].as_str().map(str::to_owned))
        .collect()
}

fn wait_exit(r: &mut Running, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = r.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the bot did not exit in {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(unix)]
#[test]
fn sigterm_mid_run_drains_and_loses_no_reply() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db");
    let n = 24;
    let all: Vec<usize> = (0..n).collect();

    let mut first = spawn(&db);
    feed(&mut first, &all);
    // Mid-run: some replies out, most handlers still working (each works 150 ms between its
    // two replies, a chat's messages one after another).
    let deadline = Instant::now() + Duration::from_secs(30);
    while texts(&first.lines.lock().unwrap(), "send", "text").len() < 4 {
        assert!(Instant::now() < deadline, "no reply in 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let term = Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = wait_exit(&mut first, Duration::from_secs(60));
    assert!(status.success(), "a SIGTERM stop exits 0: {status:?}");
    first.reader.join().unwrap();
    let lines1 = first.lines.lock().unwrap().clone();
    let acked: HashSet<String> = texts(&lines1, "ack", "id").into_iter().collect();
    let sent1 = texts(&lines1, "send", "text");
    // The drain answered every message it had accepted, both replies.
    for id in &acked {
        let i: usize = id[1..].parse().unwrap();
        for part in ["one", "two"] {
            let text = format!("t{i}:{part}");
            assert!(
                sent1.contains(&text),
                "{text} of an accepted message not sent before the exit: {sent1:?}"
            );
        }
    }
    assert!(
        sent1.len() < 2 * n,
        "the signal came after the last reply: nothing was mid-run"
    );

    // The channel redelivers what was not acknowledged.
    let mut second = spawn(&db);
    let again: Vec<usize> = all
        .iter()
        .copied()
        .filter(|i| !acked.contains(&format!("m{i}")))
        .collect();
    feed(&mut second, &again);
    drop(second.child.stdin.take());
    let status = wait_exit(&mut second, Duration::from_secs(60));
    assert!(status.success());
    second.reader.join().unwrap();
    let lines2 = second.lines.lock().unwrap().clone();
    let mut sends = sent1.clone();
    sends.extend(texts(&lines2, "send", "text"));
    for i in 0..n {
        for part in ["one", "two"] {
            let text = format!("t{i}:{part}");
            let count = sends.iter().filter(|s| **s == text).count();
            assert_eq!(count, 1, "{text} sent {count} times: {sends:?}");
        }
    }
    println!(
        "{} of {n} messages accepted and answered before the SIGTERM exit; the rest after the restart",
        acked.len()
    );
}
