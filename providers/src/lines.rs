//! Line-oriented I/O shared by the console and jsonl providers.
//!
//! [`LineSource`] reads one line at a time, only when asked: from any `AsyncRead` (tests use
//! `tokio::io::duplex`) or from the process's stdin. Stdin is read by a dedicated thread that
//! reads exactly one line per request, because tokio's own `stdin()` blocks runtime shutdown
//! until the user presses enter; the thread is detached and dies with the process.
//!
//! [`LineOutput`] (public: both providers hand theirs out with `output()`) writes whole lines
//! from one writer task fed by a channel, so lines from concurrent senders never interleave
//! and the callers never block on the terminal or the pipe. A write error (a closed stdout)
//! is logged once and kept: later lines are dropped, [`LineOutput::flush`] and
//! [`LineOutput::error`] report it, and [`LineOutput::closed`] wakes whoever waits for it.
//! This module knows nothing of messages or JSON.

use std::io::{self, BufRead};
use std::sync::Mutex;

use crate::task::TaskSlot;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

/// A boxed reader.
pub(crate) type BoxReader = Box<dyn AsyncRead + Send + Unpin>;
/// A boxed writer.
pub(crate) type BoxWriter = Box<dyn AsyncWrite + Send + Unpin>;

type LineReply = oneshot::Sender<io::Result<Option<Vec<u8>>>>;

/// Where input lines come from.
pub(crate) enum LineSource {
    /// Any async reader.
    Reader(BufReader<BoxReader>),
    /// The process's stdin, read by a dedicated thread (started on the first read).
    Stdin(Option<std::sync::mpsc::Sender<LineReply>>),
}

impl LineSource {
    /// Lines of an async reader.
    pub(crate) fn reader(reader: impl AsyncRead + Send + Unpin + 'static) -> Self {
        LineSource::Reader(BufReader::new(Box::new(reader)))
    }

    /// Lines of the process's stdin.
    pub(crate) fn stdin() -> Self {
        LineSource::Stdin(None)
    }

    /// The next line without its line ending, or `None` at the end of input.
    pub(crate) async fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        let line = match self {
            LineSource::Reader(reader) => {
                let mut buf = Vec::new();
                match reader.read_until(b'\n', &mut buf).await? {
                    0 => None,
                    _ => Some(buf),
                }
            }
            LineSource::Stdin(requests) => {
                let tx = match requests {
                    Some(tx) => tx.clone(),
                    None => {
                        let tx = spawn_stdin_thread()?;
                        *requests = Some(tx.clone());
                        tx
                    }
                };
                let (reply, answer) = oneshot::channel();
                // The thread ends after the end of input (or an error): input is over then.
                if tx.send(reply).is_err() {
                    return Ok(None);
                }
                match answer.await {
                    Ok(line) => line?,
                    Err(_) => None,
                }
            }
        };
        Ok(line.map(trim_line_ending))
    }
}

/// Starts the thread that reads one stdin line per request.
fn spawn_stdin_thread() -> io::Result<std::sync::mpsc::Sender<LineReply>> {
    let (tx, rx) = std::sync::mpsc::channel::<LineReply>();
    std::thread::Builder::new()
        .name("botmesh-stdin".to_owned())
        .spawn(move || {
            let stdin = io::stdin();
            let mut lock = stdin.lock();
            while let Ok(reply) = rx.recv() {
                let mut buf = Vec::new();
                let result = match lock.read_until(b'\n', &mut buf) {
                    Ok(0) => Ok(None),
                    Ok(_) => Ok(Some(buf)),
                    Err(e) => Err(e),
                };
                let done = !matches!(result, Ok(Some(_)));
                // The asking task may be gone (the provider stopped): the line is dropped then.
                let _ = reply.send(result);
                if done {
                    break;
                }
            }
        })?;
    Ok(tx)
}

fn trim_line_ending(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    line
}

enum Command {
    Line(String),
    Flush(oneshot::Sender<()>),
}

/// Why the output failed (the writer's error, as text), once it did.
type Failure = watch::Sender<Option<String>>;

