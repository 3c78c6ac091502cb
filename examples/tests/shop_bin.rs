//! The `shop` binary as a black box: JSON lines in, JSON lines out, a SQLite file between runs.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs the binary with `args`, `input` on stdin; fails the test after 60 s.
fn shop(args: &[&str], input: &str) -> Run {
    run_shop(args, input, true)
}

/// As [`shop`]; with `read_stdout` false, nobody reads the replies (stdout is closed at once).
fn run_shop(args: &[&str], input: &str, read_stdout: bool) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shop"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("SHOP_DB")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shop");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_owned();
    let writer = std::thread::spawn(move || {
        // The shop may exit before reading everything (bad arguments): ignore broken pipes.
        let _ = stdin.write_all(input.as_bytes());
    });
    let read_to_end = |mut from: Box<dyn Read + Send>| {
        let (done, ended) = mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = from.read_to_string(&mut s);
            let _ = done.send(s);
        });
        ended
    };
    let out = child.stdout.take().expect("stdout");
    let stdout = read_stdout.then(|| read_to_end(Box::new(out)));
    let stderr = read_to_end(Box::new(child.stderr.take().expect("stderr")));
    // The shop's stderr ends when it exits (or dies).
    let Ok(stderr) = stderr.recv_timeout(Duration::from_secs(60)) else {
        let _ = child.kill();
        panic!("shop did not exit within 60 s");
    };
    let status = child.wait().expect("wait for shop");
    writer.join().expect("writer thread");
    Run {
        code: status.code(),
        stdout: stdout.map_or_else(String::new, |o| o.recv().unwrap_or_default()),
        stderr,
    }
}

fn jsonl(db: &Path, input: &str) -> Vec<Value> {
    let db = db.to_str().expect("utf-8 temp path");
    let run = shop(&["--jsonl", "--db", db], input);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    run.stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("stdout line is not JSON: {l}: {e}"))
        })
        .collect()
}

fn of<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

fn texts(lines: &[Value]) -> Vec<&str> {
    of(lines, "send")
        .iter()
        .filter_map(|s| s["text"].as_str())
        .collect()
}

#[test]
fn start_is_acked_and_answered_and_the_data_dir_is_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("nested").join("shop.db");
    let lines = jsonl(&db, "{\"id\":\"1\",\"chat\":\"a\",\"text\":\"/start\"}\n");
    assert_eq!(lines[0], json!({"type": "ack", "id": "1"}));
    let sends = of(&lines, "send");
    assert_eq!(sends.len(), 1, "{lines:?}");
    assert_eq!(sends[0]["chat"], "a");
    assert_eq!(sends[0]["key"], "a/1:1");
    assert!(
        sends[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Welcome"))
    );
    assert_eq!(sends[0]["buttons"][0]["id"], "order");
    assert!(db.exists());
}

