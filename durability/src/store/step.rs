//! One flow step, committed in one transaction: its checkpoint, the journal rows of its sends
//! and the completion of the inbound record that fed it.
//!
//! When the durable journals keep their rows in the store's own database (the `durable` table of
//! a [`SqliteStore`](super::SqliteStore)'s file, the `{prefix}durable` table of a
//! `PostgresStore`'s database), a `#[persistent]` flow step commits as one [`StepCommit`]
//! through [`Store::commit_step`](super::Store::commit_step): the checkpoint change, the
//! step's journal operations (its sends' outbox records, created pending; the inbound record
//! marked done) and the removal of the step's effect records either all land or none does. No
//! crash can leave a checkpoint without its sends, sends without their checkpoint, or an
//! acknowledged message whose step was lost.
//!
//! | the process dies… | found on restart |
//! | --- | --- |
//! | before the commit | the previous checkpoint, no outbox record of the step, the inbound open: replayed, the step runs again |
//! | after the commit, before the sends went out | the new checkpoint, the sends pending: delivered in order at the restart |
//!
//! The journal half is prepared by `KvDurability::step` (records, versions, fencing); this
//! module only carries it. A store that cannot share a transaction with the journals answers
//! `false` to [`Store::shares_transactions_with`](super::Store::shares_transactions_with), and
//! the runtime writes the pieces one after the other: each send journaled and sent as the step
//! makes it, then the checkpoint change, then the removal of the effect records.

use super::{ChatRecord, ContactRecord, FlowCheckpoint, LedgerEntry};
use crate::kv::{CasOutcome, KvOp, Scope};

/// What a step does to its chat's checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointWrite {
    /// Write (replace) the chat's checkpoint.
    Save(FlowCheckpoint),
    /// Remove the chat's checkpoint (the flow ended); removing none is not an error.
    Delete {
        /// The chat.
        chat: String,
    },
    /// Leave it as it is.
    Keep,
}

/// The writes of one flow step, committed together by [`Store::commit_step`](super::Store::commit_step).
#[derive(Debug, Clone, PartialEq)]
pub struct StepCommit {
    /// The checkpoint change.
    pub checkpoint: CheckpointWrite,
    /// The journals' scope.
    pub scope: Scope,
    /// The journal operations, applied all or none: a conflict on any of them rolls the whole
    /// step back.
    pub journal: Vec<KvOp>,
    /// Per-scope values to remove in the same transaction (`(scope, key)`: the step's effect
    /// records, which must not outlive the step's outcome).
    pub delete_values: Vec<(String, String)>,
    /// Ledger entries to append in the same transaction (a send recorded as sent with its
    /// ledger row, in one write).
    pub ledger: Vec<LedgerEntry>,
    /// The chat an inbound message came from, upserted as
    /// [`Store::record_inbound`](super::Store::record_inbound) does (an existing chat keeps
    /// its title, language and first sighting): an inbound journaled with its ledger row.
    pub chat: Option<ChatRecord>,
    /// The contact who sent it, upserted as [`Store::record_inbound`](super::Store::record_inbound)
    /// does.
    pub contact: Option<ContactRecord>,
}

impl StepCommit {
    /// A step with only a checkpoint change (no journal operation yet).
    pub fn new(scope: Scope, checkpoint: CheckpointWrite) -> Self {
        StepCommit {
            checkpoint,
            scope,
            journal: Vec::new(),
            delete_values: Vec::new(),
            ledger: Vec::new(),
            chat: None,
            contact: None,
        }
    }
}

/// What [`Store::commit_step`](super::Store::commit_step) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepCommitOutcome {
    /// Everything was written; one outcome per journal operation, in order (all `Ok`).
    Committed(Vec<CasOutcome>),
    /// Journal operation `op` found another version (`current`): nothing was written.
    Conflict {
        /// The index of the operation in [`StepCommit::journal`].
        op: usize,
        /// The version found (`None`: the key does not exist).
        current: Option<u64>,
    },
}
