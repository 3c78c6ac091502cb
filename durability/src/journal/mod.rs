//! `KvDurability`: the inbox and the outbox, built on any [`DurableKv`].
//!
//! One `KvDurability` is one running incarnation of one bot's durability: a backend, a
//! [`Scope`], a validated [`DurabilityConfig`], a [`Clock`], an instance id with a fresh boot id
//! (see [`crate::leases`]), the metrics counters and the event channel. Clones share all of it
//! (they are the same process). [`KvDurability::reopen`] starts a new incarnation on the same
//! backend, the way a restarted process would. [`MemoryDurability`] is the in-memory flavour.
//!
//! Records are JSON with a state machine (see [`crate::inbox`] and [`crate::outbox`]); their
//! content is a [`Payload`] kept as JSON text. Every backend stores them as their JSON bytes,
//! through [`DurableKv::cas`]. Every change is a compare-and-set on the record's version,
//! re-read and re-decided on a conflict, so two replicas (or a sweeper and an inline send)
//! never both win a transition. A change of a record this incarnation has just written starts
//! from its snapshot instead of a read (see [`snapshots`]); the compare-and-set on the
//! snapshot's version makes that exactly as safe as a read.
//! Bytes that do not decode as a record are quarantined, logged with `tracing::error!` and
//! reported as a `Dead` event; listing and sweeping calls skip them instead of failing.
//!
//! This module holds the shared plumbing; the operations live in the `inbox`, `outbox`,
//! `retention` and `operating` modules.

pub(crate) mod attempts;
pub(crate) mod index;
mod payload;
mod records;
pub(crate) mod snapshots;
mod view;

pub use payload::Payload;
pub(crate) use records::{JournalRecord, Loaded, Step, cas};
pub(crate) use view::{Creation, View};

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::clock::{Clock, SystemClock};
use crate::config::DurabilityConfig;
use crate::error::DurabilityError;
use crate::kv::{CasOutcome, DurableKv, Entry, KvError, MemoryKv, Scope, WritePhase, WritePoint};
use crate::leases::{Incarnation, InstanceId};
use crate::metrics::{Counter, Counters, DurabilityEvent, DurabilityMetrics, RecordKind};

/// How many times an operation re-reads a record after a CAS conflict before giving up.
pub(crate) const MAX_CAS_RETRIES: usize = 32;
/// Capacity of the event channel.
const EVENT_CAPACITY: usize = 1024;

/// The inbox and outbox journals over a [`DurableKv`]. Cheap to clone.
pub struct KvDurability<K: ?Sized = dyn DurableKv> {
    shared: Arc<Shared>,
    kv: Arc<K>,
}

/// `KvDurability` over the in-memory backend: retries, backoff and the DLQ, no crash survival.
pub type MemoryDurability = KvDurability<MemoryKv>;

/// Everything of one incarnation but the backend (so [`KvDurability::erase`] can share it).
struct Shared {
    scope: Scope,
    config: DurabilityConfig,
    clock: Arc<dyn Clock>,
    me: Incarnation,
    events: broadcast::Sender<DurabilityEvent>,
    counters: Counters,
    seq: AtomicU64,
    rng: Mutex<fastrand::Rng>,
    snapshots: snapshots::Snapshots,
    payload_text: Option<PayloadText>,
}

/// How a journal's user reads the text of a send from its opaque payload, for the
/// `Ambiguous` event ([`KvDurabilityBuilder::payload_text`]).
pub(crate) type PayloadText = Arc<dyn Fn(&Payload) -> String + Send + Sync>;

impl<K: ?Sized> Clone for KvDurability<K> {
    fn clone(&self) -> Self {
        KvDurability {
            shared: Arc::clone(&self.shared),
            kv: Arc::clone(&self.kv),
        }
    }
}

impl<K: ?Sized> fmt::Debug for KvDurability<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvDurability")
            .field("scope", &self.shared.scope.id())
            .field("instance_id", &self.shared.me.instance_id)
            .field("boot_id", &self.shared.me.boot_id)
            .finish_non_exhaustive()
    }
}

/// Builds a [`KvDurability`]: backend and scope first, then optional config, clock and seed.
pub struct KvDurabilityBuilder<K: ?Sized> {
    kv: Arc<K>,
    scope: Scope,
    config: DurabilityConfig,
    clock: Arc<dyn Clock>,
    seed: Option<u64>,
    payload_text: Option<PayloadText>,
}

