//! [`ConsoleProvider`]: chat with a bot in the terminal.
//!
//! Each line typed is a message from one user in one chat (both `"you"` unless configured).
//! The bot's messages print as `bot> …`; edits as `bot (edited)> …`; messages to another
//! chat as `bot to <chat>> …`. Buttons and list rows print as a numbered list
//! (`[1] Yes  [2] No`): answering with a number, or with a title (ignoring case), presses
//! that button (an interaction carrying the button's id); anything else is a text message.
//! Media, locations, contacts, reactions and templates print as one readable line.
//!
//! | event | what the console does |
//! | --- | --- |
//! | a line is typed | delivers it; reads the next line only once `deliver` returned |
//! | … and [`attach`](ConsoleProvider::attach)ed | also waits until the bot settled (turn-taking) |
//! | `deliver` refused it | prints `(not delivered: …)` |
//! | end of input (Ctrl-D, end of a pipe) | `end_of_input()`: the bot stops with a drain |
//! | typing | a transient `bot is typing…` on stderr when it is a terminal, else nothing |
//! | start, [`attach`](ConsoleProvider::attach)ed, a flow waiting in the chat (a restart) | prints the question it waits on again: `bot (waiting for your answer)> …`, its buttons answerable |
//!
//! A typed line's message id is `console-<run>-<n>` (`<run>`: the ms the console started
//! reading), so a bot restarted on the same journal does not take a new run's lines for
//! redeliveries of the last run's.
//!
//! Output goes through one writer task, so lines never interleave. It does not persist
//! anything, download media, or show read marks; interaction acks are no-ops.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::Bot;
use botmesh::message::{
    Button, ChatId, ContactCard, Interaction, Location, MediaSource, Message, MessageId, Outgoing,
    OutgoingContent, SentMessage, UserId,
};
use botmesh::provider::{Capabilities, EventSink, Provider, ProviderError, ProviderEvent};
use derive_setters::Setters;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::lines::{LineOutput, LineSource};
use crate::task::TaskSlot;

/// The provider's name, as media refs carry it.
pub const NAME: &str = "console";

/// The longest an attached console waits for the bot to settle before reading on.
const TURN_WAIT: Duration = Duration::from_secs(30);

/// A terminal chat: one user, one chat, lines in, rendered messages out.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::ConsoleProvider;
/// # async fn demo() -> Result<(), BotError> {
/// let bot = Bot::builder(ConsoleProvider::new().chat("alice")).build()?;
/// bot.command("start", |ctx: Ctx| async move {
///     ctx.reply_buttons("Continue?", [("yes", "Yes"), ("no", "No")]).await?;
///     Ok(())
/// });
/// bot.run().await
/// # }
/// ```
#[derive(Clone, Setters)]
#[setters(generate = false, into, strip_option)]
pub struct ConsoleProvider {
    chat: ChatId,
    user: UserId,
    /// The user's display name.
    #[setters(generate)]
    user_name: Option<String>,
    /// Shows (or hides) the transient typing indicator on stderr.
    #[setters(generate, into = false, rename = "typing_indicator")]
    typing_on_stderr: bool,
    /// A line printed as it is when the console starts (a greeting, how to quit).
    #[setters(generate)]
    banner: Option<String>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ConsoleProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleProvider")
            .field("chat", &self.chat)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

struct Shared {
    input: Arc<tokio::sync::Mutex<LineSource>>,
    out: LineOutput,
    state: Mutex<State>,
    /// The task reading the input, between `start()` and `stop()`.
    reader: TaskSlot,
    sent_ids: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The buttons (or list rows) of the bot's last message to the console's chat.
    choices: Vec<Button>,
    /// The message that carried them.
    choices_message: Option<MessageId>,
    /// A typing indicator is on stderr.
    typing_shown: bool,
    /// The bot whose answers the reader waits for (see `attach`).
    bot: Option<Bot>,
}

impl Default for ConsoleProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl ConsoleProvider {
    /// A console on the process's stdin and stdout; the typing indicator shows on stderr when
    /// stdout and stderr are terminals.
    pub fn new() -> Self {
        let tty = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        Self::from_parts(
            LineSource::stdin(),
            LineOutput::new(tokio::io::stdout()),
            tty,
        )
    }

