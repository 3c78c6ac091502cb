//! [`BotBuilder`]: configuration defaults, the store, the clock, every subsystem, in a fixed
//! order; `build()` validates the configuration and assembles the kernel and its lifecycle.
//!
//! Nothing starts here: `build()` does no I/O. `Bot::start()` runs the lifecycle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use botmesh_durability::{MemoryStore, Store};
use tokio::sync::{Notify, watch};

use crate::bot::Bot;
use crate::bot::lifecycle::{RestoreStep, StorageStep, TransportStep};
use crate::clock::{Clock, SystemClock};
use crate::config::{BotConfig, GroupMode, Pacing, RateLimitRetry};
use crate::durable::{DurabilityOptions, DurabilityStep, JournalStep};
use crate::error::BotError;
use crate::events::EventOutlet;
use crate::kernel::dedupe::Dedupe;
use crate::kernel::gates::Gates;
use crate::kernel::jobs::JobsHandle;
use crate::kernel::journals::Durable;
use crate::kernel::lang::LangResolver;
use crate::kernel::lifecycle::LifecycleStep;
use crate::kernel::queue::ChatQueues;
use crate::kernel::routes::Routes;
use crate::kernel::{Kernel, RunState};
use crate::message::{ChatId, Message, UserId};
use crate::metrics::Counters;
use crate::provider::{Provider, TransportStatus};
use crate::schedule::{Scheduler, SchedulerOptions, SchedulerStep};

/// Builds a [`Bot`].
///
/// ```
/// use botmesh::prelude::*;
/// use botmesh::testing::MockProvider;
///
/// let bot = Bot::builder(MockProvider::new())
///     .bot_id("shop")
///     .default_lang("en")
///     .group_mode(GroupMode::MentionsOrCommands)
///     .build()
///     .unwrap();
/// # let _ = bot;
/// ```
pub struct BotBuilder {
    provider: Arc<dyn Provider>,
    store: Option<Arc<dyn Store>>,
    config: BotConfig,
    clock: Arc<dyn Clock>,
    lang_resolver: Option<LangResolver>,
    steps: Vec<Arc<dyn LifecycleStep>>,
    durability: Option<DurabilityOptions>,
    coordination: Option<crate::coordination::Coordination>,
    scheduler: SchedulerOptions,
}

impl BotBuilder {
    pub(crate) fn new(provider: Arc<dyn Provider>) -> Self {
        Self {
            provider,
            store: None,
            config: BotConfig::default(),
            clock: Arc::new(SystemClock),
            lang_resolver: None,
            steps: Vec::new(),
            durability: None,
            coordination: None,
            scheduler: SchedulerOptions::default(),
        }
    }

    /// How the durable scheduler polls, leases and judges a late occurrence (see
    /// [`crate::schedule`]). Jobs need durable journals; the defaults suit most bots.
    pub fn scheduler(mut self, options: SchedulerOptions) -> Self {
        self.scheduler = options;
        self
    }

    /// Runs the bot as one of several replicas on a shared durable backend: chat turns, the
    /// send fence and, for an exclusive transport, a leader election (see
    /// [`crate::coordination`]). Off by default: a single process needs none of it. Refused by
    /// [`build`](Self::build) without durable journals.
    pub fn coordination(mut self, coordination: crate::coordination::Coordination) -> Self {
        self.coordination = Some(coordination);
        self
    }

    /// Where the inbox and outbox journals live and their options. Without this call, a bot
    /// whose store is durable (SQLite, Postgres, Redis) runs them in its store, and a bot on a
    /// [`MemoryStore`] runs none; [`DurabilityOptions::off`] turns them off on any store.
    /// Invalid options are refused by [`build`](Self::build).
    pub fn durability(mut self, options: DurabilityOptions) -> Self {
        self.durability = Some(options);
        self
    }

    /// The store (a [`MemoryStore`] by default).
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// The store, shared.
    pub fn store_arc(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: BotConfig) -> Self {
        self.config = config;
        self
    }

    /// The bot's id.
    pub fn bot_id(mut self, id: impl Into<String>) -> Self {
        self.config.bot_id = id.into();
        self
    }

    /// The fallback language.
    pub fn default_lang(mut self, lang: impl Into<String>) -> Self {
        self.config.default_lang = lang.into();
        self
    }

    /// A custom language resolver.
    pub fn lang_resolver(
        mut self,
        f: impl Fn(&Message) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.lang_resolver = Some(Arc::new(f));
        self
    }

    /// Group mode.
    pub fn group_mode(mut self, mode: GroupMode) -> Self {
        self.config.group_mode = mode;
        self
    }

    /// Admits only these chats (may be called several times).
    pub fn allow_chat(mut self, chat: impl Into<ChatId>) -> Self {
        self.config.access.allow_chats.insert(chat.into());
        self
    }

    /// Admits only these senders (may be called several times).
    pub fn allow_user(mut self, user: impl Into<UserId>) -> Self {
        self.config.access.allow_users.insert(user.into());
        self
    }

