//! The commands of the CLI, each one call (or a few) of the operator API.

use std::collections::BTreeMap;
use std::io::{self, Write};

use botmesh_durability::inbox::InboxState;
use botmesh_durability::operating::RecordKind;
use botmesh_durability::outbox::OutboxState;
use serde::Serialize;

use crate::operating::cli::output::{self, Conversation, DeadLetter, JobRow, Quarantined, emit};
use crate::operating::cli::target::Target;
use crate::operating::cli::{
    Cli, CliError, Command, ConversationCommand, DeadCommand, JobCommand, Kind, QuarantineCommand,
};

/// How many records `metrics` counts per state before it says "at least".
const COUNT_CAP: usize = 10_000;

pub(crate) async fn run(
    t: &Target,
    cli: &Cli,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let mut run = Run {
        t,
        json: cli.json,
        out,
    };
    match &cli.command {
        Command::Dead(c) => run.dead(c).await,
        Command::Quarantine(c) => run.quarantine(c).await,
        Command::Conversations(c) => run.conversations(c).await,
        Command::Jobs(c) => run.jobs(c).await,
        Command::Metrics => run.metrics().await,
    }
}

/// A command's run: the bot's journals and store it reads and changes, and where its answer
/// goes (JSON with `--json`, text otherwise).
struct Run<'a> {
    t: &'a Target,
    json: bool,
    out: &'a mut (dyn Write + Send),
}

fn kinds(kind: Option<Kind>) -> Vec<RecordKind> {
    match kind {
        Some(Kind::Inbound) => vec![RecordKind::Inbound],
        Some(Kind::Outbound) => vec![RecordKind::Outbound],
        None => vec![RecordKind::Inbound, RecordKind::Outbound],
    }
}

fn record_kind(kind: Kind) -> RecordKind {
    match kind {
        Kind::Inbound => RecordKind::Inbound,
        Kind::Outbound => RecordKind::Outbound,
    }
}

/// The record `id` names in either journal (inbound first).
async fn find(t: &Target, id: &str) -> Result<Option<DeadLetter>, CliError> {
    if let Some(r) = t.journals.inbox().get(id).await? {
        return Ok(Some(DeadLetter::inbound(&r)));
    }
    Ok(t.journals
        .outbox()
        .lookup(id)
        .await?
        .map(|r| DeadLetter::outbound(&r)))
}

fn not_found(what: &'static str, id: &str) -> CliError {
    CliError::NotFound {
        what,
        id: id.to_owned(),
    }
}

/// The conversation waiting in `chat`, or [`CliError::NotFound`].
async fn conversation(t: &Target, chat: &str) -> Result<Conversation, CliError> {
    t.store
        .checkpoint(chat)
        .await?
        .map(|c| Conversation::of(&c))
        .ok_or_else(|| not_found("conversation", chat))
}

