//! Durable processing in the bot: the runtime side of the inbox and outbox journals of
//! `botmesh-durability` (see `docs/durability-and-backends.md`).
//!
//! With [`DurabilityOptions`] on the builder, the bot journals every admitted message before
//! dispatch and completes it once the work it started settled (module `inbound`), journals every
//! send under its idempotency key before the provider is called and answers a replayed send
//! from the outbox (module `outbound`), and runs a background sweeper that replays unfinished
//! inbound records, retries failed sends and purges old records (module `sweeper`). The lifecycle
//! gains two steps: `journal` (the backend opened, the sends recovered, and the backend closed at
//! stop) between `storage` and `restore`, and `durability` (the inbound replays and the sweeper)
//! between `restore` and `transport`. Without the option none of
//! this code runs: the bot runs exactly the code it ran before.
//!
//! | the process dies…                                  | on restart                                         |
//! | --- | --- |
//! | before the inbound is journaled                    | nothing recorded; processed if the channel redelivers |
//! | after journaling, before/while the handler runs    | replayed; sent replies answered from the outbox      |
//! | between "about to call the provider" and "sent"    | ambiguous: `on_ambiguous` skip (unknown) or resend; `durability:ambiguous` |
//! | after the send is recorded, before the ack         | replayed; every reply answered from the outbox       |
//! | on every run of the same message                   | dead-lettered after `inbox.max_attempts` runs         |

pub(crate) mod inbound;
mod instance;
pub(crate) mod media;
pub(crate) mod sweeper;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh_durability::{DurabilityConfig, DurableKv, KvDurability, MemoryKv, Scope, Store};

use crate::clock::Clock;
use crate::config::BotConfig;
use crate::durable::inbound::Admit;
use crate::error::BotError;
use crate::events::BotEvent;
use crate::kernel::journals::Durable;
use crate::kernel::lifecycle::{LifecycleStep, StepTask};
use crate::kernel::{Bot, waiting};

pub use crate::kernel::journals::{MaxAge, StalePolicy};
pub use crate::outbound::outbox::EnqueueOutcome;

/// Where a bot keeps its inbox and outbox journals.
#[derive(Clone)]
pub(crate) enum Journals {
    /// In the bot's store when it keeps them ([`Store::journal_backend`]), in memory otherwise.
    Store,
    /// In this backend.
    Backend(Arc<dyn DurableKv>),
    /// Nowhere: durable processing is off.
    Off,
}

/// The bot's `durability` configuration: where the journals live and their options
/// ([`DurabilityConfig`], the table "Configuration" of `docs/durability-and-backends.md`).
///
/// Durable is the default: a bot built with a durable store (SQLite, Postgres, Redis) runs its
/// journals in that store without this option; give it to change the options
/// ([`DurabilityOptions::store`]), to put the journals elsewhere ([`backend`](Self::backend),
/// e.g. a `FileDurability`), or to turn durable processing off ([`off`](Self::off)).
///
/// ```
/// use botmesh::prelude::*;
/// use botmesh::durable::{DurabilityOptions, StalePolicy};
/// use botmesh::durability::DurabilityConfig;
/// use std::time::Duration;
///
/// let mut config = DurabilityConfig::default();
/// config.outbox.retries = 3;
/// let bot = Bot::builder(botmesh::testing::MockProvider::new())
///     .durability(
///         DurabilityOptions::memory()
///             .config(config)
///             .max_age(Duration::from_secs(3600), StalePolicy::Skip),
///     )
///     .build()
///     .unwrap();
/// # let _ = bot;
/// ```
#[derive(Clone)]
pub struct DurabilityOptions {
    pub(crate) journals: Journals,
    pub(crate) config: DurabilityConfig,
    pub(crate) max_age: Option<MaxAge>,
}

impl std::fmt::Debug for DurabilityOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let journals = match &self.journals {
            Journals::Store => "store",
            Journals::Backend(_) => "backend",
            Journals::Off => "off",
        };
        f.debug_struct("DurabilityOptions")
            .field("journals", &journals)
            .field("config", &self.config)
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}

impl Default for DurabilityOptions {
    /// [`DurabilityOptions::store`].
    fn default() -> Self {
        Self::store()
    }
}

impl DurabilityOptions {
    /// Journals in the bot's store (what a bot with a durable store does without this
    /// option), or in memory when the store keeps nothing across a restart.
    pub fn store() -> Self {
        Self::with(Journals::Store)
    }