    /// The same as [`new`](Self::new): the process's stdin and stdout.
    pub fn stdio() -> Self {
        Self::new()
    }

    /// A console reading lines from `reader` and writing to `writer` (no typing indicator).
    pub fn with_io(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
    ) -> Self {
        Self::from_parts(LineSource::reader(reader), LineOutput::new(writer), false)
    }

    fn from_parts(input: LineSource, out: LineOutput, typing_on_stderr: bool) -> Self {
        Self {
            chat: ChatId::from("you"),
            user: UserId::from("you"),
            user_name: None,
            typing_on_stderr,
            banner: None,
            shared: Arc::new(Shared {
                input: Arc::new(tokio::sync::Mutex::new(input)),
                out,
                state: Mutex::new(State::default()),
                reader: TaskSlot::default(),
                sent_ids: AtomicU64::new(0),
            }),
        }
    }

    /// The chat (and user) id the typed lines come from (`"you"` by default).
    pub fn chat(mut self, chat: impl Into<String>) -> Self {
        let chat = chat.into();
        self.user = UserId::from(chat.as_str());
        self.chat = ChatId::from(chat);
        self
    }

    /// Takes turns with `bot`: after each line is delivered, the console waits until the bot
    /// settled (at most 30 s) before it reads the next one, so that a number typed ahead, or
    /// piped in, answers the buttons of the bot's latest reply. Holds a handle of the bot
    /// until the provider stops; attach again after a restart.
    pub fn attach(&self, bot: &Bot) -> &Self {
        self.state().bot = Some(bot.clone());
        self
    }

