//! The `whatsapp-rust` client's storage backend ([`Backend`]: its Signal, app-state, protocol,
//! message-secret and device stores) over the session's [`SessionStore`], i.e. over the bot's
//! durable store (SQLite, Postgres, Redis, …): a restart reconnects without pairing again.
//!
//! Every item is one key under [`CLIENT_PREFIX`](super::super::CLIENT_PREFIX) (`wa/`), so a
//! logout clears it all:
//!
//! | key | value |
//! | --- | --- |
//! | `wa/device` | the device (keys, account, pairing) as JSON |
//! | `wa/identity/<address>`, `wa/session/<address>`, `wa/sender-key/<address>` | the Signal records' bytes |
//! | `wa/prekey/<id>`, `wa/signed-prekey/<id>` (ids zero-padded: listed in order) | a pre-key (JSON: record, uploaded) / the signed pre-key's bytes |
//! | `wa/sync-key/<hex id>`, `wa/sync-key-latest` | an app-state sync key (JSON) / the id last stored |
//! | `wa/version/<collection>`, `wa/mac/<collection>/<hex index MAC>` | an app-state collection's hash state / a mutation's value MAC (JSON) |
//! | `wa/skd/<group>/<device>` | whether the device holds the group's sender key (`1` / `0`) |
//! | `wa/lid/<lid>`, `wa/pn/<phone>` | a LID ↔ phone-number mapping (JSON), by either side |
//! | `wa/base-key/<address>/<message id>` | a retry's base key |
//! | `wa/devices/<user>`, `wa/group/<group>`, `wa/tc/<jid>` | a device list / group metadata / a trusted-contact token |
//! | `wa/sent/<chat>/<message id>` | a sent message's payload for retry receipts (JSON, with its time) |
//! | `wa/pending/<chat>/<sender>/<id>` | an inbound message awaiting its commit (JSON, with its time) |
//! | `wa/secret/<chat>/<sender>/<message id>` | a message secret (JSON: secret, expiry, message time) |
//!
//! Values are serialized per key; a failure is a [`NativeStoreError`] naming the key, carried
//! to the client inside its `StoreError`. One process writes (the session's lock), so there
//! are no cross-process races to arbitrate. It does not cache: the client keeps its own
//! caches in front of the backend.

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use whatsapp_rust::bytes::Bytes;
use whatsapp_rust::store::traits::{
    AppStateSyncKey, AppSyncStore, DeviceListRecord, DeviceStore, LidPnMappingEntry,
    MsgSecretEntry, MsgSecretStore, ProtocolStore, SignalStore, TcTokenEntry,
    merge_msg_secret_expiry, merge_msg_secret_message_ts,
};
use whatsapp_rust::wacore::appstate::hash::HashState;
use whatsapp_rust::wacore::appstate::processor::AppStateMutationMAC;
use whatsapp_rust::wacore::store::Device;
use whatsapp_rust::wacore::store::error::{Result, StoreError};

use super::super::CLIENT_PREFIX;
use super::super::session::{WaError, b64};
use super::super::store::SessionStore;

