//! [`Crashbot`]: the `crashbot` binary run as a child process, fed JSON lines on its stdin,
//! with its stdout's JSON lines collected by a reader thread. Waiting is on those lines (a
//! condition variable the readers signal), never on the clock: [`Crashbot::wait_until`] and
//! [`wait_all`] wake at each new line and at the end of an output.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What the reader thread has seen.
#[derive(Debug, Default)]
struct Output {
    lines: Vec<Value>,
    /// The process closed its stdout (it exited, or is about to).
    closed: bool,
}

#[derive(Debug, Default)]
struct Shared {
    output: Mutex<Output>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Output> {
        self.output.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Counts the output events (a line, an end of output) of every `Crashbot` of the test
/// binary; waiters sleep on it until it moves.
static CHANGES: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

fn changed() {
    *CHANGES.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    CHANGES.1.notify_all();
}

/// Waits until `done` holds of the output lines of `bots` (in that order, concatenated), or
/// every output ended, or `within` passed; returns whether `done` holds.
pub fn wait_all(bots: &[&Crashbot], within: Duration, done: impl Fn(&[Value]) -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let seen = *CHANGES.0.lock().unwrap_or_else(|e| e.into_inner());
        let lines: Vec<Value> = bots.iter().flat_map(|b| b.lines()).collect();
        if done(&lines) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || bots.iter().all(|b| b.shared.lock().closed) {
            return false;
        }
        let guard = CHANGES.0.lock().unwrap_or_else(|e| e.into_inner());
        let _ = CHANGES
            .1
            .wait_timeout_while(guard, left, |n| *n == seen)
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// A running `crashbot`.
#[derive(Debug)]
pub struct Crashbot {
    child: Child,
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
}

/// The jsonl input line of message `m<i>` (text `t<i>`) in chat `c<i % chats>`.
pub fn message_line(i: usize, chats: usize) -> String {
    format!(
        "{{\"id\":\"m{i}\",\"chat\":\"c{}\",\"text\":\"t{i}\"}}\n",
        i % chats
    )
}

/// The `field` of every line of type `kind` (`"send"` and `"text"`: the replies).
pub fn texts(lines: &[Value], kind: &str, field: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|v| v["type"] == kind)
        .filter_map(|v| v[field].as_str().map(str::to_owned))
        .collect()
}

/// The ids of the messages acknowledged in `lines`.
pub fn acked(lines: &[Value]) -> HashSet<String> {
    texts(lines, "ack", "id").into_iter().collect()
}

/// The messages of `all` (`m<i>`, see [`message_line`]) that are not in `acked`: what the
/// channel redelivers.
pub fn unacked(all: &[usize], acked: &HashSet<String>) -> Vec<usize> {
    all.iter()
        .copied()
        .filter(|i| !acked.contains(&format!("m{i}")))
        .collect()
}

/// The arguments of a bot on file `db` with its journals on `backend` at `url` (a server).
pub fn on_server(db: &Path, backend: &str, url: &str) -> Vec<String> {
    let db = db.display();
    format!("--db\n{db}\n--backend\n{backend}\n--url\n{url}")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether every reply of messages `0..n` (`t<i>:one`, `t<i>:two`) went out in `lines`, but
/// for as many as were reported ambiguous.
pub fn all_replied(n: usize, lines: &[Value]) -> bool {
    let sent: std::collections::HashSet<String> =
        texts(lines, "send", "text").into_iter().collect();
    let ambiguous = lines.iter().filter_map(crate::ambiguous_reply).count();
    (0..n)
        .flat_map(|i| [format!("t{i}:one"), format!("t{i}:two")])
        .filter(|t| !sent.contains(t))
        .count()
        <= ambiguous
}

/// Checks that each reply of messages `0..n` (`t<i>:one`, `t<i>:two`) is in `sends` once, or
/// at most once when `ambiguous` names it; `explain(i)` tells more about message `i` on failure.
///
/// # Panics
/// On a reply missing or sent twice.
pub fn assert_each_reply_once(
    what: &str,
    n: usize,
    sends: &[String],
    ambiguous: &std::collections::HashSet<String>,
    explain: impl Fn(usize) -> String,
) {
    for i in 0..n {
        for part in ["one", "two"] {
            let text = format!("t{i}:{part}");
            let count = sends.iter().filter(|s| **s == text).count();
            if ambiguous.contains(&text) {
                assert!(count <= 1, "{what}: ambiguous {text} sent {count} times");
            } else {
                assert_eq!(
                    count,
                    1,
                    "{what}: {text} sent {count} times\n{}",
                    explain(i)
                );
            }
        }
    }
}

/// The lines of a log file that contain any of `needles` (to explain a failure).
pub fn log_lines(log: &Path, needles: &[&str]) -> String {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.lines()
        .filter(|l| needles.iter().any(|n| l.contains(n)))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Crashbot {
    /// Starts the binary `bin` (a test's `env!("CARGO_BIN_EXE_crashbot")`) with `args`, its
    /// log (stderr) appended to `log` (or dropped), with `RUST_LOG=rust_log`.
    ///
    /// # Panics
    /// When the binary cannot start (a test harness: the test fails).
    pub fn spawn(
        bin: &str,
        args: impl IntoIterator<Item = impl AsRef<std::ffi::OsStr>>,
        log: Option<&Path>,
        rust_log: &str,
    ) -> Self {
        let stderr = match log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("the log file opens"),
            ),
            None => Stdio::null(),
        };
        let mut child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("crashbot starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    s.lock().lines.push(v);
                    changed();
                }
            }
            s.lock().closed = true;
            changed();
        });
        Self {
            child,
            shared,
            reader: Some(reader),
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Writes `lines` to the bot's stdin and flushes.
    ///
    /// # Panics
    /// When the input is closed or the pipe broke.
    pub fn feed(&mut self, lines: impl IntoIterator<Item = String>) {
        let stdin = self.child.stdin.as_mut().expect("the input is open");
        for line in lines {
            stdin.write_all(line.as_bytes()).expect("the bot reads");
        }
        stdin.flush().expect("the bot reads");
    }

    /// Closes the bot's stdin: the end of input, after which it drains and exits.
    pub fn close_input(&mut self) {
        drop(self.child.stdin.take());
    }

    /// The output lines so far.
    pub fn lines(&self) -> Vec<Value> {
        self.shared.lock().lines.clone()
    }

    /// Waits until `done` holds of the output lines, or the output ended, or `within` passed;
    /// returns whether `done` holds.
    pub fn wait_until(&self, within: Duration, done: impl Fn(&[Value]) -> bool) -> bool {
        wait_all(&[self], within, done)
    }

    /// Waits until the process exits (its output ends first), up to `within`; `None` when it
    /// did not (it is then killed).
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        if !self.wait_until(within, |_| false) && !self.shared.lock().closed {
            let _ = self.child.kill();
            let _ = self.child.wait();
            return None;
        }
        let status = self.child.wait().expect("the child is waited for");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        Some(status)
    }

