//! botmesh-durability: everything botmesh persists.
//!
//! - [`store`]: the [`Store`] SPI (chats, contacts, message ledger, flow checkpoints, handoffs,
//!   per-scope data) with [`MemoryStore`] and, behind the `sqlite` feature, [`SqliteStore`].
//!
//! This crate knows nothing of messages, chats' channels or providers: it keeps opaque JSON.

pub mod store;

pub use store::{
    ChatRecord, ContactRecord, Direction, FlowCheckpoint, HandoffRecord, LedgerEntry,
    LedgerStatus, MemoryStore, Store, StoreError,
};
#[cfg(feature = "sqlite")]
pub use store::{SqliteStore, SqliteStoreOptions};