/// Why the client's store failed, naming the key concerned.
#[derive(Debug, thiserror::Error)]
pub enum NativeStoreError {
    /// The durable store failed to read or write the key.
    #[error("WhatsApp Web store, key `{key}`: {source}")]
    Store {
        /// The key.
        key: String,
        /// The store's error.
        #[source]
        source: WaError,
    },
    /// The stored value does not decode (written by another version, or damaged).
    #[error("WhatsApp Web store, key `{key}`: the value does not decode: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The value could not be encoded.
    #[error("WhatsApp Web store, key `{key}`: the value does not encode: {reason}")]
    Encode {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
}

impl NativeStoreError {
    /// The key concerned.
    pub fn key(&self) -> &str {
        match self {
            NativeStoreError::Store { key, .. }
            | NativeStoreError::Corrupt { key, .. }
            | NativeStoreError::Encode { key, .. } => key,
        }
    }
}

impl From<NativeStoreError> for StoreError {
    fn from(e: NativeStoreError) -> Self {
        match e {
            e @ NativeStoreError::Store { .. } => StoreError::Database(Box::new(e)),
            e => StoreError::Serialization(Box::new(e)),
        }
    }
}

/// A pre-key and whether the server has it.
#[derive(Serialize, Deserialize)]
struct PreKey {
    #[serde(with = "b64")]
    record: Vec<u8>,
    uploaded: bool,
}

/// A mutation's value MAC and the collection version that wrote it.
#[derive(Serialize, Deserialize)]
struct MutationMac {
    version: u64,
    #[serde(with = "b64")]
    value_mac: Vec<u8>,
}

/// Bytes and when they were stored (Unix seconds): sent messages, pending inbound messages.
#[derive(Serialize, Deserialize)]
struct Dated {
    #[serde(with = "b64")]
    bytes: Vec<u8>,
    at: i64,
}

/// A message secret with its expiry and the message's time.
#[derive(Serialize, Deserialize)]
struct Secret {
    #[serde(with = "b64")]
    secret: Vec<u8>,
    expires_at: i64,
    message_ts: i64,
}

const DEVICE: &str = "wa/device";
const LATEST_SYNC_KEY: &str = "wa/sync-key-latest";

/// The key of an item: `wa/` and its parts joined by `/`.
fn key(parts: &[&str]) -> String {
    format!("{CLIENT_PREFIX}{}", parts.join("/"))
}

/// The key of a numbered item, zero-padded so that keys list in number order.
fn numbered(kind: &str, id: u32) -> String {
    key(&[kind, &format!("{id:010}")])
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The client's backend over a session's store (see the module documentation). Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct NativeStore {
    store: SessionStore,
}

impl NativeStore {
    /// The backend over `store`.
    pub fn new(store: SessionStore) -> Self {
        Self { store }
    }

    /// The raw bytes under `key`.
    async fn bytes(&self, key: &str) -> std::result::Result<Option<Vec<u8>>, NativeStoreError> {
        self.store.get(key).await.map_err(failed(key))
    }

    async fn put_bytes(&self, key: &str, value: Vec<u8>) -> Result<()> {
        Ok(self.store.put(key, value).await.map_err(failed(key))?)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        Ok(self.store.delete(key).await.map_err(failed(key))?)
    }

    /// The entries under `prefix`, sorted by key.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(self
            .store
            .list(prefix)
            .await
            .map_err(failed(&format!("{prefix}*")))?)
    }

    async fn clear(&self, prefix: &str) -> Result<()> {
        for (key, _) in self.list(prefix).await? {
            self.delete(&key).await?;
        }
        Ok(())
    }

    /// The JSON value under `key`.
    async fn json<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        match self.bytes(key).await? {
            Some(bytes) => Ok(Some(decode(key, &bytes)?)),
            None => Ok(None),
        }
    }

    async fn put_json<T: Serialize>(&self, key: &str, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec(value).map_err(|e| NativeStoreError::Encode {
            key: key.to_owned(),
            reason: e.to_string(),
        })?;
        self.put_bytes(key, bytes).await
    }

    /// The JSON values under `prefix`, with their keys.
    async fn list_json<T: DeserializeOwned>(&self, prefix: &str) -> Result<Vec<(String, T)>> {
        self.list(prefix)
            .await?
            .into_iter()
            .map(|(key, bytes)| {
                let value = decode(&key, &bytes)?;
                Ok((key, value))
            })
            .collect()
    }

    /// Deletes the JSON values under `prefix` that `expired` picks; returns how many.
    async fn expire<T: DeserializeOwned>(
        &self,
        prefix: &str,
        expired: impl Fn(&T) -> bool,
    ) -> Result<u32> {
        let mut removed = 0u32;
        for (key, value) in self.list_json::<T>(prefix).await? {
            if expired(&value) {
                self.delete(&key).await?;
                removed = removed.saturating_add(1);
            }
        }
        Ok(removed)
    }

    async fn has_prefix(&self, prefix: &str) -> Result<bool> {
        Ok(!self.list(prefix).await?.is_empty())
    }
}

/// The error of a failed store call on `key`.
fn failed(key: &str) -> impl FnOnce(WaError) -> NativeStoreError + '_ {
    move |source| NativeStoreError::Store {
        key: key.to_owned(),
        source,
    }
}

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> std::result::Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| {
        NativeStoreError::Corrupt {
            key: key.to_owned(),
            reason: e.to_string(),
        }
        .into()
    })
}

