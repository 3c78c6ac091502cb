//! The write statements of [`PostgresStore`](super::PostgresStore), built once per table
//! prefix: one a table over arrays for the rows [`TableWrites`](super::table_writes) writes
//! (ledger, chats, contacts, checkpoints, values).

use crate::store::{ACTIVITY_RESOLUTION_MS, Direction, LedgerStatus};

/// The columns of a checkpoint row, in the order of its statements.
pub(super) const CHECKPOINT_COLUMNS: &str =
    "chat, flow, layout_hash, state, inbound_id, step, updated_ms";

/// The write statements of one prefix.
#[derive(Debug)]
pub(super) struct Writes {
    /// The statements of [`TableWrites`](super::table_writes), one a table (the chats and the
    /// contacts: two each, inbound and replaced), over arrays (one element a row), each with its table's name,
    /// in the order [`TableWrites::statements`](super::table_writes::TableWrites::statements)
    /// lists them.
    pub(super) merged: [(String, String); 9],
}

/// The statements of [`Writes::merged`]: the ledger rows, the chats of inbound messages, the
/// chats replaced, the senders of inbound messages, the contacts replaced, the checkpoints
/// saved, the checkpoints removed, the values set, the values removed. An inbound message's
/// chat and sender are rewritten only when their flag or name changes or their time moves by
/// [`ACTIVITY_RESOLUTION_MS`] or more, and the rows left as they are are not locked (an
/// `UPDATE` of the changed rows, then an insert of the new ones that does nothing on a
/// conflict).
fn merged(
    chats: &str,
    contacts: &str,
    ledger: &str,
    checkpoints: &str,
    kv: &str,
) -> [(String, String); 9] {
    let chat_insert = format!(
        "INSERT INTO {chats} (id, is_group, title, lang, first_seen_ms, last_activity_ms) \
         SELECT * FROM unnest($1::text[], $2::boolean[], $3::text[], $4::text[], $5::bigint[], \
         $6::bigint[]) ON CONFLICT (id) DO UPDATE SET is_group = excluded.is_group, \
         last_activity_ms = excluded.last_activity_ms"
    );
    let contact_insert = format!(
        "INSERT INTO {contacts} (id, name, last_seen_ms) SELECT * FROM unnest($1::text[], \
         $2::text[], $3::bigint[]) ON CONFLICT (id) DO UPDATE SET name = excluded.name, \
         last_seen_ms = excluded.last_seen_ms"
    );
    [
        (
            format!(
                "INSERT INTO {ledger} (chat, message_id, direction, status, text, content, key, \
                 error, at_ms) SELECT chat, message_id, direction, status, text, content, key, \
                 error, at_ms FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
                 $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[]) WITH ORDINALITY \
                 AS r(chat, message_id, direction, status, text, content, key, error, at_ms, n) \
                 ORDER BY n"
            ),
            ledger.to_owned(),
        ),
        (
            format!(
                "WITH r (id, is_group, title, lang, first_seen_ms, last_activity_ms) AS \
                 (SELECT * FROM unnest($1::text[], $2::boolean[], $3::text[], $4::text[], \
                 $5::bigint[], $6::bigint[])), \
                 changed AS (UPDATE {chats} c SET is_group = r.is_group, \
                 last_activity_ms = r.last_activity_ms FROM r WHERE c.id = r.id \
                 AND (c.is_group IS DISTINCT FROM r.is_group \
                 OR r.last_activity_ms >= c.last_activity_ms + {ACTIVITY_RESOLUTION_MS})) \
                 INSERT INTO {chats} (id, is_group, title, lang, first_seen_ms, \
                 last_activity_ms) SELECT * FROM r ON CONFLICT (id) DO NOTHING"
            ),
            chats.to_owned(),
        ),
        (
            format!(
                "{chat_insert}, title = excluded.title, lang = excluded.lang, \
                 first_seen_ms = excluded.first_seen_ms"
            ),
            chats.to_owned(),
        ),
        (
            format!(
                "WITH r (id, name, last_seen_ms) AS (SELECT * FROM unnest($1::text[], \
                 $2::text[], $3::bigint[])), \
                 changed AS (UPDATE {contacts} c SET name = r.name, \
                 last_seen_ms = r.last_seen_ms FROM r WHERE c.id = r.id \
                 AND (c.name IS DISTINCT FROM r.name \
                 OR r.last_seen_ms >= c.last_seen_ms + {ACTIVITY_RESOLUTION_MS})) \
                 INSERT INTO {contacts} (id, name, last_seen_ms) SELECT * FROM r \
                 ON CONFLICT (id) DO NOTHING"
            ),
            contacts.to_owned(),
        ),
        (contact_insert, contacts.to_owned()),
        (
            format!(
                "INSERT INTO {checkpoints} ({CHECKPOINT_COLUMNS}) SELECT * FROM \
                 unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], \
                 $6::bigint[], $7::bigint[]) ON CONFLICT (chat) DO UPDATE SET \
                 flow = excluded.flow, layout_hash = excluded.layout_hash, \
                 state = excluded.state, inbound_id = excluded.inbound_id, \
                 step = excluded.step, updated_ms = excluded.updated_ms"
            ),
            checkpoints.to_owned(),
        ),
        (
            format!("DELETE FROM {checkpoints} WHERE chat = ANY($1::text[])"),
            checkpoints.to_owned(),
        ),
        (
            format!(
                "INSERT INTO {kv} (scope, key, value) SELECT * FROM unnest($1::text[], \
                 $2::text[], $3::text[]) ON CONFLICT (scope, key) DO UPDATE SET \
                 value = excluded.value"
            ),
            kv.to_owned(),
        ),
        (
            format!(
                "DELETE FROM {kv} v USING unnest($1::text[], $2::text[]) AS r(scope, key) \
                 WHERE v.scope = r.scope AND v.key = r.key"
            ),
            kv.to_owned(),
        ),
    ]
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
        Writes {
            merged: merged(&chats, &contacts, &ledger, &checkpoints, &kv),
        }
    }
}
