//! [`TableWrites`]: the store-table writes of a group commit (flow steps and value writes),
//! merged so that each table takes one statement whatever the number of writes; also the
//! store's single-row writes of the same tables.
//!
//! A group of N flow steps writes up to N chats, N contacts, N checkpoints and a few ledger
//! rows each; run one by one that is several statements a step, each a round of the
//! protocol for the client and the server. Here each table takes one statement over arrays
//! (`unnest`), with the rows the writes run one by one would leave:
//!
//! | table | rows | written as one by one |
//! | --- | --- | --- |
//! | ledger | every row, in order | `INSERT … SELECT … FROM unnest(…) WITH ORDINALITY … ORDER BY` the order (the `bigserial` follows it) |
//! | chats of inbound messages | one a chat: its first sighting's columns, the last write's `is_group` and activity | `UPDATE … SET is_group, last_activity_ms` of the changed, `INSERT … ON CONFLICT (id) DO NOTHING` |
//! | chats replaced (`upsert_chat`) | each row, whole | `INSERT … ON CONFLICT (id) DO UPDATE` of every column |
//! | senders of inbound messages | one a contact: the last write | `UPDATE … SET name, last_seen_ms` of the changed, `INSERT … ON CONFLICT (id) DO NOTHING` |
//! | contacts replaced (`upsert_contact`) | each row, whole | `INSERT … ON CONFLICT (id) DO UPDATE` |
//! | checkpoints | one a chat: the last write, a save or a removal | an upsert of the saved, a `DELETE` of the removed |
//! | values | one a `(scope, key)`: the last write, a set or a removal | an upsert of the set, a `DELETE` of the removed |
//!
//! An inbound message's chat and sender are rewritten only when the chat's group flag or the
//! sender's name changes or the time moves by
//! [`ACTIVITY_RESOLUTION_MS`](crate::store::ACTIVITY_RESOLUTION_MS) or more: an `UPDATE` of
//! the rows that changed, then `INSERT … ON CONFLICT (id) DO NOTHING` of the rows that are new,
//! in one statement. (An `ON CONFLICT DO UPDATE … WHERE` leaves the rows it does not update
//! locked, and a row lock is a write: a heap change and a WAL record at every message.)
//!
//! The tables are independent of each other and of the journal's table, so their order in
//! the transaction does not matter. The store's own writes of these rows (`append_ledger`,
//! `upsert_contact`, `upsert_chat`, `record_inbound`, `save_checkpoint`,
//! `delete_checkpoint`) are the same statements with one row. It does not write the journal
//! operations (the durable table's apply function does) nor the handoffs.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use tokio_postgres::types::ToSql;

use super::rows::u64_bits;
use super::writes::{Writes, direction, status};
use crate::backends::postgres::pipeline::Statement;
use crate::store::{
    ChatRecord, CheckpointWrite, ContactRecord, FlowCheckpoint, LedgerEntry, StepCommit,
};

/// A value write of a group: set (its JSON text) or removed.
pub(super) struct ValueWrite<'a> {
    pub(super) scope: &'a str,
    pub(super) key: &'a str,
    pub(super) value: Option<&'a str>,
}

/// The columns of the ledger rows, one array a column.
#[derive(Default)]
struct LedgerColumns<'a> {
    chat: Vec<&'a str>,
    message_id: Vec<Option<&'a str>>,
    direction: Vec<&'static str>,
    status: Vec<&'static str>,
    text: Vec<Option<&'a str>>,
    content: Vec<String>,
    key: Vec<Option<&'a str>>,
    error: Vec<Option<&'a str>>,
    at_ms: Vec<i64>,
}

/// The columns of the chats written, one array a column.
#[derive(Default)]
struct ChatColumns<'a> {
    id: Vec<&'a str>,
    is_group: Vec<bool>,
    title: Vec<Option<&'a str>>,
    lang: Vec<Option<&'a str>>,
    first_seen_ms: Vec<i64>,
    last_activity_ms: Vec<i64>,
}

