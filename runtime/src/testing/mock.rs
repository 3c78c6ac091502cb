//! [`MockProvider`]: records sends, edits, typing, read marks and interaction acks; injects
//! messages, interactions and provider events; fails sends on demand (rate limits with a
//! `retry_after` included); reports any transport status.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::message::{
    ChatId, Interaction, Message, MessageId, Outgoing, OutgoingContent, SentMessage, UserId,
};
use crate::provider::{
    Accepted, Capabilities, EventSink, Provider, ProviderError, ProviderEvent, Rejected,
    TransportStatus,
};

/// One message the mock "delivered".
#[derive(Debug, Clone, PartialEq)]
pub struct SentRecord {
    /// The chat.
    pub chat: ChatId,
    /// What was sent (never carries an idempotency key).
    pub outgoing: Outgoing,
    /// The id the mock gave it.
    pub message_id: MessageId,
}

impl SentRecord {
    /// The text of what was sent.
    pub fn text(&self) -> &str {
        self.outgoing.content.text()
    }
}

#[derive(Default)]
struct State {
    sink: Option<EventSink>,
    sent: Vec<SentRecord>,
    edits: Vec<(ChatId, MessageId, OutgoingContent)>,
    typing: Vec<ChatId>,
    reads: Vec<(ChatId, MessageId)>,
    acks: Vec<(String, Option<String>)>,
    failures: VecDeque<ProviderError>,
    start_error: Option<ProviderError>,
    started: u32,
    stopped: u32,
    keys_seen: Vec<String>,
}

struct Inner {
    name: String,
    caps: Capabilities,
    state: Mutex<State>,
    ids: AtomicU64,
    changed: Notify,
    send_delay: Mutex<Option<Duration>>,
    status: Mutex<TransportStatus>,
    on_send: Mutex<Option<SendObserver>>,
}

/// What [`MockProvider::on_send`] calls for each send it accepts.
type SendObserver = Arc<dyn Fn(&SentRecord) + Send + Sync>;

/// A provider for tests. Clones share state: keep one clone, give one to the bot.
#[derive(Clone)]
pub struct MockProvider(Arc<Inner>);

impl Default for MockProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MockProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockProvider")
            .field("name", &self.0.name)
            .finish_non_exhaustive()
    }
}

impl MockProvider {
    /// A mock named `mock` with default capabilities (4096-character texts, edits, typing).
    pub fn new() -> Self {
        Self::with_capabilities(Capabilities::default())
    }

