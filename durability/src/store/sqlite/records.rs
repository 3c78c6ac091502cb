//! The [`Store`] records over SQLite: one statement per call, and the decoding of rows.
//!
//! Every write goes through [`SqliteStore::write`] (group commit on the writer thread), every
//! read through [`SqliteStore::read`]. JSON columns hold `serde_json` text; rows are read
//! raw inside the closure and decoded after it, so a row that does not decode (bad JSON, an
//! unknown direction or status) becomes [`StoreError::Corrupt`] naming the record, never a
//! panic. `u64` fields (`layout_hash`, `step`) are stored as the `i64` of the same bits.
//! The `durable` table is the journal's; the one exception is [`Store::commit_step`], which
//! applies a flow step's journal operations there (through the journal's own `apply`) in the
//! transaction of its checkpoint.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, ToSql, Transaction, params};

use super::{SqliteDurableKv, SqliteStore, durable, query_error};
use crate::kv::{CasOutcome, DurableKv};
use crate::store::{
    ACTIVITY_RESOLUTION_MS, ChatRecord, CheckpointHead, CheckpointWrite, ContactRecord, Direction,
    FlowCheckpoint, HandoffRecord, LedgerEntry, LedgerStatus, StepCommit, StepCommitOutcome, Store,
    StoreError,
};
use serde_json::Value;

/// Encodes a JSON column.
fn encode(operation: &'static str, value: &serde_json::Value) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| query_error(operation, e))
}

/// Decodes a JSON column of the record `what` whose key is `key`.
fn decode(
    what: &'static str,
    key: &dyn Fn() -> String,
    text: &str,
) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what,
        key: key(),
        reason: format!("invalid JSON: {e}"),
    })
}

fn direction_str(direction: Direction) -> &'static str {
    match direction {
        Direction::Inbound => "inbound",
        Direction::Outbound => "outbound",
    }
}

fn parse_direction(text: &str) -> Option<Direction> {
    match text {
        "inbound" => Some(Direction::Inbound),
        "outbound" => Some(Direction::Outbound),
        _ => None,
    }
}

fn parse_status(text: &str) -> Option<LedgerStatus> {
    match text {
        "received" => Some(LedgerStatus::Received),
        "sent" => Some(LedgerStatus::Sent),
        "failed" => Some(LedgerStatus::Failed),
        _ => None,
    }
}

fn chat_row(row: &Row<'_>) -> rusqlite::Result<ChatRecord> {
    Ok(ChatRecord {
        id: row.get(0)?,
        is_group: row.get(1)?,
        title: row.get(2)?,
        lang: row.get(3)?,
        first_seen_ms: row.get(4)?,
        last_activity_ms: row.get(5)?,
    })
}

/// A ledger row before decoding.
struct RawLedger {
    id: i64,
    chat: String,
    message_id: Option<String>,
    direction: String,
    status: String,
    text: Option<String>,
    content: String,
    key: Option<String>,
    error: Option<String>,
    at_ms: i64,
}

impl RawLedger {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            chat: row.get(1)?,
            message_id: row.get(2)?,
            direction: row.get(3)?,
            status: row.get(4)?,
            text: row.get(5)?,
            content: row.get(6)?,
            key: row.get(7)?,
            error: row.get(8)?,
            at_ms: row.get(9)?,
        })
    }

    fn decode(self) -> Result<LedgerEntry, StoreError> {
        let key = || format!("{}#{}", self.chat, self.id);
        let corrupt = |reason: String| StoreError::Corrupt {
            what: "ledger",
            key: key(),
            reason,
        };
        let direction = parse_direction(&self.direction)
            .ok_or_else(|| corrupt(format!("unknown direction `{}`", self.direction)))?;
        let status = parse_status(&self.status)
            .ok_or_else(|| corrupt(format!("unknown status `{}`", self.status)))?;
        let content = decode("ledger", &key, &self.content)?;
        Ok(LedgerEntry {
            chat: self.chat,
            message_id: self.message_id,
            direction,
            status,
            text: self.text,
            content,
            key: self.key,
            error: self.error,
            at_ms: self.at_ms,
        })
    }
}

/// A checkpoint row before decoding (`state` still JSON text).
type RawCheckpoint = (FlowCheckpoint, String);