impl<K: DurableKv + ?Sized> KvDurabilityBuilder<K> {
    /// How to read the text of a send from its payload (the journals store payloads as
    /// opaque JSON): the `Ambiguous` event carries it. Without it the event's text is empty.
    /// The bot's runtime installs its own (the message's text, or its caption).
    pub fn payload_text(
        mut self,
        text: impl Fn(&Payload) -> String + Send + Sync + 'static,
    ) -> Self {
        self.payload_text = Some(Arc::new(text));
        self
    }

    /// The configuration (validated by [`build`](Self::build)); the default otherwise.
    pub fn config(mut self, config: DurabilityConfig) -> Self {
        self.config = config;
        self
    }

    /// The clock (the system clock otherwise).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// A clock shared with other components.
    pub fn shared_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Seeds the backoff jitter (random otherwise), for reproducible tests.
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Validates the configuration and starts a new incarnation.
    pub fn build(self) -> Result<KvDurability<K>, DurabilityError> {
        self.config.validate()?;
        let instance_id = match &self.config.instance_id {
            Some(id) => id.clone(),
            None => InstanceId::default_for(
                self.scope.bot(),
                self.scope.connection(),
                self.kv.shared_between_processes(),
            ),
        };
        let now = self.clock.now_ms();
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let rng = match self.seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        tracing::debug!(scope = %self.scope, %instance_id, "durability started");
        Ok(KvDurability {
            shared: Arc::new(Shared {
                me: Incarnation::new(instance_id, now),
                scope: self.scope,
                config: self.config,
                clock: self.clock,
                events,
                counters: Counters::default(),
                seq: AtomicU64::new(0),
                rng: Mutex::new(rng),
                snapshots: snapshots::Snapshots::default(),
                payload_text: self.payload_text,
            }),
            kv: self.kv,
        })
    }
}

impl<K: DurableKv> KvDurability<K> {
    /// The same incarnation (same counters, events, leases) over a type-erased backend, for a
    /// runtime that picks its backend at run time.
    pub fn erase(&self) -> KvDurability {
        KvDurability {
            shared: Arc::clone(&self.shared),
            kv: Arc::clone(&self.kv) as Arc<dyn DurableKv>,
        }
    }
}

impl MemoryDurability {
    /// A durability over a new in-memory backend.
    pub fn memory(scope: Scope, config: DurabilityConfig) -> Result<Self, DurabilityError> {
        KvDurability::new(Arc::new(MemoryKv::new()), scope, config)
    }
}

impl<K: DurableKv + ?Sized> KvDurability<K> {
    /// A builder over `kv`, working in `scope`.
    pub fn builder(kv: Arc<K>, scope: Scope) -> KvDurabilityBuilder<K> {
        KvDurabilityBuilder {
            kv,
            scope,
            config: DurabilityConfig::default(),
            clock: Arc::new(SystemClock),
            seed: None,
            payload_text: None,
        }
    }

    /// A durability over `kv` in `scope` with `config` and the system clock.
    pub fn new(
        kv: Arc<K>,
        scope: Scope,
        config: DurabilityConfig,
    ) -> Result<Self, DurabilityError> {
        Self::builder(kv, scope).config(config).build()
    }

    /// A new incarnation on the same backend, scope, config and clock: what a restarted process
    /// sees. Its counters start at zero and it has its own event channel.
    pub fn reopen(&self) -> Result<Self, DurabilityError> {
        let mut config = self.shared.config.clone();
        config.instance_id = Some(self.shared.me.instance_id.to_string());
        Self::builder(Arc::clone(&self.kv), self.shared.scope.clone())
            .config(config)
            .shared_clock(Arc::clone(&self.shared.clock))
            .build()
    }

    /// The scope this durability works in (`bot.durability.scope`).
    pub fn scope(&self) -> &Scope {
        &self.shared.scope
    }

    /// The validated configuration.
    pub fn config(&self) -> &DurabilityConfig {
        &self.shared.config
    }

    /// The lease owner id of this process.
    pub fn instance_id(&self) -> &str {
        &self.shared.me.instance_id
    }

    /// This incarnation (instance id, boot id, recovery start).
    pub fn incarnation(&self) -> &Incarnation {
        &self.shared.me
    }

    /// The backend.
    pub fn kv(&self) -> &Arc<K> {
        &self.kv
    }

