//! [`JsonlProvider`]: the black-box interface. JSON lines in, JSON lines out.
//!
//! Each input line is one inbound event:
//!
//! - a message: `{"id":"m1","chat":"alice","text":"order"}`, with optional `user` (the sender;
//!   the chat by default), `name`, `group` (bool), `mentions` (bool), `lang`, `reply_to`;
//! - a button press: `{"id":"c1","chat":"alice","button":"yes"}`, with optional `title` and
//!   `message_id` (the message that carried the button) besides the fields above.
//!
//! `id` and `chat` may be strings or numbers. Blank lines are skipped (they still count in
//! line numbers). Limits, in bytes: a line 1 MiB ([`MAX_LINE_BYTES`]); `id`, `chat`, `user`,
//! `message_id`, `reply_to` 256 ([`MAX_ID_BYTES`]); `text` 64 KiB ([`MAX_TEXT_BYTES`]);
//! `button`, `title`, `name`, `lang` 1 KiB ([`MAX_SHORT_BYTES`]). A line over a limit, with a
//! field of the wrong type, or missing a field gets an `error` line naming the field. Stdout carries one JSON object per line, `type` first:
//!
//! | line | when |
//! | --- | --- |
//! | `{"type":"ack","id":…}` | `deliver` returned `Ok` (queued, or dropped on purpose); `"duplicate":true` when the id was seen before (a redelivery: not handled again) |
//! | `{"type":"nack","id":…,"error":…}` | `deliver` returned `Err`: the event was not accepted |
//! | `{"type":"error","line":N,"error":…}` | line N is not JSON or misses a field; input goes on |
//! | `{"type":"send","chat":…,"text":…,"key":…,"message_id":…}` | a message went out (1) |
//! | `{"type":"edit","chat":…,"message_id":…,"text":…}` | a message was edited |
//! | `{"type":"typing","chat":…}` | a typing indicator |
//! | `{"type":"event","name":…}` | a bot event: `error`, `dropped`, `durability:<name>` |
//!
//! (1) with `buttons` when it has buttons, `content` (the whole content) when it is not plain
//! text, and `reply_to` when it quotes a message.
//!
//! Stdout is the channel: `send()` returns only once its `send` line is written and flushed, so
//! a line on stdout is a message delivered, and a process killed before that line was written
//! did not deliver it (what the durable outbox then replays or reports as ambiguous). The key
//! on the line is the send's idempotency key, read from
//! [`botmesh::provider::current_send_key`] (the runtime never puts it in the payload). The next
//! input line is read only once `deliver` returned. While a line of chat C is being delivered,
//! the `send`, `edit` and `typing` lines of chat C wait and are printed right after that line's
//! `ack`, so a message's `ack` always precedes the sends it causes. End of input calls `end_of_input()`: `bot.run()` then stops with a drain.
//!
//! All output goes through one writer task: lines never interleave. Logs never go to
//! stdout. A failing stdout (closed by the reader) fails every send from then on (retryable:
//! the outbox keeps them for the next start, none is recorded as sent), ends the input (the
//! bot stops), and is reported by the provider's [`output`](JsonlProvider::output). Media, calls, reactions and
//! read marks are not part of the input format.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use botmesh::message::{
    Button, ChatId, Interaction, Message, MessageId, Outgoing, OutgoingContent, SentMessage, UserId,
};
use botmesh::provider::{
    Accepted, Capabilities, EventSink, Provider, ProviderError, ProviderEvent,
};
use botmesh::{Bot, BotEvent};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::lines::{LineOutput, LineSource};
use crate::task::TaskSlot;

/// The provider's name, as media refs carry it.
pub const NAME: &str = "jsonl";

/// Why an input line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The line is not valid UTF-8.
    #[error("the line is not valid UTF-8")]
    NotUtf8,
    /// The line is not JSON.
    #[error("invalid JSON: {0}")]
    NotJson(String),
    /// The line is JSON but not an object.
    #[error("expected a JSON object")]
    NotObject,
    /// A required field is missing.
    #[error("missing required field `{0}`")]
    Missing(&'static str),
    /// A field has the wrong type or an empty value.
    #[error("field `{field}`: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Neither `text` nor `button` was given.
    #[error("a line needs `text` (a message) or `button` (a button press)")]
    NoContent,
    /// Both `text` and `button` were given.
    #[error("a line has either `text` or `button`, not both")]
    TextAndButton,
    /// A field (or the whole line) is over its size limit.
    #[error("field `{field}`: {len} bytes, over the limit of {limit}")]
    TooLong {
        /// The field (`line` for the whole line).
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        limit: usize,
    },
}

