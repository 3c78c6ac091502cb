//! The `Store` SPI: what a bot keeps about its chats, beyond the journals.
//!
//! A store holds chats, contacts, the message ledger (every message in and out, with its
//! delivery status), flow checkpoints (the state of `#[persistent]` conversations), human
//! handoffs and small per-scope key/value data (`ctx.user`, an app's own records).
//! It does not hold the durable inbox and outbox: those live behind
//! [`DurableKv`](crate) and may share the same file or server.
//!
//! Records are plain data: the store never parses message payloads, it keeps the opaque
//! JSON the runtime gives it. Timestamps are Unix milliseconds.

mod memory;
#[cfg(feature = "sqlite")]
mod sqlite;
mod step;

pub use memory::MemoryStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{
    SqliteDurableKv, SqliteKvError, SqliteQueryError, SqliteStore, SqliteStoreOptions,
    SqliteSynchronous, SqliteWriteStats,
};
pub use step::{CheckpointWrite, StepCommit, StepCommitOutcome};

/// The `rusqlite` this crate links, for closures given to [`SqliteStore::write`] and
/// [`SqliteStore::read`].
#[cfg(feature = "sqlite")]
pub use rusqlite;

use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::kv::DurableKv;
use serde_json::Value;

/// A chat (a one-to-one conversation or a group) as the store knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRecord {
    /// The provider's opaque chat id.
    pub id: String,
    /// Whether this chat is a group.
    pub is_group: bool,
    /// A display title, when the channel gives one.
    pub title: Option<String>,
    /// The language last resolved for this chat (`ctx.lang`), if any.
    pub lang: Option<String>,
    /// When the chat was first seen (Unix ms).
    pub first_seen_ms: i64,
    /// When the chat last received a message (Unix ms), to within
    /// [`ACTIVITY_RESOLUTION_MS`] (the ledger keeps each message's own time).
    pub last_activity_ms: i64,
}

/// How far behind its latest inbound message a chat's
/// [`last_activity_ms`](ChatRecord::last_activity_ms) and a contact's
/// [`last_seen_ms`](ContactRecord::last_seen_ms) may be (one minute). A store may leave both
/// rows alone for an inbound message that comes sooner than this after the stored time and
/// changes neither the chat's group flag nor the contact's name: SQLite and Postgres do, so
/// a busy chat does not rewrite two rows at every message. The ledger keeps each message's
/// own time.
pub const ACTIVITY_RESOLUTION_MS: i64 = 60_000;

/// A contact: a user who wrote to the bot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContactRecord {
    /// The provider's opaque user id.
    pub id: String,
    /// The display name, when the channel gives one.
    pub name: Option<String>,
    /// When the contact was last seen (Unix ms), to within [`ACTIVITY_RESOLUTION_MS`].
    pub last_seen_ms: i64,
}

/// Direction of a ledger entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// A message the bot received.
    Inbound,
    /// A message the bot sent.
    Outbound,
}

/// Delivery status of a ledger entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerStatus {
    /// Received from the channel.
    Received,
    /// Accepted by the channel.
    Sent,
    /// The channel refused it or the send failed for good.
    Failed,
}

impl LedgerStatus {
    /// The stable lowercase name used in storage.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerStatus::Received => "received",
            LedgerStatus::Sent => "sent",
            LedgerStatus::Failed => "failed",
        }
    }
}

/// One row of the message ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The chat the message belongs to.
    pub chat: String,
    /// The channel's message id (inbound) or the provider's returned id (outbound), when known.
    pub message_id: Option<String>,
    /// Inbound or outbound.
    pub direction: Direction,
    /// Received, sent or failed.
    pub status: LedgerStatus,
    /// The message text, when it has one (for search and `/status`-like answers).
    pub text: Option<String>,
    /// The whole content as opaque JSON.
    pub content: serde_json::Value,
    /// The idempotency key of an outbound message, when it had one.
    pub key: Option<String>,
    /// An error description for failed sends.
    pub error: Option<String>,
    /// When it happened (Unix ms).
    pub at_ms: i64,
}