fn id_of(prefix: &str, key: &str) -> std::result::Result<u32, StoreError> {
    key.strip_prefix(prefix)
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| {
            NativeStoreError::Corrupt {
                key: key.to_owned(),
                reason: "the key does not end in a number".to_owned(),
            }
            .into()
        })
}

#[async_trait]
impl SignalStore for NativeStore {
    async fn put_identity(&self, address: &str, identity: [u8; 32]) -> Result<()> {
        self.put_bytes(&key(&["identity", address]), identity.to_vec())
            .await
    }

    async fn load_identity(&self, address: &str) -> Result<Option<[u8; 32]>> {
        let key = key(&["identity", address]);
        match self.bytes(&key).await? {
            Some(bytes) => Ok(Some(<[u8; 32]>::try_from(bytes.as_slice()).map_err(
                |_| NativeStoreError::Corrupt {
                    key,
                    reason: format!("an identity key of {} bytes, not 32", bytes.len()),
                },
            )?)),
            None => Ok(None),
        }
    }

    async fn delete_identity(&self, address: &str) -> Result<()> {
        self.delete(&key(&["identity", address])).await
    }

    async fn get_session(&self, address: &str) -> Result<Option<Bytes>> {
        Ok(self
            .bytes(&key(&["session", address]))
            .await?
            .map(Bytes::from))
    }

    async fn put_session(&self, address: &str, record: &[u8]) -> Result<()> {
        self.put_bytes(&key(&["session", address]), record.to_vec())
            .await
    }

    async fn delete_session(&self, address: &str) -> Result<()> {
        self.delete(&key(&["session", address])).await
    }

    async fn has_signal_state_for_user(&self, user: &str) -> Result<bool> {
        // Addresses are `user@server` (device 0) or `user:device@server`.
        for separator in ['@', ':'] {
            if self
                .has_prefix(&key(&["session", &format!("{user}{separator}")]))
                .await?
                || self
                    .has_prefix(&key(&["identity", &format!("{user}{separator}")]))
                    .await?
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn store_prekey(&self, id: u32, record: &[u8], uploaded: bool) -> Result<()> {
        let value = PreKey {
            record: record.to_vec(),
            uploaded,
        };
        self.put_json(&numbered("prekey", id), &value).await
    }

    async fn load_prekey(&self, id: u32) -> Result<Option<Bytes>> {
        Ok(self
            .json::<PreKey>(&numbered("prekey", id))
            .await?
            .map(|k| Bytes::from(k.record)))
    }

    async fn mark_prekeys_uploaded(&self, ids: &[u32]) -> Result<()> {
        for &id in ids {
            // An update only: a key consumed meanwhile stays deleted.
            if let Some(mut key) = self.json::<PreKey>(&numbered("prekey", id)).await? {
                key.uploaded = true;
                self.put_json(&numbered("prekey", id), &key).await?;
            }
        }
        Ok(())
    }

    async fn remove_prekey(&self, id: u32) -> Result<()> {
        self.delete(&numbered("prekey", id)).await
    }

    async fn get_max_prekey_id(&self) -> Result<u32> {
        let prefix = format!("{CLIENT_PREFIX}prekey/");
        match self.list(&prefix).await?.last() {
            Some((key, _)) => id_of(&prefix, key),
            None => Ok(0),
        }
    }

    async fn store_signed_prekey(&self, id: u32, record: &[u8]) -> Result<()> {
        self.put_bytes(&numbered("signed-prekey", id), record.to_vec())
            .await
    }

    async fn load_signed_prekey(&self, id: u32) -> Result<Option<Vec<u8>>> {
        Ok(self.bytes(&numbered("signed-prekey", id)).await?)
    }

    async fn load_all_signed_prekeys(&self) -> Result<Vec<(u32, Vec<u8>)>> {
        let prefix = format!("{CLIENT_PREFIX}signed-prekey/");
        self.list(&prefix)
            .await?
            .into_iter()
            .map(|(key, record)| Ok((id_of(&prefix, &key)?, record)))
            .collect()
    }

    async fn remove_signed_prekey(&self, id: u32) -> Result<()> {
        self.delete(&numbered("signed-prekey", id)).await
    }

    async fn put_sender_key(&self, address: &str, record: &[u8]) -> Result<()> {
        self.put_bytes(&key(&["sender-key", address]), record.to_vec())
            .await
    }

    async fn get_sender_key(&self, address: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.bytes(&key(&["sender-key", address])).await?)
    }

    async fn delete_sender_key(&self, address: &str) -> Result<()> {
        self.delete(&key(&["sender-key", address])).await
    }
}

#[async_trait]
impl AppSyncStore for NativeStore {
    async fn get_sync_key(&self, key_id: &[u8]) -> Result<Option<AppStateSyncKey>> {
        self.json(&key(&["sync-key", &hex::encode(key_id)])).await
    }

