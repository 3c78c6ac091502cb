//! [`Transcript`]: drives a bot with scripted users and renders what happened as readable
//! lines for `insta::assert_snapshot!`.
//!
//! The harness owns the store, a [`ManualClock`] and a [`MockProvider`]; a setup closure turns
//! a builder (already given the provider, store and clock) into a bot with its flows. Lines:
//!
//! | line | meaning |
//! | --- | --- |
//! | `alice: order` | alice wrote "order" |
//! | `alice [press]: yes` | alice pressed the button `yes` |
//! | `bot → alice [key=…]: text` | a send, with its idempotency key |
//! | `· checkpoint order@ask-f8cb7f30 step 1 (hash …)` | a flow checkpoint was written (the flow, the state it waits in) |
//! | `· flow order ended:done` | a flow event (started, called, ended, version mismatch) |
//! | `· clock +30s` / `· restart` | the harness moved the clock / rebuilt the bot on the same store |
//! | `· crash at after outbox.journal` | the process died at a journal write (a durable transcript) |
//!
//! It waits for the bot to be idle after every action, so lines are in causal order.
//!
//! A durable transcript (`Transcript::durable`, feature `testing`) also keeps the bot's
//! journals across restarts and can kill the process at a journal write
//! (`Transcript::crash_at`): in the middle of a flow's step, between its sends and its commit
//! (`crash_at(WritePoint::OutboxJournal, WritePhase::After, 1)` on a step with one send), the
//! channel dies with the process; after [`Transcript::restart`] the message is redelivered and
//! the transcript shows each reply once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_durability::store::FlowCheckpoint;
use botmesh_durability::{MemoryStore, Store, StoreError};

use crate::bot::{Bot, BotBuilder};
use crate::clock::ManualClock;
use crate::error::BotError;
use crate::events::BotEvent;
use crate::message::OutgoingContent;
use crate::testing::MockProvider;

type Setup = Box<dyn Fn(BotBuilder) -> Result<Bot, BotError> + Send + Sync>;

/// The journals of a durable transcript: kept across restarts, behind the crash switch of the
/// current process.
#[cfg(feature = "testing")]
#[derive(Clone)]
struct Journals {
    kv: Arc<botmesh_durability::MemoryKv>,
    switch: botmesh_durability::testing::crash::Crashable<botmesh_durability::MemoryKv>,
}

/// Without the `testing` feature, a transcript has no journals.
#[cfg(not(feature = "testing"))]
type Journals = std::convert::Infallible;

/// A scripted conversation with a bot; see the module docs.
pub struct Transcript {
    setup: Setup,
    store: Arc<dyn Store>,
    clock: ManualClock,
    provider: MockProvider,
    bot: Bot,
    lines: Arc<Mutex<Vec<String>>>,
    next_id: u64,
    journals: Option<Journals>,
}

impl std::fmt::Debug for Transcript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcript")
            .field("lines", &self.lines().len())
            .finish_non_exhaustive()
    }
}

fn push(lines: &Mutex<Vec<String>>, line: String) {
    lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
}

impl Transcript {
    /// A transcript on a fresh [`MemoryStore`]; `setup` builds the bot and registers its flows.
    pub async fn new(
        setup: impl Fn(BotBuilder) -> Result<Bot, BotError> + Send + Sync + 'static,
    ) -> Result<Self, BotError> {
        Self::with_store(Arc::new(MemoryStore::new()), setup).await
    }

    /// A transcript of a bot built with the defaults on a fresh [`MemoryStore`]; `register`
    /// adds its flows and hooks: `Transcript::of(|bot| { bot.flow(order); })`.
    pub async fn of(register: impl Fn(&Bot) + Send + Sync + 'static) -> Result<Self, BotError> {
        Self::new(move |b| {
            let bot = b.build()?;
            register(&bot);
            Ok(bot)
        })
        .await
    }

    /// A transcript on a given store.
    pub async fn with_store(
        store: Arc<dyn Store>,
        setup: impl Fn(BotBuilder) -> Result<Bot, BotError> + Send + Sync + 'static,
    ) -> Result<Self, BotError> {
        Self::start(Box::new(setup), store, None).await
    }

