//! The chat turn around a chat's work (coordination on): taken before the dispatch (waiting
//! while another replica holds it, in ingress order), renewed while the work runs, released
//! after. The turn is the task-local `coordination::TURN`, so the send fence and the
//! checkpoint writes of that work find it. A turn lost while the work runs (its renewal is
//! refused) marks the work as failed: its inbound record is released for a replay under the
//! new holder's turn.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_durability::coordination::{Fence, TurnAttempt};

use crate::coordination::{Coord, TURN, TurnCell};
use crate::kernel::Kernel;
use crate::message::ChatId;

/// The first wait between two asks for a busy turn; it doubles up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(10);
const MAX_WAIT: Duration = Duration::from_millis(200);

/// Runs `work` (whose output is "the journal failed", as the inbound pipeline's jobs return)
/// under `chat`'s turn when coordination is on; plain otherwise. `ticket` orders the waiters.
pub(crate) async fn in_turn<F>(k: &Arc<Kernel>, chat: &ChatId, ticket: u64, work: F) -> bool
where
    F: Future<Output = bool>,
{
    let Some(coord) = k.coordination.as_deref() else {
        return work.await;
    };
    let fence = take(coord, chat, ticket).await;
    let cell = Arc::new(TurnCell {
        chat: chat.clone(),
        fence: Mutex::new(fence),
        lost: AtomicBool::new(false),
    });
    let every = (coord.options.config().turn_lease / 3).max(Duration::from_millis(5));
    let renew = async {
        loop {
            tokio::time::sleep(every).await;
            match coord.c.renew_turn(&cell.fence()).await {
                Ok(f) => *cell.fence.lock().unwrap_or_else(|e| e.into_inner()) = f,
                Err(e) if e.is_refusal() => {
                    tracing::warn!(chat = %chat, error = %e, "chat turn lost: this replica stops processing the chat");
                    cell.lost.store(true, Ordering::SeqCst);
                    return;
                }
                Err(e) => {
                    tracing::warn!(chat = %chat, error = %e, "chat turn renewal failed; trying again")
                }
            }
        }
    };
    let failed = TURN
        .scope(Arc::clone(&cell), async {
            tokio::pin!(work);
            tokio::pin!(renew);
            let mut renewing = true;
            loop {
                tokio::select! {
                    failed = &mut work => break failed,
                    () = &mut renew, if renewing => renewing = false,
                }
            }
        })
        .await;
    let lost = cell.lost.load(Ordering::SeqCst);
    if !lost {
        if let Err(e) = coord.c.release_turn(&cell.fence()).await {
            tracing::warn!(chat = %chat, error = %e, "chat turn release failed (it expires on its own)");
        }
    }
    failed || lost
}

/// Takes `chat`'s turn, waiting (with a growing pause) while another replica holds it.
async fn take(coord: &Coord, chat: &ChatId, ticket: u64) -> Fence {
    let mut wait = FIRST_WAIT;
    loop {
        match coord.c.take_turn(chat.as_str(), Some(ticket)).await {
            Ok(TurnAttempt::Taken(fence)) => return fence,
            Ok(TurnAttempt::Wait { .. }) => {}
            Err(e) => {
                tracing::warn!(chat = %chat, error = %e, "taking the chat's turn failed; trying again");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_WAIT);
    }
}
