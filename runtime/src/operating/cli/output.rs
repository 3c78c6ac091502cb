//! What the CLI prints: the rows of its listings (serializable for `--json`) and their text
//! form, one record per line, tab-separated, with a header.

use std::io::{self, Write};

use botmesh_durability::inbox::InboundRecord;
use botmesh_durability::outbox::OutboxRecord;
use botmesh_durability::store::FlowCheckpoint;
use serde::Serialize;

/// Writes `value` as pretty JSON when `json`, else with `text`.
pub(crate) fn emit<T: Serialize>(
    out: &mut (dyn Write + Send),
    json: bool,
    value: &T,
    text: impl FnOnce(&mut (dyn Write + Send)) -> io::Result<()>,
) -> io::Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::other)?;
        writeln!(out)
    } else {
        text(out)
    }
}

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

impl DeadLetter {
    pub(crate) fn inbound(r: &InboundRecord) -> Self {
        DeadLetter {
            kind: "inbound",
            id: r.id.clone(),
            chat: r.chat.clone(),
            state: r.state.as_str(),
            attempts: r.attempts,
            error: r.last_error.clone(),
            updated_ms: r.updated_ms,
            payload: serde_json::to_value(&r.payload).unwrap_or_default(),
        }
    }

    pub(crate) fn outbound(r: &OutboxRecord) -> Self {
        DeadLetter {
            kind: "outbound",
            id: r.key.clone(),
            chat: r.chat.clone(),
            state: r.state.as_str(),
            attempts: r.attempts,
            error: r.last_error.clone(),
            updated_ms: r.updated_ms,
            payload: serde_json::to_value(&r.payload).unwrap_or_default(),
        }
    }
}

pub(crate) fn dead_letters(out: &mut (dyn Write + Send), rows: &[DeadLetter]) -> io::Result<()> {
    writeln!(out, "KIND\tID\tCHAT\tSTATE\tATTEMPTS\tERROR")?;
    for r in rows {
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}",
            r.kind,
            r.id,
            r.chat,
            r.state,
            r.attempts,
            one_line(r.error.as_deref().unwrap_or("-"))
        )?;
    }
    Ok(())
}

pub(crate) fn dead_letter(out: &mut (dyn Write + Send), r: &DeadLetter) -> io::Result<()> {
    writeln!(out, "kind:     {}", r.kind)?;
    writeln!(out, "id:       {}", r.id)?;
    writeln!(out, "chat:     {}", r.chat)?;
    writeln!(out, "state:    {}", r.state)?;
    writeln!(out, "attempts: {}", r.attempts)?;
    writeln!(out, "error:    {}", r.error.as_deref().unwrap_or("-"))?;
    writeln!(out, "payload:  {}", r.payload)
}

/// One quarantined record.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Quarantined {
    pub(crate) kind: &'static str,
    pub(crate) id: String,
    pub(crate) bytes: usize,
    /// The stored bytes as text (invalid UTF-8 replaced).
    pub(crate) content: String,
}

pub(crate) fn quarantined(out: &mut (dyn Write + Send), rows: &[Quarantined]) -> io::Result<()> {
    writeln!(out, "KIND\tID\tBYTES")?;
    for r in rows {
        writeln!(out, "{}\t{}\t{}", r.kind, r.id, r.bytes)?;
    }
    Ok(())
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

pub(crate) fn conversations(out: &mut (dyn Write + Send), rows: &[Conversation]) -> io::Result<()> {
    writeln!(out, "CHAT\tFLOW\tWAITING AT\tSTEP")?;
    for r in rows {
        writeln!(out, "{}\t{}\t{}\t{}", r.chat, r.flow, r.waiting_at, r.step)?;
    }
    Ok(())
}

pub(crate) fn conversation(out: &mut (dyn Write + Send), r: &Conversation) -> io::Result<()> {
    writeln!(out, "chat:       {}", r.chat)?;
    writeln!(out, "flow:       {}", r.flow)?;
    writeln!(out, "flows:      {}", r.flows.join(" > "))?;
    writeln!(out, "waiting at: {}", r.waiting_at)?;
    writeln!(out, "step:       {}", r.step)?;
    writeln!(
        out,
        "inbound:    {}",
        r.inbound_id.as_deref().unwrap_or("-")
    )?;
    writeln!(out, "state:      {}", r.state)
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\t'], " ")
}