    async fn set_sync_key(&self, key_id: &[u8], sync_key: AppStateSyncKey) -> Result<()> {
        self.put_json(&key(&["sync-key", &hex::encode(key_id)]), &sync_key)
            .await?;
        self.put_bytes(LATEST_SYNC_KEY, key_id.to_vec()).await
    }

    async fn get_version(&self, name: &str) -> Result<HashState> {
        Ok(self
            .json(&key(&["version", name]))
            .await?
            .unwrap_or_default())
    }

    async fn set_version(&self, name: &str, state: HashState) -> Result<()> {
        self.put_json(&key(&["version", name]), &state).await
    }

    async fn put_mutation_macs(
        &self,
        name: &str,
        version: u64,
        mutations: &[AppStateMutationMAC],
    ) -> Result<()> {
        for m in mutations {
            let value = MutationMac {
                version,
                value_mac: m.value_mac.clone(),
            };
            let key = key(&["mac", name, &hex::encode(&m.index_mac)]);
            self.put_json(&key, &value).await?;
        }
        Ok(())
    }

    async fn get_mutation_mac(&self, name: &str, index_mac: &[u8]) -> Result<Option<Vec<u8>>> {
        let key = key(&["mac", name, &hex::encode(index_mac)]);
        Ok(self.json::<MutationMac>(&key).await?.map(|m| m.value_mac))
    }

    async fn delete_mutation_macs(&self, name: &str, index_macs: &[Vec<u8>]) -> Result<()> {
        for index_mac in index_macs {
            self.delete(&key(&["mac", name, &hex::encode(index_mac)]))
                .await?;
        }
        Ok(())
    }

    async fn clear_mutation_macs(&self, name: &str) -> Result<()> {
        self.clear(&key(&["mac", name, ""])).await
    }

    async fn get_latest_sync_key_id(&self) -> Result<Option<Vec<u8>>> {
        Ok(self.bytes(LATEST_SYNC_KEY).await?)
    }
}

#[async_trait]
impl ProtocolStore for NativeStore {
    async fn get_sender_key_devices(&self, group_jid: &str) -> Result<Vec<(String, bool)>> {
        let prefix = key(&["skd", group_jid, ""]);
        Ok(self
            .list(&prefix)
            .await?
            .into_iter()
            .filter_map(|(key, value)| {
                let device = key.strip_prefix(&prefix)?.to_owned();
                Some((device, value == b"1"))
            })
            .collect())
    }

    async fn set_sender_key_status(&self, group_jid: &str, entries: &[(&str, bool)]) -> Result<()> {
        for (device, has_key) in entries {
            let value = if *has_key { b"1" } else { b"0" };
            self.put_bytes(&key(&["skd", group_jid, device]), value.to_vec())
                .await?;
        }
        Ok(())
    }

    async fn clear_sender_key_devices(&self, group_jid: &str) -> Result<()> {
        self.clear(&key(&["skd", group_jid, ""])).await
    }

    async fn delete_sender_key_device_rows(&self, device_jids: &[&str]) -> Result<()> {
        if device_jids.is_empty() {
            return Ok(());
        }
        for (key, _) in self.list(&format!("{CLIENT_PREFIX}skd/")).await? {
            let device = key.rsplit_once('/').map_or("", |(_, d)| d);
            if device_jids.contains(&device) {
                self.delete(&key).await?;
            }
        }
        Ok(())
    }

    async fn clear_all_sender_key_devices(&self) -> Result<()> {
        self.clear(&format!("{CLIENT_PREFIX}skd/")).await
    }

    async fn get_lid_mapping(&self, lid_user: &str) -> Result<Option<LidPnMappingEntry>> {
        self.json(&key(&["lid", lid_user])).await
    }