const CHECKPOINT_COLUMNS: &str = "chat, flow, layout_hash, state, inbound_id, step, updated_ms";

fn checkpoint_row(row: &Row<'_>) -> rusqlite::Result<RawCheckpoint> {
    let checkpoint = FlowCheckpoint {
        chat: row.get(0)?,
        flow: row.get(1)?,
        layout_hash: row.get::<_, i64>(2)?.cast_unsigned(),
        state: serde_json::Value::Null,
        inbound_id: row.get(4)?,
        step: row.get::<_, i64>(5)?.cast_unsigned(),
        updated_ms: row.get(6)?,
    };
    Ok((checkpoint, row.get(3)?))
}

fn decode_checkpoint((mut checkpoint, state): RawCheckpoint) -> Result<FlowCheckpoint, StoreError> {
    let chat = checkpoint.chat.clone();
    checkpoint.state = decode("checkpoint", &|| chat.clone(), &state)?;
    Ok(checkpoint)
}

fn handoff_row(row: &Row<'_>) -> rusqlite::Result<HandoffRecord> {
    Ok(HandoffRecord {
        chat: row.get(0)?,
        agent: row.get(1)?,
        reason: row.get(2)?,
        since_ms: row.get(3)?,
    })
}

fn write_checkpoint(
    tx: &Transaction<'_>,
    checkpoint: &FlowCheckpoint,
    state: &str,
) -> rusqlite::Result<()> {
    // An upsert changes the row in place; `INSERT OR REPLACE` would delete it and insert it
    // again (a new rowid, both B-trees touched twice) at every step.
    tx.prepare_cached(
        "INSERT INTO checkpoints (chat, flow, layout_hash, state, inbound_id, step, updated_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
         ON CONFLICT(chat) DO UPDATE SET flow = excluded.flow, \
         layout_hash = excluded.layout_hash, state = excluded.state, \
         inbound_id = excluded.inbound_id, step = excluded.step, updated_ms = excluded.updated_ms",
    )?
    .execute(params![
        checkpoint.chat,
        checkpoint.flow,
        checkpoint.layout_hash.cast_signed(),
        state,
        checkpoint.inbound_id,
        checkpoint.step.cast_signed(),
        checkpoint.updated_ms
    ])?;
    Ok(())
}

fn insert_ledger(tx: &Transaction<'_>, entry: &LedgerEntry, content: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO ledger \
         (chat, message_id, direction, status, text, content, key, error, at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        entry.chat,
        entry.message_id,
        direction_str(entry.direction),
        entry.status.as_str(),
        entry.text,
        content,
        entry.key,
        entry.error,
        entry.at_ms
    ])?;
    Ok(())
}

fn remove_checkpoint(tx: &Transaction<'_>, chat: &str) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM checkpoints WHERE chat = ?1")?
        .execute([chat])?;
    Ok(())
}

fn remove_value(tx: &Transaction<'_>, scope: &str, key: &str) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM kv WHERE scope = ?1 AND key = ?2")?
        .execute([scope, key])?;
    Ok(())
}

/// The body of [`Store::commit_step`]: inside its own savepoint, so a conflicting journal
/// operation rolls back every statement of the step (and only those).
/// A copy of `entry` without its JSON content (the writer gets it encoded): the JSON tree is
/// neither cloned here nor freed on the writer thread, which every other write waits for.
fn without_content(entry: &LedgerEntry) -> LedgerEntry {
    LedgerEntry {
        chat: entry.chat.clone(),
        message_id: entry.message_id.clone(),
        direction: entry.direction,
        status: entry.status,
        text: entry.text.clone(),
        content: serde_json::Value::Null,
        key: entry.key.clone(),
        error: entry.error.clone(),
        at_ms: entry.at_ms,
    }
}

/// Inserts or replaces a chat.
const UPSERT_CHAT: &str = "INSERT INTO chats (id, is_group, title, lang, first_seen_ms, last_activity_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
     ON CONFLICT(id) DO UPDATE SET is_group = excluded.is_group, \
     title = excluded.title, lang = excluded.lang, \
     first_seen_ms = excluded.first_seen_ms, \
     last_activity_ms = excluded.last_activity_ms";

