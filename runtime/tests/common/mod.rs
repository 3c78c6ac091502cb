//! Flows shared by the flow tests, and the helpers of the other tests ([`eventually`],
//! [`fresh`]).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too

/// The tests `$postgres` and `$redis`: `$scenario` on a kv of that server (tables or keys
/// under `$prefix`), skipped when the suite has no such server.
macro_rules! on_server_kvs {
    ($scenario:ident($prefix:literal): $postgres:ident, $redis:ident) => {
        #[cfg(feature = "postgres")]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            if let Some(kv) = crate::servers::postgres_kv($prefix) {
                $scenario(kv).await;
            }
        }

        #[cfg(feature = "redis")]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            if let Some(kv) = crate::servers::redis_kv($prefix).await {
                $scenario(kv).await;
            }
        }
    };
}

/// What `pick` takes of each event `bot` reports, in order.
pub(crate) fn events_picked<T: Send + 'static>(
    bot: &Bot,
    pick: impl Fn(&BotEvent) -> Option<T> + Send + Sync + 'static,
) -> std::sync::Arc<std::sync::Mutex<Vec<T>>> {
    let picked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = picked.clone();
    bot.on_event(move |e| {
        if let Some(t) = pick(e) {
            into.lock().unwrap().push(t);
        }
    });
    picked
}

pub(crate) mod eventually;
#[macro_use]
mod flow_builds;
pub(crate) mod fresh;

use botmesh::prelude::*;

flow_builds! {
    /// The first build of a smaller order flow (an item, then "How many?" as a `u32`), which
    /// the version and upgrade tests meet later builds with.
    pub(crate) mod order_v1: #[flow(start = command("order"))] fn order(cx) {
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        let qty: u32 = cx.ask("How many?").parse::<u32>("A number.").await?;
        cx.send(format!("{qty} x {item}")).await?;
        Ok(())
    }
}

// The DESIGN.md order flow (`order`), shared with the macro's unit tests.
include!("../../../macros/src/fixtures/design_order.rs");

/// Registers the command `/hi`, answered "hello".
pub(crate) fn hello_on_hi(bot: &Bot) {
    bot.command("hi", |ctx: Ctx| async move {
        ctx.reply("hello").await?;
        Ok(())
    });
}

/// Bob's `/hi` (his message `m2`) answered with a send the channel refuses for good: it is
/// left dead.
pub(crate) async fn dead_reply_to_bob(bot: &Bot, mock: &botmesh::testing::MockProvider) {
    mock.fail_next_send(botmesh::provider::ProviderError::UnsupportedContent {
        provider: "mock".into(),
        what: "text".into(),
    });
    mock.say("bob", "m2", "/hi").await.unwrap();
    bot.idle().await;
}

/// Answers every message with `text`.
pub(crate) fn answer_all(bot: &Bot, text: &'static str) {
    bot.catch_all(move |ctx: Ctx| async move {
        ctx.reply(text).await?;
        Ok(())
    });
}

/// Checks that starting `bot` fails at the start step `at`.
pub(crate) async fn assert_start_fails_at(bot: &Bot, at: &str) {
    let err = bot.start().await.unwrap_err();
    assert!(
        matches!(&err, BotError::StartFailed { step, .. } if step == at),
        "{err}"
    );
}

/// `chat` says `before`, the bot restarts, and `chat` says `after`.
pub(crate) async fn across_a_restart(
    t: &mut botmesh::testing::Transcript,
    chat: &str,
    before: &[&str],
    after: &[&str],
) {
    t.says_all(chat, before).await;
    t.restart().await.expect("restart");
    t.says_all(chat, after).await;
}