/// What the console and jsonl providers can do: texts of 4096 characters, edits and typing
/// (printed), nothing to acknowledge, no read marks.
pub(crate) const CAPABILITIES: botmesh::provider::Capabilities = botmesh::provider::Capabilities {
    text_limit: 4096,
    buttons_text_limit: None,
    interactions_require_ack: false,
    edits: true,
    typing: true,
    mark_read: false,
    resends_deduplicated: false,
};

/// The output of the console and jsonl providers (`ConsoleProvider::output`,
/// `JsonlProvider::output`): whole lines, written in the order given by one task. Once a
/// write fails (a closed stdout), later lines are dropped and the sends fail.
pub struct LineOutput {
    tx: mpsc::UnboundedSender<Command>,
    idle: Mutex<Option<(mpsc::UnboundedReceiver<Command>, BoxWriter)>>,
    task: TaskSlot,
    failure: Failure,
}

impl LineOutput {
    /// A sink writing to `writer`; its task starts with the first line written inside a
    /// tokio runtime (lines written before wait in the channel).
    pub(crate) fn new(writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            idle: Mutex::new(Some((rx, Box::new(writer)))),
            task: TaskSlot::default(),
            failure: watch::channel(None).0,
        }
    }

    fn ensure_started(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.is_none() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if let Some((rx, writer)) = idle.take() {
            let task = handle.spawn(write_lines(rx, writer, self.failure.clone()));
            self.task.set(task);
        }
    }

    /// Queues one line (without its `\n`).
    pub(crate) fn line(&self, line: String) {
        self.ensure_started();
        // The writer task lives as long as the sink, unless the runtime is gone.
        let _ = self.tx.send(Command::Line(line));
    }

    /// Waits until every line queued so far is written and flushed; `Err` (the writer's
    /// error) when the output failed, now or before: those lines were not written.
    pub async fn flush(&self) -> Result<(), String> {
        self.ensure_started();
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::Flush(done)).is_ok() {
            let _ = wait.await;
        }
        match self.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// [`flush`](Self::flush) for the send of the message `id`: delivered means written, so
    /// the send is done once its lines are, and a failed output fails it as a network error of
    /// `provider` (the outbox keeps it), naming `output`.
    pub(crate) async fn flush_send(
        &self,
        provider: &str,
        output: &str,
        id: botmesh::message::MessageId,
    ) -> Result<botmesh::message::SentMessage, botmesh::provider::ProviderError> {
        match self.flush().await {
            Ok(()) => Ok(botmesh::message::SentMessage {
                message_id: Some(id),
            }),
            Err(e) => Err(botmesh::provider::ProviderError::Network {
                provider: provider.to_owned(),
                message: format!("cannot write to {output}: {e}"),
            }),
        }
    }

    /// Why the output failed (the writer's error), once it did: the sends made since then
    /// failed.
    pub fn error(&self) -> Option<String> {
        self.failure.borrow().clone()
    }

    /// Waits until the output fails; returns the error.
    pub async fn closed(&self) -> String {
        let mut rx = self.failure.subscribe();
        let failure = match rx.wait_for(Option::is_some).await {
            Ok(e) => e.clone(),
            Err(_) => None,
        };
        match failure {
            Some(e) => e,
            None => std::future::pending().await,
        }
    }
}

impl std::fmt::Debug for LineOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineOutput")
            .field("error", &self.error())
            .finish_non_exhaustive()
    }
}

impl Drop for LineOutput {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn write_lines(
    mut rx: mpsc::UnboundedReceiver<Command>,
    mut writer: BoxWriter,
    failure: Failure,
) {
    let mut failed = false;
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Command::Line(mut line) => {
                if failed {
                    continue;
                }
                line.push('\n');
                let mut result = writer.write_all(line.as_bytes()).await;
                if result.is_ok() && rx.is_empty() {
                    result = writer.flush().await;
                }
                if let Err(e) = result {
                    tracing::error!(error = %e, "cannot write output: dropping further lines");
                    failed = true;
                    failure.send_replace(Some(e.to_string()));
                }
            }
            Command::Flush(done) => {
                if !failed && let Err(e) = writer.flush().await {
                    tracing::error!(error = %e, "cannot flush output: dropping further lines");
                    failed = true;
                    failure.send_replace(Some(e.to_string()));
                }
                let _ = done.send(());
            }
        }
    }
}
