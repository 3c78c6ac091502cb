//! The send fence: refuses a send (or a checkpoint write) of work whose chat turn was lost,
//! and a call to a leader-only transport from a replica that does not lead.
//!
//! | check | where | refusal |
//! | --- | --- | --- |
//! | [`chat_write`] | before a send is journaled, before a checkpoint is written | [`CoordinationError::Fenced`] naming the chat and the token |
//! | [`may_use_transport`] | before a send is leased for its provider call (inline or by the sweeper) | a standby journals the send and leaves it to the leader |
//! | [`provider_call`] ([`transport_call`] and [`chat_write`]) | right before the provider is called | [`CoordinationError::NotLeader`] or `Fenced`: the attempt fails as retryable |
//!
//! Every refusal is counted in the coordination metrics and emitted as an event.

use botmesh_durability::coordination::{CoordinationError, FenceKind};

use crate::coordination::{TRANSPORT_LEASE, current_turn};
use crate::kernel::Kernel;

/// `Ok` unless the work running on this task holds `chat`'s turn and lost it.
pub(crate) async fn chat_write(k: &Kernel, chat: &str) -> Result<(), CoordinationError> {
    let Some(coord) = k.coordination.as_deref() else {
        return Ok(());
    };
    let Some(cell) = current_turn().filter(|c| c.chat.as_str() == chat) else {
        return Ok(());
    };
    let fence = cell.fence();
    if cell.lost.load(std::sync::atomic::Ordering::SeqCst) {
        let holder = coord.c.turn_holder(chat).await.ok().flatten();
        return Err(CoordinationError::Fenced {
            kind: FenceKind::Turn,
            name: chat.to_owned(),
            token: fence.token,
            current: holder.as_ref().map_or(fence.token, |h| h.token),
            holder: holder.map(|h| h.owner.to_string()),
        });
    }
    coord.c.check_turn(&fence).await
}

/// Whether this replica may call the provider's transport: always, unless the transport is
/// leader-only and this replica does not lead (as of its last campaign).
pub(crate) fn may_use_transport(k: &Kernel) -> bool {
    match k.coordination.as_deref() {
        Some(coord) if coord.options.is_leader_only_transport() => coord.leading().is_some(),
        _ => true,
    }
}

/// The fence right before a provider call: with a leader-only transport, `Ok` only while
/// this replica's leader lease holds (checked against the backend).
pub(crate) async fn transport_call(k: &Kernel) -> Result<(), CoordinationError> {
    match k.coordination.as_deref() {
        Some(coord) if coord.options.is_leader_only_transport() => {
            coord
                .c
                .check_leader(TRANSPORT_LEASE, coord.leading().as_ref())
                .await
        }
        _ => Ok(()),
    }
}

/// The fence right before a provider call: [`transport_call`], then [`chat_write`].
pub(crate) async fn provider_call(k: &Kernel, chat: &str) -> Result<(), CoordinationError> {
    transport_call(k).await?;
    chat_write(k, chat).await
}
