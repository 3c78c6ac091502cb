//! The `shop` binary on Telegram (long polling) against the fake Bot API, as a user would run
//! it (`shop --channel telegram`, nothing but its SQLite file): a dozen chats each take an
//! order in a closed loop (each answer sent once its question arrived), while the shop is
//! SIGKILLed at seeded moments and restarted on the same file; another run injects 502s and
//! 429 bursts (`retry_after`) into `sendMessage`.
//!
//! What must hold: no reply twice unless a `send outcome is ambiguous` log line names its
//! chat, no answer taken for another question (no "Sorry, we don't sell that." and the like),
//! every chat reaches its confirmation (none is left without its next question), and under
//! the faults every reply arrives exactly once, in order.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::expect_used)]

#[path = "../../providers/tests/fakes/mod.rs"]
mod fakes;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fakes::telegram::{FakeTelegram, updates};
use serde_json::json;

const TOKEN: &str = "4242:crash-token";
const CHATS: i64 = 12;
/// The order each chat places, as (the question's start, the answer).
const SCRIPT: [(&str, &str); 3] = [
    ("What would you like?", "Coffee"),
    ("How many Coffee?", "2"),
    ("2 × Coffee for", "yes"),
];
const DONE: &str = "Order #";
/// Replies that mean an answer was fed to the wrong question.
const WRONG: [&str; 3] = [
    "Sorry, we don't sell that.",
    "Please answer with a whole number",
    "Please answer Yes or No.",
];

fn spawn_shop(db: &Path, fake: &FakeTelegram) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(db.with_extension("log"))
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_shop"))
        .args(["--channel", "telegram", "--db", db.to_str().unwrap()])
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_API_BASE", fake.base_url())
        .env("TELEGRAM_POLL_TIMEOUT_SECS", "1")
        .env_remove("TELEGRAM_WEBHOOK_SECRET")
        .env_remove("SHOP_DB")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the shop starts")
}

/// The chats named by `send outcome is ambiguous` lines of the shop's log.
fn ambiguous_chats(db: &Path) -> HashSet<String> {
    let log = std::fs::read_to_string(db.with_extension("log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("send outcome is ambiguous"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("chat="))
                .map(|c| c.trim_matches('"').to_owned())
        })
        .collect()
}

/// Drives every chat one step: answers the last question received if it was not answered yet.
/// Returns whether every chat is done.
fn drive(fake: &FakeTelegram, answered: &mut HashMap<i64, usize>, next_id: &mut i64) -> bool {
    let mut done = true;
    for chat in 1..=CHATS {
        let user = 1000 + chat;
        let texts = fake.delivered_to(user);
        if texts.iter().any(|t| t.starts_with(DONE)) {
            continue;
        }
        done = false;
        let stage = answered.entry(chat).or_insert(0);
        if *stage == 0 {
            *next_id += 1;
            fake.push_update(updates::text(user, *next_id, "/order"));
            *stage = 1;
            continue;
        }
        // Stage n (1..=3) waits for question n; after the last answer, for the confirmation.
        let Some((question, answer)) = SCRIPT.get(*stage - 1) else {
            continue;
        };
        if texts.iter().any(|t| t.starts_with(question)) {
            *next_id += 1;
            fake.push_update(updates::text(user, *next_id, answer));
            *stage += 1;
        }
    }
    done
}

/// Per chat, the texts delivered; fails on a wrong answer, an unexplained duplicate, a reply
/// out of order, or a chat without its confirmation (unless an ambiguous line names it).
fn check(fake: &FakeTelegram, db: &Path, faults: bool) -> (usize, usize) {
    let ambiguous = ambiguous_chats(db);
    let mut duplicates = 0;
    for chat in 1..=CHATS {
        let user = 1000 + chat;
        let texts = fake.delivered_to(user);
        for wrong in WRONG {
            assert!(
                !texts.iter().any(|t| t.starts_with(wrong)),
                "chat {user}: an answer was taken for another question: {texts:?}"
            );
        }
        let mut seen = HashSet::new();
        for t in &texts {
            if !seen.insert(t.clone()) {
                duplicates += 1;
                assert!(
                    !faults && ambiguous.contains(&user.to_string()),
                    "chat {user}: {t:?} twice, and no ambiguous send names the chat: {texts:?}"
                );
            }
        }
        // In order: each question after the one before it, the confirmation last.
        let mut at = 0;
        for (question, _) in SCRIPT {
            let i = texts.iter().position(|t| t.starts_with(question));
            let i = i.unwrap_or_else(|| panic!("chat {user}: never asked {question:?}: {texts:?}"));
            assert!(i >= at, "chat {user}: out of order: {texts:?}");
            at = i;
        }
        let confirmed = texts.iter().any(|t| t.starts_with(DONE));
        assert!(
            confirmed || (!faults && ambiguous.contains(&user.to_string())),
            "chat {user}: no confirmation, and no ambiguous send names the chat: {texts:?}"
        );
    }
    (duplicates, ambiguous.len())
}