    /// A transcript whose bots run durable journals (on a `MemoryKv` kept across restarts),
    /// so that [`crash_at`](Self::crash_at) can kill the process at a journal write.
    #[cfg(feature = "testing")]
    pub async fn durable(
        setup: impl Fn(BotBuilder) -> Result<Bot, BotError> + Send + Sync + 'static,
    ) -> Result<Self, BotError> {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let kv = Arc::new(botmesh_durability::MemoryKv::new());
        let journals = Journals {
            switch: botmesh_durability::testing::crash::crashable(kv.clone()),
            kv,
        };
        Self::start(Box::new(setup), store, Some(journals)).await
    }

    /// Builds the first bot of a transcript on `store` (with `journals`, a durable one), its
    /// clock at a fixed start.
    async fn start(
        setup: Setup,
        store: Arc<dyn Store>,
        journals: Option<Journals>,
    ) -> Result<Self, BotError> {
        let clock = ManualClock::new(1_700_000_000_000);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (bot, provider) =
            Self::build(&setup, &store, &clock, &lines, journals.as_ref()).await?;
        Ok(Self {
            setup,
            store,
            clock,
            provider,
            bot,
            lines,
            next_id: 0,
            journals,
        })
    }

    /// Kills the process at the `occurrence`-th (from 1) journal write at `point` (before or
    /// after it lands) from now on: from there, nothing the bot does reaches the journals,
    /// the store's checkpoints or the channel, until [`restart`](Self::restart). Needs a
    /// [`durable`](Self::durable) transcript; a no-op otherwise.
    #[cfg(feature = "testing")]
    pub fn crash_at(
        &self,
        point: botmesh_durability::kv::WritePoint,
        phase: botmesh_durability::kv::WritePhase,
        occurrence: u32,
    ) {
        if let Some(j) = &self.journals {
            j.switch.crash_at(point, phase, occurrence);
        }
    }

    /// Whether the process died at an armed crash point (a line says where).
    fn crashed(&self) -> bool {
        #[cfg(feature = "testing")]
        if let Some(j) = &self.journals {
            if let Some(site) = j.switch.crashed() {
                let line = format!("· crash at {site}");
                if !self.lines().contains(&line) {
                    push(&self.lines, line);
                }
                return true;
            }
        }
        false
    }

    async fn build(
        setup: &Setup,
        store: &Arc<dyn Store>,
        clock: &ManualClock,
        lines: &Arc<Mutex<Vec<String>>>,
        journals: Option<&Journals>,
    ) -> Result<(Bot, MockProvider), BotError> {
        let provider = MockProvider::new();
        let builder = match journals {
            #[cfg(feature = "testing")]
            Some(j) => {
                let switch = j.switch.clone();
                Bot::builder(crate::testing::CrashableProvider::new(
                    provider.clone(),
                    &j.switch,
                ))
                .store_arc(store.clone())
                .durability(
                    crate::durable::DurabilityOptions::shared(Arc::new(switch))
                        .instance_id("transcript"),
                )
            }
            _ => Bot::builder(provider.clone()).store_arc(store.clone()),
        }
        .clock(clock.clone());
        let bot = setup(builder)?;
        let l = lines.clone();
        bot.after_send(move |info| {
            let l = l.clone();
            async move {
                if info.edit {
                    return;
                }
                let mut line = format!(
                    "bot → {} [key={}]: {}",
                    info.chat,
                    info.key.as_deref().unwrap_or("-"),
                    info.outgoing.content.text()
                );
                if let OutgoingContent::Text { buttons, .. } = &info.outgoing.content {
                    if !buttons.is_empty() {
                        let b: Vec<&str> = buttons.iter().map(|b| b.id.as_str()).collect();
                        line.push_str(&format!(" [buttons: {}]", b.join(" | ")));
                    }
                }
                push(&l, line);
            }
        });
        let l = lines.clone();
        let b = bot.clone();
        bot.on_event(move |e| match e {
            BotEvent::Flow { flow, what, .. } => {
                if let Some(rest) = what.strip_prefix("checkpoint:") {
                    let (top, step) = rest.rsplit_once(':').unwrap_or((rest, "?"));
                    let hash = top
                        .split('@')
                        .next()
                        .and_then(|f| b.flow_info(f))
                        .map(|i| format!("{:08x}", i.layout_hash >> 32))
                        .unwrap_or_default();
                    push(&l, format!("· checkpoint {top} step {step} (hash {hash})"));
                } else if what != "suspended" && what != "resumed" && what != "returned" {
                    push(&l, format!("· flow {flow} {what}"));
                }
            }
            BotEvent::Error { context, error, .. } => {
                push(&l, format!("· error {context}: {error}"))
            }
            _ => {}
        });
        bot.start().await?;
        Ok((bot, provider))
    }

