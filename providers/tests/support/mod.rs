//! Test support: a provider wrapper whose event sink holds deliveries at a gate (or refuses
//! them), and line readers for in-memory pipes.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::message::{ChatId, MessageId, Outgoing, OutgoingContent, SentMessage};
use botmesh::prelude::{Bot, BotError};
use botmesh::provider::{
    Accepted, Capabilities, EventSink, InboundPipeline, Provider, ProviderError, ProviderEvent,
    Rejected, TransportStatus,
};
use tokio::io::{AsyncBufReadExt, BufReader, DuplexStream, Lines};
use tokio::sync::{Notify, Semaphore};

/// Counts deliveries and holds each at a gate until a permit is added.
pub struct Gate {
    pub permits: Semaphore,
    pub calls: AtomicUsize,
    pub reject_next: AtomicBool,
    called: Notify,
}

impl Gate {
    pub fn closed() -> Arc<Self> {
        Arc::new(Self {
            permits: Semaphore::new(0),
            calls: AtomicUsize::new(0),
            reject_next: AtomicBool::new(false),
            called: Notify::new(),
        })
    }

    pub fn open() -> Arc<Self> {
        let gate = Self::closed();
        gate.permits.add_permits(Semaphore::MAX_PERMITS / 2);
        gate
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Waits until `n` deliveries reached the gate (or 5 s); returns how many did.
    pub async fn wait_calls(&self, n: usize) -> usize {
        let wait = async {
            loop {
                let called = self.called.notified();
                tokio::pin!(called);
                called.as_mut().enable();
                if self.calls() >= n {
                    return;
                }
                called.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), wait).await;
        self.calls()
    }
}

/// Runs `bot` (start, then until the input ends) in a task.
pub fn spawn_run(bot: &Bot) -> tokio::task::JoinHandle<Result<(), BotError>> {
    let bot = bot.clone();
    tokio::spawn(async move { bot.run().await })
}

/// Closes the bot's input and waits for its `run` to end; checks that the run ended well, not
/// before `drain` had passed since `started` (the drain waits for the handler in flight), and
/// left the bot stopped.
pub async fn end_input_and_drain(
    input: DuplexStream,
    run: tokio::task::JoinHandle<Result<(), BotError>>,
    bot: &Bot,
    started: tokio::time::Instant,
    drain: Duration,
) {
    drop(input);
    run.await.expect("run task").expect("run ok");
    assert!(
        started.elapsed() >= drain,
        "the drain waited for the handler"
    );
    assert_eq!(bot.run_state(), botmesh::RunState::Stopped);
}

struct GatedPipeline {
    inner: EventSink,
    gate: Arc<Gate>,
}

#[async_trait]
impl InboundPipeline for GatedPipeline {
    async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
        self.gate.calls.fetch_add(1, Ordering::SeqCst);
        self.gate.called.notify_waiters();
        let permit = self.gate.permits.acquire().await;
        if let Ok(p) = permit {
            p.forget();
        }
        if self.gate.reject_next.swap(false, Ordering::SeqCst) {
            return Err(Rejected::JournalUnavailable {
                id: "x".into(),
                reason: "disk on fire".into(),
            });
        }
        self.inner.deliver(event).await
    }
    fn transport_status(&self, status: TransportStatus) {
        self.inner.transport_status(status);
    }
    fn end_of_input(&self) {
        self.inner.end_of_input();
    }
}

/// Wraps a provider so that its deliveries pass the gate first.
pub struct Gated<P> {
    pub inner: P,
    pub gate: Arc<Gate>,
}

#[async_trait]
impl<P: Provider> Provider for Gated<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        let gated = EventSink::new(Arc::new(GatedPipeline {
            inner: sink,
            gate: self.gate.clone(),
        }));
        self.inner.start(gated).await
    }
    async fn stop(&self) -> Result<(), ProviderError> {
        self.inner.stop().await
    }
    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        self.inner.send(chat, outgoing).await
    }
    async fn edit(
        &self,
        chat: &ChatId,
        id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        self.inner.edit(chat, id, content).await
    }
    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        self.inner.typing(chat).await
    }
}

/// Reads the provider's output lines.
pub struct Output(pub Lines<BufReader<DuplexStream>>);

impl Output {
    pub fn new(stream: DuplexStream) -> Self {
        Self(BufReader::new(stream).lines())
    }

    /// The next line, or `None` if none comes within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<String> {
        match tokio::time::timeout(wait, self.0.next_line()).await {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => panic!("cannot read output: {e}"),
            Err(_) => None,
        }
    }

    /// The next line; fails the test after 5 s.
    pub async fn next(&mut self) -> String {
        self.next_within(Duration::from_secs(5))
            .await
            .expect("an output line within 5 s")
    }

    /// The next line as JSON.
    pub async fn next_json(&mut self) -> serde_json::Value {
        let line = self.next().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"))
    }

    /// Every line until none came for 300 ms.
    pub async fn rest(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        while let Some(line) = self.next_within(Duration::from_millis(300)).await {
            lines.push(line);
        }
        lines
    }
}
