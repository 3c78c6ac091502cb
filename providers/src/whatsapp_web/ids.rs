//! One user, one chat: WhatsApp names a person by phone number (`…@s.whatsapp.net`) in one
//! event and by LID (`…@lid`) in the next. The provider resolves both to one canonical JID,
//! chosen the first time the person is seen (the phone number when the event names it, else
//! the LID) and kept in the session store (`id/<user@server>` → canonical), so that a later
//! event naming only the other identity, or a replay after a restart, lands in the same chat.
//!
//! Device suffixes (`user:3@s.whatsapp.net`) are dropped. Groups keep their group JID; only
//! their senders are resolved. It does not ask the network (no usync lookups): mappings
//! come from the events.

use std::collections::HashMap;
use std::sync::Mutex;

use super::session::WaError;
use super::store::SessionStore;

const PREFIX: &str = "id/";

/// The JID without its device suffix: `user:3@server` → `user@server`.
pub(crate) fn bare(jid: &str) -> String {
    match jid.split_once('@') {
        Some((user, server)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{user}@{server}")
        }
        None => jid.to_owned(),
    }
}

/// Whether the JID is a phone number's.
fn is_pn(jid: &str) -> bool {
    jid.ends_with("@s.whatsapp.net") || jid.ends_with("@c.us")
}

/// The canonical identities of the session (see the module documentation).
pub(crate) struct Identities {
    store: SessionStore,
    cache: Mutex<HashMap<String, String>>,
}

impl Identities {
    pub(crate) fn new(store: SessionStore) -> Self {
        Self {
            store,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The canonical JID of the person named `id` (and `alt`, when the event gives the other
    /// identity).
    pub(crate) async fn resolve(&self, id: &str, alt: Option<&str>) -> Result<String, WaError> {
        let ids: Vec<String> = std::iter::once(bare(id)).chain(alt.map(bare)).collect();
        let mut canonical = None;
        for id in &ids {
            if let Some(found) = self.lookup(id).await? {
                canonical = Some(found);
                break;
            }
        }
        let canonical = match canonical {
            Some(c) => c,
            None => ids.iter().find(|j| is_pn(j)).unwrap_or(&ids[0]).clone(),
        };
        for id in &ids {
            if self.cached(id).as_deref() != Some(canonical.as_str()) {
                self.store
                    .put(&format!("{PREFIX}{id}"), canonical.as_bytes().to_vec())
                    .await?;
                self.remember(id, &canonical);
            }
        }
        Ok(canonical)
    }

    /// The other identities known for `canonical` (to address a contact by LID when the
    /// phone number is refused).
    pub(crate) async fn aliases(&self, canonical: &str) -> Result<Vec<String>, WaError> {
        Ok(self
            .store
            .list(PREFIX)
            .await?
            .into_iter()
            .filter(|(_, v)| v == canonical.as_bytes())
            .filter_map(|(k, _)| k.strip_prefix(PREFIX).map(str::to_owned))
            .filter(|k| k != canonical)
            .collect())
    }

    /// The identities resolved so far (a poisoned lock still holds them).
    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cached(&self, id: &str) -> Option<String> {
        self.known().get(id).cloned()
    }

    fn remember(&self, id: &str, canonical: &str) {
        self.known().insert(id.to_owned(), canonical.to_owned());
    }

    async fn lookup(&self, id: &str) -> Result<Option<String>, WaError> {
        if let Some(found) = self.cached(id) {
            return Ok(Some(found));
        }
        let Some(bytes) = self.store.get(&format!("{PREFIX}{id}")).await? else {
            return Ok(None);
        };
        let canonical = String::from_utf8(bytes)
            .map_err(|_| WaError::Store(format!("identity `{id}` is not UTF-8")))?;
        self.remember(id, &canonical);
        Ok(Some(canonical))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use botmesh::durability::MemoryKv;

    use super::*;

    #[test]
    fn device_suffixes_are_dropped() {
        assert_eq!(
            bare("15551234567:12@s.whatsapp.net"),
            "15551234567@s.whatsapp.net"
        );
        assert_eq!(bare("100000012345678@lid"), "100000012345678@lid");
    }

    #[tokio::test]
    async fn a_lid_and_a_phone_number_are_one_person_across_restarts() {
        let kv = Arc::new(MemoryKv::new());
        let store = SessionStore::new(kv.clone(), "s");
        let ids = Identities::new(store.clone());
        let pn = "15551234567@s.whatsapp.net";
        let lid = "100000012345678@lid";
        assert_eq!(ids.resolve(lid, Some(pn)).await.ok().as_deref(), Some(pn));
        assert_eq!(ids.resolve(lid, None).await.ok().as_deref(), Some(pn));
        // A restart: a new cache over the same store.
        let again = Identities::new(SessionStore::new(kv, "s"));
        assert_eq!(
            again
                .resolve("100000012345678:4@lid", None)
                .await
                .ok()
                .as_deref(),
            Some(pn)
        );
        assert_eq!(again.aliases(pn).await.ok(), Some(vec![lid.to_owned()]));
        // A LID seen first stays the chat when its phone number shows up later.
        let other = "200000000000001@lid";
        assert_eq!(ids.resolve(other, None).await.ok().as_deref(), Some(other));
        assert_eq!(
            ids.resolve("15550000001@s.whatsapp.net", Some(other))
                .await
                .ok()
                .as_deref(),
            Some(other)
        );
    }
}