impl Run<'_> {
    /// Writes `value` as JSON, or as `text` writes it.
    fn emit<T: Serialize>(
        &mut self,
        value: &T,
        text: impl FnOnce(&mut (dyn Write + Send)) -> io::Result<()>,
    ) -> io::Result<()> {
        emit(self.out, self.json, value, text)
    }

    async fn jobs(&mut self, c: &JobCommand) -> Result<(), CliError> {
        let t = self.t;
        match c {
            JobCommand::List { limit } => {
                let rows: Vec<JobRow> = t
                    .journals
                    .jobs()
                    .list(*limit)
                    .await?
                    .iter()
                    .map(JobRow::of)
                    .collect();
                self.emit(&rows, |o| output::jobs(o, &rows))?;
            }
            JobCommand::Cancel { id } => {
                let row = t
                    .journals
                    .jobs()
                    .get(id)
                    .await?
                    .map(|j| JobRow::of(&j))
                    .ok_or_else(|| not_found("job", id))?;
                if !t.journals.jobs().cancel(id).await? {
                    return Err(not_found("job", id));
                }
                tracing::info!(job = %id, "job cancelled by operator");
                self.emit(&row, |o| writeln!(o, "job {id} cancelled"))?;
            }
        }
        Ok(())
    }

    async fn dead(&mut self, c: &DeadCommand) -> Result<(), CliError> {
        let t = self.t;
        match c {
            DeadCommand::List { kind, limit } => {
                let mut rows = Vec::new();
                for k in kinds(*kind) {
                    rows.extend(DeadLetter::listed(&t.journals, k, *limit).await?);
                }
                self.emit(&rows, |o| output::dead_letters(o, &rows))?;
            }
            DeadCommand::Show { id } => {
                let row = find(t, id).await?.ok_or_else(|| not_found("record", id))?;
                self.emit(&row, |o| output::dead_letter(o, &row))?;
            }
            DeadCommand::Replay { id } => {
                if t.journals.inbox().get(id).await?.is_none() {
                    return Err(not_found("inbound record", id));
                }
                let r = DeadLetter::inbound(&t.journals.replay_inbound(id).await?);
                self.emit(&r, |o| writeln!(o, "inbound record {id} is pending again"))?;
            }
            DeadCommand::Retry { key } => {
                if t.journals.outbox().lookup(key).await?.is_none() {
                    return Err(not_found("send", key));
                }
                let r = DeadLetter::outbound(&t.journals.retry_send(key).await?);
                self.emit(&r, |o| writeln!(o, "send {key} is pending again"))?;
            }
            DeadCommand::Discard { id } => {
                let found = find(t, id).await?.ok_or_else(|| not_found("record", id))?;
                let discarded = if found.kind == "inbound" {
                    t.journals.inbox().discard(id).await?
                } else {
                    t.journals.discard_send(id).await?
                };
                if !discarded {
                    return Err(not_found("record", id));
                }
                self.emit(&found, |o| {
                    writeln!(o, "{} record {id} discarded", found.kind)
                })?;
            }
        }
        Ok(())
    }

    async fn quarantine(&mut self, c: &QuarantineCommand) -> Result<(), CliError> {
        let t = self.t;
        let rows_of = |kind: RecordKind, limit: usize| async move {
            let found = t.journals.quarantined(kind, limit).await?;
            Ok::<_, CliError>(
                found
                    .into_iter()
                    .map(|q| Quarantined {
                        kind: q.kind.as_str(),
                        id: q.id,
                        bytes: q.bytes.len(),
                        content: String::from_utf8_lossy(&q.bytes).into_owned(),
                    })
                    .collect::<Vec<_>>(),
            )
        };
        match c {
            QuarantineCommand::List { kind, limit } => {
                let mut rows = Vec::new();
                for k in kinds(*kind) {
                    rows.extend(rows_of(k, *limit).await?);
                }
                self.emit(&rows, |o| output::quarantined(o, &rows))?;
            }
            QuarantineCommand::Show { kind, id } => {
                let row = rows_of(record_kind(*kind), usize::MAX)
                    .await?
                    .into_iter()
                    .find(|q| &q.id == id)
                    .ok_or_else(|| not_found("quarantined record", id))?;
                self.emit(&row, |o| {
                    writeln!(o, "{} {} ({} bytes)", row.kind, row.id, row.bytes)?;
                    writeln!(o, "{}", row.content)
                })?;
            }
            QuarantineCommand::Discard { kind, id } => {
                if !t
                    .journals
                    .discard_quarantined(record_kind(*kind), id)
                    .await?
                {
                    return Err(not_found("quarantined record", id));
                }
                self.emit(&serde_json::json!({ "discarded": id }), |o| {
                    writeln!(o, "quarantined record {id} discarded")
                })?;
            }
        }
        Ok(())
    }

    async fn conversations(&mut self, c: &ConversationCommand) -> Result<(), CliError> {
        let t = self.t;
        match c {
            ConversationCommand::List => {
                let mut rows: Vec<Conversation> = t
                    .store
                    .checkpoints()
                    .await?
                    .iter()
                    .map(Conversation::of)
                    .collect();
                rows.sort_by(|a, b| a.chat.cmp(&b.chat));
                self.emit(&rows, |o| output::conversations(o, &rows))?;
            }
            ConversationCommand::Show { chat } => {
                let row = conversation(t, chat).await?;
                self.emit(&row, |o| output::conversation(o, &row))?;
            }
            ConversationCommand::Cancel { chat } => {
                let row = conversation(t, chat).await?;
                t.store.delete_checkpoint(chat).await?;
                // Its ask's timeout goes with it (it would find nothing to time out).
                let timeout =
                    crate::flow::timeout::job_id(&crate::message::ChatId::from(chat.as_str()));
                t.journals.jobs().cancel(&timeout).await?;
                tracing::info!(chat = %chat, flow = %row.flow, "conversation cancelled by operator");
                self.emit(&row, |o| {
                    writeln!(
                        o,
                        "conversation of chat {chat} ({} waiting at {}) cancelled",
                        row.flow, row.waiting_at
                    )
                })?;
            }
        }
        Ok(())
    }

    async fn metrics(&mut self) -> Result<(), CliError> {
        let t = self.t;
        let mut counts: BTreeMap<String, BTreeMap<&'static str, usize>> = BTreeMap::new();
        let mut inbound = BTreeMap::new();
        for s in InboxState::ALL {
            inbound.insert(
                s.as_str(),
                t.journals.inbox().list(s, COUNT_CAP).await?.len(),
            );
        }
        let mut outbound = BTreeMap::new();
        for s in OutboxState::ALL {
            outbound.insert(
                s.as_str(),
                t.journals.outbox().list(s, COUNT_CAP).await?.len(),
            );
        }
        for (kind, mut states) in [
            (RecordKind::Inbound, inbound),
            (RecordKind::Outbound, outbound),
        ] {
            let quarantined = t.journals.quarantined(kind, COUNT_CAP).await?.len();
            states.insert("quarantined", quarantined);
            counts.insert(kind.as_str().to_owned(), states);
        }
        let conversations = t.store.checkpoints().await?.len();
        counts
            .entry("conversations".into())
            .or_default()
            .insert("waiting", conversations);
        self.emit(&counts, |o| {
            writeln!(o, "JOURNAL\tSTATE\tRECORDS")?;
            for (journal, states) in &counts {
                for (state, n) in states {
                    let n = if *n >= COUNT_CAP {
                        format!("{COUNT_CAP}+")
                    } else {
                        n.to_string()
                    };
                    writeln!(o, "{journal}\t{state}\t{n}")?;
                }
            }
            Ok(())
        })?;
        Ok(())
    }
}