    async fn get_pn_mapping(&self, phone: &str) -> Result<Option<LidPnMappingEntry>> {
        self.json(&key(&["pn", phone])).await
    }

    async fn put_lid_mapping(&self, entry: &LidPnMappingEntry) -> Result<()> {
        // A LID that moved to another number no longer answers for the old one.
        if let Some(old) = self
            .json::<LidPnMappingEntry>(&key(&["lid", &entry.lid]))
            .await?
        {
            if old.phone_number != entry.phone_number {
                let by_old = self
                    .json::<LidPnMappingEntry>(&key(&["pn", &old.phone_number]))
                    .await?;
                if by_old.is_some_and(|m| m.lid == entry.lid) {
                    self.delete(&key(&["pn", &old.phone_number])).await?;
                }
            }
        }
        self.put_json(&key(&["lid", &entry.lid]), entry).await?;
        self.put_json(&key(&["pn", &entry.phone_number]), entry)
            .await
    }

    async fn get_all_lid_mappings(&self) -> Result<Vec<LidPnMappingEntry>> {
        Ok(self
            .list_json(&format!("{CLIENT_PREFIX}lid/"))
            .await?
            .into_iter()
            .map(|(_, entry)| entry)
            .collect())
    }

    async fn save_base_key(&self, address: &str, message_id: &str, base: &[u8]) -> Result<()> {
        self.put_bytes(&key(&["base-key", address, message_id]), base.to_vec())
            .await
    }

    async fn has_same_base_key(
        &self,
        address: &str,
        message_id: &str,
        current_base_key: &[u8],
    ) -> Result<bool> {
        Ok(self
            .bytes(&key(&["base-key", address, message_id]))
            .await?
            .is_some_and(|stored| stored == current_base_key))
    }

    async fn delete_base_key(&self, address: &str, message_id: &str) -> Result<()> {
        self.delete(&key(&["base-key", address, message_id])).await
    }

    async fn update_device_list(&self, record: DeviceListRecord) -> Result<()> {
        self.put_json(&key(&["devices", &record.user]), &record)
            .await
    }

    async fn get_devices(&self, user: &str) -> Result<Option<DeviceListRecord>> {
        self.json(&key(&["devices", user])).await
    }

    async fn delete_devices(&self, user: &str) -> Result<()> {
        self.delete(&key(&["devices", user])).await
    }

    async fn get_group_metadata(&self, group_jid: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.bytes(&key(&["group", group_jid])).await?)
    }

    async fn put_group_metadata(&self, group_jid: &str, blob: &[u8]) -> Result<()> {
        self.put_bytes(&key(&["group", group_jid]), blob.to_vec())
            .await
    }

    async fn delete_group_metadata(&self, group_jid: &str) -> Result<()> {
        self.delete(&key(&["group", group_jid])).await
    }

    async fn get_tc_token(&self, jid: &str) -> Result<Option<TcTokenEntry>> {
        self.json(&key(&["tc", jid])).await
    }

    async fn put_tc_token(&self, jid: &str, entry: &TcTokenEntry) -> Result<()> {
        self.put_json(&key(&["tc", jid]), entry).await
    }

    async fn delete_tc_token(&self, jid: &str) -> Result<()> {
        self.delete(&key(&["tc", jid])).await
    }

    async fn get_all_tc_token_jids(&self) -> Result<Vec<String>> {
        let prefix = format!("{CLIENT_PREFIX}tc/");
        Ok(self
            .list(&prefix)
            .await?
            .into_iter()
            .filter_map(|(key, _)| key.strip_prefix(&prefix).map(str::to_owned))
            .collect())
    }

    async fn delete_expired_tc_tokens(&self, token_cutoff: i64, sender_cutoff: i64) -> Result<u32> {
        self.expire(&format!("{CLIENT_PREFIX}tc/"), |e: &TcTokenEntry| {
            let token_live = !e.token.is_empty() && e.token_timestamp >= token_cutoff;
            let sender_live = e.sender_timestamp.is_some_and(|ts| ts >= sender_cutoff);
            !(token_live || sender_live)
        })
        .await
    }

    async fn store_sent_message(&self, chat: &str, message_id: &str, payload: &[u8]) -> Result<()> {
        let value = Dated {
            bytes: payload.to_vec(),
            at: now_secs(),
        };
        self.put_json(&key(&["sent", chat, message_id]), &value)
            .await
    }