    /// The clock.
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.shared.clock)
    }

    /// Now, by this durability's clock (Unix ms).
    pub fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    /// A receiver of the durability events emitted from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<DurabilityEvent> {
        self.shared.events.subscribe()
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> DurabilityMetrics {
        self.shared.counters.snapshot()
    }

    // ---- plumbing shared by the journals -------------------------------------------------

    pub(crate) fn count(&self, counter: Counter) {
        self.shared.counters.add(counter);
    }

    /// The text of a send's payload, by the reader the builder was given (empty without).
    pub(crate) fn payload_text(&self, payload: &Payload) -> String {
        self.shared
            .payload_text
            .as_ref()
            .map(|text| text(payload))
            .unwrap_or_default()
    }

    pub(crate) fn emit(&self, event: DurabilityEvent) {
        // No receiver is not an error: events are for whoever listens.
        let _ = self.shared.events.send(event);
    }

    /// A random number in `0.0..1.0` for the backoff jitter.
    pub(crate) fn unit(&self) -> f64 {
        self.shared
            .rng
            .lock()
            .map(|mut rng| rng.f64())
            .unwrap_or(0.5)
    }

    /// A sequence number that grows within this process and, with a sane clock, across
    /// restarts (`now_ms × 1000`, plus one per call within a millisecond).
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq_at(self.now_ms())
    }

    /// [`next_seq`](Self::next_seq) with the caller's reading of the clock (one clock read
    /// fewer on the journal path).
    pub(crate) fn next_seq_at(&self, now_ms: i64) -> u64 {
        let floor = u64::try_from(now_ms.max(0))
            .unwrap_or(0)
            .saturating_mul(1000);
        let prev = self
            .shared
            .seq
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(floor.max(last.saturating_add(1)))
            })
            .unwrap_or(floor);
        floor.max(prev.saturating_add(1))
    }

    /// The error of a backend call on record `id`: the id is copied only when there is an
    /// error (the success path of every journal write passes one of these to `map_err`).
    pub(crate) fn backend_err<'a>(
        kind: RecordKind,
        id: &'a str,
        operation: &'static str,
    ) -> impl FnOnce(KvError) -> DurabilityError + 'a {
        move |source| DurabilityError::Backend {
            kind,
            id: id.to_owned(),
            operation,
            source,
        }
    }

    /// The backend itself: its calls go straight to it, not through `Arc`'s forwarding
    /// implementation (which would box a second future for every call).
    fn backend(&self) -> &K {
        &self.kv
    }

    pub(crate) fn hook(&self, point: WritePoint, phase: WritePhase) -> Result<(), KvError> {
        self.backend().on_journal_write(point, phase)
    }

    /// Writes `entry` at `key` under the write point's hooks.
    pub(crate) async fn cas_at(
        &self,
        point: WritePoint,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        self.cas_at_points(&[point], key, expected, entry).await
    }

    /// Writes `entry` at `key` under the hooks of every point in `points` (one write that is
    /// several steps of the pipeline at once): all their `Before` hooks, the write, then all
    /// their `After` hooks.
    pub(crate) async fn cas_at_points(
        &self,
        points: &[WritePoint],
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        self.hooked(points, || {
            self.backend().cas(&self.shared.scope, key, expected, entry)
        })
        .await
    }

    /// Runs `write` between the `Before` hooks of every point in `points` and, once it
    /// applied, their `After` hooks (the write is not even started when a `Before` hook
    /// fails).
    async fn hooked<F: Future<Output = Result<CasOutcome, KvError>>>(
        &self,
        points: &[WritePoint],
        write: impl FnOnce() -> F,
    ) -> Result<CasOutcome, KvError> {
        for point in points {
            self.hook(*point, WritePhase::Before)?;
        }
        let outcome = write().await?;
        if outcome.is_ok() {
            for point in points {
                self.hook(*point, WritePhase::After)?;
            }
        }
        Ok(outcome)
    }

    /// Runs a batch under the write point's hooks.
    pub(crate) async fn batch_at(
        &self,
        point: WritePoint,
        ops: Vec<crate::kv::KvOp>,
    ) -> Result<Vec<CasOutcome>, KvError> {
        self.hook(point, WritePhase::Before)?;
        let outcomes = self.backend().batch(&self.shared.scope, ops).await?;
        if outcomes.iter().any(|o| o.is_ok()) {
            self.hook(point, WritePhase::After)?;
        }
        Ok(outcomes)
    }
}
