//! The write statements of [`PostgresStore`](super::PostgresStore), built once per table
//! prefix: each method answers the [`Statement`] of one write with its parameters, so that a
//! write runs the same statement alone or inside a flow step's transaction.

use tokio_postgres::types::ToSql;

use super::rows::CheckpointColumns;
use crate::backends::postgres::pipeline::Statement;
use crate::store::{ChatRecord, ContactRecord, Direction, LedgerEntry, LedgerStatus};

/// The columns of a checkpoint row, in the order of its statements.
pub(super) const CHECKPOINT_COLUMNS: &str =
    "chat, flow, layout_hash, state, inbound_id, step, updated_ms";

/// A text parameter: a `String` of a record or a `&str` argument.
pub(super) trait Text: ToSql + Sync + AsRef<str> {}

impl<T: ToSql + Sync + AsRef<str>> Text for T {}

/// The tables' names and the write statements of one prefix.
#[derive(Debug)]
pub(super) struct Writes {
    chats: String,
    contacts: String,
    ledger: String,
    checkpoints: String,
    kv: String,
    upsert_chat: String,
    inbound_chat: String,
    upsert_contact: String,
    append_ledger: String,
    save_checkpoint: String,
    delete_checkpoint: String,
    set_value: String,
    delete_value: String,
}

impl Writes {
    pub(super) fn new(prefix: &str) -> Self {
        let [chats, contacts, ledger, checkpoints, kv] =
            ["chats", "contacts", "ledger", "checkpoints", "kv"].map(|t| format!("{prefix}{t}"));
        let chat_insert = format!(
            "INSERT INTO {chats} (id, is_group, title, lang, first_seen_ms, last_activity_ms) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET is_group = $2, "
        );
        Writes {
            upsert_chat: format!(
                "{chat_insert}title = $3, lang = $4, first_seen_ms = $5, last_activity_ms = $6"
            ),
            // An existing chat keeps its title, language and first sighting.
            inbound_chat: format!("{chat_insert}last_activity_ms = $6"),
            upsert_contact: format!(
                "INSERT INTO {contacts} (id, name, last_seen_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET name = $2, last_seen_ms = $3"
            ),
            append_ledger: format!(
                "INSERT INTO {ledger} (chat, message_id, direction, status, text, content, key, \
                 error, at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            save_checkpoint: format!(
                "INSERT INTO {checkpoints} ({CHECKPOINT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, \
                 $6, $7) ON CONFLICT (chat) DO UPDATE SET flow = $2, layout_hash = $3, \
                 state = $4, inbound_id = $5, step = $6, updated_ms = $7"
            ),
            delete_checkpoint: format!("DELETE FROM {checkpoints} WHERE chat = $1"),
            set_value: format!(
                "INSERT INTO {kv} (scope, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (scope, key) DO UPDATE SET value = $3"
            ),
            delete_value: format!("DELETE FROM {kv} WHERE scope = $1 AND key = $2"),
            chats,
            contacts,
            ledger,
            checkpoints,
            kv,
        }
    }

    /// Creates or replaces a chat.
    pub(super) fn upsert_chat<'a>(&'a self, c: &'a ChatRecord) -> Statement<'a> {
        self.chat(&self.upsert_chat, c)
    }

    /// The chat of an inbound message: created, or its activity updated.
    pub(super) fn inbound_chat<'a>(&'a self, c: &'a ChatRecord) -> Statement<'a> {
        self.chat(&self.inbound_chat, c)
    }

    fn chat<'a>(&'a self, sql: &'a str, c: &'a ChatRecord) -> Statement<'a> {
        Statement {
            sql,
            params: vec![
                &c.id,
                &c.is_group,
                &c.title,
                &c.lang,
                &c.first_seen_ms,
                &c.last_activity_ms,
            ],
            table: &self.chats,
            key: &c.id,
        }
    }

    /// Creates or replaces a contact.
    pub(super) fn upsert_contact<'a>(&'a self, c: &'a ContactRecord) -> Statement<'a> {
        Statement {
            sql: &self.upsert_contact,
            params: vec![&c.id, &c.name, &c.last_seen_ms],
            table: &self.contacts,
            key: &c.id,
        }
    }

    /// Appends a ledger row; `content` is the entry's JSON.
    pub(super) fn append_ledger<'a>(
        &'a self,
        e: &'a LedgerEntry,
        content: &'a String,
    ) -> Statement<'a> {
        let direction: &(dyn ToSql + Sync) = match e.direction {
            Direction::Inbound => &"inbound",
            Direction::Outbound => &"outbound",
        };
        let status: &(dyn ToSql + Sync) = match e.status {
            LedgerStatus::Received => &"received",
            LedgerStatus::Sent => &"sent",
            LedgerStatus::Failed => &"failed",
        };
        Statement {
            sql: &self.append_ledger,
            params: vec![
                &e.chat,
                &e.message_id,
                direction,
                status,
                &e.text,
                content,
                &e.key,
                &e.error,
                &e.at_ms,
            ],
            table: &self.ledger,
            key: &e.chat,
        }
    }

    /// Saves a checkpoint (its columns encoded).
    pub(super) fn save_checkpoint<'a>(
        &'a self,
        columns: &'a CheckpointColumns<'a>,
    ) -> Statement<'a> {
        Statement {
            sql: &self.save_checkpoint,
            params: columns.params().to_vec(),
            table: &self.checkpoints,
            key: columns.chat(),
        }
    }

    /// Removes a chat's checkpoint.
    pub(super) fn delete_checkpoint<'a, T: Text>(&'a self, chat: &'a T) -> Statement<'a> {
        Statement {
            sql: &self.delete_checkpoint,
            params: vec![chat],
            table: &self.checkpoints,
            key: chat.as_ref(),
        }
    }

    /// Sets a value (`value`: its JSON text).
    pub(super) fn set_value<'a>(
        &'a self,
        scope: &'a String,
        key: &'a String,
        value: &'a String,
    ) -> Statement<'a> {
        Statement {
            sql: &self.set_value,
            params: vec![scope, key, value],
            table: &self.kv,
            key,
        }
    }

    /// Removes a value.
    pub(super) fn delete_value<'a, T: Text>(&'a self, scope: &'a T, key: &'a T) -> Statement<'a> {
        Statement {
            sql: &self.delete_value,
            params: vec![scope, key],
            table: &self.kv,
            key: key.as_ref(),
        }
    }
}
