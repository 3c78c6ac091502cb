//! Running user code (a handler, a scheduled task) in a task of its own, so that a panic is
//! reported as an error instead of killing the queue that runs it, and so that dropping the
//! caller (`stop()` aborting a chat's worker) aborts the user code too: it must not go on
//! sending after the bot stopped.

use std::future::Future;

/// Aborts the spawned task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `fut` in its own task: `Ok` when it returned `Ok`, otherwise its error, its panic
/// (`panicked: …`) or `cancelled`, rendered. The task is aborted if this future is dropped
/// before it ends.
pub(crate) async fn run_isolated<F, E>(fut: F) -> Result<(), String>
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let task = tokio::spawn(fut);
    let _abort = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(join) if join.is_panic() => Err(format!("panicked: {}", panic_text(join.into_panic()))),
        Err(_) => Err("cancelled".to_owned()),
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic".to_owned()
    }
}
