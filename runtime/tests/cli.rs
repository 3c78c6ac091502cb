//! The `botmesh` operator CLI against real stores: a bot leaves a dead inbound record, a dead
//! send and a conversation waiting at an ask in SQLite (and in PostgreSQL when
//! `BOTMESH_TEST_POSTGRES_URL` is set); every command then lists, shows, replays, retries,
//! discards and cancels them through the library entry point, and the real binary runs as a
//! child process for its text output, its exit codes and its errors.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use botmesh::durability::inbox::{InboxJournalClaim, NewInbound};
use botmesh::durability::{PostgresStore, SqliteStore, Store};
use botmesh::operating::cli::{CliError, run_from};
use botmesh::prelude::*;
use botmesh::schedule::{Job, JobCtx, MissedRuns};
use botmesh::testing::MockProvider;
use serde_json::Value;

/// Takes an order in one question, waiting a day for the answer.
#[flow(start = command("order"))]
#[persistent]
async fn order(cx: &mut FlowCx) -> FlowResult {
    let item: String = cx
        .ask("What would you like?")
        .idle(Duration::from_secs(86_400))
        .await?
        .text()
        .to_owned();
    cx.send(format!("Ordered {item}")).await?;
    Ok(())
}

/// Runs a bot on `store` until it leaves: alice's order waiting at its ask, bob's reply dead
/// (the channel refused it for good), and carol's message dead (its run failed before the
/// handlers). Returns the dead send's key and the dead inbound record's id.
async fn seed(store: Arc<dyn Store>) -> (String, String) {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone()).store_arc(store).build().unwrap();
    bot.flow(order);
    crate::common::hello_on_hi(&bot);
    bot.task("digest", |_job: JobCtx| async move { Ok(()) });
    bot.start().await.unwrap();
    // Two scheduled jobs: a daily digest and a reminder for alice in an hour.
    bot.schedule(Job::cron("digest", "0 9 * * *").missed(MissedRuns::Skip))
        .await
        .unwrap();
    bot.schedule(
        Job::after("remind:alice", Duration::from_secs(3600))
            .chat("alice")
            .remind("Your order is waiting"),
    )
    .await
    .unwrap();
    mock.say("alice", "m1", "/order").await.unwrap();
    assert_eq!(mock.wait_for_sends(1, Duration::from_secs(10)).await, 1);
    bot.idle().await;
    crate::common::dead_reply_to_bob(&bot, &mock).await;
    let journals = bot.durability().unwrap();
    let dead_send = journals
        .outbox()
        .list(botmesh::durability::OutboxState::Dead, 10)
        .await
        .unwrap();
    assert_eq!(dead_send.len(), 1, "bob's reply is dead");
    let hey = NewInbound::new("carol", "m3", serde_json::json!({"text": "hey"}));
    let claim = journals.inbox().journal_and_claim(hey).await.unwrap();
    let InboxJournalClaim::Claimed(claimed) = claim else {
        panic!("carol's message is new")
    };
    journals
        .inbox()
        .fail(&claimed.lease, "the store was down", false)
        .await
        .unwrap();
    bot.stop().await.unwrap();
    (dead_send[0].key.clone(), claimed.record.id)
}

/// Runs the CLI in process: its output, or its error.
async fn cli(base: &[&str], args: &[&str]) -> Result<String, CliError> {
    let mut out = Vec::new();
    let argv = ["botmesh"].iter().chain(base).chain(args).copied();
    match run_from(argv, &mut out).await {
        Ok(()) => Ok(String::from_utf8(out).unwrap()),
        Err(Ok(usage)) => panic!("usage error: {usage}"),
        Err(Err(e)) => Err(e),
    }
}

async fn json(base: &[&str], args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&cli(base, &all).await.unwrap()).unwrap()
}