    async fn take_sent_message(&self, chat: &str, message_id: &str) -> Result<Option<Vec<u8>>> {
        let key = key(&["sent", chat, message_id]);
        let Some(value) = self.json::<Dated>(&key).await? else {
            return Ok(None);
        };
        self.delete(&key).await?;
        Ok(Some(value.bytes))
    }

    async fn delete_expired_sent_messages(&self, cutoff: i64) -> Result<u32> {
        self.expire(&format!("{CLIENT_PREFIX}sent/"), |d: &Dated| d.at < cutoff)
            .await
    }

    async fn store_pending_inbound(
        &self,
        chat: &str,
        sender: &str,
        id: &str,
        message: &[u8],
    ) -> Result<()> {
        let value = Dated {
            bytes: message.to_vec(),
            at: now_secs(),
        };
        self.put_json(&key(&["pending", chat, sender, id]), &value)
            .await
    }

    async fn get_pending_inbound(
        &self,
        chat: &str,
        sender: &str,
        id: &str,
    ) -> Result<Option<Vec<u8>>> {
        Ok(self
            .json::<Dated>(&key(&["pending", chat, sender, id]))
            .await?
            .map(|d| d.bytes))
    }

    async fn delete_pending_inbound(&self, chat: &str, sender: &str, id: &str) -> Result<()> {
        self.delete(&key(&["pending", chat, sender, id])).await
    }

    async fn delete_expired_pending_inbound(&self, cutoff: i64) -> Result<u32> {
        self.expire(&format!("{CLIENT_PREFIX}pending/"), |d: &Dated| {
            d.at < cutoff
        })
        .await
    }
}

#[async_trait]
impl MsgSecretStore for NativeStore {
    async fn put_msg_secrets(&self, entries: Vec<MsgSecretEntry>) -> Result<usize> {
        let stored = entries.len();
        for entry in entries {
            let key = key(&["secret", &entry.chat, &entry.sender, &entry.msg_id]);
            let mut value = Secret {
                secret: entry.secret.to_vec(),
                expires_at: entry.expires_at,
                message_ts: entry.message_ts,
            };
            if let Some(old) = self.json::<Secret>(&key).await? {
                value.expires_at = merge_msg_secret_expiry(old.expires_at, value.expires_at);
                value.message_ts = merge_msg_secret_message_ts(old.message_ts, value.message_ts);
            }
            self.put_json(&key, &value).await?;
        }
        Ok(stored)
    }

    async fn get_msg_secret(
        &self,
        chat: &str,
        sender: &str,
        msg_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        Ok(self
            .get_msg_secret_with_ts(chat, sender, msg_id)
            .await?
            .map(|(s, _)| s))
    }

    async fn get_msg_secret_with_ts(
        &self,
        chat: &str,
        sender: &str,
        msg_id: &str,
    ) -> Result<Option<(Vec<u8>, i64)>> {
        Ok(self
            .json::<Secret>(&key(&["secret", chat, sender, msg_id]))
            .await?
            .map(|s| (s.secret, s.message_ts)))
    }

    async fn delete_expired_msg_secrets(&self, cutoff: i64) -> Result<u32> {
        self.expire(&format!("{CLIENT_PREFIX}secret/"), |s: &Secret| {
            s.expires_at != 0 && s.expires_at <= cutoff
        })
        .await
    }
}

#[async_trait]
impl DeviceStore for NativeStore {
    async fn save(&self, device: &Device) -> Result<()> {
        self.put_json(DEVICE, device).await
    }

    async fn load(&self) -> Result<Option<Device>> {
        self.json(DEVICE).await
    }

    async fn exists(&self) -> Result<bool> {
        Ok(self.bytes(DEVICE).await?.is_some())
    }

    async fn create(&self) -> Result<i32> {
        // One device per session (a session is one linked account).
        if !self.exists().await? {
            self.save(&Device::new()).await?;
        }
        Ok(1)
    }

    async fn resource_report(&self) -> whatsapp_rust::StorageResourceReport {
        // The data lives in the bot's store, not in this process's memory.
        whatsapp_rust::StorageResourceReport {
            memory_bytes: Some(0),
            ..Default::default()
        }
    }
}