/// The longest input line, in bytes; a longer one is refused before it is parsed.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// The longest `id`, `chat`, `user`, `message_id` and `reply_to`, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// The longest `text`, in bytes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// The longest `button`, `title`, `name` and `lang`, in bytes.
pub const MAX_SHORT_BYTES: usize = 1024;

/// The fields of one input line, each checked by name.
struct Fields(serde_json::Map<String, serde_json::Value>);

impl Fields {
    fn too_long(field: &'static str, s: &str, limit: usize) -> Result<(), LineError> {
        if s.len() > limit {
            return Err(LineError::TooLong {
                field,
                len: s.len(),
                limit,
            });
        }
        Ok(())
    }

    /// An id: a string or a number, not empty, at most [`MAX_ID_BYTES`].
    fn id(&self, field: &'static str) -> Result<Option<String>, LineError> {
        let id = match self.0.get(field) {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            Some(other) => {
                return Err(LineError::Invalid {
                    field,
                    reason: format!("expected a string or a number, got {}", kind(other)),
                });
            }
        };
        if id.is_empty() {
            return Err(LineError::Invalid {
                field,
                reason: "must not be empty".into(),
            });
        }
        Self::too_long(field, &id, MAX_ID_BYTES)?;
        Ok(Some(id))
    }

    /// A string of at most `limit` bytes.
    fn string(&self, field: &'static str, limit: usize) -> Result<Option<String>, LineError> {
        match self.0.get(field) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => {
                Self::too_long(field, s, limit)?;
                Ok(Some(s.clone()))
            }
            Some(other) => Err(LineError::Invalid {
                field,
                reason: format!("expected a string, got {}", kind(other)),
            }),
        }
    }

    fn bool(&self, field: &'static str) -> Result<Option<bool>, LineError> {
        match self.0.get(field) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(LineError::Invalid {
                field,
                reason: format!("expected true or false, got {}", kind(other)),
            }),
        }
    }
}

/// The JSON type of a value, for an error message.
fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Parses one input line into the event to deliver.
pub fn parse_line(bytes: &[u8]) -> Result<ProviderEvent, LineError> {
    if bytes.len() > MAX_LINE_BYTES {
        return Err(LineError::TooLong {
            field: "line",
            len: bytes.len(),
            limit: MAX_LINE_BYTES,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| LineError::NotUtf8)?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| LineError::NotJson(e.to_string()))?;
    let serde_json::Value::Object(map) = value else {
        return Err(LineError::NotObject);
    };
    let f = Fields(map);
    let id = f.id("id")?.ok_or(LineError::Missing("id"))?;
    let chat = ChatId(f.id("chat")?.ok_or(LineError::Missing("chat"))?);
    let sender = UserId(f.id("user")?.unwrap_or_else(|| chat.0.clone()));
    let text = f.string("text", MAX_TEXT_BYTES)?;
    let button = f.string("button", MAX_SHORT_BYTES)?;
    let name = f.string("name", MAX_SHORT_BYTES)?;
    let group = f.bool("group")?.unwrap_or(false);
    let now = botmesh::clock::now_ms();
    match (text, button) {
        (Some(_), Some(_)) => Err(LineError::TextAndButton),
        (None, None) => Err(LineError::NoContent),
        (Some(text), None) => {
            let mut m = Message::text(id, chat, text);
            m.sender = sender;
            m.sender_name = name;
            m.is_group = group;
            m.mentions_bot = f.bool("mentions")?.unwrap_or(false);
            m.timestamp_ms = now;
            m.reply_to = f.id("reply_to")?.map(MessageId);
            m.lang_hint = f.string("lang", MAX_SHORT_BYTES)?;
            Ok(ProviderEvent::Message(m))
        }
        (None, Some(button)) => Ok(ProviderEvent::Interaction(Interaction {
            id,
            chat,
            sender,
            sender_name: name,
            data: button,
            title: f.string("title", MAX_SHORT_BYTES)?,
            message_id: f.id("message_id")?.map(MessageId),
            is_group: group,
            timestamp_ms: now,
            respond_by_ms: None,
            from_text: false,
        })),
    }
}

/// The id an event was given on its input line.
fn event_id(event: &ProviderEvent) -> String {
    match event {
        ProviderEvent::Message(m) => m.id.0.clone(),
        ProviderEvent::Interaction(i) => i.id.clone(),
        _ => String::new(),
    }
}

/// A message the provider delivered, waiting for its key.
#[derive(Debug, Clone)]
struct SendRecord {
    chat: ChatId,
    message_id: MessageId,
    outgoing: Outgoing,
}

/// One output line.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutLine<'a> {
    Ack {
        id: &'a str,
        /// The line was seen before (a redelivery): not handled again.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        duplicate: bool,
    },
    Nack {
        id: &'a str,
        error: String,
    },
    Error {
        line: u64,
        error: String,
    },
    Send {
        chat: &'a ChatId,
        text: &'a str,
        key: Option<&'a str>,
        message_id: &'a MessageId,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        buttons: &'a [Button],
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<&'a OutgoingContent>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reply_to: Option<&'a MessageId>,
    },
    Edit {
        chat: &'a ChatId,
        message_id: &'a MessageId,
        text: &'a str,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        buttons: &'a [Button],
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<&'a OutgoingContent>,
    },
    Typing {
        chat: &'a ChatId,
    },
    Event {
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        chat: Option<&'a ChatId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        context: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<serde_json::Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<&'a serde_json::Value>,
    },
}