/// Every command, in the order an operator would use them.
async fn every_command(base: &[&str], dead_key: &str, dead_id: &str) {
    // Dead letters: one of each journal, with their errors and payloads.
    let dead = json(base, &["dead", "list"]).await;
    let rows = dead.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{dead:#}");
    assert_eq!(rows[0]["kind"], "inbound");
    assert_eq!(rows[0]["id"], dead_id);
    assert_eq!(rows[0]["chat"], "carol");
    assert_eq!(rows[0]["error"], "the store was down");
    assert_eq!(rows[0]["payload"]["text"], "hey");
    assert_eq!(rows[1]["kind"], "outbound");
    assert_eq!(rows[1]["id"], dead_key);
    assert_eq!(rows[1]["chat"], "bob");
    let only_out = json(base, &["dead", "list", "--kind", "outbound"]).await;
    assert_eq!(only_out.as_array().unwrap().len(), 1);
    let text = cli(base, &["dead", "show", dead_key]).await.unwrap();
    assert!(text.contains("chat:     bob"), "{text}");
    assert!(text.contains("state:    dead"), "{text}");
    assert!(text.contains("hello"), "the payload is shown: {text}");

    // Conversations: alice waits at the order's question.
    let conv = json(base, &["conversations", "list"]).await;
    let rows = conv.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{conv:#}");
    assert_eq!(rows[0]["chat"], "alice");
    assert!(
        rows[0]["flow"].as_str().unwrap().contains("order"),
        "{conv:#}"
    );
    assert!(
        !rows[0]["waiting_at"].as_str().unwrap().is_empty(),
        "{conv:#}"
    );
    let shown = json(base, &["conversations", "show", "alice"]).await;
    assert_eq!(shown["waiting_at"], rows[0]["waiting_at"]);

    // Metrics: what the store holds.
    let m = json(base, &["metrics"]).await;
    assert_eq!(m["inbound"]["dead"], 1, "{m:#}");
    assert_eq!(m["outbound"]["dead"], 1, "{m:#}");
    assert_eq!(m["outbound"]["sent"], 1, "alice's question went out: {m:#}");
    assert_eq!(m["conversations"]["waiting"], 1, "{m:#}");

    // Scheduled jobs: the digest next at 09:00 UTC, alice's reminder in an hour, and the
    // timeout of alice's ask.
    let jobs = json(base, &["jobs", "list"]).await;
    let rows = jobs.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{jobs:#}");
    let timeout = rows
        .iter()
        .find(|r| r["id"] == "botmesh.ask-timeout:alice")
        .unwrap();
    assert_eq!(timeout["task"], "botmesh.ask-timeout");
    assert_eq!(timeout["chat"], "alice");
    assert_eq!(timeout["data"]["flow"], "order");
    let digest = rows.iter().find(|r| r["id"] == "digest").unwrap();
    assert_eq!(digest["schedule"], "cron 0 9 * * *");
    assert_eq!(digest["state"], "scheduled");
    assert_eq!(digest["missed_runs"], "skip");
    assert_eq!(
        digest["next_ms"].as_i64().unwrap() % 86_400_000,
        9 * 3_600_000
    );
    let remind = rows.iter().find(|r| r["id"] == "remind:alice").unwrap();
    assert_eq!(remind["chat"], "alice");
    assert_eq!(remind["task"], "botmesh.remind");
    assert_eq!(remind["data"]["text"], "Your order is waiting");
    let out = cli(base, &["jobs", "cancel", "remind:alice"])
        .await
        .unwrap();
    assert_eq!(out.trim(), "job remind:alice cancelled");
    let left = json(base, &["jobs", "list"]).await;
    assert_eq!(left.as_array().unwrap().len(), 2, "{left:#}");

    // Acting on them.
    let replayed = json(base, &["dead", "replay", dead_id]).await;
    assert_eq!(replayed["state"], "pending");
    let retried = json(base, &["dead", "retry", dead_key]).await;
    assert_eq!(retried["state"], "pending");
    assert_eq!(json(base, &["dead", "list"]).await, serde_json::json!([]));
    let out = cli(base, &["dead", "discard", dead_key]).await.unwrap();
    assert!(out.contains("discarded"), "{out}");
    let out = cli(base, &["conversations", "cancel", "alice"])
        .await
        .unwrap();
    assert!(out.contains("cancelled"), "{out}");
    assert_eq!(
        json(base, &["conversations", "list"]).await,
        serde_json::json!([])
    );
    let left = json(base, &["jobs", "list"]).await;
    let ids: Vec<&str> = left
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["digest"],
        "the cancelled conversation's timeout went with it"
    );
    let m = json(base, &["metrics"]).await;
    assert_eq!(m["inbound"]["pending"], 1, "{m:#}");
    assert_eq!(m["outbound"]["pending"], 0, "{m:#}");
    assert_eq!(m["conversations"]["waiting"], 0, "{m:#}");
    assert_eq!(
        json(base, &["quarantine", "list"]).await,
        serde_json::json!([])
    );

    // Unknown ids are errors that name the id.
    for args in [
        &["dead", "show", dead_key][..],
        &["dead", "retry", "nope"],
        &["dead", "replay", "nope"],
        &["dead", "discard", "nope"],
        &["conversations", "show", "alice"],
        &["conversations", "cancel", "nobody"],
        &["quarantine", "discard", "inbound", "nope"],
        &["jobs", "cancel", "remind:alice"],
        &["jobs", "cancel", "nope"],
    ] {
        let err = cli(base, args).await.unwrap_err();
        assert!(matches!(err, CliError::NotFound { .. }), "{args:?}: {err}");
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains(args[args.len() - 1]), "{err}");
    }
    // A record in another state is refused by the journals, with their reason.
    let err = cli(base, &["dead", "replay", dead_id]).await.unwrap_err();
    assert!(err.to_string().contains("pending"), "{err}");
}

#[tokio::test]
async fn every_command_against_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bot.db");
    let (key, id) = seed(Arc::new(SqliteStore::open(&path))).await;
    let url = format!("sqlite:{}", path.display());
    every_command(&["--store", &url], &key, &id).await;
}

