//! Three replicas of the `shop` binary on one Postgres, and again on one Redis, behind a load
//! balancer that sends each message of a chat to a random replica (Telegram webhooks), and on
//! Telegram long polling (only the elected leader polls: the fake Bot API checks that no two
//! `getUpdates` ever overlap), SIGKILLed at seeded moments (the leader first) and restarted.
//! What each run checks is the harness's (`channels/replicas.rs`): every chat completes its
//! order, no reply twice, no answer taken for another question, the questions in order, and
//! a chat left without its confirmation is named by an ambiguous send.
//!
//! Needs `BOTMESH_TEST_POSTGRES_URL` / `BOTMESH_TEST_REDIS_URL`; without them a test says it
//! was skipped, and under `CI=true` a missing server fails it. CI runs one seed per case;
//! `SEEDS=a..b` runs more (the soak: `examples/replicas-soak.sh`).
#![allow(clippy::expect_used)]

use crate::channels::replicas::replicas_survive_sigkills;
use crate::channels::seeds;
use crate::channels::telegram::Telegram;
use botmesh_tests::server_url;

/// The seeds a CI run takes per case (a soak sets `SEEDS`).
const SEEDS: std::ops::Range<u64> = 0..1;

async fn run(var: &str, backend: &str, webhook: bool) {
    let Some(url) = server_url(var) else { return };
    replicas_survive_sigkills(|| Telegram::start(webhook), backend, &url, seeds(SEEDS)).await;
}

/// A test per case: `name: the server's variable, the backend, and whether the shop takes
/// webhooks (or polls)`.
macro_rules! replica_runs {
    ($($name:ident: $var:literal, $backend:literal, $webhook:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            run($var, $backend, $webhook).await;
        }
    )*};
}

replica_runs! {
    postgres_replicas_on_webhooks_survive_sigkills: "BOTMESH_TEST_POSTGRES_URL", "postgres", true;
    postgres_replicas_on_long_polling_survive_sigkills:
        "BOTMESH_TEST_POSTGRES_URL", "postgres", false;
    redis_replicas_on_webhooks_survive_sigkills: "BOTMESH_TEST_REDIS_URL", "redis", true;
    redis_replicas_on_long_polling_survive_sigkills: "BOTMESH_TEST_REDIS_URL", "redis", false;
}
