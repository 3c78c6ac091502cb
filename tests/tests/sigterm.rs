//! SIGTERM (what `docker stop`, systemd and Kubernetes send) stops a bot with a drain, as
//! Ctrl-C does: every accepted message is answered before the process exits 0, and what it
//! had not accepted is answered after a restart. No reply is lost, none is sent twice.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use botmesh_tests::process::{
    Crashbot, acked, assert_each_reply_once, message_line, texts, unacked,
};

fn spawn(db: &Path) -> Crashbot {
    let db_arg = db.to_str().unwrap();
    Crashbot::spawn(
        env!("CARGO_BIN_EXE_crashbot"),
        ["--db", db_arg, "--defaults", "--work-ms", "150"],
        Some(&db.with_extension("log")),
        "botmesh=info",
    )
}

#[cfg(unix)]
#[test]
fn sigterm_mid_run_drains_and_loses_no_reply() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db");
    let n = 24;
    let all: Vec<usize> = (0..n).collect();

    let mut first = spawn(&db);
    first.feed(all.iter().map(|i| message_line(*i, 4)));
    // Mid-run: some replies out, most handlers still working (each works 150 ms between its
    // two replies, a chat's messages one after another).
    assert!(
        first.wait_until(Duration::from_secs(30), |lines| {
            texts(lines, "send", "text").len() >= 4
        }),
        "no reply in 30 s"
    );
    let term = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = first.wait_exit(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "a SIGTERM stop exits 0: {status:?}"
    );
    let lines1 = first.lines();
    let acked = acked(&lines1);
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
    second.feed(unacked(&all, &acked).iter().map(|i| message_line(*i, 4)));
    let lines2 = second.finish();
    let mut sends = sent1.clone();
    sends.extend(texts(&lines2, "send", "text"));
    assert_each_reply_once("SIGTERM", n, &sends, &HashSet::new(), |_| {
        format!("{sends:?}")
    });
    println!(
        "{} of {n} messages accepted and answered before the SIGTERM exit; the rest after the restart",
        acked.len()
    );
}
