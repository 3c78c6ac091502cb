//! Admission gates: the access lists and the human-handoff gate, with their drop counters.
//!
//! The access lists decide whether an event reaches the pipeline at all; the handoff gate
//! (checked by the dispatcher after the `before` message hooks) keeps the bot quiet in chats
//! a human agent took over. Handoffs are kept in memory here and persisted through the store
//! by the persistence module; `start()` restores them.

use std::collections::HashMap;
use std::sync::RwLock;

use botmesh_durability::store::HandoffRecord;

use crate::config::AccessList;
use crate::message::{ChatId, UserId};

pub(crate) struct Gates {
    access: RwLock<AccessList>,
    handoffs: RwLock<HashMap<ChatId, HandoffRecord>>,
}

impl Gates {
    pub(crate) fn new(access: AccessList) -> Self {
        Self {
            access: RwLock::new(access),
            handoffs: RwLock::new(HashMap::new()),
        }
    }

    pub(crate) fn admits(&self, chat: &ChatId, user: &UserId) -> bool {
        self.access
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .admits(chat, user)
    }

    pub(crate) fn update_access(&self, f: impl FnOnce(&mut AccessList)) {
        f(&mut self.access.write().unwrap_or_else(|e| e.into_inner()));
    }

    pub(crate) fn is_handed_off(&self, chat: &ChatId) -> bool {
        self.handoffs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(chat)
    }

    pub(crate) fn set_handoff(&self, record: HandoffRecord) {
        self.handoffs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ChatId(record.chat.clone()), record);
    }

    pub(crate) fn clear_handoff(&self, chat: &ChatId) -> bool {
        self.handoffs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(chat)
            .is_some()
    }
}
