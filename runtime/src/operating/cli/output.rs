//! What the CLI prints: the rows of its listings (serializable for `--json`) and their text
//! form, one record per line, tab-separated, with a header.

use std::io::{self, Write};

use serde::Serialize;

pub(crate) use crate::operating::views::{Conversation, DeadLetter, JobRow};

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

pub(crate) fn jobs(out: &mut (dyn Write + Send), rows: &[JobRow]) -> io::Result<()> {
    writeln!(
        out,
        "ID\tSTATE\tSCHEDULE\tTASK\tCHAT\tNEXT_MS\tRUNS\tFAILURES\tMISSES\tLAST_ERROR"
    )?;
    for r in rows {
        let next = r.next_ms.map_or_else(|| "-".to_owned(), |n| n.to_string());
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{next}\t{}\t{}\t{}\t{}",
            r.id,
            r.state,
            r.schedule,
            r.task,
            r.chat.as_deref().unwrap_or("-"),
            r.runs,
            r.failures,
            r.misses,
            one_line(r.last_error.as_deref().unwrap_or("-"))
        )?;
    }
    Ok(())
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
