//! The crash harness: "kill" a process at a precise journal write.
//!
//! [`crashable`] wraps any [`DurableKv`]. Arm it with [`Crashable::crash_before`] /
//! [`Crashable::crash_after`] a [`CrashPoint`] (or [`Crashable::crash_randomly`] with a seed),
//! build the durability under test on it ([`crashable_durability`]), and drive it. When the
//! point is reached the wrapper fails that write and every later operation with
//! [`KvError::Crashed`], as if the process had died there. Then abandon that durability and
//! start a new incarnation on the unwrapped backend with the same instance id
//! ([`KvDurability::reopen`]) to observe recovery.
//!
//! | armed | the write at the point | the caller sees | every later call |
//! | --- | --- | --- | --- |
//! | `crash_before(p)` | never issued | `Crashed { p, before }` | `Crashed` |
//! | `crash_after(p)` | applied (durable) | `Crashed { p, after }` | `Crashed` |
//! | `crash_randomly(seed, prob)` | before or after, at the first point drawn | same as above | `Crashed` |
//! | `fail_once(p)` | never issued | `Unavailable` (the backend away for a moment) | as usual: no crash |
//!
//! The points are [`CRASH_POINTS`] (every [`WritePoint`]): `inbox.journal`, `inbox.claim`,
//! `inbox.heartbeat`, `inbox.complete`, `inbox.fail`, `inbox.release`, `inbox.deadLetter`,
//! `inbox.replay`, `inbox.discard`, `inbox.quarantine`, `outbox.journal`, `outbox.split`,
//! `outbox.beginAttempt`, `outbox.heartbeat`, `outbox.markSent`, `outbox.markFailed`,
//! `outbox.markAmbiguous`, `outbox.deadLetter`, `outbox.retry`, `outbox.discard`,
//! `outbox.quarantine`, `retention.purge`.
//!
//! The wrapper only simulates the process dying at a journal write; a real process killed in
//! the middle of a handler is the `tests` crate's job.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::error::DurabilityError;
use crate::journal::KvDurability;
use crate::kv::{
    CasOutcome, DurableKv, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned, WritePhase,
    WritePoint,
};

/// A journal write point where a crash can be injected.
pub type CrashPoint = WritePoint;

/// Every crash point.
pub const CRASH_POINTS: [CrashPoint; 22] = WritePoint::ALL;

/// Where a crash happened (or a point was passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CrashSite {
    /// The write point.
    pub point: CrashPoint,
    /// Before or after the write.
    pub phase: WritePhase,
}

impl std::fmt::Display for CrashSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.phase, self.point)
    }
}

#[derive(Default)]
struct State {
    armed: Option<(CrashSite, u32)>,
    random: Option<(fastrand::Rng, f64)>,
    crashed: Option<CrashSite>,
    passed: Vec<CrashSite>,
    /// The point whose next write fails once, without a crash.
    blip: Option<CrashPoint>,
    /// Writes failed by `blip` so far.
    blips: u32,
    /// Whether every call fails as unavailable (see [`Crashable::set_down`]).
    down: bool,
}

/// A [`DurableKv`] that can die at a journal write point. Clones share the same switch.
pub struct Crashable<K: ?Sized> {
    inner: Arc<K>,
    state: Arc<Mutex<State>>,
}

impl<K: ?Sized> Clone for Crashable<K> {
    fn clone(&self) -> Self {
        Crashable {
            inner: Arc::clone(&self.inner),
            state: Arc::clone(&self.state),
        }
    }
}

/// Wraps `backend` so that it can be crashed at a journal write point.
pub fn crashable<K: DurableKv + ?Sized>(backend: Arc<K>) -> Crashable<K> {
    Crashable {
        inner: backend,
        state: Arc::default(),
    }
}

/// A new incarnation of `durability` (same scope, config, clock and instance id) whose backend
/// is wrapped by [`crashable`]; returns the switch and the durability to drive.
pub fn crashable_durability<K: DurableKv + ?Sized>(
    durability: &KvDurability<K>,
) -> Result<(Crashable<K>, KvDurability<Crashable<K>>), DurabilityError> {
    let switch = crashable(Arc::clone(durability.kv()));
    let mut config = durability.config().clone();
    config.instance_id = Some(durability.instance_id().to_owned());
    let wrapped = KvDurability::builder(Arc::new(switch.clone()), durability.scope().clone())
        .config(config)
        .shared_clock(durability.clock())
        .build()?;
    Ok((switch, wrapped))
}

