//! The test environment shared by the journal tests: one in-memory backend and one manual
//! clock, durabilities opened on them, and short helpers for the common steps.

use std::sync::Arc;
use std::time::Duration;

use botmesh_durability::clock::ManualClock;
use botmesh_durability::inbox::InboxJournalClaim;
use botmesh_durability::inbox::NewInbound;
use botmesh_durability::keys::SendKey;
use botmesh_durability::leases::{InboxLease, OutboxLease};
use botmesh_durability::outbox::NewSend;
use botmesh_durability::outbox::SendJournal;
use botmesh_durability::outbox::{BeginAttempt, JournalBegun};
use botmesh_durability::retries::Backoff;
use botmesh_durability::{
    DurabilityConfig, DurabilityEvent, KvDurability, MemoryKv, OutboxState, Scope,
};
use serde_json::json;

/// The journals every test opens.
type Kd = KvDurability<MemoryKv>;

pub(crate) const T0: i64 = 1_700_000_000_000;

pub(crate) struct Env {
    pub(crate) kv: Arc<MemoryKv>,
    pub(crate) clock: ManualClock,
}

impl Env {
    pub(crate) fn new() -> Self {
        Env {
            kv: Arc::new(MemoryKv::new()),
            clock: ManualClock::new(T0),
        }
    }

    /// A fresh environment, and the journals of instance `i1` on it (default config).
    pub(crate) fn opened() -> (Self, Kd) {
        let env = Self::new();
        let d = env.open("i1", |_| {});
        (env, d)
    }

    /// [`Env::opened`], with a send of `text` to `chat` journaled under the explicit `key`.
    pub(crate) async fn with_send(key: &str, chat: &str, text: &str) -> (Self, Kd) {
        let (env, d) = Self::opened();
        journal(&d, SendKey::explicit(key), chat, text).await;
        (env, d)
    }

    pub(crate) fn open(
        &self,
        instance: &str,
        tweak: impl FnOnce(&mut DurabilityConfig),
    ) -> KvDurability<MemoryKv> {
        self.open_in(Scope::new("t", "test", "bot", "c"), instance, tweak)
    }

    pub(crate) fn open_in(
        &self,
        scope: Scope,
        instance: &str,
        tweak: impl FnOnce(&mut DurabilityConfig),
    ) -> KvDurability<MemoryKv> {
        let mut config = DurabilityConfig {
            instance_id: Some(instance.into()),
            ..Default::default()
        };
        config.inbox.backoff = Backoff::fixed(Duration::from_secs(1), Duration::from_secs(60));
        config.outbox.backoff = Backoff::fixed(Duration::from_secs(1), Duration::from_secs(60));
        tweak(&mut config);
        KvDurability::builder(Arc::clone(&self.kv), scope)
            .config(config)
            .clock(self.clock.clone())
            .build()
            .expect("valid config")
    }
}

pub(crate) async fn claim_new(d: &KvDurability<MemoryKv>, chat: &str, msg: &str) -> InboxLease {
    match d
        .inbox()
        .journal_and_claim(NewInbound::new(chat, msg, json!({ "text": msg })))
        .await
        .expect("journal")
    {
        InboxJournalClaim::Claimed(c) => c.lease,
        InboxJournalClaim::Duplicate(r) => panic!("unexpected duplicate {r:?}"),
    }
}

/// A send of `text` to `chat` under `key`.
fn send_of(key: SendKey, chat: &str, text: &str) -> NewSend {
    NewSend::new(key, chat, json!({ "text": text }))
}

pub(crate) async fn journal(d: &Kd, key: SendKey, chat: &str, text: &str) -> SendJournal {
    let send = send_of(key, chat, text);
    d.outbox().journal(send).await.expect("journal send")
}

pub(crate) async fn journal_and_begin(
    d: &Kd,
    key: SendKey,
    chat: &str,
    text: &str,
) -> JournalBegun {
    let send = send_of(key, chat, text);
    d.outbox()
        .journal_and_begin(send)
        .await
        .expect("journal_and_begin")
}

pub(crate) async fn lease(d: &KvDurability<MemoryKv>, key: &str) -> OutboxLease {
    match d.outbox().begin_attempt(key).await.expect("begin_attempt") {
        BeginAttempt::Leased { lease, .. } => lease,
        other => panic!("expected a lease on {key}, got {other:?}"),
    }
}

/// Journals the send `hi` to alice under the explicit key `k` and leases it: the process is
/// about to call the provider, and dies.
pub(crate) async fn leave_leased(d: &Kd) {
    journal(d, SendKey::explicit("k"), "alice", "hi").await;
    lease(d, "k").await;
}

/// What recovery reports of [`leave_leased`]'s send.
pub(crate) fn ambiguous_hi_to_alice() -> DurabilityEvent {
    DurabilityEvent::Ambiguous {
        key: "k".into(),
        chat: "alice".into(),
        text: String::new(),
    }
}

pub(crate) async fn send_ok(d: &KvDurability<MemoryKv>, key: &str) {
    let l = lease(d, key).await;
    d.outbox()
        .mark_sent(&l, Some(format!("p-{key}")))
        .await
        .expect("mark_sent");
}

pub(crate) async fn state(d: &KvDurability<MemoryKv>, key: &str) -> OutboxState {
    d.outbox()
        .lookup(key)
        .await
        .expect("lookup")
        .expect("record")
        .state
}

pub(crate) fn events(
    rx: &mut tokio::sync::broadcast::Receiver<DurabilityEvent>,
) -> Vec<DurabilityEvent> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}
