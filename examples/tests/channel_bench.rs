//! The end-to-end channel benchmark's harness (`benches/channel`) with a few chats, so that
//! it keeps working: every chat's order is answered in order, over long polling and over the
//! webhook, without a store and with SQLite durable. No timing is asserted.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::harness;

use crate::harness::{Mode, Run, Storage};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_channel_bench_runs_the_shop_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let run = Run {
        chats: 5,
        orders: 2,
        dir: dir.path().to_owned(),
    };
    let fake_rt = tokio::runtime::Handle::current();
    for (mode, storage) in [
        (Mode::Polling, Storage::None),
        (Mode::Polling, Storage::SqliteDurable),
        (Mode::Webhook, Storage::SqliteDurable),
    ] {
        let outcome = harness::run(&fake_rt, storage, mode, &run)
            .await
            .unwrap_or_else(|e| panic!("{mode:?} {storage:?}: {e}"));
        assert_eq!(
            outcome.messages,
            run.chats * run.orders * harness::SCRIPT.len(),
            "{mode:?} {storage:?}: every message answered once"
        );
    }
}
