//! [`MemoryStore`]: the [`Store`] kept in process memory.
//!
//! Every record lives in maps behind one mutex; clones of a `MemoryStore` share the same
//! data, so a test can stop a bot and start another one on the same store to play a restart.
//! It has the same semantics as the SQLite store (ledger order and limit, replace-on-save,
//! removal of a missing record is not an error, [`StoreError::Closed`] between `close()` and
//! the next `open()`), but it does not survive the process and does not copy data between
//! processes. A new store is open at once: `open()` is needed only after a `close()`.
//! `close()` keeps the data, so a later `open()` finds it again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    ChatRecord, CheckpointHead, ContactRecord, FlowCheckpoint, HandoffRecord, LedgerEntry, Store,
    StoreError,
};
use serde_json::Value;

/// A [`Store`] in process memory; clones share the same data.
///
/// ```
/// # use botmesh_durability::{MemoryStore, Store};
/// # async fn demo() -> Result<(), botmesh_durability::StoreError> {
/// let store = MemoryStore::new();
/// let restarted = store.clone(); // sees everything `store` writes
/// store.set_value("user:1", "name", &serde_json::json!("Ada")).await?;
/// assert!(restarted.get_value("user:1", "name").await?.is_some());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    closed: bool,
    chats: HashMap<String, ChatRecord>,
    contacts: HashMap<String, ContactRecord>,
    ledger: HashMap<String, Vec<LedgerEntry>>,
    checkpoints: BTreeMap<String, FlowCheckpoint>,
    handoffs: BTreeMap<String, HandoffRecord>,
    kv: HashMap<String, BTreeMap<String, serde_json::Value>>,
}

impl MemoryStore {
    /// An empty store, open at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Locks the data; a mutex poisoned by a panicking holder is still usable, since every
    /// update below leaves the maps consistent at each step.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the data of an open store.
    fn open_data(&self) -> Result<MutexGuard<'_, Inner>, StoreError> {
        let guard = self.lock();
        if guard.closed {
            return Err(StoreError::Closed);
        }
        Ok(guard)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn open(&self) -> Result<(), StoreError> {
        self.lock().closed = false;
        Ok(())
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.lock().closed = true;
        Ok(())
    }

    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<(), StoreError> {
        let mut data = self.open_data()?;
        data.chats.insert(chat.id.clone(), chat.clone());
        Ok(())
    }

    async fn chat(&self, id: &str) -> Result<Option<ChatRecord>, StoreError> {
        Ok(self.open_data()?.chats.get(id).cloned())
    }

    async fn upsert_contact(&self, contact: &ContactRecord) -> Result<(), StoreError> {
        let mut data = self.open_data()?;
        data.contacts.insert(contact.id.clone(), contact.clone());
        Ok(())
    }

    async fn contact(&self, id: &str) -> Result<Option<ContactRecord>, StoreError> {
        Ok(self.open_data()?.contacts.get(id).cloned())
    }

    async fn append_ledger(&self, entry: &LedgerEntry) -> Result<(), StoreError> {
        let mut data = self.open_data()?;
        data.ledger
            .entry(entry.chat.clone())
            .or_default()
            .push(entry.clone());
        Ok(())
    }

    async fn ledger(&self, chat: &str, limit: usize) -> Result<Vec<LedgerEntry>, StoreError> {
        let data = self.open_data()?;
        let Some(entries) = data.ledger.get(chat) else {
            return Ok(Vec::new());
        };
        let skip = entries.len().saturating_sub(limit);
        Ok(entries[skip..].to_vec())
    }

    async fn save_checkpoint(&self, checkpoint: &FlowCheckpoint) -> Result<(), StoreError> {
        let mut data = self.open_data()?;
        data.checkpoints
            .insert(checkpoint.chat.clone(), checkpoint.clone());
        Ok(())
    }

    async fn checkpoint(&self, chat: &str) -> Result<Option<FlowCheckpoint>, StoreError> {
        Ok(self.open_data()?.checkpoints.get(chat).cloned())
    }

    async fn checkpoint_head(&self, chat: &str) -> Result<Option<CheckpointHead>, StoreError> {
        Ok(self
            .open_data()?
            .checkpoints
            .get(chat)
            .map(|cp| CheckpointHead {
                step: cp.step,
                inbound_id: cp.inbound_id.clone(),
            }))
    }

    async fn delete_checkpoint(&self, chat: &str) -> Result<(), StoreError> {
        self.open_data()?.checkpoints.remove(chat);
        Ok(())
    }

    async fn checkpoints(&self) -> Result<Vec<FlowCheckpoint>, StoreError> {
        Ok(self.open_data()?.checkpoints.values().cloned().collect())
    }

    async fn set_handoff(&self, handoff: &HandoffRecord) -> Result<(), StoreError> {
        let mut data = self.open_data()?;
        data.handoffs.insert(handoff.chat.clone(), handoff.clone());
        Ok(())
    }

    async fn clear_handoff(&self, chat: &str) -> Result<(), StoreError> {
        self.open_data()?.handoffs.remove(chat);
        Ok(())
    }

    async fn handoffs(&self) -> Result<Vec<HandoffRecord>, StoreError> {
        Ok(self.open_data()?.handoffs.values().cloned().collect())
    }

    async fn get_value(&self, scope: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let data = self.open_data()?;
        Ok(data
            .kv
            .get(scope)
            .and_then(|values| values.get(key))
            .cloned())
    }

    async fn set_value(&self, scope: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        let mut data = self.open_data()?;
        data.kv
            .entry(scope.to_owned())
            .or_default()
            .insert(key.to_owned(), value.clone());
        Ok(())
    }

    async fn delete_value(&self, scope: &str, key: &str) -> Result<(), StoreError> {
        let mut data = self.open_data()?;
        if let Some(values) = data.kv.get_mut(scope) {
            values.remove(key);
            if values.is_empty() {
                data.kv.remove(scope);
            }
        }
        Ok(())
    }

    async fn values(&self, scope: &str) -> Result<Vec<(String, Value)>, StoreError> {
        let data = self.open_data()?;
        Ok(data
            .kv
            .get(scope)
            .map(|values| values.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default())
    }
}