#[test]
fn an_order_is_taken_then_shown_by_status_in_a_second_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("shop.db");
    let input = concat!(
        "{\"id\":\"1\",\"chat\":\"alice\",\"text\":\"/start\"}\n",
        "{\"id\":\"2\",\"chat\":\"alice\",\"button\":\"order\"}\n",
        "{\"id\":\"3\",\"chat\":\"alice\",\"button\":\"coffee\"}\n",
        "{\"id\":\"4\",\"chat\":\"alice\",\"text\":\"a dozen\"}\n",
        "this line is not JSON\n",
        "{\"id\":\"6\",\"chat\":\"alice\",\"text\":\"100\"}\n",
        "{\"id\":\"7\",\"chat\":\"alice\",\"text\":\"2\"}\n",
        "{\"id\":\"8\",\"chat\":\"alice\",\"button\":\"yes\"}\n",
    );
    let lines = jsonl(&db, input);

    let acks: Vec<&str> = of(&lines, "ack")
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(acks, ["1", "2", "3", "4", "6", "7", "8"]);
    let errors = of(&lines, "error");
    assert_eq!(errors.len(), 1, "{lines:?}");
    assert_eq!(errors[0]["line"], 5);

    let said = texts(&lines);
    // The `#[flow]` version re-asks a bad quantity with one message (`.validate`'s re-ask,
    // which says what to answer) where the hand-written version repeated the question after it.
    let expected = [
        "What would you like? Tea 3.00 · Coffee 3.50 · Cake 4.00",
        "How many Coffee? (1-99)",
        "Please answer with a whole number from 1 to 99.",
        "Please answer with a whole number from 1 to 99.",
        "2 × Coffee for 7.00. Place the order?",
        "Order #1 placed: 2 × Coffee for 7.00. Send /status to see your orders.",
    ];
    assert_eq!(&said[1..], expected, "{lines:?}");
    let confirm = of(&lines, "send")
        .into_iter()
        .find(|s| s["text"] == expected[4])
        .expect("confirm");
    assert_eq!(
        confirm["buttons"],
        json!([{"id": "yes", "title": "Yes"}, {"id": "no", "title": "No"}])
    );
    // Every send carries its idempotency key: `<chat>/<inbound id>:<n>` for a handler's
    // reply, `<chat>/<inbound id>:<flow>/<send site>#<n>` for a flow's send.
    for send in of(&lines, "send") {
        assert!(
            send["key"]
                .as_str()
                .is_some_and(|k| k.starts_with("alice/")),
            "{send}"
        );
    }

    let second = jsonl(
        &db,
        concat!(
            "{\"id\":\"s1\",\"chat\":\"alice\",\"text\":\"/status\"}\n",
            "{\"id\":\"s2\",\"chat\":\"bob\",\"text\":\"/status\"}\n",
        ),
    );
    let said = texts(&second);
    assert_eq!(said.len(), 2, "{second:?}");
    let alice = said
        .iter()
        .find(|t| t.contains("Your orders"))
        .expect("alice's orders");
    assert!(alice.contains("#1 2 × Coffee — 7.00"), "{alice}");
    assert!(said.iter().any(|t| t.contains("no orders yet")), "{said:?}");
}

/// The console's second run on the same database answers from its first line: the lines of
/// a new run are new messages, not redeliveries of the first run's (whose ids the journal
/// keeps for its retention window).
#[test]
fn a_console_run_on_the_same_database_answers_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("shop.db");
    let db = db.to_str().expect("utf-8 path");
    for run in 1..=2 {
        let out = shop(&["--db", db], "/start\n/status\n");
        assert_eq!(out.code, Some(0), "run {run}: {}", out.stderr);
        assert!(
            out.stdout.contains("Welcome to the botmesh shop"),
            "run {run}: {}",
            out.stdout
        );
        assert!(
            out.stdout.contains("no orders yet"),
            "run {run}: {}",
            out.stdout
        );
    }
}

#[test]
fn help_and_bad_arguments() {
    let help = shop(&["--help"], "");
    assert_eq!(help.code, Some(0));
    assert!(help.stdout.contains("Usage: shop"), "{}", help.stdout);
    // Every channel, and each network channel's variables.
    for needle in [
        "console",
        "jsonl",
        "TELEGRAM_BOT_TOKEN",
        "TELEGRAM_WEBHOOK_SECRET",
        "WHATSAPP_ACCESS_TOKEN",
        "WHATSAPP_APP_SECRET",
        "TWILIO_ACCOUNT_SID",
        "TWILIO_AUTH_TOKEN",
        "SHOP_DB",
    ] {
        assert!(help.stdout.contains(needle), "{needle}: {}", help.stdout);
    }

    let bad = shop(&["--frobnicate"], "");
    assert_eq!(bad.code, Some(2));
    assert!(
        bad.stderr.contains("unexpected argument '--frobnicate'"),
        "{}",
        bad.stderr
    );
    assert!(bad.stdout.is_empty());

    let missing = shop(&["--db"], "");
    assert_eq!(missing.code, Some(2));
    assert!(missing.stderr.contains("--db"), "{}", missing.stderr);

    let channel = shop(&["--channel", "fax"], "");
    assert_eq!(channel.code, Some(2));
    assert!(channel.stderr.contains("telegram"), "{}", channel.stderr);

    let chat = shop(&["--jsonl", "--chat", "x"], "");
    assert_eq!(chat.code, Some(2));
    assert!(chat.stderr.contains("--chat"), "{}", chat.stderr);
}