impl<'a> ChatColumns<'a> {
    /// Adds `c`'s row with its group flag and activity taken from a later write.
    fn push(&mut self, c: &'a ChatRecord, is_group: bool, last_activity_ms: i64) {
        self.id.push(&c.id);
        self.is_group.push(is_group);
        self.title.push(c.title.as_deref());
        self.lang.push(c.lang.as_deref());
        self.first_seen_ms.push(c.first_seen_ms);
        self.last_activity_ms.push(last_activity_ms);
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.id,
            &self.is_group,
            &self.title,
            &self.lang,
            &self.first_seen_ms,
            &self.last_activity_ms,
        ]
    }
}

/// The columns of the contacts written.
#[derive(Default)]
struct ContactColumns<'a> {
    id: Vec<&'a str>,
    name: Vec<Option<&'a str>>,
    last_seen_ms: Vec<i64>,
}

impl<'a> ContactColumns<'a> {
    fn push(&mut self, c: &'a ContactRecord) {
        self.id.push(&c.id);
        self.name.push(c.name.as_deref());
        self.last_seen_ms.push(c.last_seen_ms);
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.id, &self.name, &self.last_seen_ms]
    }
}

/// The columns of the checkpoints saved.
#[derive(Default)]
struct CheckpointArrays<'a> {
    chat: Vec<&'a str>,
    flow: Vec<&'a str>,
    layout_hash: Vec<i64>,
    state: Vec<String>,
    inbound_id: Vec<Option<&'a str>>,
    step: Vec<i64>,
    updated_ms: Vec<i64>,
}

/// The merged writes of a group (see the [module documentation](self)). The keyed tables'
/// rows go in key order, so that two groups committing at once lock shared rows in the same
/// order.
#[derive(Default)]
pub(super) struct TableWrites<'a> {
    ledger: LedgerColumns<'a>,
    /// Each chat's first write, with the last write's group flag and activity.
    chats: BTreeMap<&'a str, (&'a ChatRecord, bool, i64)>,
    /// Each inbound message's sender: the last write.
    contacts: BTreeMap<&'a str, &'a ContactRecord>,
    /// The contacts replaced whole (`upsert_contact`), in order.
    replaced_contacts: ContactColumns<'a>,
    /// Each chat's last checkpoint write: `None` removes it.
    checkpoints: BTreeMap<&'a str, Option<&'a FlowCheckpoint>>,
    /// Each value's last write: `None` removes it.
    values: BTreeMap<(&'a str, &'a str), Option<&'a str>>,
    /// The chats replaced whole (`upsert_chat`), in order.
    replaced_chats: ChatColumns<'a>,
    /// The arrays of the statements, filled by [`finish`](Self::finish).
    chat_columns: ChatColumns<'a>,
    contact_columns: ContactColumns<'a>,
    saved: CheckpointArrays<'a>,
    removed_checkpoints: Vec<&'a str>,
    set_scopes: Vec<&'a str>,
    set_keys: Vec<&'a str>,
    set_values: Vec<&'a str>,
    removed_scopes: Vec<&'a str>,
    removed_keys: Vec<&'a str>,
}

impl<'a> TableWrites<'a> {
    /// Adds a flow step's writes (after the ones added before it).
    pub(super) fn step(&mut self, step: &'a StepCommit) {
        self.checkpoint(&step.checkpoint);
        for (scope, key) in &step.delete_values {
            self.values.insert((scope, key), None);
        }
        if let Some(chat) = &step.chat {
            self.chat(chat);
        }
        if let Some(contact) = &step.contact {
            self.contact(contact);
        }
        for e in &step.ledger {
            self.ledger(e);
        }
    }

    /// Adds a chat replaced whole (its title, language and first sighting too); not for a
    /// chat also written as an inbound message's.
    pub(super) fn replace_chat(&mut self, c: &'a ChatRecord) {
        self.replaced_chats.push(c, c.is_group, c.last_activity_ms);
    }