impl<K: ?Sized> Crashable<K> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Crashes just before the first write at `point`: the write never lands.
    pub fn crash_before(&self, point: CrashPoint) {
        self.crash_at(point, WritePhase::Before, 1);
    }

    /// Crashes just after the first write at `point`: the write landed, the caller never
    /// learns it.
    pub fn crash_after(&self, point: CrashPoint) {
        self.crash_at(point, WritePhase::After, 1);
    }

    /// Crashes at the `occurrence`-th (from 1) passage of `point` in `phase`.
    pub fn crash_at(&self, point: CrashPoint, phase: WritePhase, occurrence: u32) {
        self.lock().armed = Some((CrashSite { point, phase }, occurrence.max(1)));
    }

    /// Crashes at a random point: each passage (before or after a write) crashes with
    /// `probability`, drawn from a generator seeded with `seed` (so a failing seed replays).
    pub fn crash_randomly(&self, seed: u64, probability: f64) {
        self.lock().random = Some((fastrand::Rng::with_seed(seed), probability.clamp(0.0, 1.0)));
    }

    /// Fails the next write at `point` once, before it is issued, with
    /// [`KvError::Unavailable`], as a backend away for a moment would; nothing crashes, and
    /// every later call goes through.
    pub fn fail_once(&self, point: CrashPoint) {
        self.lock().blip = Some(point);
    }

    /// Takes the backend down (`true`) or brings it back up (`false`): while it is down every
    /// call fails with [`KvError::Unavailable`], as a backend whose server is gone would;
    /// nothing crashes.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// How many writes [`fail_once`](Self::fail_once) failed so far.
    pub fn failed_once(&self) -> u32 {
        self.lock().blips
    }

    /// Disarms every planned crash (a crash that happened stays).
    pub fn disarm(&self) {
        let mut s = self.lock();
        s.armed = None;
        s.random = None;
    }

    /// Where the backend crashed, if it did.
    pub fn crashed(&self) -> Option<CrashSite> {
        self.lock().crashed
    }

    /// Whether the backend crashed.
    pub fn is_crashed(&self) -> bool {
        self.crashed().is_some()
    }

    /// Every point passed so far, in order (the crash site last, if any).
    pub fn passed(&self) -> Vec<CrashSite> {
        self.lock().passed.clone()
    }

    /// The wrapped backend (what a restarted process opens again).
    pub fn inner(&self) -> &Arc<K> {
        &self.inner
    }

    fn check(&self) -> Result<(), KvError> {
        let s = self.lock();
        match s.crashed {
            Some(site) => Err(KvError::Crashed {
                point: site.point,
                phase: site.phase,
            }),
            None if s.down => Err(KvError::Unavailable {
                operation: "kv",
                source: "the backend is down (crash harness)".into(),
            }),
            None => Ok(()),
        }
    }

    fn pass(&self, site: CrashSite) -> Result<(), KvError> {
        let mut s = self.lock();
        if let Some(crashed) = s.crashed {
            return Err(KvError::Crashed {
                point: crashed.point,
                phase: crashed.phase,
            });
        }
        if site.phase == WritePhase::Before && s.blip == Some(site.point) {
            s.blip = None;
            s.blips += 1;
            tracing::info!(%site, "crash harness: the backend failed one write");
            return Err(KvError::Unavailable {
                operation: "cas",
                source: format!("the backend failed {site} once (crash harness)").into(),
            });
        }
        s.passed.push(site);
        let mut crash = false;
        if let Some((armed, left)) = s.armed.as_mut()
            && *armed == site
        {
            *left -= 1;
            crash = *left == 0;
        }
        if let Some((rng, probability)) = s.random.as_mut()
            && rng.f64() < *probability
        {
            crash = true;
        }
        if crash {
            s.crashed = Some(site);
            s.armed = None;
            s.random = None;
            tracing::info!(%site, "crash harness: process killed");
            return Err(KvError::Crashed {
                point: site.point,
                phase: site.phase,
            });
        }
        Ok(())
    }
}

impl<K: ?Sized> std::fmt::Debug for Crashable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crashable")
            .field("crashed", &self.crashed())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<K: DurableKv + ?Sized> DurableKv for Crashable<K> {
    async fn open(&self) -> Result<(), KvError> {
        self.check()?;
        self.inner.open().await
    }
    async fn close(&self) -> Result<(), KvError> {
        self.inner.close().await
    }

    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        self.check()?;
        self.inner.get(scope, key).await
    }

    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        self.check()?;
        self.inner.apply(scope, op).await
    }

    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        self.check()?;
        self.inner.scan(scope, query).await
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        self.check()?;
        self.inner.batch(scope, ops).await
    }

    fn shared_between_processes(&self) -> bool {
        self.inner.shared_between_processes()
    }

    fn on_journal_write(&self, point: WritePoint, phase: WritePhase) -> Result<(), KvError> {
        self.pass(CrashSite { point, phase })?;
        self.inner.on_journal_write(point, phase)
    }

    /// The inner backend: a store that shares its transactions with it commits flow steps in
    /// one transaction under the harness too (the step's write points still pass the hooks).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.inner.as_any()
    }
}
