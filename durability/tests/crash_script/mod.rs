//! The scripted "process" of the crash tests: a tiny runtime (handlers, inline send loop,
//! sweeper) over the journals, a scripted provider that counts deliveries, an observer, and
//! the guarantees of `docs/durability-and-backends.md` ([`check_guarantees`]).
//!
//! The harness runs on any [`DurableKv`] ([`Harness::on`]; [`Harness::new`] is the memory
//! backend). A backend that survives a restart builds each new incarnation on a reopened
//! backend with [`Harness::incarnation_on`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_durability::clock::ManualClock;
use botmesh_durability::inbox::NewInbound;
use botmesh_durability::inbox::{Claim, InboxJournalClaim};
use botmesh_durability::keys::SendKey;
use botmesh_durability::kv::Scope;
use botmesh_durability::outbox::BeginAttempt;
use botmesh_durability::outbox::NewSend;
use botmesh_durability::retries::Backoff;
use botmesh_durability::retries::FailOutcome;
use botmesh_durability::retries::SendFailure;
use botmesh_durability::testing::crash::Crashable;
use botmesh_durability::{
    DurabilityConfig, DurabilityError, DurableKv, InboxState, KvDurability, MemoryKv, OnAmbiguous,
    OutboxState,
};
use serde_json::json;

/// The crash switch of the live incarnation.
pub(crate) type Switch<K = MemoryKv> = Crashable<K>;

const T0: i64 = 1_700_000_000_000;
const DAY: Duration = Duration::from_secs(24 * 3600);

/// What the scripted provider answers.
#[derive(Debug, Clone, Copy)]
enum Reply {
    Ok,
    Retryable,
    Final,
    /// The request reached the channel but the answer was lost.
    Timeout,
}

#[derive(Default)]
struct Provider {
    script: Mutex<HashMap<String, VecDeque<Reply>>>,
    delivered: Mutex<BTreeMap<String, u32>>,
}

impl Provider {
    fn call(&self, key: &str) -> Reply {
        let reply = self
            .script
            .lock()
            .expect("script")
            .get_mut(key)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Reply::Ok);
        if matches!(reply, Reply::Ok | Reply::Timeout) {
            *self
                .delivered
                .lock()
                .expect("log")
                .entry(key.to_owned())
                .or_default() += 1;
        }
        reply
    }

    fn delivered(&self, key: &str) -> u32 {
        self.delivered
            .lock()
            .expect("log")
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

/// One backend, one clock, one provider, shared by every incarnation of the test.
pub(crate) struct Harness<B: DurableKv = MemoryKv> {
    pub(crate) base: KvDurability<B>,
    kv: Arc<B>,
    clock: ManualClock,
    provider: Provider,
    m0: NewInbound,
    m1: NewInbound,
    m2: NewInbound,
    m3: NewInbound,
}

/// What a run left behind.
#[derive(Debug)]
pub(crate) struct Observed {
    pub(crate) m0_purged: bool,
    pub(crate) m1: Option<InboxState>,
    pub(crate) m2: Option<InboxState>,
    /// The first message's replies: key, state, provider deliveries.
    pub(crate) replies: Vec<(String, Option<OutboxState>, u32)>,
    pub(crate) notice: (Option<OutboxState>, Option<OutboxState>),
    /// Records still pending, failed, processing or sending.
    pub(crate) open: usize,
    pub(crate) ambiguous: u64,
    pub(crate) dead: u64,
}

type R<T = ()> = Result<T, DurabilityError>;

fn state_name<S: std::fmt::Debug>(s: &Option<S>) -> String {
    s.as_ref()
        .map_or("-".to_owned(), |s| format!("{s:?}").to_lowercase())
}

impl Observed {
    pub(crate) fn row(&self, point: &str, phase: &str, policy: OnAmbiguous) -> String {
        let replies = self
            .replies
            .iter()
            .map(|(_, s, n)| format!("{}×{n}", state_name(s)))
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "| {point:<22} | {phase:<6} | {:<6} | {:<10} | {replies:<34} | {:<10} | {:<13} | amb {} dead {} |",
            format!("{policy:?}").to_lowercase(),
            state_name(&self.m1),
            state_name(&self.m2),
            format!(
                "{}, {}",
                state_name(&self.notice.0),
                state_name(&self.notice.1)
            ),
            self.ambiguous,
            self.dead,
        )
    }
}