    /// Adds a checkpoint's save or removal.
    fn checkpoint(&mut self, write: &'a CheckpointWrite) {
        match write {
            CheckpointWrite::Save(cp) => self.save_checkpoint(cp),
            CheckpointWrite::Delete { chat } => self.remove_checkpoint(chat),
            CheckpointWrite::Keep => {}
        }
    }

    /// Adds a checkpoint saved (created or replaced).
    pub(super) fn save_checkpoint(&mut self, cp: &'a FlowCheckpoint) {
        self.checkpoints.insert(&cp.chat, Some(cp));
    }

    /// Adds a chat's checkpoint removed.
    pub(super) fn remove_checkpoint(&mut self, chat: &'a str) {
        self.checkpoints.insert(chat, None);
    }

    /// Adds the sender of an inbound message: created, or (seen before) its name and
    /// sighting updated.
    pub(super) fn contact(&mut self, contact: &'a ContactRecord) {
        self.contacts.insert(&contact.id, contact);
    }

    /// Adds a contact replaced whole; not for a contact also written as a sender.
    pub(super) fn replace_contact(&mut self, contact: &'a ContactRecord) {
        self.replaced_contacts.push(contact);
    }

    /// Adds a ledger row (after the ones added before it).
    pub(super) fn ledger(&mut self, e: &'a LedgerEntry) {
        let l = &mut self.ledger;
        l.chat.push(&e.chat);
        l.message_id.push(e.message_id.as_deref());
        l.direction.push(*direction(e.direction));
        l.status.push(*status(e.status));
        l.text.push(e.text.as_deref());
        l.content.push(e.content.to_string());
        l.key.push(e.key.as_deref());
        l.error.push(e.error.as_deref());
        l.at_ms.push(e.at_ms);
    }

    /// Adds a value write.
    pub(super) fn value(&mut self, write: ValueWrite<'a>) {
        self.values.insert((write.scope, write.key), write.value);
    }

    /// Adds the chat of an inbound message: created with its columns, or (written before)
    /// its group flag and activity updated.
    pub(super) fn chat(&mut self, c: &'a ChatRecord) {
        match self.chats.entry(&c.id) {
            Entry::Occupied(mut row) => {
                let (_, is_group, activity) = row.get_mut();
                *is_group = c.is_group;
                *activity = c.last_activity_ms;
            }
            Entry::Vacant(slot) => {
                slot.insert((c, c.is_group, c.last_activity_ms));
            }
        }
    }

    /// Fills the keyed tables' arrays; call once, after the last write is added.
    pub(super) fn finish(&mut self) {
        for &(c, is_group, last_activity_ms) in self.chats.values() {
            self.chat_columns.push(c, is_group, last_activity_ms);
        }
        for contact in self.contacts.values() {
            self.contact_columns.push(contact);
        }
        for (chat, write) in &self.checkpoints {
            match write {
                Some(cp) => {
                    let s = &mut self.saved;
                    s.chat.push(&cp.chat);
                    s.flow.push(&cp.flow);
                    s.layout_hash.push(u64_bits(cp.layout_hash));
                    s.state.push(cp.state.to_string());
                    s.inbound_id.push(cp.inbound_id.as_deref());
                    s.step.push(u64_bits(cp.step));
                    s.updated_ms.push(cp.updated_ms);
                }
                None => self.removed_checkpoints.push(chat),
            }
        }
        for (&(scope, key), value) in &self.values {
            match value {
                Some(value) => {
                    self.set_scopes.push(scope);
                    self.set_keys.push(key);
                    self.set_values.push(value);
                }
                None => {
                    self.removed_scopes.push(scope);
                    self.removed_keys.push(key);
                }
            }
        }
    }