/// The saved state of a `#[persistent]` flow waiting for an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowCheckpoint {
    /// The chat the flow runs in.
    pub chat: String,
    /// The flow's name (its function path).
    pub flow: String,
    /// The layout hash of the state enum that wrote `state`.
    pub layout_hash: u64,
    /// The serialized state (opaque JSON; the flow's own state enum).
    pub state: serde_json::Value,
    /// The inbound record id that fed the step which wrote this checkpoint.
    pub inbound_id: Option<String>,
    /// A counter incremented by every step of the same flow run.
    pub step: u64,
    /// When it was written (Unix ms).
    pub updated_ms: i64,
}

/// What the runtime checks of a chat's checkpoint before each message of a flow it holds in
/// memory: another process sharing the store may have moved the flow on, or started another
/// run of it that reached the same step (the inbound record that fed it tells them apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointHead {
    /// [`FlowCheckpoint::step`].
    pub step: u64,
    /// [`FlowCheckpoint::inbound_id`].
    pub inbound_id: Option<String>,
}

/// A chat handed over to a human agent: the bot does not answer while it lasts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffRecord {
    /// The chat handed off.
    pub chat: String,
    /// The agent or queue that took it, if known.
    pub agent: Option<String>,
    /// Why, if given.
    pub reason: Option<String>,
    /// Since when (Unix ms).
    pub since_ms: i64,
}