    /// Closes the input and waits for a clean exit (up to 60 s); returns every output line.
    ///
    /// # Panics
    /// When the bot does not exit, or exits with a failure.
    pub fn finish(mut self) -> Vec<Value> {
        self.close_input();
        let status = self.wait_exit(Duration::from_secs(60));
        assert!(
            status.is_some_and(|s| s.success()),
            "the bot exits cleanly at the end of its input: {status:?}"
        );
        self.lines()
    }

    /// Kills the process with SIGKILL; returns every output line.
    ///
    /// # Panics
    /// When the process cannot be killed.
    pub fn kill(mut self) -> Vec<Value> {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("the child is waited for");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.lines()
    }
}

impl Drop for Crashbot {
    fn drop(&mut self) {
        if self.reader.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A `schedbot` on SQLite file `db`, with its journals on `server` (`(backend, url)`) or in
/// the file, as bot `bot_id`, its wall clock `offset_ms` ahead, and the `extra` arguments; its
/// log goes to `<db>.log`.
pub fn spawn_schedbot(
    exe: &str,
    db: &Path,
    server: Option<(&str, &str)>,
    bot_id: &str,
    offset_ms: i64,
    extra: &[&str],
) -> Crashbot {
    let mut args = match server {
        Some((backend, url)) => on_server(db, backend, url),
        None => vec!["--db".to_owned(), db.display().to_string()],
    };
    args.extend(["--bot-id".to_owned(), bot_id.to_owned()]);
    args.extend(["--clock-offset-ms".to_owned(), offset_ms.to_string()]);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Crashbot::spawn(exe, args, Some(&db.with_extension("log")), "botmesh=debug")
}

/// A bot id unique to this test process and moment (`<prefix>-<pid>-<nanos>`): runs sharing a
/// server never see each other's data.
pub fn unique_bot_id(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000)
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}