    /// The statements, one a table written (after [`finish`](Self::finish)); a failure
    /// names the table and its first row's key.
    pub(super) fn statements(&'a self, w: &'a Writes) -> Vec<Statement<'a>> {
        let (l, c, k, s) = (
            &self.ledger,
            &self.chat_columns,
            &self.contact_columns,
            &self.saved,
        );
        // In the order of `Writes::merged`.
        let tables: [(&[&str], Vec<&'a (dyn ToSql + Sync)>); 9] = [
            (
                &l.chat,
                vec![
                    &l.chat,
                    &l.message_id,
                    &l.direction,
                    &l.status,
                    &l.text,
                    &l.content,
                    &l.key,
                    &l.error,
                    &l.at_ms,
                ],
            ),
            (&c.id, c.params()),
            (&self.replaced_chats.id, self.replaced_chats.params()),
            (&k.id, k.params()),
            (&self.replaced_contacts.id, self.replaced_contacts.params()),
            (
                &s.chat,
                vec![
                    &s.chat,
                    &s.flow,
                    &s.layout_hash,
                    &s.state,
                    &s.inbound_id,
                    &s.step,
                    &s.updated_ms,
                ],
            ),
            (&self.removed_checkpoints, vec![&self.removed_checkpoints]),
            (
                &self.set_keys,
                vec![&self.set_scopes, &self.set_keys, &self.set_values],
            ),
            (
                &self.removed_keys,
                vec![&self.removed_scopes, &self.removed_keys],
            ),
        ];
        tables
            .into_iter()
            .zip(&w.merged)
            .filter_map(|((keys, params), (sql, table))| {
                keys.first().map(|key| Statement {
                    sql,
                    params,
                    table,
                    key,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Scope;
    use crate::store::{ContactRecord, FlowCheckpoint};

    fn chat(title: &str, is_group: bool, at: i64) -> ChatRecord {
        ChatRecord {
            id: "c".into(),
            is_group,
            title: Some(title.into()),
            lang: None,
            first_seen_ms: at,
            last_activity_ms: at,
        }
    }

    fn step(checkpoint: CheckpointWrite, chat: ChatRecord, contact: &str) -> StepCommit {
        StepCommit {
            chat: Some(chat),
            contact: Some(ContactRecord {
                id: "x".into(),
                name: Some(contact.into()),
                last_seen_ms: 0,
            }),
            delete_values: vec![("s".into(), "k".into())],
            ..StepCommit::new(Scope::new("t", "e", "b", "c"), checkpoint)
        }
    }

    /// Two steps of one chat in a group leave the rows the steps run one by one would: the
    /// chat's first sighting with the last activity and group flag, the last contact, the
    /// last checkpoint write (a removal after a save), and per value the last write.
    #[test]
    fn a_group_leaves_the_rows_of_its_writes_run_one_by_one() {
        let saved = FlowCheckpoint {
            chat: "c".into(),
            flow: "f".into(),
            layout_hash: 1,
            state: serde_json::json!({}),
            inbound_id: None,
            step: 1,
            updated_ms: 1,
        };
        let first = step(CheckpointWrite::Save(saved), chat("first", false, 1), "X1");
        let second = step(
            CheckpointWrite::Delete { chat: "c".into() },
            chat("second", true, 5),
            "X2",
        );
        let mut tables = TableWrites::default();
        tables.step(&first);
        tables.value(ValueWrite {
            scope: "s",
            key: "k2",
            value: Some("1"),
        });
        tables.step(&second);
        tables.value(ValueWrite {
            scope: "s",
            key: "k",
            value: Some("2"),
        });
        tables.finish();

        let c = &tables.chat_columns;
        assert_eq!(c.id, ["c"]);
        assert_eq!(c.title, [Some("first")]);
        assert_eq!(c.first_seen_ms, [1]);
        assert_eq!((c.is_group[0], c.last_activity_ms[0]), (true, 5));
        assert_eq!(tables.contact_columns.name, [Some("X2")]);
        assert!(tables.saved.chat.is_empty());
        assert_eq!(tables.removed_checkpoints, ["c"]);
        // `k`: removed by both steps, then set; `k2`: set between them.
        assert_eq!(tables.set_keys, ["k", "k2"]);
        assert_eq!(tables.set_values, ["2", "1"]);
        assert!(tables.removed_keys.is_empty());
    }
}