#[tokio::test]
async fn every_command_against_postgres() {
    let Ok(url) = std::env::var("BOTMESH_TEST_POSTGRES_URL") else {
        return; // no server here; CI sets the variable
    };
    let prefix = format!("cli_{}_{}_", std::process::id(), fastrand_suffix());
    let config =
        botmesh::durability::backends::postgres::PostgresConfig::new().table_prefix(&prefix);
    let store = PostgresStore::connect_with(&url, config).await.unwrap();
    let (key, id) = seed(Arc::new(store)).await;
    every_command(&["--store", &url, "--prefix", &prefix], &key, &id).await;
}

fn fastrand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64 % 1_000_000)
        .unwrap_or(0)
}

#[tokio::test]
async fn a_wrong_url_names_what_is_wrong() {
    let err = cli(
        &["--store", "mysql://root:hunter2@db/bot"],
        &["dead", "list"],
    )
    .await
    .unwrap_err();
    assert!(matches!(err, CliError::UnknownScheme { .. }), "{err}");
    assert!(err.to_string().contains("`mysql`"), "{err}");
    assert!(
        !err.to_string().contains("hunter2"),
        "the password is masked: {err}"
    );

    let err = cli(&["--store", "/no/such/bot.db"], &["metrics"])
        .await
        .unwrap_err();
    assert!(matches!(err, CliError::FileNotFound { .. }), "{err}");
    assert!(err.to_string().contains("/no/such/bot.db"), "{err}");

    // Port 1 on loopback: nothing listens there.
    for url in [
        "postgres://postgres@127.0.0.1:1/test",
        "redis://127.0.0.1:1/",
    ] {
        let err = cli(&["--store", url], &["dead", "list"]).await.unwrap_err();
        assert!(matches!(err, CliError::Connect { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(url) && text.contains("refused"), "{text}");
        assert_eq!(err.exit_code(), 1);
    }
}

/// The real binary, as an operator runs it.
#[tokio::test]
async fn the_binary_lists_and_fails_with_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bot.db");
    let (key, _) = seed(Arc::new(SqliteStore::open(&path))).await;
    let bin = env!("CARGO_BIN_EXE_botmesh");
    let run = |args: &[&str]| {
        Command::new(bin)
            .args(args)
            .env_remove("BOTMESH_STORE")
            .output()
            .unwrap()
    };
    let store = path.to_str().unwrap();

    let out = run(&["--store", store, "dead", "list"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "KIND\tID\tCHAT\tSTATE\tATTEMPTS\tERROR");
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("outbound\t{key}\tbob\tdead\t")))
    );

    let out = run(&["--store", store, "jobs", "list"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "ID\tSTATE\tSCHEDULE\tTASK\tCHAT\tNEXT_MS\tRUNS\tFAILURES\tMISSES\tLAST_ERROR"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("digest\tscheduled\tcron 0 9 * * *\tdigest\t-\t")),
        "{text}"
    );
    let out = run(&["--store", store, "jobs", "cancel", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap().trim(),
        "botmesh: no job with id `nope`"
    );

    let out = run(&["--store", store, "--json", "conversations", "list"]);
    assert!(out.status.success(), "{out:?}");
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["chat"], "alice");

    let out = Command::new(bin)
        .args(["dead", "show", "nope"])
        .env("BOTMESH_STORE", format!("sqlite:{store}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim(), "botmesh: no record with id `nope`");

    let out = run(&["--store", "ftp://x/y", "metrics"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("unknown store URL scheme `ftp`")
    );

    let out = run(&["metrics"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("no store given")
    );
}
