//! In-memory dedupe of inbound events by chat and message id.
//!
//! Remembers the last `capacity` (chat, id) pairs in arrival order. A redelivery of a pair it
//! still remembers is dropped. `forget` removes a pair (fail-closed journaling makes a
//! redelivery processable again). Across restarts, the durable inbox dedupes instead.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use crate::message::ChatId;

type Seen = (HashSet<(ChatId, String)>, VecDeque<(ChatId, String)>);

pub(crate) struct Dedupe {
    capacity: usize,
    inner: Mutex<Seen>,
}

impl Dedupe {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new((HashSet::new(), VecDeque::new())),
        }
    }

    /// Records the pair; `false` when it was already seen.
    pub(crate) fn first_sight(&self, chat: &ChatId, id: &str) -> bool {
        if self.capacity == 0 {
            return true;
        }
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (set, order) = &mut *guard;
        let key = (chat.clone(), id.to_owned());
        if !set.insert(key.clone()) {
            return false;
        }
        order.push_back(key);
        while order.len() > self.capacity {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
        true
    }

    pub(crate) fn forget(&self, chat: &ChatId, id: &str) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (chat.clone(), id.to_owned());
        guard.0.remove(&key);
        guard.1.retain(|k| k != &key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_within_capacity_and_forgets_the_oldest() {
        let d = Dedupe::new(2);
        let c = ChatId::from("c");
        assert!(d.first_sight(&c, "1"));
        assert!(!d.first_sight(&c, "1"));
        assert!(d.first_sight(&c, "2"));
        assert!(d.first_sight(&c, "3"));
        assert!(d.first_sight(&c, "1"), "1 fell out of the window");
        d.forget(&c, "3");
        assert!(d.first_sight(&c, "3"));
        assert!(
            d.first_sight(&ChatId::from("other"), "2"),
            "pairs are per chat"
        );
    }
}
