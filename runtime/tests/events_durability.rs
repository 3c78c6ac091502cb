//! A bot whose inbox and outbox live in the app's events journal (`events_durability`), end
//! to end: messages answered, a redelivery after a restart recognised as a duplicate, the
//! app's events beside the bot's records, and the journal still the app's after `stop()`.
#![cfg(feature = "file")]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use botmesh::durability::DurabilityConfig;
use botmesh::durability::events::{
    ClaimRequest, EventQuery, NewEvent, SharedFileEventJournal, SharedFileOptions,
    events_durability,
};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::provider::Accepted;
use botmesh::testing::MockProvider;
use serde_json::json;

fn bot(journal: &SharedFileEventJournal) -> (Bot, MockProvider) {
    let mock = MockProvider::new();
    let mut config = DurabilityConfig::default();
    config.poll = Duration::from_millis(20);
    let bot = Bot::builder(mock.clone())
        .durability(
            DurabilityOptions::backend(events_durability(journal))
                .config(config)
                .instance_id("replica-1"),
        )
        .build()
        .unwrap();
    bot.catch_all(|ctx: Ctx| async move {
        ctx.reply("one").await?;
        ctx.reply("two").await?;
        Ok(())
    });
    (bot, mock)
}

/// A [`bot`] on `journal` takes `hi` (`m1`) from chat `a` as `accepted`, then stops; its channel.
async fn hi_from_a(journal: &SharedFileEventJournal, accepted: Accepted) -> MockProvider {
    let (bot, mock) = bot(journal);
    bot.start().await.unwrap();
    assert_eq!(mock.say("a", "m1", "hi").await, Ok(accepted));
    bot.idle().await;
    bot.stop().await.unwrap();
    mock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_keeps_its_journals_in_the_apps_events_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.json");
    let journal = SharedFileEventJournal::open(&path, SharedFileOptions::new().fsync(false))
        .await
        .unwrap();
    journal
        .append(NewEvent::new("order.paid", json!({"order": 7})).id("paid-7"))
        .await
        .unwrap();

    let mock = hi_from_a(&journal, Accepted::Queued).await;
    assert_eq!(mock.texts("a"), ["one", "two"]);

    // The journal is the app's: the bot's stop did not close it.
    let listed = journal.list(&EventQuery::all()).await.unwrap();
    let ids: Vec<_> = listed.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["paid-7"], "the bot's records are not app events");
    let claimed = journal.claim(&ClaimRequest::new("app")).await.unwrap();
    journal
        .complete(&claimed[0].record.id, claimed[0].token)
        .await
        .unwrap();

    // A restarted bot on the same file (another handle, as another process would open it).
    let reopened = SharedFileEventJournal::open(&path, SharedFileOptions::new())
        .await
        .unwrap();
    let mock2 = hi_from_a(&reopened, Accepted::Duplicate).await;
    assert!(
        mock2.sent().is_empty(),
        "the redelivery is not answered again"
    );
    reopened.close().await;
    journal.close().await;
}
