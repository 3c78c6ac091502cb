//! [`FlakyStore`]: a [`MemoryStore`] whose next checkpoint save or delete fails once when
//! armed (the store away for a moment), for the flow tests. It fails nothing else.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use botmesh::durability::store::ChatRecord;
use botmesh::durability::store::CheckpointHead;
use botmesh::durability::store::ContactRecord;
use botmesh::durability::store::FlowCheckpoint;
use botmesh::durability::store::HandoffRecord;
use botmesh::durability::store::LedgerEntry;
use botmesh::durability::{MemoryStore, Store, StoreError};

/// A memory store whose next checkpoint save, or delete, fails once when armed.
#[derive(Clone, Default)]
pub struct FlakyStore {
    /// The store that holds the data.
    pub inner: MemoryStore,
    /// Fails the next `save_checkpoint` once.
    pub fail_save: Arc<AtomicBool>,
    /// Fails the next `delete_checkpoint` once.
    pub fail_delete: Arc<AtomicBool>,
}

/// The error an armed failure gives.
pub fn away() -> StoreError {
    StoreError::Query {
        operation: "checkpoint",
        source: "the store is away for a moment".into(),
    }
}

#[async_trait]
impl Store for FlakyStore {
    async fn open(&self) -> Result<(), StoreError> {
        self.inner.open().await
    }
    async fn close(&self) -> Result<(), StoreError> {
        self.inner.close().await
    }
    async fn upsert_chat(&self, c: &ChatRecord) -> Result<(), StoreError> {
        self.inner.upsert_chat(c).await
    }
    async fn chat(&self, id: &str) -> Result<Option<ChatRecord>, StoreError> {
        self.inner.chat(id).await
    }
    async fn upsert_contact(&self, c: &ContactRecord) -> Result<(), StoreError> {
        self.inner.upsert_contact(c).await
    }
    async fn contact(&self, id: &str) -> Result<Option<ContactRecord>, StoreError> {
        self.inner.contact(id).await
    }
    async fn append_ledger(&self, e: &LedgerEntry) -> Result<(), StoreError> {
        self.inner.append_ledger(e).await
    }
    async fn ledger(&self, c: &str, l: usize) -> Result<Vec<LedgerEntry>, StoreError> {
        self.inner.ledger(c, l).await
    }
    async fn save_checkpoint(&self, cp: &FlowCheckpoint) -> Result<(), StoreError> {
        if self.fail_save.swap(false, Ordering::SeqCst) {
            return Err(away());
        }
        self.inner.save_checkpoint(cp).await
    }
    async fn checkpoint(&self, c: &str) -> Result<Option<FlowCheckpoint>, StoreError> {
        self.inner.checkpoint(c).await
    }
    async fn checkpoint_head(&self, c: &str) -> Result<Option<CheckpointHead>, StoreError> {
        self.inner.checkpoint_head(c).await
    }
    async fn delete_checkpoint(&self, c: &str) -> Result<(), StoreError> {
        if self.fail_delete.swap(false, Ordering::SeqCst) {
            return Err(away());
        }
        self.inner.delete_checkpoint(c).await
    }
    async fn checkpoints(&self) -> Result<Vec<FlowCheckpoint>, StoreError> {
        self.inner.checkpoints().await
    }
    async fn set_handoff(&self, h: &HandoffRecord) -> Result<(), StoreError> {
        self.inner.set_handoff(h).await
    }
    async fn clear_handoff(&self, c: &str) -> Result<(), StoreError> {
        self.inner.clear_handoff(c).await
    }
    async fn handoffs(&self) -> Result<Vec<HandoffRecord>, StoreError> {
        self.inner.handoffs().await
    }
    async fn get_value(&self, s: &str, k: &str) -> Result<Option<serde_json::Value>, StoreError> {
        self.inner.get_value(s, k).await
    }
    async fn set_value(&self, s: &str, k: &str, v: &serde_json::Value) -> Result<(), StoreError> {
        self.inner.set_value(s, k, v).await
    }
    async fn delete_value(&self, s: &str, k: &str) -> Result<(), StoreError> {
        self.inner.delete_value(s, k).await
    }
    async fn values(&self, s: &str) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        self.inner.values(s).await
    }
}
