//! The one real-time poll of the provider and channel tests, for what moves on the wall clock
//! and signals nothing a test could await: a fake server's log filled by a provider's HTTP
//! calls, a fake session's files, a real process (a shop killed with SIGKILL and restarted).
//! What can be awaited (a recorder's notification, a bot event, `Bot::idle`) is awaited
//! instead.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tokio::time::Instant;

/// How long [`Poll::again`] waits before the next look.
pub const EVERY: Duration = Duration::from_millis(10);

/// A deadline for looking at something again and again:
/// `loop { look; if !poll.again().await { give up } }`.
pub struct Poll {
    deadline: Instant,
}

impl Poll {
    /// Looks for at most `within` from now.
    pub fn within(within: Duration) -> Self {
        Self {
            deadline: Instant::now() + within,
        }
    }

    /// Waits [`EVERY`] before the next look; `false` (at once) when the deadline passed.
    pub async fn again(&self) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        // Real time, on purpose: what is looked at changes on its own (see the module docs).
        tokio::time::sleep(EVERY).await;
        true
    }
}

/// Waits (20 s at most) until `done` holds; whether it did.
pub async fn eventually(done: impl Fn() -> bool) -> bool {
    let poll = Poll::within(Duration::from_secs(20));
    loop {
        if done() {
            return true;
        }
        if !poll.again().await {
            return false;
        }
    }
}

/// Waits (20 s at most) until `bot`'s outbox holds no send still to make (pending, in flight,
/// or failed and due again); how many sends it recorded sent (`None`: it never settled).
pub async fn outbox_settled(bot: &botmesh::prelude::Bot) -> Option<usize> {
    use botmesh::durability::OutboxState;
    let outbox = bot.durability()?.outbox();
    let open = [
        OutboxState::Pending,
        OutboxState::Sending,
        OutboxState::Failed,
    ];
    let poll = Poll::within(Duration::from_secs(20));
    loop {
        let mut settled = true;
        for state in open {
            settled &= outbox.list(state, 1).await.ok()?.is_empty();
        }
        if settled {
            return Some(outbox.list(OutboxState::Sent, 1000).await.ok()?.len());
        }
        if !poll.again().await {
            return None;
        }
    }
}
