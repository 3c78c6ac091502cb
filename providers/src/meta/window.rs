//! [`SessionWindow`]: when each chat last wrote, for the 24-hour customer-service window of
//! Meta's channels (a free-form message only goes out within 24 h of the user's last message).
//!
//! Kept in memory, at most [`WINDOW_CHATS`] chats: when full, the chats whose window closed
//! are pruned first, then the older half. A chat the provider has not seen write (a restart
//! forgot it, or the map pruned it) counts as inside the window: Meta has the last word, and
//! its refusal is classified as `OutsideSessionWindow` all the same.

use std::collections::HashMap;
use std::sync::Mutex;

use botmesh::message::ChatId;
use botmesh::provider::ProviderEvent;

/// The customer-service window.
pub const SESSION_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;

/// The most chats whose last message time a provider remembers for the window.
pub const WINDOW_CHATS: usize = 100_000;

/// When each chat last wrote.
#[derive(Debug, Default)]
pub(crate) struct SessionWindow {
    last: Mutex<HashMap<ChatId, i64>>,
}

impl SessionWindow {
    /// Records that `chat` wrote at `at_ms` (a later time wins).
    pub(crate) fn note(&self, chat: &ChatId, at_ms: i64) {
        let mut map = self.last.lock().unwrap_or_else(|e| e.into_inner());
        remember(&mut map, chat, at_ms);
    }

    /// Records the messages and interactions among `events`.
    pub(crate) fn note_events(&self, events: &[ProviderEvent]) {
        let mut map = self.last.lock().unwrap_or_else(|e| e.into_inner());
        for e in events {
            let (chat, at) = match e {
                ProviderEvent::Message(m) => (&m.chat, m.timestamp_ms),
                ProviderEvent::Interaction(i) => (&i.chat, i.timestamp_ms),
                _ => continue,
            };
            remember(&mut map, chat, at);
        }
    }

    /// How long `chat` has been silent, when the provider saw it write.
    pub(crate) fn silent_for(&self, chat: &ChatId) -> Option<i64> {
        let last = self
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(chat)
            .copied()?;
        Some(botmesh::clock::now_ms() - last)
    }

    /// Whether `chat` is known to have been silent for more than the window.
    pub(crate) fn closed(&self, chat: &ChatId) -> bool {
        self.silent_for(chat).is_some_and(|s| s > SESSION_WINDOW_MS)
    }
}

/// Records that `chat` wrote at `at_ms`, keeping at most [`WINDOW_CHATS`] chats.
fn remember(map: &mut HashMap<ChatId, i64>, chat: &ChatId, at_ms: i64) {
    if !map.contains_key(chat) && map.len() >= WINDOW_CHATS {
        let now = botmesh::clock::now_ms();
        map.retain(|_, t| now - *t <= SESSION_WINDOW_MS);
        if map.len() >= WINDOW_CHATS {
            let mut times: Vec<i64> = map.values().copied().collect();
            times.sort_unstable();
            let cut = times[times.len() / 2];
            map.retain(|_, t| *t > cut);
        }
    }
    let entry = map.entry(chat.clone()).or_insert(at_ms);
    *entry = (*entry).max(at_ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_map_stays_bounded() {
        let mut map = HashMap::new();
        let now = botmesh::clock::now_ms();
        for i in 0..WINDOW_CHATS {
            // Half of them wrote more than a day ago.
            let at = if i % 2 == 0 {
                now - 2 * SESSION_WINDOW_MS
            } else {
                now
            };
            map.insert(ChatId(format!("c{i}")), at);
        }
        remember(&mut map, &ChatId("new".into()), now);
        assert!(map.len() <= WINDOW_CHATS / 2 + 1, "{}", map.len());
        assert!(map.contains_key(&ChatId("new".into())));
        assert!(
            map.contains_key(&ChatId("c1".into())),
            "a chat in its window is kept"
        );
    }
}