    /// The output (stdout, or the writer given): waiting until it is written, its error.
    pub fn output(&self) -> &LineOutput {
        &self.shared.out
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prints lines, clearing a typing indicator first.
    fn print(&self, lines: Vec<String>) {
        let was_typing = std::mem::take(&mut self.state().typing_shown);
        if was_typing {
            let mut err = std::io::stderr();
            // Best effort: a terminal that refuses the clear keeps a stale indicator.
            let _ = err.write_all(b"\r\x1b[2K").and_then(|()| err.flush());
        }
        for line in lines {
            self.shared.out.line(line);
        }
    }

    fn prefix(&self, chat: &ChatId, edited: bool) -> String {
        match (chat == &self.chat, edited) {
            (true, false) => "bot> ".to_owned(),
            (true, true) => "bot (edited)> ".to_owned(),
            (false, false) => format!("bot to {chat}> "),
            (false, true) => format!("bot (edited) to {chat}> "),
        }
    }

    fn remember_choices(&self, chat: &ChatId, message_id: &MessageId, choices: Vec<Button>) {
        if chat != &self.chat {
            return;
        }
        let mut state = self.state();
        state.choices = choices;
        state.choices_message = Some(message_id.clone());
    }
}

/// What a typed line means.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Typed {
    Text(String),
    Press(Button),
}

/// Maps a typed line to a button press (by number or title) or a text.
fn interpret(line: &str, choices: &[Button]) -> Typed {
    let trimmed = line.trim();
    if let Ok(n) = trimmed.parse::<usize>()
        && let Some(b) = n.checked_sub(1).and_then(|i| choices.get(i))
    {
        return Typed::Press(b.clone());
    }
    match choices
        .iter()
        .find(|b| b.title.trim().eq_ignore_ascii_case(trimmed))
    {
        Some(b) => Typed::Press(b.clone()),
        None => Typed::Text(line.to_owned()),
    }
}

/// Renders content as lines under `prefix`; returns the lines and the choices offered.
fn render(prefix: &str, content: &OutgoingContent) -> (Vec<String>, Vec<Button>) {
    let indent = " ".repeat(prefix.chars().count());
    let mut lines = Vec::new();
    let mut choices = Vec::new();
    let push_text = |lines: &mut Vec<String>, text: &str| {
        for (i, l) in text.split('\n').enumerate() {
            lines.push(format!(
                "{}{l}",
                if i == 0 { prefix } else { indent.as_str() }
            ));
        }
    };
    match content {
        OutgoingContent::Text { text, buttons } => {
            push_text(&mut lines, text);
            if !buttons.is_empty() {
                lines.push(format!("{indent}{}", numbered(buttons, 1)));
                choices.extend(buttons.iter().cloned());
            }
        }
        OutgoingContent::List {
            text,
            button,
            sections,
        } => {
            push_text(&mut lines, text);
            lines.push(format!("{indent}({button})"));
            for section in sections {
                if !section.title.is_empty() {
                    lines.push(format!("{indent}{}:", section.title));
                }
                if !section.rows.is_empty() {
                    lines.push(format!(
                        "{indent}{}",
                        numbered(&section.rows, choices.len() + 1)
                    ));
                    choices.extend(section.rows.iter().cloned());
                }
            }
        }
        other => push_text(&mut lines, &one_liner(other)),
    }
    (lines, choices)
}

fn numbered(buttons: &[Button], first: usize) -> String {
    buttons
        .iter()
        .enumerate()
        .map(|(i, b)| format!("[{}] {}", first + i, b.title))
        .collect::<Vec<_>>()
        .join("  ")
}

/// A readable line for media, locations, contacts, reactions and templates.
fn one_liner(content: &OutgoingContent) -> String {
    match content {
        OutgoingContent::Text { text, .. } | OutgoingContent::List { text, .. } => text.clone(),
        OutgoingContent::Media {
            media_kind,
            source,
            caption,
            ..
        } => {
            let source = match source {
                MediaSource::Url { url } => url.clone(),
                MediaSource::Path { path } => path.display().to_string(),
                MediaSource::Bytes { data, file_name } => match file_name {
                    Some(name) => format!("{name}, {} bytes", data.len()),
                    None => format!("{} bytes", data.len()),
                },
                MediaSource::Token { token } => format!("token {token}"),
            };
            let caption = caption
                .as_deref()
                .map(|c| format!(" {c}"))
                .unwrap_or_default();
            format!("[{}: {source}]{caption}", media_kind.as_str())
        }
        OutgoingContent::Location(loc) => format!("[location: {}]", location(loc)),
        OutgoingContent::Contacts(cards) => {
            let cards: Vec<String> = cards.iter().map(contact).collect();
            format!("[contact: {}]", cards.join("; "))
        }
        OutgoingContent::Reaction(r) if r.emoji.is_empty() => {
            format!("[reaction removed from {}]", r.message_id)
        }
        OutgoingContent::Reaction(r) => format!("[reacted {} to {}]", r.emoji, r.message_id),
        OutgoingContent::Template {
            name,
            language,
            params,
        } => {
            format!("[template {name} ({language}): {}]", params.join(", "))
        }
    }
}

fn location(loc: &Location) -> String {
    let mut parts: Vec<&str> = Vec::new();
    parts.extend(loc.name.as_deref());
    parts.extend(loc.address.as_deref());
    let coords = format!("({:.5}, {:.5})", loc.latitude, loc.longitude);
    if parts.is_empty() {
        coords
    } else {
        format!("{} {coords}", parts.join(", "))
    }
}

fn contact(card: &ContactCard) -> String {
    if card.phones.is_empty() {
        card.name.clone()
    } else {
        format!("{} {}", card.name, card.phones.join(", "))
    }
}

/// Reads lines and delivers them until the input ends.
/// The prefix of the question a chat waits on, shown again when the console starts.
const WAITING: &str = "bot (waiting for your answer)> ";

/// After a restart, shows the question the chat is waiting on: when a persistent flow waits
/// in the chat (its checkpoint is in the store of the [`attach`](ConsoleProvider::attach)ed
/// bot), the last message the bot sent there (from the store's message ledger), with its
/// buttons answerable by number again. Nothing without an attached bot, a waiting flow or the
/// ledger.
async fn show_waiting_question(provider: &ConsoleProvider) {
    use botmesh::durability::store::{Direction, LedgerStatus};

    let Some(bot) = provider.state().bot.clone() else {
        return;
    };
    let store = bot.store();
    let chat = provider.chat.as_str();
    match store.checkpoint(chat).await {
        Ok(Some(_)) => {}
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "console: cannot read the chat's waiting flow");
            return;
        }
    }
    let entries = match store.ledger(chat, 32).await {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(error = %e, "console: cannot read the chat's last messages");
            return;
        }
    };
    let Some(question) = entries.iter().rev().find(|e| {
        matches!(e.direction, Direction::Outbound) && matches!(e.status, LedgerStatus::Sent)
    }) else {
        return;
    };
    let Ok(content) = serde_json::from_value::<OutgoingContent>(question.content.clone()) else {
        return;
    };
    let (lines, choices) = render(WAITING, &content);
    if let Some(id) = &question.message_id {
        provider.remember_choices(&provider.chat, &MessageId(id.clone()), choices);
    }
    provider.print(lines);
}

