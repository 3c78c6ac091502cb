//! A bot whose Postgres backend cannot be reached fails `start()` with an error that names the
//! host and port, never the password (no server needed: port 1 on 127.0.0.1 refuses).

#![allow(clippy::unwrap_used)]

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
