//! Coordination between replicas: fenced chat turns and leader leases, kept in the bot's own
//! [`DurableKv`] scope, so every backend (memory, file, SQLite, Postgres, Redis, Redis
//! Cluster) coordinates through the same code path and no service of its own.
//!
//! - A **chat turn** ([`Coordinator::take_turn`]) serializes one chat across replicas: the
//!   replica holding it processes the chat's events; the others wait, queued by ticket (the
//!   arrival sequence of the oldest event each holds), so the turn is taken in ingress order.
//! - A **leader lease** ([`Coordinator::campaign`]) picks the one replica that runs an
//!   exclusive transport (Telegram long polling); a standby asking to use it gets
//!   [`CoordinationError::NotLeader`].
//!
//! Both are the same fenced lease (see `record`): a [`LeaseRecord`](crate::leases::LeaseRecord)
//! of the holding incarnation, the one the inbox and outbox put on their records, under a
//! fencing token that grows with every holder. A holder renews its lease while it works; when
//! it stalls past the lease, another replica takes over under a higher token (a steal), and
//! every later write of the old holder is refused by [`Coordinator::check_turn`] /
//! [`Coordinator::check_leader`] with [`CoordinationError::Fenced`], naming the chat and the
//! tokens. A check passes only while the lease has at least
//! [`CoordinationConfig::safety_margin`] left, so a write issued right after a passing check
//! lands before anyone may take the lease over, as long as it takes less than the margin.
//!
//! | counter ([`CoordinationMetrics`]) | incremented when |
//! | --- | --- |
//! | `turns_taken` | a replica takes a chat's turn |
//! | `turn_waits` | a replica finds a chat's turn held (or another waiter first) and waits |
//! | `turn_steals` | a turn whose holder let its lease expire is taken over |
//! | `fenced_refusals` | a stale holder is refused (a check, a renewal or a release) |
//! | `leader_changes` | this replica becomes the leader of a lease, or loses it |
//! | `not_leader_refusals` | a standby was refused the use of an exclusive transport ([`CoordinationError::NotLeader`]) |
//! | `handovers` | this replica finished a conversation step another message's replica cut short ([`Coordinator::handed_over`]) |
//! | `records_purged` | idle turn and leader records deleted ([`Coordinator::purge_idle`]) |
//! | `forwards` | this replica handed a message to the live replica holding the chat's non-persistent flow ([`Coordinator::forwarded`]; liveness: [`Coordinator::keep_alive`], see `replica`) |
//!
//! Each is also a [`CoordinationEvent`] on [`Coordinator::subscribe`]. This module does not
//! run anything on its own: the runtime's coordination opt-in takes, renews and releases.

mod error;
mod leader;
mod record;
mod replica;
mod turns;

pub use error::CoordinationError;
pub use leader::Leadership;
pub use turns::TurnAttempt;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::clock::Clock;
use crate::journal::KvDurability;
use crate::kv::{DurableKv, Scope};
use crate::leases::Incarnation;
use crate::retries::duration_ms;
use record::{Acquired, Machine};

/// What a fenced lease guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceKind {
    /// A chat's turn.
    Turn,
    /// A leader lease.
    Leader,
}

impl FenceKind {
    /// `chat turn` or `leader lease`.
    pub fn as_str(self) -> &'static str {
        match self {
            FenceKind::Turn => "chat turn",
            FenceKind::Leader => "leader lease",
        }
    }

    fn key_tag(self) -> &'static str {
        match self {
            FenceKind::Turn => "t",
            FenceKind::Leader => "l",
        }
    }
}