/// The buttons of text content, and the whole content when it is not plain text.
fn split_content(content: &OutgoingContent) -> (&[Button], Option<&OutgoingContent>) {
    match content {
        OutgoingContent::Text { buttons, .. } => (buttons, None),
        other => (&[], Some(other)),
    }
}

/// A bot on JSON lines: stdin in, stdout out (or any reader and writer).
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::JsonlProvider;
/// # async fn demo() -> Result<(), BotError> {
/// let provider = JsonlProvider::new();
/// let bot = Bot::builder(provider.clone()).build()?;
/// provider.attach(&bot); // `send` lines carry their idempotency keys
/// bot.run().await?;
/// if let Err(e) = provider.output().flush().await {
///     eprintln!("stdout failed: {e}");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct JsonlProvider {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for JsonlProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlProvider")
            .field("attached", &self.shared.attached.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

struct Shared {
    input: Arc<tokio::sync::Mutex<LineSource>>,
    out: LineOutput,
    /// The chat whose line is being delivered, and its output held back until the ack.
    ack_order: Mutex<AckOrder>,
    line_no: AtomicU64,
    sent_ids: AtomicU64,
    run_tag: String,
    attached: AtomicBool,
    /// Signalled whenever held-back output is released.
    released: tokio::sync::Notify,
    reader: TaskSlot,
}

/// Output of the chat being delivered, held back until its ack is printed.
#[derive(Default)]
struct AckOrder {
    delivering: Option<ChatId>,
    held: Vec<String>,
}

fn encode(line: &OutLine<'_>) -> Option<String> {
    serde_json::to_string(line)
        .map_err(|e| tracing::error!(error = %e, "jsonl: cannot encode an output line"))
        .ok()
}

impl Shared {
    fn print(&self, line: &OutLine<'_>) {
        if let Some(s) = encode(line) {
            self.out.line(s);
        }
    }

    fn ack_order(&self) -> std::sync::MutexGuard<'_, AckOrder> {
        self.ack_order.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prints a line about `chat`, after the ack of a line of `chat` being delivered.
    fn print_for_chat(&self, chat: &ChatId, line: &OutLine<'_>) {
        let Some(s) = encode(line) else { return };
        let mut order = self.ack_order();
        if order.delivering.as_ref() == Some(chat) {
            order.held.push(s);
        } else {
            self.out.line(s);
        }
    }

    /// A line of `chat` is about to be delivered.
    fn delivering(&self, chat: &ChatId) {
        self.ack_order().delivering = Some(chat.clone());
    }

    /// Prints the ack (or nack) of the line delivered, then what was held back for it.
    fn delivered(&self, ack: &OutLine<'_>) {
        let mut order = self.ack_order();
        if let Some(s) = encode(ack) {
            self.out.line(s);
        }
        for s in std::mem::take(&mut order.held) {
            self.out.line(s);
        }
        order.delivering = None;
        drop(order);
        self.released.notify_waiters();
    }

    /// Waits until output of `chat` is no longer held back.
    async fn wait_released(&self, chat: &ChatId) {
        loop {
            let notified = self.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.ack_order().delivering.as_ref() != Some(chat) {
                return;
            }
            notified.await;
        }
    }

    fn print_send(&self, record: &SendRecord, key: Option<&str>) {
        let (buttons, content) = split_content(&record.outgoing.content);
        self.print_for_chat(
            &record.chat,
            &OutLine::Send {
                chat: &record.chat,
                text: record.outgoing.content.text(),
                key,
                message_id: &record.message_id,
                buttons,
                content,
                reply_to: record.outgoing.reply_to.as_ref(),
            },
        );
    }

    fn on_event(&self, event: &BotEvent) {
        match event {
            BotEvent::Error {
                context,
                chat,
                error,
            } => self.print(&OutLine::Event {
                name: "error".into(),
                chat: chat.as_ref(),
                context: Some(context),
                error: Some(error),
                reason: None,
                detail: None,
            }),
            BotEvent::Dropped { chat, reason } => self.print(&OutLine::Event {
                name: "dropped".into(),
                chat: Some(chat),
                context: None,
                error: None,
                reason: serde_json::to_value(reason).ok(),
                detail: None,
            }),
            BotEvent::Durability(event) => {
                let detail = serde_json::to_value(event).ok();
                let chat = event.chat().map(|c| ChatId(c.to_owned()));
                self.print(&OutLine::Event {
                    name: format!("durability:{}", event.name()),
                    chat: chat.as_ref(),
                    context: None,
                    error: None,
                    reason: None,
                    detail: detail.as_ref(),
                })
            }
            _ => {}
        }
    }
}

impl Default for JsonlProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonlProvider {
    /// JSON lines on the process's stdin and stdout.
    pub fn new() -> Self {
        Self::from_parts(LineSource::stdin(), LineOutput::new(tokio::io::stdout()))
    }

    /// The same as [`new`](Self::new): the process's stdin and stdout.
    pub fn stdio() -> Self {
        Self::new()
    }

    /// JSON lines read from `reader` and written to `writer`.
    pub fn with_io(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
    ) -> Self {
        Self::from_parts(LineSource::reader(reader), LineOutput::new(writer))
    }

    fn from_parts(input: LineSource, out: LineOutput) -> Self {
        let run_tag = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| format!("{:x}", d.as_millis()))
            .unwrap_or_else(|_| "0".to_owned());
        Self {
            shared: Arc::new(Shared {
                input: Arc::new(tokio::sync::Mutex::new(input)),
                out,
                ack_order: Mutex::new(AckOrder::default()),
                line_no: AtomicU64::new(0),
                sent_ids: AtomicU64::new(0),
                run_tag,
                attached: AtomicBool::new(false),
                released: tokio::sync::Notify::new(),
                reader: TaskSlot::default(),
            }),
        }
    }

    /// Listens to `bot`'s events: errors, drops and durability events print as `event` lines.
    /// Call it once, before the bot starts.
    pub fn attach(&self, bot: &Bot) -> &Self {
        if !self.shared.attached.swap(true, Ordering::SeqCst) {
            let shared = self.shared.clone();
            bot.on_event(move |event| shared.on_event(event));
        }
        self
    }

    /// The output (stdout, or the writer given): waiting until it is written, its error.
    pub fn output(&self) -> &LineOutput {
        &self.shared.out
    }
}

