//! What the operator surfaces (the `botmesh` command line, the admin page) show of a
//! record: a dead letter of either journal, a waiting conversation, a scheduled job. Read from the public
//! records of the journals and the store; serializable for `--json`.

use botmesh_durability::inbox::{InboundRecord, InboxState};
use botmesh_durability::operating::RecordKind;
use botmesh_durability::outbox::{OutboxRecord, OutboxState};
use botmesh_durability::schedule::{JobRecord, JobSchedule};
use botmesh_durability::store::FlowCheckpoint;
use botmesh_durability::{DurabilityError, KvDurability};
use serde::Serialize;

/// One dead letter of either journal.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DeadLetter {
    pub(crate) kind: &'static str,
    pub(crate) id: String,
    pub(crate) chat: String,
    pub(crate) state: &'static str,
    pub(crate) attempts: u32,
    pub(crate) error: Option<String>,
    pub(crate) updated_ms: i64,
    pub(crate) payload: serde_json::Value,
}

/// `DeadLetter`'s constructors: `$name` reads a `$record` of the journal `$kind`, whose id is
/// its field `$id`.
macro_rules! dead_letter_of {
    ($($name:ident($record:ty): $kind:literal, id: $id:ident;)*) => {
        impl DeadLetter {
            $(
                pub(crate) fn $name(r: &$record) -> Self {
                    DeadLetter {
                        kind: $kind,
                        id: r.$id.clone(),
                        chat: r.chat.clone(),
                        state: r.state.as_str(),
                        attempts: r.attempts,
                        error: r.last_error.clone(),
                        updated_ms: r.updated_ms,
                        payload: serde_json::to_value(&r.payload).unwrap_or_default(),
                    }
                }
            )*
        }
    };
}

dead_letter_of! {
    inbound(InboundRecord): "inbound", id: id;
    outbound(OutboxRecord): "outbound", id: key;
}

impl DeadLetter {
    /// The dead letters of the journal `kind`, oldest first, at most `limit`.
    pub(crate) async fn listed(
        journals: &KvDurability,
        kind: RecordKind,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, DurabilityError> {
        Ok(match kind {
            RecordKind::Inbound => {
                let dead = journals.inbox().list(InboxState::Dead, limit).await?;
                dead.iter().map(DeadLetter::inbound).collect()
            }
            RecordKind::Outbound => {
                let dead = journals.outbox().list(OutboxState::Dead, limit).await?;
                dead.iter().map(DeadLetter::outbound).collect()
            }
        })
    }
}

/// A persistent conversation waiting for an answer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Conversation {
    pub(crate) chat: String,
    /// The flow that waits (the innermost of a flow and its sub-flows).
    pub(crate) flow: String,
    /// The ask it waits at (the name of its state).
    pub(crate) waiting_at: String,
    /// The flows of the stack, outermost first.
    pub(crate) flows: Vec<String>,
    pub(crate) step: u64,
    pub(crate) inbound_id: Option<String>,
    pub(crate) updated_ms: i64,
    /// The saved state, as stored.
    pub(crate) state: serde_json::Value,
}

impl Conversation {
    /// Reads the checkpoint's stack (`{"run", "frames": [{"flow", "state", …}]}`, written by
    /// the flow executor; a state is named after the ask it waits at).
    pub(crate) fn of(c: &FlowCheckpoint) -> Self {
        let frames = c.state["frames"].as_array().cloned().unwrap_or_default();
        let flows: Vec<String> = frames
            .iter()
            .filter_map(|f| f["flow"].as_str().map(str::to_owned))
            .collect();
        let waiting_at = frames
            .last()
            .map(|f| match &f["state"] {
                serde_json::Value::Object(m) => m.keys().next().cloned().unwrap_or_default(),
                serde_json::Value::String(s) => s.clone(),
                _ => String::new(),
            })
            .unwrap_or_default();
        Conversation {
            chat: c.chat.clone(),
            flow: flows.last().cloned().unwrap_or_else(|| c.flow.clone()),
            waiting_at,
            flows,
            step: c.step,
            inbound_id: c.inbound_id.clone(),
            updated_ms: c.updated_ms,
            state: c.state.clone(),
        }
    }
}

/// One scheduled job.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct JobRow {
    pub(crate) id: String,
    pub(crate) state: &'static str,
    /// `cron 0 9 * * *`, `every 60000ms`, `at <ms>`.
    pub(crate) schedule: String,
    pub(crate) task: String,
    pub(crate) chat: Option<String>,
    pub(crate) next_ms: Option<i64>,
    pub(crate) missed_runs: &'static str,
    pub(crate) runs: u64,
    pub(crate) failures: u64,
    pub(crate) misses: u64,
    pub(crate) last_run_ms: Option<i64>,
    pub(crate) last_error: Option<String>,
    pub(crate) data: serde_json::Value,
}

impl JobRow {
    pub(crate) fn of(j: &JobRecord) -> Self {
        let schedule = match &j.def.schedule {
            JobSchedule::Cron { expr } => format!("cron {expr}"),
            JobSchedule::Every { every_ms, .. } => format!("every {every_ms}ms"),
            JobSchedule::At { at_ms } => format!("at {at_ms}"),
        };
        JobRow {
            id: j.id.clone(),
            state: j.state().as_str(),
            schedule,
            task: j.def.task.clone(),
            chat: j.def.chat.clone(),
            next_ms: j.next_ms,
            missed_runs: j.def.missed.as_str(),
            runs: j.runs,
            failures: j.failures,
            misses: j.misses,
            last_run_ms: j.last_run_ms,
            last_error: j.last_error.clone(),
            data: j.def.data.clone(),
        }
    }
}