/// Upserts the chat an inbound message came from: an existing chat keeps its title, language
/// and first sighting, and is rewritten only when its group flag changes or its activity moves
/// by [`ACTIVITY_RESOLUTION_MS`] (`?7`) or more.
const UPSERT_INBOUND_CHAT: &str = "INSERT INTO chats (id, is_group, title, lang, first_seen_ms, last_activity_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
     ON CONFLICT(id) DO UPDATE SET is_group = excluded.is_group, \
     last_activity_ms = excluded.last_activity_ms \
     WHERE chats.is_group IS NOT excluded.is_group \
     OR excluded.last_activity_ms >= chats.last_activity_ms + ?7";

/// Upserts the sender of an inbound message: an existing contact is rewritten only when its
/// name changes or its sighting moves by [`ACTIVITY_RESOLUTION_MS`] (`?4`) or more.
const UPSERT_INBOUND_CONTACT: &str = "INSERT INTO contacts (id, name, last_seen_ms) VALUES (?1, ?2, ?3) \
     ON CONFLICT(id) DO UPDATE SET name = excluded.name, last_seen_ms = excluded.last_seen_ms \
     WHERE contacts.name IS NOT excluded.name \
     OR excluded.last_seen_ms >= contacts.last_seen_ms + ?4";

/// The statement writing a chat or a contact: `replace` and `inbound` (which takes
/// [`ACTIVITY_RESOLUTION_MS`] as its last parameter).
struct Upsert {
    replace: &'static str,
    inbound: &'static str,
}

const CHAT: Upsert = Upsert {
    replace: UPSERT_CHAT,
    inbound: UPSERT_INBOUND_CHAT,
};

const CONTACT: Upsert = Upsert {
    replace: "INSERT INTO contacts (id, name, last_seen_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT(id) DO UPDATE SET name = excluded.name, last_seen_ms = excluded.last_seen_ms",
    inbound: UPSERT_INBOUND_CONTACT,
};

/// Runs `upsert` on `row`: replacing it whole, or as an inbound message's (see
/// [`Store::record_inbound`]).
fn write_row(
    tx: &Transaction<'_>,
    upsert: &Upsert,
    inbound: bool,
    mut row: Vec<&dyn ToSql>,
) -> rusqlite::Result<()> {
    let sql = if inbound {
        row.push(&ACTIVITY_RESOLUTION_MS);
        upsert.inbound
    } else {
        upsert.replace
    };
    tx.prepare_cached(sql)?.execute(&*row)?;
    Ok(())
}

/// Writes `chat` (see [`write_row`]).
fn write_chat(tx: &Transaction<'_>, chat: &ChatRecord, inbound: bool) -> rusqlite::Result<()> {
    let row: Vec<&dyn ToSql> = vec![
        &chat.id,
        &chat.is_group,
        &chat.title,
        &chat.lang,
        &chat.first_seen_ms,
        &chat.last_activity_ms,
    ];
    write_row(tx, &CHAT, inbound, row)
}

/// Writes `contact` (see [`write_row`]).
fn write_contact(
    tx: &Transaction<'_>,
    contact: &ContactRecord,
    inbound: bool,
) -> rusqlite::Result<()> {
    let row: Vec<&dyn ToSql> = vec![&contact.id, &contact.name, &contact.last_seen_ms];
    write_row(tx, &CONTACT, inbound, row)
}

/// A copy of `checkpoint` without its state (the writer gets it encoded), as
/// [`without_content`].
fn without_state(checkpoint: &FlowCheckpoint) -> FlowCheckpoint {
    FlowCheckpoint {
        chat: checkpoint.chat.clone(),
        flow: checkpoint.flow.clone(),
        layout_hash: checkpoint.layout_hash,
        state: serde_json::Value::Null,
        inbound_id: checkpoint.inbound_id.clone(),
        step: checkpoint.step,
        updated_ms: checkpoint.updated_ms,
    }
}

/// A copy of `step` without its JSON trees (the checkpoint's state and the ledger contents,
/// which the writer gets encoded), as [`without_content`].
fn without_json(step: &StepCommit) -> StepCommit {
    let checkpoint = match &step.checkpoint {
        CheckpointWrite::Save(cp) => CheckpointWrite::Save(without_state(cp)),
        other => other.clone(),
    };
    StepCommit {
        checkpoint,
        scope: step.scope.clone(),
        journal: step.journal.clone(),
        delete_values: step.delete_values.clone(),
        ledger: step.ledger.iter().map(without_content).collect(),
        chat: step.chat.clone(),
        contact: step.contact.clone(),
    }
}

