//! [`TaskSlot`]: the background task a provider runs between its `start()` and its `stop()`
//! (the console's and the JSON lines' reader, the email IMAP connection, a line writer, the
//! WhatsApp Web fake session's follower). A second `start()` replaces the task and aborts the
//! old one; `stop()` aborts it.

use std::sync::{Mutex, MutexGuard};

use tokio::task::JoinHandle;

/// One background task, or none.
#[derive(Debug, Default)]
pub(crate) struct TaskSlot(Mutex<Option<JoinHandle<()>>>);

impl TaskSlot {
    /// Keeps `task`, aborting the one it replaces.
    pub(crate) fn set(&self, task: JoinHandle<()>) {
        if let Some(old) = self.slot().replace(task) {
            old.abort();
        }
    }

    /// Aborts the task (it ends at its next await), without waiting for it.
    #[cfg(any(feature = "console", feature = "jsonl", feature = "whatsapp-web"))]
    pub(crate) fn abort(&self) {
        let task = self.slot().take();
        if let Some(task) = task {
            task.abort();
        }
    }

    /// Aborts the task and waits for it to end.
    #[cfg(feature = "email")]
    pub(crate) async fn stop(&self) {
        let task = self.slot().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    fn slot(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