impl fmt::Display for FenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A held lease: what a holder shows to renew, release or check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// A chat turn or a leader lease.
    pub kind: FenceKind,
    /// The chat, or the leader lease's name.
    pub name: String,
    /// The fencing token: higher for every new holder.
    pub token: u64,
    /// The holder's instance id.
    pub owner: Arc<str>,
    /// When the lease expires unless renewed (Unix ms).
    pub expires_ms: i64,
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}` token {}", self.kind, self.name, self.token)
    }
}

/// How long leases last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinationConfig {
    /// How long a chat turn lasts unless renewed (default 30 s).
    pub turn_lease: Duration,
    /// How long a leader lease lasts unless renewed (default 15 s): a standby takes over
    /// within this time when the leader dies.
    pub leader_lease: Duration,
    /// A check passes only with at least this much of the lease left (default 2 s).
    pub safety_margin: Duration,
}

impl Default for CoordinationConfig {
    fn default() -> Self {
        CoordinationConfig {
            turn_lease: Duration::from_secs(30),
            leader_lease: Duration::from_secs(15),
            safety_margin: Duration::from_secs(2),
        }
    }
}

impl CoordinationConfig {
    /// Refuses a margin that is not shorter than both leases, or a zero lease.
    pub fn validate(&self) -> Result<(), CoordinationError> {
        for (key, lease) in [
            ("coordination.turn_lease", self.turn_lease),
            ("coordination.leader_lease", self.leader_lease),
        ] {
            if lease.is_zero() || self.safety_margin >= lease {
                return Err(CoordinationError::Config {
                    option: key,
                    reason: format!(
                        "must be longer than zero and than coordination.safety_margin ({:?}), got {lease:?}",
                        self.safety_margin
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A coordination event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinationEvent {
    /// This replica took a chat's turn; `stolen_from` names the holder whose lease had expired.
    TurnTaken {
        /// The turn.
        fence: Fence,
        /// The previous holder, when its lease was taken over.
        stolen_from: Option<String>,
    },
    /// This replica waits for a chat's turn.
    TurnWaiting {
        /// The chat.
        chat: String,
        /// The holder (or the waiter that goes first), if known.
        holder: Option<String>,
    },
    /// A stale holder was refused.
    Fenced {
        /// A chat turn or a leader lease.
        kind: FenceKind,
        /// The chat or lease name.
        name: String,
        /// The refused token.
        token: u64,
    },
    /// This replica finished a conversation step that was cut short (its replica lost the
    /// chat's turn, stopped or died mid-step) with the answer the checkpoint carried, before
    /// the chat's next message.
    HandedOver {
        /// The chat.
        chat: String,
        /// The flow.
        flow: String,
        /// The inbound record whose answer the cut step had taken.
        answer_of: String,
        /// The inbound record that found the cut step (`None` when nothing fed it, e.g. a
        /// timeout).
        found_by: Option<String>,
    },
    /// This replica handed a message of `chat` to replica `to`, which holds the chat's
    /// non-persistent flow in memory.
    Forwarded {
        /// The chat.
        chat: String,
        /// The instance id of the replica holding the flow.
        to: String,
    },
    /// This replica became the leader of `name` (`leader: Some(self)`), or lost it (`None`).
    LeaderChanged {
        /// The lease's name.
        name: String,
        /// This replica's instance id when it leads, `None` when it stopped leading.
        leader: Option<String>,
        /// The token it led (or leads) under.
        token: u64,
    },
}

/// A snapshot of the coordination counters (see the module table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoordinationMetrics {
    /// Chat turns taken.
    pub turns_taken: u64,
    /// Waits for a chat's turn.
    pub turn_waits: u64,
    /// Turns taken over from a holder whose lease expired.
    pub turn_steals: u64,
    /// Stale holders refused.
    pub fenced_refusals: u64,
    /// Leader changes seen by this replica.
    pub leader_changes: u64,
    /// Calls to an exclusive transport refused because this replica does not lead.
    pub not_leader_refusals: u64,
    /// Conversation steps cut short elsewhere (or earlier) that this replica finished.
    pub handovers: u64,
    /// Idle turn and leader records deleted.
    pub records_purged: u64,
    /// Messages handed to the replica holding their chat's non-persistent flow.
    pub forwards: u64,
}

#[derive(Default)]
struct Counters {
    turns_taken: AtomicU64,
    turn_waits: AtomicU64,
    turn_steals: AtomicU64,
    fenced_refusals: AtomicU64,
    leader_changes: AtomicU64,
    not_leader_refusals: AtomicU64,
    handovers: AtomicU64,
    records_purged: AtomicU64,
    forwards: AtomicU64,
}

struct Inner {
    kv: Arc<dyn DurableKv>,
    scope: Scope,
    clock: Arc<dyn Clock>,
    me: Incarnation,
    config: CoordinationConfig,
    counters: Counters,
    events: broadcast::Sender<CoordinationEvent>,
}

/// Chat turns and leader leases of one replica, over its durability's backend and scope.
/// Cheap to clone.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

impl fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coordinator")
            .field("scope", &self.inner.scope.id())
            .field("instance_id", &self.inner.me.instance_id)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// The coordinator of `durability`'s replica: same backend, scope, clock and incarnation
    /// (a restarted replica with the same instance id takes its abandoned leases at once).
    pub fn new<K: DurableKv + ?Sized>(
        durability: &KvDurability<K>,
        config: CoordinationConfig,
    ) -> Result<Self, CoordinationError> {
        config.validate()?;
        let kv: Arc<dyn DurableKv> = Arc::new(Arc::clone(durability.kv()));
        let (events, _) = broadcast::channel(1024);
        Ok(Coordinator {
            inner: Arc::new(Inner {
                kv,
                scope: durability.scope().clone(),
                clock: durability.clock(),
                me: durability.incarnation().clone(),
                config,
                counters: Counters::default(),
                events,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CoordinationConfig {
        &self.inner.config
    }

    /// This replica's instance id.
    pub fn instance_id(&self) -> &str {
        &self.inner.me.instance_id
    }

    /// A receiver of the events emitted from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<CoordinationEvent> {
        self.inner.events.subscribe()
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> CoordinationMetrics {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CoordinationMetrics {
            turns_taken: get(&c.turns_taken),
            turn_waits: get(&c.turn_waits),
            turn_steals: get(&c.turn_steals),
            fenced_refusals: get(&c.fenced_refusals),
            leader_changes: get(&c.leader_changes),
            not_leader_refusals: get(&c.not_leader_refusals),
            handovers: get(&c.handovers),
            records_purged: get(&c.records_purged),
            forwards: get(&c.forwards),
        }
    }

    fn machine<'a>(&'a self, kind: FenceKind, name: &'a str) -> Machine<'a> {
        Machine {
            kv: &*self.inner.kv,
            scope: &self.inner.scope,
            me: &self.inner.me,
            kind,
            name,
        }
    }

    /// Takes or renews lease `name` of `kind` for this replica, or queues `ticket` for it.
    async fn acquire(
        &self,
        kind: FenceKind,
        name: &str,
        ticket: Option<u64>,
    ) -> Result<Acquired, CoordinationError> {
        let lease_ms = self.lease_ms(kind);
        self.machine(kind, name)
            .acquire(self.clock_fn(), ticket, lease_ms)
            .await
    }

    /// Gives the lease `fence` holds back.
    async fn release(&self, kind: FenceKind, fence: &Fence) -> Result<(), CoordinationError> {
        self.machine(kind, &fence.name)
            .release(self.clock_fn(), fence)
            .await
    }

    /// `Ok` when `fence` still holds lease `name` of `kind` with the safety margin left; a
    /// fenced holder is counted.
    async fn check(
        &self,
        kind: FenceKind,
        name: &str,
        fence: &Fence,
    ) -> Result<(), CoordinationError> {
        let result = self
            .machine(kind, name)
            .check(self.now_ms(), fence, self.margin_ms())
            .await;
        self.counted(result)
    }

    /// The live holder of lease `name` of `kind`, if any.
    async fn holder(
        &self,
        kind: FenceKind,
        name: &str,
    ) -> Result<Option<Fence>, CoordinationError> {
        self.machine(kind, name).holder(self.now_ms()).await
    }

    fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    fn clock_fn(&self) -> impl Fn() -> i64 + '_ {
        move || self.inner.clock.now_ms()
    }

    fn lease_ms(&self, kind: FenceKind) -> i64 {
        duration_ms(match kind {
            FenceKind::Turn => self.inner.config.turn_lease,
            FenceKind::Leader => self.inner.config.leader_lease,
        })
    }

    fn margin_ms(&self) -> i64 {
        duration_ms(self.inner.config.safety_margin)
    }

    fn emit(&self, event: CoordinationEvent) {
        // Nobody listening is fine.
        let _ = self.inner.events.send(event);
    }

    /// Counts and emits a hand-over: this replica finished the cut step of `flow` in `chat`
    /// fed by `answer_of`, found by the message `found_by`.
    pub fn handed_over(&self, chat: &str, flow: &str, answer_of: &str, found_by: Option<&str>) {
        self.inner
            .counters
            .handovers
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            chat,
            flow,
            answer_of,
            found_by,
            "a conversation step cut short is finished here"
        );
        self.emit(CoordinationEvent::HandedOver {
            chat: chat.to_owned(),
            flow: flow.to_owned(),
            answer_of: answer_of.to_owned(),
            found_by: found_by.map(str::to_owned),
        });
    }

    /// Deletes up to `max` turn and leader records that nobody has held or waited for since
    /// at least `idle_for` ago (the turns of chats that finished, see `record`); returns how
    /// many. A token is never issued twice for a chat or lease afterwards: a record created
    /// anew starts above every deleted token. The runtime calls it from its sweeper.
    pub async fn purge_idle(
        &self,
        idle_for: Duration,
        max: usize,
    ) -> Result<usize, CoordinationError> {
        let now = self.now_ms();
        let cutoff = now.saturating_sub(duration_ms(idle_for));
        let purged =
            record::purge_idle(&*self.inner.kv, &self.inner.scope, now, cutoff, max).await?;
        if purged > 0 {
            self.inner
                .counters
                .records_purged
                .fetch_add(purged as u64, Ordering::Relaxed);
            tracing::debug!(purged, "idle turn and leader records purged");
        }
        Ok(purged)
    }

    /// `result`, counting, logging and emitting a refused stale holder.
    fn counted<T>(&self, result: Result<T, CoordinationError>) -> Result<T, CoordinationError> {
        if let Err(CoordinationError::Fenced {
            kind, name, token, ..
        }) = &result
        {
            self.inner
                .counters
                .fenced_refusals
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %result.as_ref().err().map(ToString::to_string).unwrap_or_default(), "stale holder fenced off");
            self.emit(CoordinationEvent::Fenced {
                kind: *kind,
                name: name.clone(),
                token: *token,
            });
        }
        result
    }
}
