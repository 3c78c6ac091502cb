//! Writing a channel's own state in the bot's [`DurableKv`] (WhatsApp Web's session, email's
//! threads, attachments and IMAP position): [`overwrite`] a key whatever its version. Each key
//! has one writer at a time (the session's lock holder, the mail being delivered), so a
//! compare-and-set conflict is a lost race with nobody: the version is read again and the
//! write retried a few times. It does not merge values.

use botmesh::durability::kv::{CasOutcome, DurableKv, Entry, KvOp, Scope};

/// Writes `value` under `key` in `scope` (created or replaced), the key as its first index
/// (so a scan by key prefix lists it). `Err` with why: the backend's error, or a key that kept
/// changing under five writes.
pub(crate) async fn overwrite(
    kv: &dyn DurableKv,
    scope: &Scope,
    key: &str,
    value: Vec<u8>,
) -> Result<(), String> {
    for _ in 0..5 {
        let expected = kv
            .get(scope, key)
            .await
            .map_err(|e| e.to_string())?
            .map(|v| v.version);
        let op = KvOp::Cas {
            key: key.to_owned(),
            expected,
            entry: Entry {
                value: value.clone(),
                idx1: Some(key.to_owned()),
                idx2: None,
            },
        };
        if let CasOutcome::Ok { .. } = kv.apply(scope, op).await.map_err(|e| e.to_string())? {
            return Ok(());
        }
    }
    Err(format!("`{key}` kept changing under the write"))
}