    /// Journals in memory (`MemoryDurability`): retries, backoff and the DLQ, no crash survival.
    pub fn memory() -> Self {
        Self::backend(MemoryKv::new())
    }

    /// Journals in `backend` (file, SQLite, Postgres, Redis, or your own `DurableKv`).
    pub fn backend(backend: impl DurableKv) -> Self {
        Self::shared(Arc::new(backend))
    }

    /// Journals in a shared backend.
    pub fn shared(backend: Arc<dyn DurableKv>) -> Self {
        Self::with(Journals::Backend(backend))
    }

    /// No journals, even on a durable store: a crash loses the messages in hand and may send a
    /// reply twice, and a failed send is not retried. The bot logs a warning when it starts.
    pub fn off() -> Self {
        Self::with(Journals::Off)
    }

    fn with(journals: Journals) -> Self {
        Self {
            journals,
            config: DurabilityConfig::default(),
            max_age: None,
        }
    }

    /// Whether these options turn durable processing off.
    pub fn is_off(&self) -> bool {
        matches!(self.journals, Journals::Off)
    }

    /// The journals' options, [`DurabilityConfig`] (validated when the bot is built).
    pub fn config(mut self, config: DurabilityConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the lease owner id (stable across restarts, unique per live replica). Without it,
    /// a bot on a single-host backend (SQLite, file, memory) gets an id that its next run on the
    /// same host gets again, so a restart reclaims its own leases at once; a bot on a backend
    /// shared by several hosts (Postgres, Redis) gets a new id per run.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.config.instance_id = Some(id.into());
        self
    }

    /// `inbox.max_age`: messages older than `age` when admitted are skipped or marked stale.
    pub fn max_age(mut self, age: Duration, policy: StalePolicy) -> Self {
        self.max_age = Some(MaxAge { age, policy });
        self
    }
}

impl Durable {
    /// The durability of a bot with `store`: `None` when the options turn it off, or when none
    /// were given and the store keeps nothing across a restart.
    pub(crate) fn build(
        opts: Option<DurabilityOptions>,
        store: &dyn Store,
        bot: &BotConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Option<Self>, BotError> {
        let explicit = opts.is_some();
        let mut opts = opts.unwrap_or_default();
        let backend = match std::mem::replace(&mut opts.journals, Journals::Off) {
            Journals::Off => return Ok(None),
            Journals::Backend(kv) => kv,
            Journals::Store => match store.journal_backend() {
                Some(kv) => kv,
                None if explicit => Arc::new(MemoryKv::new()),
                None => return Ok(None),
            },
        };
        let mut instance_lock = None;
        if opts.config.instance_id.is_none() {
            if let Some(default) = instance::default_id(bot, backend.as_ref()) {
                opts.config.instance_id = Some(default.id);
                instance_lock = Some(default.lock);
            }
        }
        let mut durable = Self::with_backend(opts, backend, bot, clock)?;
        durable._instance_lock = instance_lock;
        Ok(Some(durable))
    }

    fn with_backend(
        opts: DurabilityOptions,
        backend: Arc<dyn DurableKv>,
        bot: &BotConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, BotError> {
        let scope = Scope::new(
            &bot.tenant_id,
            &bot.environment_id,
            &bot.bot_id,
            &bot.connection_id,
        );
        if let Some(m) = &opts.max_age {
            if m.age.is_zero() {
                return Err(BotError::config(
                    "durability.inbox.max_age",
                    "must be above zero",
                ));
            }
        }
        let d = KvDurability::builder(backend, scope)
            .config(opts.config)
            .shared_clock(clock)
            // The `durability:ambiguous` event names the send's text.
            .payload_text(|payload| {
                payload
                    .decode::<crate::message::Outgoing>()
                    .map(|o| o.content.text().to_owned())
                    .unwrap_or_default()
            })
            .build()
            .map_err(|e| BotError::config("durability", e.to_string()))?;
        Ok(Self {
            d,
            max_age: opts.max_age,
            tasks: Mutex::new(Vec::new()),
            sweeper: StepTask::default(),
            waiting: waiting::WaitingLeases::default(),
            _instance_lock: None,
        })
    }

    /// A failure of the backend itself (opening, closing), naming the bot's scope.
    fn backend_error(
        &self,
        operation: &'static str,
        source: botmesh_durability::kv::KvError,
    ) -> BotError {
        BotError::Durability(botmesh_durability::DurabilityError::Backend {
            kind: botmesh_durability::operating::RecordKind::Inbound,
            id: self.d.scope().to_string(),
            operation,
            source,
        })
    }

    fn abort_tasks(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }

    /// Asks the sweeper to stop after the record in hand (a send it started completes and is
    /// recorded); aborts it if it does not within `grace`.
    async fn stop_sweeper(&self, grace: Duration) {
        if self.sweeper.stop(grace).await {
            tracing::warn!(
                ?grace,
                "the durability sweeper did not stop in time: aborted"
            );
        }
    }
}

/// The `durability` lifecycle step: replays the unfinished inbound records (after `restore`,
/// so that a replay finds its chat's restored flow) and runs the sweeper until `stop()`. A
/// replayed record is admitted by `admit`, the bot's inbound path.
pub(crate) struct DurabilityStep {
    pub(crate) admit: Admit,
}

#[async_trait]
impl LifecycleStep for DurabilityStep {
    fn name(&self) -> &str {
        "durability"
    }

    fn produces_work(&self) -> bool {
        true
    }

    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        let k = &bot.kernel;
        let Some(dur) = &k.durable else { return Ok(()) };
        sweeper::replay_unfinished(k, dur, self.admit).await?;
        let (weak, admit) = (Arc::downgrade(k), self.admit);
        dur.sweeper.spawn(|stop| sweeper::run(weak, stop, admit));
        Ok(())
    }

    async fn stop(&self, bot: &Bot) -> Result<(), BotError> {
        if let Some(dur) = &bot.kernel.durable {
            dur.stop_sweeper(bot.kernel.config.stop_timeout).await;
        }
        Ok(())
    }
}

/// The `journal` lifecycle step: opens the backend at start (before `restore`), forwards the
/// journal's events to bot events, and recovers the sends (those of unknown outcome, by
/// `on_ambiguous`; those left unsent, queued on their chats' queues ahead of anything
/// `restore` queues); at stop,
/// after the drain and the transport (it does not produce work), gives back the leases of the
/// queued messages a `stop()` without drain dropped, then closes the backend
/// ([`DurableKv::close`]: `FileDurability` folds its log and releases its lock once no bot
/// of the process uses it).
pub(crate) struct JournalStep;

#[async_trait]
impl LifecycleStep for JournalStep {
    fn name(&self) -> &str {
        "journal"
    }

