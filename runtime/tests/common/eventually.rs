//! The one real-time poll of the runtime's tests, for what moves on the wall clock and signals
//! nothing a test could await: a browser's page, a server's rows, a lease running out on a
//! shared backend. What can be awaited (a send, a bot event, a `Notify`) is awaited instead.

use std::time::Duration;

use tokio::time::Instant;

/// Checks `check` every 10 ms until it holds or `within` passed; whether it held.
pub(crate) async fn eventually(within: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        // Real time, on purpose: what is checked changes on its own (see the module docs).
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check().await
}