impl Harness {
    /// The harness on a new memory backend.
    #[allow(
        dead_code,
        reason = "the file and SQLite crash matrices bring their backend"
    )]
    pub(crate) async fn new(policy: OnAmbiguous) -> Self {
        Self::on(policy, Arc::new(MemoryKv::new())).await
    }
}

impl<B: DurableKv> Harness<B> {
    /// The harness on `kv` (empty), with the setup already written.
    pub(crate) async fn on(policy: OnAmbiguous, kv: Arc<B>) -> Self {
        let clock = ManualClock::new(T0);
        let mut config = DurabilityConfig {
            instance_id: Some("bot-1".into()),
            ..DurabilityConfig::default()
        };
        config.inbox.max_attempts = 2;
        config.inbox.backoff = Backoff::fixed(Duration::from_secs(1), Duration::from_secs(60));
        config.outbox.backoff = Backoff::fixed(Duration::from_secs(1), Duration::from_secs(60));
        config.outbox.on_ambiguous = policy;
        let base = KvDurability::builder(Arc::clone(&kv), Scope::new("t", "test", "bot", "c"))
            .config(config)
            .clock(clock.clone())
            .build()
            .expect("valid config");
        let h = Harness {
            base,
            kv,
            clock,
            provider: Provider::default(),
            m0: NewInbound::new("zoe", "m0", json!({"text": "old"})),
            m1: NewInbound::new("alice", "m1", json!({"text": "order"})),
            m2: NewInbound::new("bob", "m2", json!({"text": "hello"})),
            m3: NewInbound::new("carol", "m3", json!({"text": "spam"})),
        };
        h.setup().await;
        h
    }

    /// Before the live process: an old done record (for retention), the provider's script and
    /// one undecodable record per journal.
    async fn setup(&self) {
        if let Ok(InboxJournalClaim::Claimed(c)) =
            self.base.inbox().journal_and_claim(self.m0.clone()).await
        {
            self.base
                .inbox()
                .complete(&c.lease)
                .await
                .expect("complete m0");
        }
        {
            let mut script = self.provider.script.lock().expect("script");
            script.insert(self.key(&self.m1, 1), VecDeque::from([Reply::Retryable]));
            script.insert(self.key(&self.m1, 2), VecDeque::from([Reply::Timeout]));
            script.insert("notice:1".into(), VecDeque::from([Reply::Final]));
        }
        let scope = self.base.scope().clone();
        for (key, idx) in [
            ("i/poison", "i/pending/0000000000000000/poison"),
            ("o/poison", "o/pending/0000000000000000/poison"),
        ] {
            let entry = botmesh_durability::kv::Entry {
                value: b"\x00garbage".to_vec(),
                idx1: Some(idx.into()),
                idx2: None,
            };
            self.kv.cas(&scope, key, None, entry).await.expect("poison");
        }
        self.clock.advance(8 * DAY);
    }