/// A flow step's writes (see [`StepCommit`]): all of them, or none when a journal operation
/// conflicts.
///
/// The journal operations' expected versions are checked first, before anything is written
/// (the first operation's by its own write, which comes first): on a conflict there is
/// nothing to undo. Without that check the step would need a
/// savepoint of its own, and SQLite copies every page a savepoint's statements change into
/// its statement journal (a fifth of the writer's work went to those copies). Should a
/// statement fail after the check, the request fails, and the writer runs the group again
/// with a savepoint per request. Operations on the same key twice, or a guarded create
/// ([`KvOp::CreateIfNoneIn`](crate::kv::KvOp::CreateIfNoneIn)) after another operation (no
/// step writes those, but nothing forbids them), cannot be checked up front: they run under
/// a savepoint.
fn commit_step_in(
    tx: &Transaction<'_>,
    step: &StepCommit,
    scope: i64,
    state: Option<&str>,
    contents: &[String],
) -> rusqlite::Result<StepCommitOutcome> {
    let checked = durable::checkable_up_front(&step.journal);
    if checked {
        if let Some((op, current)) = durable::first_conflict(tx, scope, &step.journal)? {
            return Ok(StepCommitOutcome::Conflict { op, current });
        }
    } else {
        tx.prepare_cached("SAVEPOINT botmesh_step")?.execute([])?;
    }
    let mut outcomes = Vec::with_capacity(step.journal.len());
    let mut versions = durable::Versions::for_ops(tx, &step.journal)?;
    for (op, write) in step.journal.iter().enumerate() {
        match durable::apply(tx, scope, write, &mut versions)? {
            // The first operation is not read before it is written (see `first_conflict`):
            // its conflict comes from its own write, before anything else is written.
            CasOutcome::Conflict { current } if checked && op == 0 => {
                return Ok(StepCommitOutcome::Conflict { op, current });
            }
            CasOutcome::Conflict { current } if checked => {
                // Checked a moment ago in this transaction: the earlier operations' writes
                // must not be committed without this one.
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                    Some(format!(
                        "durable operation {op} found version {current:?} right after its check"
                    )),
                ));
            }
            CasOutcome::Conflict { current } => {
                tx.execute_batch("ROLLBACK TO botmesh_step; RELEASE botmesh_step")?;
                return Ok(StepCommitOutcome::Conflict { op, current });
            }
            ok => outcomes.push(ok),
        }
    }
    match (&step.checkpoint, state) {
        (CheckpointWrite::Save(cp), Some(state)) => write_checkpoint(tx, cp, state)?,
        (CheckpointWrite::Delete { chat }, _) => remove_checkpoint(tx, chat)?,
        _ => {}
    }
    for (scope, key) in &step.delete_values {
        remove_value(tx, scope, key)?;
    }
    if let Some(chat) = &step.chat {
        write_chat(tx, chat, true)?;
    }
    if let Some(contact) = &step.contact {
        write_contact(tx, contact, true)?;
    }
    for (entry, content) in step.ledger.iter().zip(contents) {
        insert_ledger(tx, entry, content)?;
    }
    if !checked {
        tx.prepare_cached("RELEASE botmesh_step")?.execute([])?;
    }
    Ok(StepCommitOutcome::Committed(outcomes))
}

#[async_trait]
impl Store for SqliteStore {
    async fn open(&self) -> Result<(), StoreError> {
        self.open_connections().await
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.close_connections().await
    }

    async fn upsert_chat(&self, chat: &ChatRecord) -> Result<(), StoreError> {
        let chat = chat.clone();
        self.write("upsert_chat", move |tx| write_chat(tx, &chat, false))
            .await
    }

    async fn record_inbound(
        &self,
        chat: &ChatRecord,
        contact: &ContactRecord,
        entry: &LedgerEntry,
    ) -> Result<(), StoreError> {
        let content = encode("record_inbound", &entry.content)?;
        let (chat, contact, entry) = (chat.clone(), contact.clone(), without_content(entry));
        self.write("record_inbound", move |tx| {
            write_chat(tx, &chat, true)?;
            write_contact(tx, &contact, true)?;
            insert_ledger(tx, &entry, &content)
        })
        .await
    }