async fn read_loop(provider: ConsoleProvider, sink: EventSink) {
    show_waiting_question(&provider).await;
    let mut input = provider.shared.input.clone().lock_owned().await;
    // Message ids are `console-<run>-<n>`: a bot journals the ids it has seen (for the
    // retention window) and takes an id seen before for a redelivery, so ids that restarted
    // at 1 in each run would drop the first lines typed after a restart on the same
    // journal. `<run>` is the ms this run started reading.
    let run = botmesh::clock::now_ms();
    let mut n: u64 = 0;
    loop {
        let bytes = match input.next_line().await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => break,
            Err(e) => {
                tracing::error!(error = %e, "console: cannot read input");
                break;
            }
        };
        let line = String::from_utf8_lossy(&bytes).into_owned();
        if line.trim().is_empty() {
            continue;
        }
        n += 1;
        let (choices, carrier) = {
            let state = provider.state();
            (state.choices.clone(), state.choices_message.clone())
        };
        let now = botmesh::clock::now_ms();
        let event = match interpret(&line, &choices) {
            Typed::Press(button) => ProviderEvent::Interaction(Interaction {
                id: format!("console-press-{run}-{n}"),
                chat: provider.chat.clone(),
                sender: provider.user.clone(),
                sender_name: provider.user_name.clone(),
                data: button.id,
                title: Some(button.title),
                message_id: carrier,
                is_group: false,
                timestamp_ms: now,
                respond_by_ms: None,
                from_text: false,
            }),
            Typed::Text(text) => {
                let mut m =
                    Message::text(format!("console-{run}-{n}"), provider.chat.clone(), text);
                m.sender = provider.user.clone();
                m.sender_name = provider.user_name.clone();
                m.timestamp_ms = now;
                ProviderEvent::Message(m)
            }
        };
        if let Err(e) = sink.deliver(event).await {
            provider.print(vec![format!("(not delivered: {e})")]);
            continue;
        }
        let bot = provider.state().bot.clone();
        if let Some(bot) = bot
            && tokio::time::timeout(TURN_WAIT, bot.idle()).await.is_err()
        {
            tracing::debug!("console: the bot is still busy; reading on");
        }
    }
    sink.end_of_input();
}