async fn wait_all_done(fake: &FakeTelegram, db: &Path, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    let mut answered = HashMap::new();
    let mut next_id = 0;
    loop {
        if drive(fake, &mut answered, &mut next_id) {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            // A chat whose last reply was skipped as ambiguous waits forever: that is allowed
            // when the log names it; `check` decides.
            let ambiguous = ambiguous_chats(db);
            let stuck: Vec<i64> = (1..=CHATS)
                .map(|c| 1000 + c)
                .filter(|u| !fake.delivered_to(*u).iter().any(|t| t.starts_with(DONE)))
                .filter(|u| !ambiguous.contains(&u.to_string()))
                .collect();
            if !stuck.is_empty() {
                let log = std::fs::read_to_string(db.with_extension("log")).unwrap_or_default();
                let details: Vec<String> = stuck
                    .iter()
                    .map(|u| {
                        format!(
                            "{u}: delivered {:?}; all sendMessage calls {:?}",
                            fake.delivered_to(*u),
                            fake.texts_to(*u)
                        )
                    })
                    .collect();
                panic!(
                    "chats left without their next message: {stuck:?}\n{}\nunconfirmed updates: {:?}\nlog:\n{log}",
                    details.join("\n"),
                    fake.unconfirmed()
                );
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn kill9(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// Kills the shop when a failing test unwinds (a SIGKILL: the test is over anyway).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_polling_shop_survives_sigkills() {
    let seeds: Vec<u64> = match std::env::var("SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..3).collect(),
    };
    for seed in seeds {
        let dir = tempfile::tempdir().unwrap();
        let db: PathBuf = dir.path().join("shop.db");
        let fake = FakeTelegram::start(TOKEN).await;
        let mut shop = KillOnDrop(spawn_shop(&db, &fake));
        let mut rng = fastrand::Rng::with_seed(seed);
        // Two kills per run, at seeded moments of the conversation.
        let mut answered = HashMap::new();
        let mut next_id = 0;
        for _ in 0..2 {
            let until = tokio::time::Instant::now() + Duration::from_millis(rng.u64(150..900));
            while tokio::time::Instant::now() < until {
                drive(&fake, &mut answered, &mut next_id);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            kill9(&mut shop.0);
            shop = KillOnDrop(spawn_shop(&db, &fake));
        }
        let mut rest = answered;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if drive(&fake, &mut rest, &mut next_id) || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        wait_all_done(&fake, &db, Duration::from_millis(1)).await;
        stop(&mut shop.0);
        let (duplicates, ambiguous) = check(&fake, &db, false);
        println!(
            "seed {seed}: {CHATS} chats ordered through 2 SIGKILLs; {duplicates} duplicate(s), {ambiguous} chat(s) named ambiguous"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_polling_shop_retries_5xx_and_429_bursts() {
    let dir = tempfile::tempdir().unwrap();
    let db: PathBuf = dir.path().join("shop.db");
    let fake = FakeTelegram::start(TOKEN).await;
    let mut shop = KillOnDrop(spawn_shop(&db, &fake));
    let mut answered = HashMap::new();
    let mut next_id = 0;
    let mut injected_at = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        // A 502 on every 5th `sendMessage`, and three 429s in a row on every 12th.
        let calls = fake.calls("sendMessage").len();
        if calls >= injected_at + 5 {
            injected_at = calls;
            if calls % 12 < 5 {
                for _ in 0..3 {
                    fake.fail_next(
                        "sendMessage",
                        429,
                        json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}}),
                    );
                }
            } else {
                fake.fail_next(
                    "sendMessage",
                    502,
                    json!({"ok": false, "error_code": 502, "description": "Bad Gateway"}),
                );
            }
        }
        if drive(&fake, &mut answered, &mut next_id) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every chat finished its order under the faults"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop(&mut shop.0);
    check(&fake, &db, true);
    let failed = fake.calls("sendMessage").len()
        - (1..=CHATS)
            .map(|c| fake.delivered_to(1000 + c).len())
            .sum::<usize>();
    println!("{CHATS} chats ordered with {failed} failed sendMessage calls retried");
}
