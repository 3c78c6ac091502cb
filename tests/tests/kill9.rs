//! A real process killed with SIGKILL in the middle of handlers and sends, on each embedded
//! backend (SQLite; the file backend with its append log and in its default snapshot mode; a
//! shared events journal, whose cross-process mutex a kill may leave behind),
//! at five moments from right after the start to about the last reply (each backend must be
//! cut short mid-work at least once); restarted on the same file, fed again
//! what it had not acknowledged; every expected reply is delivered exactly once (a send whose
//! outcome is unknown is reported by `durability:ambiguous`, never silently duplicated).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use botmesh_tests::ambiguous_reply;
use botmesh_tests::process::{
    Crashbot, acked, assert_each_reply_once, log_lines, message_line, texts, unacked,
};

fn spawn(db: &Path, backend: &str) -> Crashbot {
    let db_arg = db.to_str().unwrap();
    Crashbot::spawn(
        env!("CARGO_BIN_EXE_crashbot"),
        ["--db", db_arg, "--backend", backend, "--work-ms", "15"],
        Some(&db.with_extension("log")),
        "botmesh=debug,botmesh_durability=debug",
    )
}

/// The conversation of chat `f`, a persistent flow, interleaved with the other messages.
const FLOW: [(usize, &str); 3] = [(2, "/order"), (6, "pears"), (10, "2")];
const FLOW_REPLIES: [&str; 3] = ["What would you like?", "How many?", "Ordered 2 x pears"];

fn flow_line(k: usize) -> String {
    format!(
        "{{\"id\":\"f{k}\",\"chat\":\"f\",\"text\":\"{}\"}}\n",
        FLOW[k].1
    )
}

/// Feeds messages `ids` and the flow's lines `flow`, each after the message it is anchored
/// to; when an anchor is not fed (it was acknowledged), the flow's lines all come first, so
/// that they keep their order (a channel redelivers a chat's messages in order).
fn feed(r: &mut Crashbot, ids: &[usize], flow: &[usize]) {
    let anchored = flow.iter().all(|k| ids.contains(&FLOW[*k].0));
    let mut lines = Vec::new();
    if !anchored {
        lines.extend(flow.iter().map(|k| flow_line(*k)));
    }
    for i in ids {
        lines.push(message_line(*i, 3));
        if anchored {
            lines.extend(
                flow.iter()
                    .filter(|k| FLOW[**k].0 == *i)
                    .map(|k| flow_line(*k)),
            );
        }
    }
    r.feed(lines);
}

/// Runs one seeded kill on `backend`; returns the lines acknowledged and the replies sent
/// before the kill, and the sends reported ambiguous.
fn run_case(backend: &str, seed: u64) -> (usize, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db");
    let n = 12;
    let all: Vec<usize> = (0..n).collect();

    // First run: feed everything, kill at a seeded moment.
    let mut first = spawn(&db, backend);
    feed(&mut first, &all, &[0, 1, 2]);
    // From right after the start to about when the last reply goes out on this machine.
    // A real-time sleep, on purpose: the seeded moment of the kill, in a real process.
    let kill_after = Duration::from_millis(15 + seed * 25);
    std::thread::sleep(kill_after);
    let lines1 = first.kill(); // SIGKILL
    let acked = acked(&lines1);

    // Second run on the same file: the channel redelivers what was not acknowledged.
    let mut second = spawn(&db, backend);
    let again = unacked(&all, &acked);
    // The flow's unacknowledged lines, in order (a chat's lines are acknowledged in order).
    let flow_again: Vec<usize> = (0..FLOW.len())
        .filter(|k| !acked.contains(&format!("f{k}")))
        .collect();
    feed(&mut second, &again, &flow_again);
    second.close_input(); // end of input: the bot drains and exits
    let status = second.wait_exit(Duration::from_secs(60));
    if !status.is_some_and(|s| s.success()) {
        let log = std::fs::read_to_string(db.with_extension("log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        panic!(
            "{backend} seed {seed}: the restarted bot did not exit cleanly ({status:?})\nstdout: {:?}\nlog tail:\n{}",
            second.lines(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let lines2 = second.lines();

    let mut sends: Vec<String> = Vec::new();
    // Keys reported ambiguous (`c<chat>/m<i>:<n>`): under the default policy (skip) such a
    // send is never repeated, and it may be lost. Every other reply is delivered exactly once.
    let mut ambiguous: HashSet<String> = HashSet::new();
    for lines in [&lines1, &lines2] {
        sends.extend(texts(lines, "send", "text"));
        ambiguous.extend(lines.iter().filter_map(ambiguous_reply));
    }
    // The persistent flow resumed where it was: each question once, the order once (a send
    // of the flow reported ambiguous may be missing, never doubled).
    let flow_ambiguous = ambiguous.contains("flow");
    let explain_flow = || {
        let related = log_lines(
            &db.with_extension("log"),
            &["f0", "f1", "f2", "chat=f", "\"f\""],
        );
        format!("acked {acked:?}\nlog lines about the flow:\n{related}")
    };
    for text in FLOW_REPLIES {
        let count = sends.iter().filter(|s| s.as_str() == text).count();
        let prompt = text != FLOW_REPLIES[2];
        if flow_ambiguous && prompt {
            // An ask's prompt of unknown outcome is sent again: never lost, maybe twice.
            assert!(
                (1..=2).contains(&count),
                "{backend} seed {seed}: flow question {text:?} sent {count} times: {sends:?}"
            );
        } else if flow_ambiguous {
            assert!(
                count <= 1,
                "{backend} seed {seed}: flow reply {text:?} sent {count} times: {sends:?}"
            );
        } else {
            assert_eq!(
                count,
                1,
                "{backend} seed {seed}: flow reply {text:?} sent {count} times: {sends:?}\n{}",
                explain_flow()
            );
        }
    }
    assert!(
        !sends.iter().any(|s| s.starts_with("Ordered pears")),
        "{backend} seed {seed}: a replayed answer was taken for the next question: {sends:?}"
    );
    let what = format!("{backend} seed {seed} (acked {acked:?})");
    assert_each_reply_once(&what, n, &sends, &ambiguous, |i| {
        let id = format!("m{i}");
        let related = log_lines(&db.with_extension("log"), &[&id]);
        format!("log lines about {id}:\n{related}\nsends: {sends:?}")
    });
    let sent_before_kill = texts(&lines1, "send", "text").len();
    (acked.len(), sent_before_kill, ambiguous.len())
}

/// Every reply of a full run: two per message, three of the flow.
const REPLIES: usize = 12 * 2 + FLOW_REPLIES.len();

#[test]
fn sigkill_mid_work_then_restart_delivers_every_reply_once() {
    // The file backend in both of its modes (the append log, and snapshots, its default), and
    // the bot's journals in a shared events journal (a kill may leave its mutex behind).
    for backend in ["sqlite", "file", "file-snapshot", "events-shared"] {
        let mut mid_work = 0;
        for seed in 0..5 {
            let (acked, sent, ambiguous) = run_case(backend, seed);
            println!(
                "{backend:<13} seed {seed}: {acked:>2}/15 lines acknowledged and {sent:>2}/{REPLIES} replies sent before the kill, {ambiguous} ambiguous"
            );
            if sent < REPLIES {
                mid_work += 1;
            }
        }
        // The kill cut the work short at least once (else the restarts proved nothing).
        assert!(
            mid_work > 0,
            "{backend}: every seed killed the bot after its last reply"
        );
    }
}