/// Reads lines and delivers them until the input ends.
async fn read_loop(shared: Arc<Shared>, sink: EventSink) {
    let mut input = shared.input.clone().lock_owned().await;
    loop {
        // Nobody reads the answers any more: stop taking messages.
        let next = tokio::select! {
            next = input.next_line() => next,
            e = shared.out.closed() => {
                tracing::error!(error = %e, "jsonl: the output is closed: input ends");
                break;
            }
        };
        let n = shared.line_no.fetch_add(1, Ordering::SeqCst) + 1;
        let bytes = match next {
            Ok(Some(bytes)) => bytes,
            Ok(None) => break,
            Err(e) => {
                tracing::error!(error = %e, "jsonl: cannot read input");
                shared.print(&OutLine::Error {
                    line: n,
                    error: format!("cannot read input: {e}"),
                });
                break;
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let event = match parse_line(&bytes) {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(line = n, error = %e, "jsonl: refused a line");
                shared.print(&OutLine::Error {
                    line: n,
                    error: e.to_string(),
                });
                continue;
            }
        };
        let id = event_id(&event);
        shared.delivering(event.chat());
        match sink.deliver(event).await {
            Ok(accepted) => shared.delivered(&OutLine::Ack {
                id: &id,
                duplicate: accepted == Accepted::Duplicate,
            }),
            Err(e) => shared.delivered(&OutLine::Nack {
                id: &id,
                error: e.to_string(),
            }),
        }
    }
    sink.end_of_input();
}

#[async_trait]
impl Provider for JsonlProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::lines::CAPABILITIES
    }

    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        self.shared
            .reader
            .set(tokio::spawn(read_loop(self.shared.clone(), sink)));
        Ok(())
    }

    async fn stop(&self) -> Result<(), ProviderError> {
        self.shared.reader.abort();
        // A delivery cut short by the abort printed no ack: release what it held back.
        let held = {
            let mut order = self.shared.ack_order();
            order.delivering = None;
            std::mem::take(&mut order.held)
        };
        for line in held {
            self.shared.out.line(line);
        }
        // A failed output already failed the sends it lost; the run itself ended well.
        let _ = self.shared.out.flush().await;
        Ok(())
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let n = self.shared.sent_ids.fetch_add(1, Ordering::SeqCst) + 1;
        let record = SendRecord {
            chat: chat.clone(),
            message_id: MessageId(format!("{}.{n}", self.shared.run_tag)),
            outgoing: outgoing.clone(),
        };
        let key = botmesh::provider::current_send_key();
        self.shared.print_send(&record, key.as_deref());
        // Delivered means written: wait for a held-back line, then for the writer.
        self.shared.wait_released(chat).await;
        self.shared
            .out
            .flush_send(NAME, "the output", record.message_id)
            .await
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        let (buttons, content_field) = split_content(content);
        self.shared.print_for_chat(
            chat,
            &OutLine::Edit {
                chat,
                message_id,
                text: content.text(),
                buttons,
                content: content_field,
            },
        );
        Ok(())
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        self.shared.print_for_chat(chat, &OutLine::Typing { chat });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_messages_and_presses() {
        let message = parse_line(br#"{"id":"m1","chat":"alice","text":"order","lang":"pt"}"#);
        let Ok(ProviderEvent::Message(m)) = message else {
            panic!("not a message: {message:?}")
        };
        let (id, chat, sender) = (m.id.as_str(), m.chat.as_str(), m.sender.as_str());
        assert_eq!(
            (id, chat, sender, m.lang_hint.as_deref()),
            ("m1", "alice", "alice", Some("pt"))
        );
        let press = parse_line(br#"{"id":7,"chat":"g","user":"bob","button":"yes","group":true}"#);
        let Ok(ProviderEvent::Interaction(i)) = press else {
            panic!("not a press: {press:?}")
        };
        let (id, data, sender) = (i.id.as_str(), i.data.as_str(), i.sender.as_str());
        assert_eq!((id, data, sender, i.is_group), ("7", "yes", "bob", true));
    }

    #[test]
    fn refuses_bad_lines() {
        assert!(matches!(parse_line(b"{nope"), Err(LineError::NotJson(_))));
        assert_eq!(parse_line(b"[1]").err(), Some(LineError::NotObject));
        assert_eq!(
            parse_line(br#"{"chat":"a","text":"x"}"#).err(),
            Some(LineError::Missing("id"))
        );
        assert_eq!(
            parse_line(br#"{"id":"1","text":"x"}"#).err(),
            Some(LineError::Missing("chat"))
        );
        assert_eq!(
            parse_line(br#"{"id":"1","chat":"a"}"#).err(),
            Some(LineError::NoContent)
        );
        assert_eq!(
            parse_line(br#"{"id":"1","chat":"a","text":"x","button":"y"}"#).err(),
            Some(LineError::TextAndButton)
        );
        assert!(matches!(
            parse_line(br#"{"id":"","chat":"a","text":"x"}"#),
            Err(LineError::Invalid { field: "id", .. })
        ));
        assert!(matches!(
            parse_line(br#"{"id":"1","chat":"a","text":5}"#),
            Err(LineError::Invalid { .. })
        ));
        assert_eq!(parse_line(&[0xff, 0xfe]).err(), Some(LineError::NotUtf8));
    }

    #[test]
    fn output_lines_put_type_first() {
        let id = MessageId::from("t.1");
        let chat = ChatId::from("a");
        let line = OutLine::Send {
            chat: &chat,
            text: "hi",
            key: Some("a/1:1"),
            message_id: &id,
            buttons: &[],
            content: None,
            reply_to: None,
        };
        assert_eq!(
            serde_json::to_string(&line).ok().as_deref(),
            Some(r#"{"type":"send","chat":"a","text":"hi","key":"a/1:1","message_id":"t.1"}"#)
        );
        assert_eq!(
            serde_json::to_string(&OutLine::Ack {
                id: "m1",
                duplicate: false
            })
            .ok()
            .as_deref(),
            Some(r#"{"type":"ack","id":"m1"}"#)
        );
    }
}
