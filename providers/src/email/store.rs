//! What the email provider keeps in the bot's durable store ([`DurableKv`], the backend the
//! bot already journals to), in the scope `email/channel/email/<account>`:
//!
//! | key | value | written |
//! | --- | --- | --- |
//! | `thread/<chat>` | the thread's last mail from the person: its id, references, subject and reply address (JSON) | before the mail is delivered |
//! | `imap/<mailbox>` | the read position: `UIDVALIDITY` and the last UID delivered (JSON) | after the pipeline accepted every event of that mail |
//! | `media/<sha256 of the Message-ID>/<index>` | an attachment's bytes | before the mail is delivered |
//!
//! Each key has one writer at a time (the mail being delivered, the IMAP task): a write
//! overwrites (`kv_write`). It does not expire entries (retention of attachments is the
//! application's).

use std::sync::Arc;

use botmesh::durability::kv::{DurableKv, Scope};
use serde::{Deserialize, Serialize};

use super::error::EmailError;

/// A thread's state: how to answer its last mail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Thread {
    /// Where replies go (`Reply-To`, else `From`).
    pub(crate) reply_to: String,
    /// The thread's subject, as the last mail had it.
    pub(crate) subject: String,
    /// The last mail's Message-ID (bare).
    pub(crate) last_id: String,
    /// The last mail's references (bare ids, in order).
    pub(crate) references: Vec<String>,
}

/// An IMAP read position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The mailbox's `UIDVALIDITY` the UID belongs to.
    pub uid_validity: u32,
    /// The last UID whose mail was accepted.
    pub uid: u32,
}

/// The provider's durable state. Cheap to clone.
#[derive(Clone)]
pub(crate) struct MailStore {
    kv: Arc<dyn DurableKv>,
    scope: Scope,
}

impl MailStore {
    /// The state of `account` in `kv`.
    pub(crate) fn new(kv: Arc<dyn DurableKv>, account: &str) -> Self {
        Self {
            kv,
            scope: Scope::new("email", "channel", "email", account),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, EmailError> {
        let found = self
            .kv
            .get(&self.scope, key)
            .await
            .map_err(|e| EmailError::Store {
                key: key.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(found.map(|v| v.value))
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), EmailError> {
        crate::kv_write::overwrite(self.kv.as_ref(), &self.scope, key, value)
            .await
            .map_err(|reason| EmailError::Store {
                key: key.to_owned(),
                reason,
            })
    }

    async fn get_json<T: for<'de> Deserialize<'de>>(
        &self,
        key: &str,
    ) -> Result<Option<T>, EmailError> {
        match self.get(key).await? {
            None => Ok(None),
            Some(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| EmailError::Store {
                        key: key.to_owned(),
                        reason: format!("unreadable: {e}"),
                    })
            }
        }
    }

    async fn put_json<T: Serialize>(&self, key: &str, value: &T) -> Result<(), EmailError> {
        let bytes = serde_json::to_vec(value).map_err(|e| EmailError::Store {
            key: key.to_owned(),
            reason: e.to_string(),
        })?;
        self.put(key, bytes).await
    }

    /// The thread of `chat`.
    pub(crate) async fn thread(&self, chat: &str) -> Result<Option<Thread>, EmailError> {
        self.get_json(&format!("thread/{chat}")).await
    }

    /// Keeps the thread of `chat`.
    pub(crate) async fn set_thread(&self, chat: &str, thread: &Thread) -> Result<(), EmailError> {
        self.put_json(&format!("thread/{chat}"), thread).await
    }

    /// The read position in `mailbox`.
    pub(crate) async fn position(&self, mailbox: &str) -> Result<Option<Position>, EmailError> {
        self.get_json(&format!("imap/{mailbox}")).await
    }

    /// Keeps the read position in `mailbox`.
    pub(crate) async fn set_position(&self, mailbox: &str, at: Position) -> Result<(), EmailError> {
        self.put_json(&format!("imap/{mailbox}"), &at).await
    }

    /// The bytes of attachment `index` of the mail whose id digests to `id_digest`.
    pub(crate) async fn attachment(
        &self,
        id_digest: &str,
        index: usize,
    ) -> Result<Option<Vec<u8>>, EmailError> {
        self.get(&format!("media/{id_digest}/{index}")).await
    }

    /// Keeps the bytes of an attachment.
    pub(crate) async fn set_attachment(
        &self,
        id_digest: &str,
        index: usize,
        bytes: Vec<u8>,
    ) -> Result<(), EmailError> {
        self.put(&format!("media/{id_digest}/{index}"), bytes).await
    }
}
