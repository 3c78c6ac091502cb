//! The tables of [`PostgresStore`](super::PostgresStore): created when missing (idempotently,
//! under an advisory lock), and a schema version newer than this build's refused. It does not
//! migrate data: there is only version 1.

use super::PostgresStore;
use crate::backends::postgres::{PostgresError, query_err};

/// The schema version this build writes and reads.
const SCHEMA_VERSION: i64 = 1;

impl PostgresStore {
    pub(super) async fn create_schema(&self) -> Result<(), PostgresError> {
        let p = &self.prefix;
        let meta = self.t("meta");
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value text NOT NULL);
             INSERT INTO {meta} (name, value) VALUES ('application', 'botmesh'),
                 ('schema_version', '{SCHEMA_VERSION}') ON CONFLICT (name) DO NOTHING;
             CREATE TABLE IF NOT EXISTS {p}chats (id text PRIMARY KEY, is_group boolean NOT NULL,
                 title text, lang text, first_seen_ms bigint NOT NULL,
                 last_activity_ms bigint NOT NULL);
             CREATE TABLE IF NOT EXISTS {p}contacts (id text PRIMARY KEY, name text,
                 last_seen_ms bigint NOT NULL);
             CREATE TABLE IF NOT EXISTS {p}ledger (seq bigserial PRIMARY KEY, chat text NOT NULL,
                 message_id text, direction text NOT NULL, status text NOT NULL, text text,
                 content text NOT NULL, key text, error text, at_ms bigint NOT NULL);
             CREATE INDEX IF NOT EXISTS {p}ledger_chat ON {p}ledger (chat, seq);
             CREATE TABLE IF NOT EXISTS {p}checkpoints (chat text PRIMARY KEY, flow text NOT NULL,
                 layout_hash bigint NOT NULL, state text NOT NULL, inbound_id text,
                 step bigint NOT NULL, updated_ms bigint NOT NULL);
             CREATE TABLE IF NOT EXISTS {p}handoffs (chat text PRIMARY KEY, agent text,
                 reason text, since_ms bigint NOT NULL);
             CREATE TABLE IF NOT EXISTS {p}kv (scope text NOT NULL,
                 key text COLLATE \"C\" NOT NULL, value text NOT NULL,
                 PRIMARY KEY (scope, key));"
        );
        self.pool.create_schema(&meta, &ddl).await?;
        let client = self.pool.client().await?;
        let sql = format!("SELECT value FROM {meta} WHERE name = 'schema_version'");
        let row = client
            .query_opt(&sql, &[])
            .await
            .map_err(|e| query_err(&meta, "schema_version", e))?;
        let found = match row {
            Some(row) => {
                let v: String = row
                    .try_get(0)
                    .map_err(|e| query_err(&meta, "schema_version", e))?;
                v.trim()
                    .parse::<i64>()
                    .map_err(|e| query_err(&meta, "schema_version", format!("not a number: {e}")))?
            }
            None => SCHEMA_VERSION,
        };
        if found > SCHEMA_VERSION {
            return Err(PostgresError::SchemaTooNew {
                table: meta,
                found,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(())
    }
}