    /// A mock with the given capabilities.
    pub fn with_capabilities(caps: Capabilities) -> Self {
        Self(Arc::new(Inner {
            name: "mock".to_owned(),
            caps,
            state: Mutex::new(State::default()),
            ids: AtomicU64::new(0),
            changed: Notify::new(),
            send_delay: Mutex::new(None),
            status: Mutex::new(TransportStatus::Ready),
            on_send: Mutex::new(None),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next `start()` fails with `err`.
    pub fn fail_start(&self, err: ProviderError) {
        self.state().start_error = Some(err);
    }

    /// The next send fails with `err` (queue several for several sends).
    pub fn fail_next_send(&self, err: ProviderError) {
        self.state().failures.push_back(err);
    }

    /// The next send is refused with a rate limit asking to wait `retry_after`.
    pub fn rate_limit_next_send(&self, retry_after: Option<Duration>) {
        self.fail_next_send(ProviderError::RateLimited {
            provider: "mock".to_owned(),
            retry_after,
        });
    }

    /// Every send takes this long (to test concurrency and drains).
    pub fn set_send_delay(&self, delay: Option<Duration>) {
        *self.0.send_delay.lock().unwrap_or_else(|e| e.into_inner()) = delay;
    }

    /// Calls `observer` with each send the mock accepts, as it accepts it: the moment the
    /// chat's user would see the message, before the bot's own bookkeeping of the send (its
    /// journal's "sent", its ledger row, its `after` send hooks). Replaces an earlier
    /// observer. The observer runs inside the provider call (after the send is listed in
    /// [`sent`](Self::sent)): keep it short.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use botmesh::testing::MockProvider;
    ///
    /// let mock = MockProvider::new();
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let counter = seen.clone();
    /// mock.on_send(move |sent| {
    ///     assert!(!sent.text().is_empty());
    ///     counter.fetch_add(1, Ordering::SeqCst);
    /// });
    /// ```
    pub fn on_send(&self, observer: impl Fn(&SentRecord) + Send + Sync + 'static) {
        *self.0.on_send.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(observer));
    }

    /// Reports a transport status to the bot (and answers it from now on).
    pub fn set_status(&self, status: TransportStatus) {
        *self.0.status.lock().unwrap_or_else(|e| e.into_inner()) = status;
        if let Some(sink) = self.state().sink.clone() {
            sink.transport_status(status);
        }
    }

    /// Delivers an event as the channel would; `Err` when the bot does not accept it.
    pub async fn deliver(&self, event: ProviderEvent) -> Result<Accepted, Rejected> {
        let sink = self.state().sink.clone();
        match sink {
            Some(s) => s.deliver(event).await,
            None => Err(Rejected::NotRunning),
        }
    }

    /// Delivers a text message from user `chat` in chat `chat`.
    pub async fn say(&self, chat: &str, id: &str, text: &str) -> Result<Accepted, Rejected> {
        self.deliver(ProviderEvent::Message(Message::text(id, chat, text)))
            .await
    }

    /// Delivers a button press of `data` in `chat`.
    pub async fn press(&self, chat: &str, id: &str, data: &str) -> Result<Accepted, Rejected> {
        self.deliver(ProviderEvent::Interaction(Interaction {
            id: id.to_owned(),
            chat: ChatId::from(chat),
            sender: UserId::from(chat),
            sender_name: None,
            data: data.to_owned(),
            title: None,
            message_id: None,
            is_group: false,
            timestamp_ms: crate::clock::now_ms(),
            respond_by_ms: None,
            from_text: false,
        }))
        .await
    }

    /// Signals the end of input (as the jsonl provider does at end of stdin).
    pub fn end_input(&self) {
        if let Some(s) = self.state().sink.clone() {
            s.end_of_input();
        }
    }

    /// Everything sent so far, in order.
    pub fn sent(&self) -> Vec<SentRecord> {
        self.state().sent.clone()
    }

    /// The texts sent to a chat, in order.
    pub fn texts(&self, chat: &str) -> Vec<String> {
        self.state()
            .sent
            .iter()
            .filter(|s| s.chat.as_str() == chat)
            .map(|s| s.text().to_owned())
            .collect()
    }

    /// The edits made, in order.
    pub fn edits(&self) -> Vec<(ChatId, MessageId, OutgoingContent)> {
        self.state().edits.clone()
    }

    /// The chats typing indicators were shown in, in order.
    pub fn typing(&self) -> Vec<ChatId> {
        self.state().typing.clone()
    }

    /// The read marks made.
    pub fn reads(&self) -> Vec<(ChatId, MessageId)> {
        self.state().reads.clone()
    }

    /// The interaction acks made: (interaction id, notice).
    pub fn acks(&self) -> Vec<(String, Option<String>)> {
        self.state().acks.clone()
    }

    /// How often `start()` and `stop()` were called.
    pub fn start_stop_counts(&self) -> (u32, u32) {
        let s = self.state();
        (s.started, s.stopped)
    }

    /// Idempotency keys that reached the provider (must stay empty).
    pub fn keys_seen(&self) -> Vec<String> {
        self.state().keys_seen.clone()
    }

    /// Waits until at least `n` messages were sent, or `timeout` passed; returns the count.
    pub async fn wait_for_sends(&self, n: usize, timeout: Duration) -> usize {
        self.wait_until(timeout, |sent| sent.len() >= n).await;
        self.state().sent.len()
    }

    /// Waits until `done` holds of everything sent so far (looked at again after each send or
    /// edit), or `timeout` passed on tokio's clock; whether it held.
    ///
    /// ```
    /// # async fn wait(mock: botmesh::testing::MockProvider) {
    /// use std::time::Duration;
    /// let greeted = mock
    ///     .wait_until(Duration::from_secs(5), |sent| {
    ///         sent.iter().any(|s| s.chat.as_str() == "a" && s.text() == "Hello")
    ///     })
    ///     .await;
    /// assert!(greeted, "{:?}", mock.texts("a"));
    /// # }
    /// ```
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[SentRecord]) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.0.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(&self.sent()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(&self.sent());
            }
        }
    }
}

#[async_trait]
impl Provider for MockProvider {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn capabilities(&self) -> Capabilities {
        self.0.caps.clone()
    }

    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        let mut s = self.state();
        s.started += 1;
        if let Some(e) = s.start_error.take() {
            return Err(e);
        }
        sink.transport_status(*self.0.status.lock().unwrap_or_else(|e| e.into_inner()));
        s.sink = Some(sink);
        Ok(())
    }

    async fn stop(&self) -> Result<(), ProviderError> {
        let mut s = self.state();
        s.stopped += 1;
        s.sink = None;
        Ok(())
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let delay = *self.0.send_delay.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let mut s = self.state();
        if let Some(k) = &outgoing.idempotency_key {
            s.keys_seen.push(k.clone());
        }
        if let Some(err) = s.failures.pop_front() {
            return Err(err);
        }
        let id = MessageId(format!(
            "out-{}",
            self.0.ids.fetch_add(1, Ordering::SeqCst) + 1
        ));
        let record = SentRecord {
            chat: chat.clone(),
            outgoing: outgoing.clone(),
            message_id: id.clone(),
        };
        // The observer runs after the state's lock is released (it may read the mock).
        let observed = self
            .0
            .on_send
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .map(|observe| (observe, record.clone()));
        s.sent.push(record);
        drop(s);
        if let Some((observe, record)) = observed {
            observe(&record);
        }
        self.0.changed.notify_waiters();
        Ok(SentMessage {
            message_id: Some(id),
        })
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        if !self.0.caps.edits {
            return Err(ProviderError::Unsupported {
                provider: "mock".into(),
                operation: "edit",
            });
        }
        self.state()
            .edits
            .push((chat.clone(), message_id.clone(), content.clone()));
        self.0.changed.notify_waiters();
        Ok(())
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        self.state().typing.push(chat.clone());
        Ok(())
    }

    async fn mark_read(&self, chat: &ChatId, message_id: &MessageId) -> Result<(), ProviderError> {
        self.state().reads.push((chat.clone(), message_id.clone()));
        Ok(())
    }

    async fn ack_interaction(
        &self,
        interaction: &Interaction,
        notice: Option<&str>,
    ) -> Result<(), ProviderError> {
        self.state()
            .acks
            .push((interaction.id.clone(), notice.map(str::to_owned)));
        Ok(())
    }
}
