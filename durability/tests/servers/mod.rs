//! What the real-server suites (`postgres.rs`, `redis.rs`) share: reading the server URL from
//! the environment, skipping loudly without it (and failing under `CI=true`), unique names so
//! that runs never collide, and a cleanup guard that runs even when a test panics.
//!
//! It does not start servers: point `BOTMESH_TEST_POSTGRES_URL` / `BOTMESH_TEST_REDIS_URL` at
//! running ones.

use std::future::Future;
use std::pin::Pin;

/// The URL in `var`, or `None` after printing that the suite was SKIPPED. Panics when the
/// variable is missing and `CI=true`: CI must run every suite.
pub(crate) fn server_url(var: &str, suite: &str, example: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true but {var} is not set: the {suite} suite must run in CI (e.g. {var}={example})"
            );
            eprintln!("the {suite} suite was SKIPPED: set {var} (e.g. {example}) to run it");
            None
        }
    }
}

/// A name no other run uses: `bmt_<random>_` (lowercase letters and digits).
pub(crate) fn unique_prefix() -> String {
    let tail: String = (0..10)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect();
    format!("bmt_{tail}_")
}

/// A cleanup to run once: an async block built on the cleanup thread.
pub(crate) type CleanupFn = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// Runs its cleanup when dropped, on a thread of its own with its own runtime, so it runs
/// after a panic too and never inside the test's runtime.
pub(crate) struct Cleanup {
    cleanup: Option<CleanupFn>,
}

impl Cleanup {
    pub(crate) fn new(cleanup: CleanupFn) -> Self {
        Cleanup {
            cleanup: Some(cleanup),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        let done = std::thread::spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(cleanup()),
                Err(e) => eprintln!("cleanup skipped: no runtime: {e}"),
            }
        })
        .join();
        if done.is_err() {
            eprintln!("cleanup panicked");
        }
    }
}