    async fn start(&self, bot: &Bot) -> Result<(), BotError> {
        let Some(dur) = &bot.kernel.durable else {
            return Ok(());
        };
        // A backend built lazily (`PostgresKv::new`) connects here: a server that cannot be
        // reached fails `start()`, naming the host (never the password). A backend closed by
        // an earlier `stop()` opens again.
        dur.d
            .kv()
            .open()
            .await
            .map_err(|e| dur.backend_error("open", e))?;
        let k = &bot.kernel;
        dur.abort_tasks();
        let mut events = dur.d.subscribe();
        let weak = Arc::downgrade(k);
        let forwarder = tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(e) => e,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "durability events lagged");
                        continue;
                    }
                    Err(_) => return,
                };
                let Some(k) = weak.upgrade() else { return };
                k.events.emit(BotEvent::Durability(event));
            }
        });
        // Keeps the leases of queued jobs (the replays of the recovery among them), also
        // through the drain of a stop.
        let keeper = tokio::spawn(waiting::keep(Arc::downgrade(k)));
        dur.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend([forwarder, keeper]);
        // The sends an earlier incarnation left are queued before `restore` queues the
        // restarted flows: a restarted flow's first send waits for the chat's earlier ones,
        // which must be ahead of it in the chat's queue.
        sweeper::recover_sends(k, dur).await
    }

    async fn stop(&self, bot: &Bot) -> Result<(), BotError> {
        waiting::release_dropped(&bot.kernel).await;
        if let Some(dur) = &bot.kernel.durable {
            dur.d
                .kv()
                .close()
                .await
                .map_err(|e| dur.backend_error("close", e))?;
        }
        Ok(())
    }
}

impl Bot {
    /// The journals and their operator API (`inbox().list(state)`, `outbox().list(state)`,
    /// `replay_inbound(id)`, `retry_send(key)`, `discard_send(key)`, `metrics()`), when the bot
    /// was built with durability.
    pub fn durability(&self) -> Option<&KvDurability> {
        self.kernel.durable.as_ref().map(|d| &d.d)
    }
}