    async fn chat(&self, id: &str) -> Result<Option<ChatRecord>, StoreError> {
        let id = id.to_owned();
        self.read_statement("chat", move |conn| {
            conn.prepare_cached(
                "SELECT id, is_group, title, lang, first_seen_ms, last_activity_ms \
                 FROM chats WHERE id = ?1",
            )?
            .query_row([id], chat_row)
            .optional()
        })
        .await
    }

    async fn upsert_contact(&self, contact: &ContactRecord) -> Result<(), StoreError> {
        let contact = contact.clone();
        self.write("upsert_contact", move |tx| {
            write_contact(tx, &contact, false)
        })
        .await
    }

    async fn contact(&self, id: &str) -> Result<Option<ContactRecord>, StoreError> {
        let id = id.to_owned();
        self.read_statement("contact", move |conn| {
            conn.prepare_cached("SELECT id, name, last_seen_ms FROM contacts WHERE id = ?1")?
                .query_row([id], |row| {
                    Ok(ContactRecord {
                        id: row.get(0)?,
                        name: row.get(1)?,
                        last_seen_ms: row.get(2)?,
                    })
                })
                .optional()
        })
        .await
    }

    async fn append_ledger(&self, entry: &LedgerEntry) -> Result<(), StoreError> {
        let content = encode("append_ledger", &entry.content)?;
        let entry = without_content(entry);
        self.write("append_ledger", move |tx| {
            insert_ledger(tx, &entry, &content)
        })
        .await
    }

