//! [`AtOnce`]: the future of a journal operation that a backend in this process answers at
//! once.
//!
//! The journals' hot operations (journaling an inbound event or a send, each with its lease)
//! are one compare-and-set for a backend that keeps its records in this process
//! ([`MemoryKv`](crate::kv::MemoryKv)): done without waiting for anything, they need no
//! state machine. Such an operation returns an `AtOnce` that already holds its result; with
//! any other backend (or on a rare path, a conflict to resolve by a read) it holds the boxed
//! future that finishes the operation. Either way the caller awaits it as any future, and the
//! futures that await it hold a result or a box, not the nested futures of the whole write.
//! It is not a general-purpose future combinator and does not spawn anything.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The result of a journal operation: ready at once when a backend in this process did it
/// without waiting (a journal write to [`MemoryKv`](crate::kv::MemoryKv)), or given by the
/// boxed future that finishes it (any other backend, or a rare path such as a conflict to
/// resolve by a read). Awaited like any future.
///
/// ```
/// # async fn demo() -> Result<(), botmesh_durability::DurabilityError> {
/// use botmesh_durability::inbox::InboxJournalLease;
/// use botmesh_durability::kv::Scope;
/// use botmesh_durability::{DurabilityConfig, MemoryDurability, NewInbound};
///
/// let journals = MemoryDurability::memory(Scope::custom("shop"), DurabilityConfig::default())?;
/// // Journaled in memory at once; awaited like any future.
/// let journaled = journals
///     .inbox()
///     .journal_and_lease(NewInbound::new("alice", "m1", serde_json::json!({"text": "hi"})))
///     .await?;
/// assert!(matches!(journaled, InboxJournalLease::Leased(_)));
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(demo()).unwrap();
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct AtOnce<'a, T>(Repr<'a, T>);

enum Repr<'a, T> {
    /// The result, taken by the first poll.
    Ready(Option<T>),
    /// The rest of the operation.
    Later(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<'a, T> AtOnce<'a, T> {
    /// An operation done at once.
    pub(crate) fn ready(value: T) -> Self {
        Self(Repr::Ready(Some(value)))
    }

    /// An operation `rest` finishes.
    pub(crate) fn later(rest: impl Future<Output = T> + Send + 'a) -> Self {
        Self(Repr::Later(Box::pin(rest)))
    }

    /// The result `f` makes of this one: at once when this one is ready.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U + Send + 'a) -> AtOnce<'a, U>
    where
        T: 'a,
    {
        match self.0 {
            Repr::Ready(Some(value)) => AtOnce::ready(f(value)),
            Repr::Ready(None) => AtOnce(Repr::Ready(None)),
            Repr::Later(rest) => AtOnce::later(async move { f(rest.await) }),
        }
    }

    /// Whether the result is already there (no backend call is left to wait for).
    pub fn is_ready(&self) -> bool {
        matches!(self.0, Repr::Ready(Some(_)))
    }
}

// The result is moved out, never pinned; the boxed future is pinned in its box.
impl<T> Unpin for AtOnce<'_, T> {}

impl<T> Future for AtOnce<'_, T> {
    type Output = T;

    /// # Panics
    ///
    /// When polled again after it completed, as [`std::future::Ready`].
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.0 {
            Repr::Ready(value) => {
                Poll::Ready(value.take().expect("`AtOnce` polled after completion"))
            }
            Repr::Later(rest) => rest.as_mut().poll(cx),
        }
    }
}

impl<T> fmt::Debug for AtOnce<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.0 {
            Repr::Ready(Some(_)) => "ready",
            Repr::Ready(None) => "taken",
            Repr::Later(_) => "later",
        };
        f.debug_tuple("AtOnce").field(&state).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::AtOnce;

    #[tokio::test]
    async fn a_ready_result_is_given_by_the_first_poll_and_a_later_one_by_its_future() {
        let ready = AtOnce::ready(7);
        assert!(ready.is_ready());
        assert_eq!(format!("{ready:?}"), "AtOnce(\"ready\")");
        assert_eq!(ready.await, 7);
        let later = AtOnce::later(async {
            tokio::task::yield_now().await;
            8
        });
        assert!(!later.is_ready());
        assert_eq!(format!("{later:?}"), "AtOnce(\"later\")");
        assert_eq!(later.await, 8);
    }

    #[test]
    #[should_panic(expected = "polled after completion")]
    fn a_ready_result_polled_twice_panics_as_std_ready() {
        use std::future::Future;
        use std::pin::Pin;
        use std::task::{Context, Waker};
        let mut ready = AtOnce::ready(1);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut ready).poll(&mut cx).is_ready());
        let _ = Pin::new(&mut ready).poll(&mut cx);
    }
}