#[async_trait]
impl Provider for ConsoleProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::lines::CAPABILITIES
    }

    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        if let Some(banner) = &self.banner {
            self.print(vec![banner.clone()]);
        }
        self.shared
            .reader
            .set(tokio::spawn(read_loop(self.clone(), sink)));
        Ok(())
    }

    async fn stop(&self) -> Result<(), ProviderError> {
        let bot = self.state().bot.take();
        drop(bot);
        self.shared.reader.abort();
        // A failed output already failed the sends it lost; the run itself ended well.
        let _ = self.shared.out.flush().await;
        Ok(())
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let id = MessageId(format!(
            "bot-{}",
            self.shared.sent_ids.fetch_add(1, Ordering::SeqCst) + 1
        ));
        let (lines, choices) = render(&self.prefix(chat, false), &outgoing.content);
        self.remember_choices(chat, &id, choices);
        self.print(lines);
        // Delivered means written: a closed stdout fails the send (the outbox keeps it).
        self.shared.out.flush_send(NAME, "the terminal", id).await
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        let (lines, choices) = render(&self.prefix(chat, true), content);
        let carries_choices = self.state().choices_message.as_ref() == Some(message_id);
        if carries_choices || !choices.is_empty() {
            self.remember_choices(chat, message_id, choices);
        }
        self.print(lines);
        Ok(())
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        if !self.typing_on_stderr || chat != &self.chat {
            return Ok(());
        }
        let mut err = std::io::stderr();
        if err
            .write_all("bot is typing…\r".as_bytes())
            .and_then(|()| err.flush())
            .is_ok()
        {
            self.state().typing_shown = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use botmesh::message::{ListSection, MediaKind, Reaction};

    #[test]
    fn numbers_and_titles_press_buttons() {
        let choices = vec![Button::with_id("y", "Yes"), Button::with_id("n", "No")];
        assert_eq!(interpret("2", &choices), Typed::Press(choices[1].clone()));
        assert_eq!(
            interpret(" yes ", &choices),
            Typed::Press(choices[0].clone())
        );
        assert_eq!(interpret("3", &choices), Typed::Text("3".into()));
        assert_eq!(interpret("1", &[]), Typed::Text("1".into()));
    }

    #[test]
    fn renders_buttons_lists_and_one_liners() {
        let content = OutgoingContent::Text {
            text: "Sure?\nReally?".into(),
            buttons: vec![Button::new("Yes"), Button::new("No")],
        };
        let (lines, choices) = render("bot> ", &content);
        assert_eq!(
            lines,
            vec!["bot> Sure?", "     Really?", "     [1] Yes  [2] No"]
        );
        assert_eq!(choices.len(), 2);

        let list = OutgoingContent::List {
            text: "Pick".into(),
            button: "Menu".into(),
            sections: vec![
                ListSection {
                    title: "Hot".into(),
                    rows: vec![Button::new("Tea")],
                },
                ListSection {
                    title: "Cold".into(),
                    rows: vec![Button::new("Juice")],
                },
            ],
        };
        let (lines, choices) = render("bot> ", &list);
        assert_eq!(
            lines,
            vec![
                "bot> Pick",
                "     (Menu)",
                "     Hot:",
                "     [1] Tea",
                "     Cold:",
                "     [2] Juice"
            ]
        );
        assert_eq!(choices[1].title, "Juice");

        let media = OutgoingContent::Media {
            media_kind: MediaKind::Image,
            source: MediaSource::Url {
                url: "https://x/cat.png".into(),
            },
            caption: Some("A cat".into()),
            mime: None,
        };
        assert_eq!(
            render("bot> ", &media).0,
            vec!["bot> [image: https://x/cat.png] A cat"]
        );
        let loc = OutgoingContent::Location(Location {
            latitude: 1.5,
            longitude: 2.25,
            name: Some("Shop".into()),
            address: None,
        });
        assert_eq!(one_liner(&loc), "[location: Shop (1.50000, 2.25000)]");
        let contacts = OutgoingContent::Contacts(vec![
            ContactCard {
                name: "Ada".into(),
                phones: vec!["+1".into()],
            },
            ContactCard {
                name: "Bob".into(),
                phones: vec![],
            },
        ]);
        assert_eq!(one_liner(&contacts), "[contact: Ada +1; Bob]");
        let reaction = OutgoingContent::Reaction(Reaction {
            message_id: MessageId::from("m1"),
            emoji: "👍".into(),
        });
        assert_eq!(one_liner(&reaction), "[reacted 👍 to m1]");
    }
}