    /// A new incarnation (same scope, config, clock and instance id as `base`) on `kv`: what
    /// a restarted process that reopened the backend sees.
    #[allow(
        dead_code,
        reason = "used by the crash matrices of the file and SQLite backends"
    )]
    pub(crate) fn incarnation_on<K2: DurableKv>(&self, kv: Arc<K2>) -> KvDurability<K2> {
        KvDurability::builder(kv, self.base.scope().clone())
            .config(self.base.config().clone())
            .shared_clock(self.base.clock())
            .build()
            .expect("valid config")
    }

    fn key(&self, m: &NewInbound, n: u32) -> String {
        SendKey::derived(&m.id, n).as_str().to_owned()
    }

    /// The live process's day.
    pub(crate) async fn script<K: DurableKv + ?Sized>(&self, d: &KvDurability<K>) -> R {
        let inbox = d.inbox();
        inbox.journal(self.m1.clone()).await?;
        let Claim::Leased(c) = inbox.claim(&self.m1.id).await? else {
            panic!("m1 must be claimable");
        };
        let lease = inbox.heartbeat(&c.lease).await?;
        self.handle(d, &self.m1.id).await?;
        inbox.complete(&lease).await?;

        let InboxJournalClaim::Claimed(c2) = inbox.journal_and_claim(self.m2.clone()).await? else {
            panic!("m2 must be new");
        };
        inbox.fail(&c2.lease, "store is down", true).await?;
        self.clock.advance(Duration::from_secs(2));
        let claims = inbox.claim_due(10).await?;
        assert_eq!(claims.len(), 1, "m2 is due again");
        inbox.release(&claims[0].lease, Duration::ZERO).await?;
        let frozen = inbox.claim_due(10).await?;
        assert_eq!(
            frozen.len(),
            1,
            "m2 is claimed once more and then abandoned"
        );
        self.clock
            .advance(d.config().inbox.lease + Duration::from_millis(1));
        assert!(
            inbox.claim_due(10).await?.is_empty(),
            "m2 is dead-lettered, not claimed"
        );
        d.replay_inbound(&self.m2.id).await?;
        for c in inbox.claim_due(10).await? {
            self.handle(d, &c.record.id).await?;
            inbox.complete(&c.lease).await?;
        }

        inbox.journal(self.m3.clone()).await?;
        inbox.discard(&self.m3.id).await?;

        self.send(d, SendKey::explicit("notice:1"), "dave", "n1|n2")
            .await?;
        d.retry_send("notice:1").await?;
        self.sweep_outbox(d).await?;

        d.outbox()
            .journal(NewSend::new(
                SendKey::explicit("promo:1"),
                "erin",
                json!({"text": "sale"}),
            ))
            .await?;
        d.discard_send("promo:1").await?;

        d.purge(1000).await?;
        Ok(())
    }

    /// The handlers: deterministic sends per inbound record.
    async fn handle<K: DurableKv + ?Sized>(&self, d: &KvDurability<K>, id: &str) -> R {
        if id == self.m1.id {
            self.send(d, SendKey::derived(id, 1), "alice", "part A|part B")
                .await?;
            self.send(d, SendKey::derived(id, 2), "alice", "done")
                .await?;
        } else if id == self.m2.id {
            self.send(d, SendKey::derived(id, 1), "bob", "hi bob")
                .await?;
        }
        Ok(())
    }

    async fn send<K: DurableKv + ?Sized>(
        &self,
        d: &KvDurability<K>,
        key: SendKey,
        chat: &str,
        text: &str,
    ) -> R {
        let key_text = key.as_str().to_owned();
        let journaled = d
            .outbox()
            .journal(NewSend::new(key, chat, json!({ "text": text })))
            .await?;
        let Some(record) = journaled.record().cloned() else {
            panic!("nothing here is large enough to bypass the outbox");
        };
        let chain = if text.contains('|') {
            let parts = text.split('|').map(|p| json!({ "text": p })).collect();
            d.outbox().split_parts(&key_text, parts).await?
        } else {
            vec![record]
        };
        for r in chain {
            self.deliver(d, &r.key).await?;
        }
        Ok(())
    }

    /// The inline send loop: retries while the record says so, gives up on waiting.
    async fn deliver<K: DurableKv + ?Sized>(&self, d: &KvDurability<K>, key: &str) -> R {
        for _ in 0..10 {
            match d.outbox().begin_attempt(key).await? {
                BeginAttempt::Leased { lease, .. } => {
                    let lease = d.outbox().heartbeat(&lease).await?;
                    match self.provider.call(key) {
                        Reply::Ok => {
                            d.outbox()
                                .mark_sent(&lease, Some(format!("p-{key}")))
                                .await?;
                            return Ok(());
                        }
                        Reply::Retryable => {
                            if let FailOutcome::Retrying { at_ms } = d
                                .outbox()
                                .mark_failed(&lease, &SendFailure::retryable("503"))
                                .await?
                            {
                                self.clock.set(at_ms.max(self.clock_now()));
                            }
                        }
                        Reply::Final => {
                            d.outbox()
                                .mark_failed(&lease, &SendFailure::final_error("unsupported"))
                                .await?;
                            return Ok(());
                        }
                        Reply::Timeout => {
                            d.outbox().mark_ambiguous(&lease, "timeout").await?;
                            return Ok(());
                        }
                    }
                }
                BeginAttempt::NotDue { at_ms } => self.clock.set(at_ms.max(self.clock_now())),
                _ => return Ok(()),
            }
        }
        Ok(())
    }

    fn clock_now(&self) -> i64 {
        use botmesh_durability::clock::Clock;
        self.clock.now_ms()
    }

    async fn sweep_outbox<K: DurableKv + ?Sized>(&self, d: &KvDurability<K>) -> R<usize> {
        let mut sent = 0;
        for _ in 0..20 {
            let due = d.outbox().due(10).await?;
            if due.is_empty() {
                break;
            }
            for r in due {
                self.deliver(d, &r.key).await?;
                sent += 1;
            }
        }
        Ok(sent)
    }

    /// A restarted process: the channel redelivers the first message, then the sweeper runs
    /// until there is nothing left to do.
    pub(crate) async fn recover<K: DurableKv + ?Sized>(&self, d: &KvDurability<K>) -> R {
        if let InboxJournalClaim::Claimed(c) = d.inbox().journal_and_claim(self.m1.clone()).await? {
            self.handle(d, &c.record.id).await?;
            d.inbox().complete(&c.lease).await?;
        }
        for _ in 0..50 {
            let claims = d.inbox().claim_due(10).await?;
            let mut work = claims.len();
            for c in claims {
                self.handle(d, &c.record.id).await?;
                d.inbox().complete(&c.lease).await?;
            }
            work += self.sweep_outbox(d).await?;
            if work == 0 && self.open(d).await? == 0 {
                break;
            }
            self.clock.advance(Duration::from_secs(2));
        }
        Ok(())
    }

    async fn open<K: DurableKv + ?Sized>(&self, d: &KvDurability<K>) -> R<usize> {
        let mut n = 0;
        for s in [InboxState::Pending, InboxState::Processing] {
            n += d.inbox().list(s, 100).await?.len();
        }
        for s in [
            OutboxState::Pending,
            OutboxState::Failed,
            OutboxState::Sending,
        ] {
            n += d.outbox().list(s, 100).await?.len();
        }
        Ok(n)
    }

    pub(crate) async fn observe<K: DurableKv + ?Sized>(&self, d: &KvDurability<K>) -> Observed {
        let inbound = |id: &str| {
            let id = id.to_owned();
            async move { d.inbox().get(&id).await.expect("get").map(|r| r.state) }
        };
        let outbound = |key: String| async move {
            d.outbox()
                .lookup(&key)
                .await
                .expect("lookup")
                .map(|r| r.state)
        };
        let mut replies = Vec::new();
        for key in [
            self.key(&self.m1, 1),
            format!("{}#2", self.key(&self.m1, 1)),
            self.key(&self.m1, 2),
        ] {
            replies.push((
                key.clone(),
                outbound(key.clone()).await,
                self.provider.delivered(&key),
            ));
        }
        let metrics = d.metrics();
        Observed {
            m0_purged: inbound(&self.m0.id).await.is_none(),
            m1: inbound(&self.m1.id).await,
            m2: inbound(&self.m2.id).await,
            replies,
            notice: (
                outbound("notice:1".into()).await,
                outbound("notice:1#2".into()).await,
            ),
            open: self.open(d).await.expect("open"),
            ambiguous: metrics.outbox_ambiguous,
            dead: metrics.outbox_dead + metrics.inbound_dead,
        }
    }
}