    /// Refuses a chat.
    pub fn block_chat(mut self, chat: impl Into<ChatId>) -> Self {
        self.config.access.block_chats.insert(chat.into());
        self
    }

    /// Refuses a sender.
    pub fn block_user(mut self, user: impl Into<UserId>) -> Self {
        self.config.access.block_users.insert(user.into());
        self
    }

    /// Turns the pacer on.
    pub fn pacing(mut self, pacing: Pacing) -> Self {
        self.config.pacing = Some(pacing);
        self
    }

    /// The inline retry of rate-limited replies.
    pub fn rate_limit_retry(mut self, policy: RateLimitRetry) -> Self {
        self.config.rate_limit_retry = policy;
        self
    }

    /// How long [`Bot::run`] drains the accepted work when it stops (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.config.drain_timeout = timeout;
        self
    }

    /// How often live stream previews are edited at most.
    pub fn stream_interval(mut self, every: Duration) -> Self {
        self.config.stream_interval = every;
        self
    }

    /// The wall clock (a [`crate::clock::ManualClock`] in tests).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Adds a lifecycle step, started after the transport and stopped before it.
    pub fn step(mut self, step: impl LifecycleStep) -> Self {
        self.steps.push(Arc::new(step));
        self
    }

    /// Validates the configuration and builds the bot. No I/O happens until `start()`.
    pub fn build(self) -> Result<Bot, BotError> {
        self.config.validate()?;
        self.scheduler.validate()?;
        let store = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let capabilities = self.provider.capabilities();
        if capabilities.text_limit == 0 {
            return Err(BotError::config(
                "provider.text_limit",
                "the provider reports a text limit of 0",
            ));
        }
        let (input_ended, _) = watch::channel(false);
        let (cancel_background, _) = watch::channel(false);
        let journals_off = self
            .durability
            .as_ref()
            .is_some_and(DurabilityOptions::is_off)
            && store.journal_backend().is_some();
        let durable = Durable::build(
            self.durability,
            store.as_ref(),
            &self.config,
            self.clock.clone(),
        )?;
        let coordination = match self.coordination {
            Some(options) => Some(Arc::new(crate::coordination::Coord::build(
                options,
                durable.as_ref().map(|d| &d.d),
            )?)),
            None => None,
        };
        let mut steps: Vec<Arc<dyn LifecycleStep>> = vec![Arc::new(StorageStep)];
        if durable.is_some() {
            // The backend opens before `restore` (which may restart a flow that sends), and
            // closes after the drain and the transport (stopped in reverse order).
            steps.push(Arc::new(JournalStep));
        }
        steps.push(Arc::new(RestoreStep));
        if durable.is_some() {
            // Produces work: stopped before the drain.
            steps.push(Arc::new(DurabilityStep {
                admit: crate::bot::inbound::readmit,
            }));
        }
        if coordination
            .as_ref()
            .is_some_and(|c| c.options.is_handover())
        {
            // This replica's lease and forward queue (non-persistent flows): up before the
            // transport brings messages, and a producer of work, stopped before the drain.
            steps.push(Arc::new(crate::bot::forwards::ForwardStep::default()));
        }
        if coordination
            .as_ref()
            .is_some_and(|c| c.options.is_leader_only_transport())
        {
            // Only the elected leader runs the transport.
            steps.push(Arc::new(crate::bot::leader::LeaderStep::default()));
        } else {
            steps.push(Arc::new(TransportStep));
        }
        // After the transport: a job may send as soon as it runs. A bot without durable
        // journals runs it too, on an in-memory journal (its flows' ask timeouts).
        steps.push(Arc::new(SchedulerStep));
        let jobs = JobsHandle::new(durable.is_some(), &self.config, self.clock.clone())
            .map_err(|e| BotError::config("scheduler", e.to_string()))?;
        let kernel = Kernel {
            dedupe: Dedupe::new(self.config.dedupe_capacity),
            gates: Gates::new(self.config.access.clone()),
            config: self.config,
            provider: self.provider,
            capabilities,
            store,
            clock: self.clock,
            routes: RwLock::new(Routes::default()),
            events: EventOutlet::new(),
            counters: Counters::default(),
            queues: ChatQueues::default(),
            lang_resolver: self.lang_resolver,
            run_state: Mutex::new(RunState::Idle),
            accepting: AtomicBool::new(false),
            transport: Mutex::new(TransportStatus::Starting),
            input_ended,
            cancel_background,
            next_owner: AtomicU64::new(0),
            plugins: Mutex::new(HashMap::new()),
            steps,
            custom_steps: Mutex::new(self.steps),
            started_steps: Mutex::new(Vec::new()),
            flow_state: Box::new(crate::flow::FlowRuntime::default()),
            scheduler_state: Box::new(Scheduler::new(self.scheduler)),
            jobs,
            durable,
            coordination,
            journals_off,
            stopped: Notify::new(),
        };
        Ok(Bot::from_kernel(Arc::new(kernel)))
    }
}

impl std::fmt::Debug for BotBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BotBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
