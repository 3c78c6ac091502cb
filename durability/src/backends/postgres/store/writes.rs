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
    /// The statements of a group's merged writes (see [`TableWrites`](super::table_writes)).
    pub(super) merged: MergedSql,
}

/// The statements of [`TableWrites`](super::table_writes::TableWrites): one a table, over
/// arrays (one element a row).
#[derive(Debug)]
pub(super) struct MergedSql {
    pub(super) ledger: String,
    pub(super) chats: String,
    pub(super) contacts: String,
    pub(super) save_checkpoints: String,
    pub(super) delete_checkpoints: String,
    pub(super) set_values: String,
    pub(super) delete_values: String,
}

impl MergedSql {
    fn new(chats: &str, contacts: &str, ledger: &str, checkpoints: &str, kv: &str) -> Self {
        MergedSql {
            ledger: format!(
                "INSERT INTO {ledger} (chat, message_id, direction, status, text, content, key, \
                 error, at_ms) SELECT chat, message_id, direction, status, text, content, key, \
                 error, at_ms FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
                 $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[]) WITH ORDINALITY \
                 AS r(chat, message_id, direction, status, text, content, key, error, at_ms, n) \
                 ORDER BY n"
            ),
            chats: format!(
                "INSERT INTO {chats} (id, is_group, title, lang, first_seen_ms, last_activity_ms) \
                 SELECT * FROM unnest($1::text[], $2::boolean[], $3::text[], $4::text[], \
                 $5::bigint[], $6::bigint[]) ON CONFLICT (id) DO UPDATE SET \
                 is_group = excluded.is_group, last_activity_ms = excluded.last_activity_ms"
            ),
            contacts: format!(
                "INSERT INTO {contacts} (id, name, last_seen_ms) SELECT * FROM unnest($1::text[], \
                 $2::text[], $3::bigint[]) ON CONFLICT (id) DO UPDATE SET name = excluded.name, \
                 last_seen_ms = excluded.last_seen_ms"
            ),
            save_checkpoints: format!(
                "INSERT INTO {checkpoints} ({CHECKPOINT_COLUMNS}) SELECT * FROM \
                 unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], \
                 $6::bigint[], $7::bigint[]) ON CONFLICT (chat) DO UPDATE SET \
                 flow = excluded.flow, layout_hash = excluded.layout_hash, \
                 state = excluded.state, inbound_id = excluded.inbound_id, \
                 step = excluded.step, updated_ms = excluded.updated_ms"
            ),
            delete_checkpoints: format!("DELETE FROM {checkpoints} WHERE chat = ANY($1::text[])"),
            set_values: format!(
                "INSERT INTO {kv} (scope, key, value) SELECT * FROM unnest($1::text[], \
                 $2::text[], $3::text[]) ON CONFLICT (scope, key) DO UPDATE SET \
                 value = excluded.value"
            ),
            delete_values: format!(
                "DELETE FROM {kv} v USING unnest($1::text[], $2::text[]) AS r(scope, key) \
                 WHERE v.scope = r.scope AND v.key = r.key"
            ),
        }
    }
}

/// A ledger row's `direction` column.
pub(super) fn direction(d: Direction) -> &'static &'static str {
    match d {
        Direction::Inbound => &"inbound",
        Direction::Outbound => &"outbound",
    }
}

/// A ledger row's `status` column.
pub(super) fn status(s: LedgerStatus) -> &'static &'static str {
    match s {
        LedgerStatus::Received => &"received",
        LedgerStatus::Sent => &"sent",
        LedgerStatus::Failed => &"failed",
    }
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
            merged: MergedSql::new(&chats, &contacts, &ledger, &checkpoints, &kv),
            chats,
            contacts,
            ledger,
            checkpoints,
            kv,
        }
    }

    /// The ledger table's name.
    pub(super) fn ledger(&self) -> &str {
        &self.ledger
    }

    /// The chats table's name.
    pub(super) fn chats(&self) -> &str {
        &self.chats
    }

    /// The contacts table's name.
    pub(super) fn contacts(&self) -> &str {
        &self.contacts
    }

    /// The checkpoints table's name.
    pub(super) fn checkpoints(&self) -> &str {
        &self.checkpoints
    }

    /// The values table's name.
    pub(super) fn kv(&self) -> &str {
        &self.kv
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
        Statement {
            sql: &self.append_ledger,
            params: vec![
                &e.chat,
                &e.message_id,
                direction(e.direction),
                status(e.status),
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
}