/// Checks the guarantees (the table "What is guaranteed" in `docs/durability-and-backends.md`).
/// `crash_loop` allows the first message to be dead-lettered: it was running in two
/// incarnations that both died, and `inbox.max_attempts` is 2 here.
pub(crate) fn check_guarantees(policy: OnAmbiguous, label: &str, o: &Observed, crash_loop: bool) {
    if crash_loop && o.m1 == Some(InboxState::Dead) {
        for (key, _, delivered) in &o.replies {
            if policy == OnAmbiguous::Skip {
                assert!(
                    *delivered <= 1,
                    "{label}: `{key}` delivered {delivered} times under skip"
                );
            }
        }
        assert_eq!(
            o.open, 0,
            "{label}: records left in flight after recovery: {o:?}"
        );
        return;
    }
    assert_eq!(
        o.m1,
        Some(InboxState::Done),
        "{label}: the first message must end done: {o:?}"
    );
    for (key, state, delivered) in &o.replies {
        match policy {
            OnAmbiguous::Skip => {
                assert!(
                    *delivered <= 1,
                    "{label}: `{key}` delivered {delivered} times under skip"
                );
                assert!(
                    matches!(state, Some(OutboxState::Sent | OutboxState::Unknown)),
                    "{label}: `{key}` ended {state:?}"
                );
                if *state == Some(OutboxState::Sent) {
                    assert_eq!(
                        *delivered, 1,
                        "{label}: `{key}` is sent but was delivered {delivered} times"
                    );
                }
            }
            OnAmbiguous::Resend => {
                assert!(*delivered >= 1, "{label}: `{key}` was lost under resend");
                assert_eq!(
                    *state,
                    Some(OutboxState::Sent),
                    "{label}: `{key}` ended {state:?}"
                );
            }
        }
    }
    assert_eq!(
        o.open, 0,
        "{label}: records left in flight after recovery: {o:?}"
    );
}
