//! The signals that ask [`Bot::run`](crate::Bot::run) to stop with a drain.
//!
//! | signal | sent by | on |
//! | --- | --- | --- |
//! | SIGINT | Ctrl-C in a terminal | every platform (Ctrl-C / Ctrl-Break on Windows) |
//! | SIGTERM | `docker stop`, systemd, Kubernetes, `kill` | Unix |
//! | SIGHUP | the terminal closing, a supervisor asking for a restart | Unix |
//!
//! Each leads to the same stop. A signal that cannot be listened for is logged and ignored
//! (the others still work). This module only waits; the stop itself is the lifecycle's.

/// Waits until the process is asked to stop; returns the signal's name.
pub(crate) async fn stop_requested() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &'static str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(signal = name, error = %e, "cannot listen for the signal");
                None
            }
        };
        let mut term = listen(SignalKind::terminate(), "SIGTERM");
        let mut hup = listen(SignalKind::hangup(), "SIGHUP");
        let mut int = listen(SignalKind::interrupt(), "SIGINT");
        tokio::select! {
            Some(()) = recv(&mut int) => "SIGINT",
            Some(()) = recv(&mut term) => "SIGTERM",
            Some(()) = recv(&mut hup) => "SIGHUP",
            else => std::future::pending::<&'static str>().await,
        }
    }
    #[cfg(not(unix))]
    {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for Ctrl-C");
                std::future::pending().await
            }
        }
    }
}

/// The next delivery of a signal; pending forever when it is not listened for.
#[cfg(unix)]
async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}