/// Errors of a [`Store`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists but is not a botmesh database.
    #[error("{file}: not a botmesh database ({reason})")]
    NotABotmeshDatabase {
        /// The file refused.
        file: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// The file was written by a newer botmesh with a schema this version does not know.
    #[error("{file}: schema version {found} is newer than the {supported} this botmesh supports")]
    SchemaTooNew {
        /// The file refused.
        file: PathBuf,
        /// The version found in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The database could not be opened or created.
    #[error("{file}: cannot open: {source}")]
    Open {
        /// The file.
        file: PathBuf,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A query failed.
    #[error("store query `{operation}` failed: {source}")]
    Query {
        /// What was being done (`upsert_chat`, `save_checkpoint`, …).
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored record could not be decoded.
    #[error("store record {what} `{key}` cannot be decoded: {reason}")]
    Corrupt {
        /// The kind of record (`checkpoint`, `ledger`, …).
        what: &'static str,
        /// Its key.
        key: String,
        /// Why it could not be decoded.
        reason: String,
    },
    /// The store was used after `close()` (or, for a store that must be opened, before
    /// `open()`).
    #[error("the store is closed")]
    Closed,
    /// A write was asked of a store opened read-only.
    #[error("{file}: the store is opened read-only")]
    ReadOnly {
        /// The file opened read-only.
        file: PathBuf,
    },
}

/// Where a bot keeps chats, contacts, the message ledger, flow checkpoints, handoffs and
/// per-scope data.
///
/// Implementations must be safe to call from many tasks at once. Writes for one chat are
/// issued in order by the runtime; a store need not order writes across chats.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Opens the store (creates files and schema). Called by the bot's `storage` lifecycle step;
    /// calling it twice is harmless.
    async fn open(&self) -> Result<(), StoreError>;
    /// Closes the store; later calls fail with [`StoreError::Closed`] (a later `open` reopens).
    async fn close(&self) -> Result<(), StoreError>;

    /// Inserts or replaces a chat.
    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<(), StoreError>;
    /// Records an inbound message in one go: the chat (inserted, or only its `is_group` and
    /// `last_activity_ms` updated, keeping its title, language and first sighting), the contact
    /// (inserted or replaced) and the ledger entry; the chat and the contact to within
    /// [`ACTIVITY_RESOLUTION_MS`]. The default makes the separate calls; a backend may do it
    /// in one transaction (SQLite and Postgres do).
    async fn record_inbound(
        &self,
        chat: &ChatRecord,
        contact: &ContactRecord,
        entry: &LedgerEntry,
    ) -> Result<(), StoreError> {
        let merged = match self.chat(&chat.id).await? {
            Some(existing) => ChatRecord {
                is_group: chat.is_group,
                last_activity_ms: chat.last_activity_ms,
                ..existing
            },
            None => chat.clone(),
        };
        self.upsert_chat(&merged).await?;
        self.upsert_contact(contact).await?;
        self.append_ledger(entry).await
    }
    /// Reads a chat.
    async fn chat(&self, id: &str) -> Result<Option<ChatRecord>, StoreError>;
    /// Inserts or replaces a contact.
    async fn upsert_contact(&self, contact: &ContactRecord) -> Result<(), StoreError>;
    /// Reads a contact.
    async fn contact(&self, id: &str) -> Result<Option<ContactRecord>, StoreError>;

    /// Appends a ledger entry.
    async fn append_ledger(&self, entry: &LedgerEntry) -> Result<(), StoreError>;
    /// The last `limit` ledger entries of a chat, oldest first.
    async fn ledger(&self, chat: &str, limit: usize) -> Result<Vec<LedgerEntry>, StoreError>;

    /// Writes (replaces) the checkpoint of a chat's flow.
    async fn save_checkpoint(&self, checkpoint: &FlowCheckpoint) -> Result<(), StoreError>;
    /// Reads the checkpoint of a chat, if a flow waits there.
    async fn checkpoint(&self, chat: &str) -> Result<Option<FlowCheckpoint>, StoreError>;
    /// The step and feeding inbound of a chat's checkpoint, if a flow waits there: what the
    /// runtime checks before each message of a flow it holds in memory (another process
    /// sharing the store may have moved the flow on), without reading and decoding its state.
    /// The default reads the whole checkpoint; SQLite, Postgres and the memory store read
    /// only those two columns.
    async fn checkpoint_head(&self, chat: &str) -> Result<Option<CheckpointHead>, StoreError> {
        Ok(self.checkpoint(chat).await?.map(|cp| CheckpointHead {
            step: cp.step,
            inbound_id: cp.inbound_id,
        }))
    }
    /// Removes the checkpoint of a chat (the flow ended); removing none is not an error.
    async fn delete_checkpoint(&self, chat: &str) -> Result<(), StoreError>;
    /// Every stored checkpoint (restored on `start()`).
    async fn checkpoints(&self) -> Result<Vec<FlowCheckpoint>, StoreError>;

    /// Hands a chat over to a human (replaces an earlier handoff of that chat).
    async fn set_handoff(&self, handoff: &HandoffRecord) -> Result<(), StoreError>;
    /// Ends the handoff of a chat; ending none is not an error.
    async fn clear_handoff(&self, chat: &str) -> Result<(), StoreError>;
    /// Every active handoff (restored on `start()`).
    async fn handoffs(&self) -> Result<Vec<HandoffRecord>, StoreError>;

    /// Reads a value of a scope (`user:<id>`, `chat:<id>`, an app's own name).
    async fn get_value(&self, scope: &str, key: &str) -> Result<Option<Value>, StoreError>;
    /// Writes a value of a scope.
    async fn set_value(&self, scope: &str, key: &str, value: &Value) -> Result<(), StoreError>;
    /// Removes a value; removing none is not an error.
    async fn delete_value(&self, scope: &str, key: &str) -> Result<(), StoreError>;
    /// Every `(key, value)` of a scope, ordered by key.
    async fn values(&self, scope: &str) -> Result<Vec<(String, Value)>, StoreError>;

    /// The backend of the inbox and outbox journals in this store's own database (SQLite,
    /// Postgres, Redis): a bot built with this store runs its journals on it unless told
    /// otherwise. `None` (the default) for a store that keeps nothing across a restart.
    fn journal_backend(&self) -> Option<std::sync::Arc<dyn DurableKv>> {
        None
    }

    /// Whether `kv` keeps the journals' rows in this store's own database, so that
    /// [`commit_step`](Self::commit_step) can write a flow step's checkpoint and journal
    /// operations in one transaction. `false` by default (and for any other backend).
    fn shares_transactions_with(&self, kv: &dyn DurableKv) -> bool {
        let _ = kv;
        false
    }

    /// Commits one flow step in one transaction: the checkpoint change, the journal operations
    /// (all or none: a conflict rolls everything back) and the value removals. Only called
    /// when [`shares_transactions_with`](Self::shares_transactions_with) answered `true` for
    /// the journals' backend; the default refuses.
    async fn commit_step(&self, step: &StepCommit) -> Result<StepCommitOutcome, StoreError> {
        let _ = step;
        Err(StoreError::Query {
            operation: "commit_step",
            source: "this store does not share transactions with the durable journals".into(),
        })
    }
}