    /// The bot under test.
    pub fn bot(&self) -> &Bot {
        &self.bot
    }

    /// The mock channel.
    pub fn provider(&self) -> &MockProvider {
        &self.provider
    }

    /// The shared store.
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// The clock.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// `chat` writes `text`; returns once the bot is idle.
    pub async fn says(&mut self, chat: &str, text: &str) {
        self.says_nowait(chat, text).await;
        self.bot.idle().await;
        self.crashed();
    }

    /// `chat` writes each of `texts` in turn, the bot idle after each.
    pub async fn says_all(&mut self, chat: &str, texts: &[&str]) {
        for text in texts {
            self.says(chat, text).await;
        }
    }

    /// `chat` writes `text` as the channel message `id` (a redelivery after a crash reuses
    /// the id); returns once the bot is idle.
    pub async fn says_id(&mut self, chat: &str, id: &str, text: &str) {
        self.deliver(chat, id, text).await;
        self.bot.idle().await;
        self.crashed();
    }

    /// `chat` writes `text` without waiting for the bot; returns the message id.
    pub async fn says_nowait(&mut self, chat: &str, text: &str) -> String {
        let id = self.next_message_id("m");
        self.deliver(chat, &id, text).await;
        id
    }

    /// `chat` presses the button `data`; returns once the bot is idle.
    pub async fn press(&mut self, chat: &str, data: &str) {
        let id = self.next_message_id("p");
        push(&self.lines, format!("{chat} [press]: {data}"));
        if let Err(e) = self.provider.press(chat, &id, data).await {
            push(&self.lines, format!("· rejected: {e:?}"));
        }
        self.bot.idle().await;
    }

    /// The checkpoint the store holds for `chat`'s flow, if one waits.
    pub async fn checkpoint(&self, chat: &str) -> Result<Option<FlowCheckpoint>, StoreError> {
        self.store.checkpoint(chat).await
    }

    fn next_message_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{}", self.next_id)
    }

    async fn deliver(&self, chat: &str, id: &str, text: &str) {
        push(&self.lines, format!("{chat}: {text}"));
        if let Err(e) = self.provider.say(chat, id, text).await {
            push(&self.lines, format!("· rejected: {e:?}"));
        }
    }

    /// Moves the clock and fires the idle timeouts that became due.
    pub async fn advance(&mut self, by: Duration) {
        self.clock.advance(by);
        push(
            &self.lines,
            format!("· clock +{}", humantime::format_duration(by)),
        );
        if let Err(e) = self.bot.fire_flow_timeouts().await {
            push(&self.lines, format!("· timeouts not fired: {e}"));
        }
        self.bot.idle().await;
    }

    /// Adds a note line.
    pub fn note(&self, text: &str) {
        push(&self.lines, format!("· {text}"));
    }

    /// Stops and drops the bot, then builds and starts a new one on the same store (flows
    /// continue from their checkpoints). After a crash, the new process runs on the journals
    /// the crash left (it recovers what the dead one had in hand).
    pub async fn restart(&mut self) -> Result<(), BotError> {
        let crashed = self.crashed();
        let stopped = self.bot.stop().await;
        if !crashed {
            stopped?;
        }
        push(&self.lines, "· restart".to_owned());
        #[cfg(feature = "testing")]
        if let Some(j) = &mut self.journals {
            j.switch = botmesh_durability::testing::crash::crashable(j.kv.clone());
        }
        let (bot, provider) = Self::build(
            &self.setup,
            &self.store,
            &self.clock,
            &self.lines,
            self.journals.as_ref(),
        )
        .await?;
        self.bot = bot;
        self.provider = provider;
        self.bot.idle().await;
        Ok(())
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The send keys so far, in order.
    pub fn keys(&self) -> Vec<String> {
        self.lines()
            .iter()
            .filter_map(|l| {
                l.split_once("[key=")
                    .and_then(|(_, r)| r.split_once(']'))
                    .map(|(k, _)| k.to_owned())
            })
            .collect()
    }

    /// The transcript, one line each.
    pub fn render(&self) -> String {
        let mut s = self.lines().join("\n");
        s.push('\n');
        s
    }
}
