//! Chat turns: one replica at a time processes a chat, taken in ingress order.
//!
//! A replica that received a chat's event takes the chat's turn under a ticket, the arrival
//! sequence (`InboundRecord::seq`) of the oldest of the chat's events it holds. While another
//! replica holds the turn, or another waiter holds an older ticket, it waits
//! ([`TurnAttempt::Wait`]) and asks again; its ticket stays in the turn record while it keeps
//! asking, and is forgotten after one turn lease when it stops (a dead waiter blocks nobody).
//! The holder renews the turn while a step runs, checks it before every write that carries
//! the chat's effects (a checkpoint, a send) and releases it when the chat has nothing left.

use super::record::Acquired;
use super::{CoordinationError, CoordinationEvent, Coordinator, Fence, FenceKind};

use std::sync::atomic::Ordering;

/// What [`Coordinator::take_turn`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnAttempt {
    /// This replica holds the chat's turn under this fence.
    Taken(Fence),
    /// Another replica holds it, or waits with an older ticket: ask again later.
    Wait {
        /// The holder (or the first waiter), if known.
        holder: Option<String>,
        /// When the holder's lease expires unless renewed (Unix ms), if held.
        expires_ms: Option<i64>,
        /// How many other replicas wait with an older ticket.
        ahead: usize,
    },
}

impl Coordinator {
    /// Takes the turn of `chat` for this replica, or queues `ticket` and returns
    /// [`TurnAttempt::Wait`]. Taking a turn this replica already holds renews it. A turn whose
    /// holder's lease expired is taken over under a higher token (a steal).
    pub async fn take_turn(
        &self,
        chat: &str,
        ticket: Option<u64>,
    ) -> Result<TurnAttempt, CoordinationError> {
        let found = self.acquire(FenceKind::Turn, chat, ticket).await?;
        let c = &self.inner.counters;
        Ok(match found {
            Acquired::Taken {
                fence,
                previous,
                renewed,
            } => {
                if !renewed {
                    c.turns_taken.fetch_add(1, Ordering::Relaxed);
                    if let Some(from) = &previous {
                        c.turn_steals.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(chat, token = fence.token, stolen_from = %from, "chat turn taken over from an expired holder");
                    } else {
                        tracing::debug!(chat, token = fence.token, "chat turn taken");
                    }
                    self.emit(CoordinationEvent::TurnTaken {
                        fence: fence.clone(),
                        stolen_from: previous,
                    });
                }
                TurnAttempt::Taken(fence)
            }
            Acquired::Wait {
                holder,
                expires_ms,
                ahead,
            } => {
                c.turn_waits.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(chat, holder = ?holder, ahead, "waiting for the chat's turn");
                self.emit(CoordinationEvent::TurnWaiting {
                    chat: chat.to_owned(),
                    holder: holder.clone(),
                });
                TurnAttempt::Wait {
                    holder,
                    expires_ms,
                    ahead,
                }
            }
        })
    }

    /// Extends a held turn by the turn lease from now; [`CoordinationError::Fenced`] when it
    /// was taken over.
    pub async fn renew_turn(&self, turn: &Fence) -> Result<Fence, CoordinationError> {
        let lease_ms = self.lease_ms(FenceKind::Turn);
        let result = self
            .machine(FenceKind::Turn, &turn.name)
            .renew(self.clock_fn(), turn, lease_ms)
            .await;
        self.counted(result)
    }

    /// Gives a turn back; [`CoordinationError::Fenced`] when it was taken over meanwhile.
    pub async fn release_turn(&self, turn: &Fence) -> Result<(), CoordinationError> {
        let result = self.release(FenceKind::Turn, turn).await;
        if result.is_ok() {
            tracing::debug!(chat = %turn.name, token = turn.token, "chat turn released");
        }
        self.counted(result)
    }

    /// The fence of a write that carries the chat's effects: `Ok` when `turn` still holds the
    /// chat with at least the safety margin left, [`CoordinationError::Fenced`] (counted and
    /// emitted) otherwise.
    pub async fn check_turn(&self, turn: &Fence) -> Result<(), CoordinationError> {
        self.check(FenceKind::Turn, &turn.name, turn).await
    }

    /// The live holder of `chat`'s turn, if any.
    pub async fn turn_holder(&self, chat: &str) -> Result<Option<Fence>, CoordinationError> {
        self.holder(FenceKind::Turn, chat).await
    }
}