/// Logs written to a pipe or a file are plain `key=value` lines, without colour codes: a
/// search for `chat=…` (or a log collector's parser) finds the field.
#[test]
fn logs_on_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"").expect("write a file");
    let db = blocker.join("shop.db");
    let run = shop(&["--jsonl", "--db", db.to_str().expect("utf-8")], "");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("ERROR shop: the shop failed error="),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains('\u{1b}'), "{:?}", run.stderr);
}

/// A network channel without its configuration says which variable is missing.
#[cfg(feature = "telegram")]
#[test]
fn a_network_channel_names_the_missing_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("shop.db");
    let run = shop(
        &["--channel", "telegram", "--db", db.to_str().expect("utf-8")],
        "",
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("TELEGRAM_BOT_TOKEN"), "{}", run.stderr);
}

/// A reader that went away (stdout closed) fails the sends: none is recorded as sent, the
/// shop exits 1 saying so, and the next run (fed again what was not acknowledged) delivers
/// each reply once, or names the chat in an ambiguous event when its send was in flight.
#[test]
fn a_closed_stdout_fails_the_sends_and_the_next_run_delivers_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("shop.db");
    let input: String = (1..=20)
        .map(|i| format!("{{\"id\":\"{i}\",\"chat\":\"c{i}\",\"text\":\"/start\"}}\n"))
        .collect();
    let db_arg = db.to_str().expect("utf-8");
    let run = run_shop(&["--jsonl", "--db", db_arg], &input, false);
    let (code, stderr) = (run.code, run.stderr);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot write to stdout"), "{stderr}");

    // Nothing was acknowledged: the channel redelivers every line.
    let lines = jsonl(&db, &input);
    for i in 1..=20 {
        let chat = format!("c{i}");
        let menus = of(&lines, "send")
            .iter()
            .filter(|s| s["chat"] == chat.as_str())
            .count();
        // A send that was in flight when the first run stopped has an unknown outcome: the
        // next run names it with an ambiguous event instead of guessing (the promise: never
        // twice, and every missing reply named).
        let named_ambiguous = of(&lines, "event")
            .iter()
            .any(|e| e["name"] == "durability:ambiguous" && e["chat"] == chat.as_str());
        assert!(
            menus == 1 || (menus == 0 && named_ambiguous),
            "chat {chat}: {menus} replies: {lines:?}"
        );
    }
}

/// Over-long fields and fields of the wrong type get an `error` line naming the field.
#[test]
fn bad_fields_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("shop.db");
    let long_id = "x".repeat(300);
    let long_text = "y".repeat(70_000);
    let input = format!(
        "{{\"id\":\"{long_id}\",\"chat\":\"a\",\"text\":\"hi\"}}\n\
         {{\"id\":\"2\",\"chat\":\"a\",\"text\":\"{long_text}\"}}\n\
         {{\"id\":\"3\",\"chat\":\"a\",\"text\":5}}\n\
         {{\"id\":\"4\",\"chat\":\"a\",\"text\":\"hi\",\"group\":\"yes\"}}\n"
    );
    let lines = jsonl(&db, &input);
    let errors: Vec<String> = of(&lines, "error")
        .iter()
        .filter_map(|e| e["error"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(errors.len(), 4, "{lines:?}");
    assert!(errors[0].starts_with("field `id`: 300 bytes"), "{errors:?}");
    assert!(
        errors[1].starts_with("field `text`: 70000 bytes"),
        "{errors:?}"
    );
    assert!(
        errors[2].starts_with("field `text`: expected a string"),
        "{errors:?}"
    );
    assert!(
        errors[3].starts_with("field `group`: expected true or false"),
        "{errors:?}"
    );
}

/// A line fed again on the same database is a redelivery: acknowledged as a duplicate, not
/// answered twice (the README's example uses a fresh database per run).
#[test]
fn a_line_fed_again_is_acknowledged_as_a_duplicate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("shop.db");
    let input = "{\"id\":\"1\",\"chat\":\"a\",\"text\":\"/start\"}\n";
    let first = jsonl(&db, input);
    assert_eq!(first[0], json!({"type": "ack", "id": "1"}));
    assert_eq!(texts(&first).len(), 1, "{first:?}");
    let second = jsonl(&db, input);
    assert_eq!(
        of(&second, "ack"),
        [&json!({"type": "ack", "id": "1", "duplicate": true})],
        "{second:?}"
    );
    assert!(texts(&second).is_empty(), "{second:?}");
}
