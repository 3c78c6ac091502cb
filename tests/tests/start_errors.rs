//! A bot whose Postgres backend cannot be reached fails `start()` with an error that names the
//! host and port, never the password (no server needed: port 1 on 127.0.0.1 refuses).

#![allow(clippy::unwrap_used)]

use crate::common;
use botmesh::durability::{PostgresKv, PostgresStore};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;

const URL: &str = "postgres://bot:s3cret@127.0.0.1:1/botmesh?connect_timeout=2";

fn assert_names_host_not_password(e: &BotError) {
    let text = format!("{e} / {e:?} / {:?}", std::error::Error::source(e));
    assert!(
        text.contains("127.0.0.1:1"),
        "the host and port are named: {text}"
    );
    assert!(!text.contains("s3cret"), "the password never shows: {text}");
}

#[tokio::test]
async fn an_unreachable_postgres_journal_fails_start_naming_the_host() {
    let bot = Bot::builder(MockProvider::new())
        .durability(DurabilityOptions::backend(PostgresKv::new(URL).unwrap()))
        .build()
        .unwrap();
    let e = bot.start().await.expect_err("start must fail");
    assert_names_host_not_password(&e);
}

#[tokio::test]
async fn an_unreachable_postgres_store_fails_start_naming_the_host() {
    let bot = Bot::builder(MockProvider::new())
        .store(PostgresStore::new(URL).unwrap())
        .build()
        .unwrap();
    let e = bot.start().await.expect_err("start must fail");
    assert_names_host_not_password(&e);
}

/// The whole chain of an error, as a user reads it.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(" / ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[tokio::test]
async fn a_refused_connection_says_so() {
    let e = PostgresKv::connect(URL).await.expect_err("port 1 refuses");
    let text = chain(&e);
    assert!(text.contains("refused"), "{text}");
    let e = botmesh::durability::RedisKv::open("redis://127.0.0.1:1/")
        .await
        .expect_err("port 1 refuses");
    let text = chain(&e);
    assert!(text.contains("refused"), "{text}");
}

#[tokio::test]
async fn a_missing_postgres_database_is_named() {
    let Some((url, _server)) = common::server("BOTMESH_TEST_POSTGRES_URL") else {
        return;
    };
    // The same server, a database that does not exist.
    let base = url.rsplit_once('/').map_or(url.as_str(), |(b, _)| b);
    let missing = format!("{base}/botmesh_no_such_database");
    let e = PostgresKv::connect(&missing)
        .await
        .expect_err("no such database");
    let text = chain(&e);
    assert!(
        text.contains("does not exist") && text.contains("create the database"),
        "{text}"
    );
}

#[tokio::test]
async fn a_sqlite_file_that_cannot_be_opened_is_named() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the database's directory should be.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let path = blocker.join("bot.db");
    let bot = Bot::builder(MockProvider::new())
        .store(botmesh::durability::SqliteStore::open(&path))
        .build()
        .unwrap();
    let e = bot.start().await.expect_err("the directory is a file");
    let text = chain(&e);
    assert!(text.contains(&path.display().to_string()), "{text}");
}