    async fn ledger(&self, chat: &str, limit: usize) -> Result<Vec<LedgerEntry>, StoreError> {
        let chat = chat.to_owned();
        let bound = limit;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .read_rows("ledger", bound, move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT id, chat, message_id, direction, status, text, content, key, error, \
                     at_ms FROM (SELECT * FROM ledger WHERE chat = ?1 ORDER BY id DESC LIMIT ?2) \
                     ORDER BY id ASC",
                )?;
                let rows = stmt.query_map(params![chat, limit], RawLedger::from_row)?;
                rows.collect::<Result<Vec<_>, _>>()
            })
            .await?;
        rows.into_iter().map(RawLedger::decode).collect()
    }

    async fn save_checkpoint(&self, checkpoint: &FlowCheckpoint) -> Result<(), StoreError> {
        let state = encode("save_checkpoint", &checkpoint.state)?;
        let checkpoint = without_state(checkpoint);
        self.write("save_checkpoint", move |tx| {
            write_checkpoint(tx, &checkpoint, &state)
        })
        .await
    }

    async fn checkpoint(&self, chat: &str) -> Result<Option<FlowCheckpoint>, StoreError> {
        let chat = chat.to_owned();
        let raw = self
            .read_statement("checkpoint", move |conn| {
                conn.prepare_cached(&format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE chat = ?1"
                ))?
                .query_row([chat], checkpoint_row)
                .optional()
            })
            .await?;
        raw.map(decode_checkpoint).transpose()
    }

    async fn checkpoint_head(&self, chat: &str) -> Result<Option<CheckpointHead>, StoreError> {
        let chat = chat.to_owned();
        self.read_statement("checkpoint_head", move |conn| {
            conn.prepare_cached("SELECT step, inbound_id FROM checkpoints WHERE chat = ?1")?
                .query_row([chat], |row| {
                    Ok(CheckpointHead {
                        step: row.get::<_, i64>(0)?.cast_unsigned(),
                        inbound_id: row.get(1)?,
                    })
                })
                .optional()
        })
        .await
    }

    async fn delete_checkpoint(&self, chat: &str) -> Result<(), StoreError> {
        let chat = chat.to_owned();
        self.write("delete_checkpoint", move |tx| remove_checkpoint(tx, &chat))
            .await
    }

    async fn checkpoints(&self) -> Result<Vec<FlowCheckpoint>, StoreError> {
        let rows = self
            .read_on_pool("checkpoints", |conn| {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY chat"
                ))?;
                let rows = stmt.query_map([], checkpoint_row)?;
                rows.collect::<Result<Vec<_>, _>>()
            })
            .await?;
        rows.into_iter().map(decode_checkpoint).collect()
    }

    async fn set_handoff(&self, handoff: &HandoffRecord) -> Result<(), StoreError> {
        let handoff = handoff.clone();
        self.write("set_handoff", move |tx| {
            tx.prepare_cached(
                "INSERT INTO handoffs (chat, agent, reason, since_ms) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT(chat) DO UPDATE SET agent = excluded.agent, \
                 reason = excluded.reason, since_ms = excluded.since_ms",
            )?
            .execute(params![
                handoff.chat,
                handoff.agent,
                handoff.reason,
                handoff.since_ms
            ])?;
            Ok(())
        })
        .await
    }

    async fn clear_handoff(&self, chat: &str) -> Result<(), StoreError> {
        let chat = chat.to_owned();
        self.write("clear_handoff", move |tx| {
            tx.prepare_cached("DELETE FROM handoffs WHERE chat = ?1")?
                .execute([&chat])?;
            Ok(())
        })
        .await
    }

    async fn handoffs(&self) -> Result<Vec<HandoffRecord>, StoreError> {
        self.read_on_pool("handoffs", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT chat, agent, reason, since_ms FROM handoffs ORDER BY chat",
            )?;
            let rows = stmt.query_map([], handoff_row)?;
            rows.collect()
        })
        .await
    }

    async fn get_value(&self, scope: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        let (scope2, key2) = (scope.clone(), key.clone());
        let text: Option<String> = self
            .read_statement("get_value", move |conn| {
                conn.prepare_cached("SELECT value FROM kv WHERE scope = ?1 AND key = ?2")?
                    .query_row([scope2, key2], |row| row.get(0))
                    .optional()
            })
            .await?;
        text.map(|text| decode("kv", &|| format!("{scope}/{key}"), &text))
            .transpose()
    }

    async fn set_value(&self, scope: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        let value = encode("set_value", value)?;
        let (scope, key) = (scope.to_owned(), key.to_owned());
        self.write("set_value", move |tx| {
            tx.prepare_cached(
                "INSERT INTO kv (scope, key, value) VALUES (?1, ?2, ?3) \
                 ON CONFLICT(scope, key) DO UPDATE SET value = excluded.value",
            )?
            .execute([&scope, &key, &value])?;
            Ok(())
        })
        .await
    }

    async fn delete_value(&self, scope: &str, key: &str) -> Result<(), StoreError> {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        self.write("delete_value", move |tx| remove_value(tx, &scope, &key))
            .await
    }

    async fn values(&self, scope: &str) -> Result<Vec<(String, Value)>, StoreError> {
        let scope = scope.to_owned();
        let scope2 = scope.clone();
        let rows: Vec<(String, String)> = self
            .read_statement("values", move |conn| {
                let mut stmt =
                    conn.prepare_cached("SELECT key, value FROM kv WHERE scope = ?1 ORDER BY key")?;
                let rows = stmt.query_map([scope2], |row| Ok((row.get(0)?, row.get(1)?)))?;
                rows.collect()
            })
            .await?;
        rows.into_iter()
            .map(|(key, text)| {
                let value = decode("kv", &|| format!("{scope}/{key}"), &text)?;
                Ok((key, value))
            })
            .collect()
    }

    fn journal_backend(&self) -> Option<std::sync::Arc<dyn DurableKv>> {
        Some(std::sync::Arc::new(self.durability_kv()))
    }

    fn shares_transactions_with(&self, kv: &dyn DurableKv) -> bool {
        kv.as_any()
            .and_then(|any| any.downcast_ref::<SqliteDurableKv>())
            .is_some_and(|kv| kv.store().is_same_store(self))
    }

    async fn commit_step(&self, step: &StepCommit) -> Result<StepCommitOutcome, StoreError> {
        let state = match &step.checkpoint {
            CheckpointWrite::Save(cp) => Some(encode("commit_step", &cp.state)?),
            _ => None,
        };
        let contents = step
            .ledger
            .iter()
            .map(|e| encode("commit_step", &e.content))
            .collect::<Result<Vec<_>, _>>()?;
        // The journal's scope is registered once per store, before its first step (a
        // step without journal operations writes no `durable` row).
        let scope = if step.journal.is_empty() {
            0
        } else {
            self.scope_id_to_write(&step.scope).await?
        };
        let step = without_json(step);
        self.write("commit_step", move |tx| {
            commit_step_in(tx, &step, scope, state.as_deref(), &contents)
        })
        .await
    }
}
