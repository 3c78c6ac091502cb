//! Durable is the default: a bot built with nothing but its SQLite store runs the inbox and
//! outbox journals in it, and a restart after a SIGKILL reclaims the killed run's leases at once
//! (its default instance id is the same), instead of waiting out the 60 s lease.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use botmesh::durability::SqliteStore;
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use botmesh_tests::process::{Crashbot, texts};

fn spawn(db: &Path, work_ms: u64) -> Crashbot {
    let work_ms = work_ms.to_string();
    Crashbot::spawn(
        env!("CARGO_BIN_EXE_crashbot"),
        [
            "--db",
            db.to_str().unwrap(),
            "--defaults",
            "--work-ms",
            &work_ms,
        ],
        Some(&db.with_extension("log")),
        "botmesh=debug,botmesh_durability=debug",
    )
}

/// Waits for a `send` line whose text is `text`; panics after `within`.
fn wait_send(r: &Crashbot, text: &str, within: Duration) {
    let sent = r.wait_until(within, |lines| {
        texts(lines, "send", "text").iter().any(|t| t == text)
    });
    assert!(sent, "no `{text}` within {within:?}");
}

#[test]
fn a_restarted_bot_built_with_the_defaults_reclaims_its_work_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db");
    // The handler answers `t:one`, then works 30 s before `t:two`: killed in between, it
    // holds the inbound record's lease.
    let mut first = spawn(&db, 30_000);
    first.feed(["{\"id\":\"m1\",\"chat\":\"c\",\"text\":\"t\"}\n".to_owned()]);
    wait_send(&first, "t:one", Duration::from_secs(30));
    first.kill(); // SIGKILL

    // The restart replays the record at once: `t:one` comes from the outbox (not sent again),
    // `t:two` follows without waiting for the lease to expire.
    let started = Instant::now();
    let second = spawn(&db, 0);
    wait_send(&second, "t:two", Duration::from_secs(30));
    let took = started.elapsed();
    println!("first reply after the restart: {took:?} (process start included)");
    let again = texts(&second.finish(), "send", "text");
    assert!(
        !again.iter().any(|t| t == "t:one"),
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
