//! Persistent flows on a durable bot, crashed at each journal write point: the conversation
//! resumes where it was, a replayed answer is never taken as the answer to the next question,
//! no question is asked twice, and every reply goes out exactly once (except a send reported
//! ambiguous). Also: a `cx.effect` cut by a crash runs once in total.
//!
//! Each runs twice: on the memory backends (a step's writes go one after the other) and on a
//! SQLite store with its own durability (a step commits in one transaction: checkpoint, its
//! sends' outbox records and the inbound's completion together), where a crash right before or
//! right after that transaction is checked to leave all of the step or none of it.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use crate::common::{self, Hold};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use botmesh::durability::backends::postgres::PostgresConfig;
use botmesh::durability::kv::WritePhase;
use botmesh::durability::kv::WritePoint;
use botmesh::durability::{
    DurabilityEvent, DurableKv, InboxState, KvDurability, MemoryKv, MemoryStore, OutboxState,
    PostgresStore, Scope, SqliteStore, Store,
};
use botmesh::prelude::*;
use botmesh::testing::{CrashableProvider, MockProvider, crashable};
use botmesh_tests::settle;

/// Declares a persistent flow that takes an order in two questions, then charges once,
/// counting its charges in a counter of its own (tests run in parallel).
macro_rules! order_flow {
    ($(#[$doc:meta])* $name:ident, $charges:ident) => {
        static $charges: AtomicUsize = AtomicUsize::new(0);

        $(#[$doc])*
        #[flow(start = command("order"))]
        #[persistent]
        async fn $name(cx: &mut FlowCx) -> FlowResult {
            let item: String = cx.ask("What would you like?").await?.text().to_owned();
            let qty: String = cx.ask("How many?").await?.text().to_owned();
            let receipt: String = cx
                .effect(async {
                    $charges.fetch_add(1, Ordering::SeqCst);
                    "receipt-1".to_owned()
                })
                .await?;
            cx.send(format!("Ordered {qty} x {item} ({receipt})"))
                .await?;
            Ok(())
        }
    };
}

order_flow!(
    /// Takes an order in two questions, then charges once.
    order,
    CHARGES
);
order_flow!(
    /// The same order, for the effect test on the memory backends.
    order_alone,
    CHARGES_ALONE
);
order_flow!(
    /// The same order, for the effect test on SQLite.
    order_sqlite,
    CHARGES_SQLITE
);

use botmesh_tests::{durable_bot, fast_durability as config};

const SCRIPT: [(&str, &str); 3] = [("m1", "/order"), ("m2", "pears"), ("m3", "2")];
/// The asks' prompts (resent when their send is ambiguous).
const PROMPTS: [&str; 2] = ["What would you like?", "How many?"];
const EXPECTED: [&str; 3] = [
    "What would you like?",
    "How many?",
    "Ordered 2 x pears (receipt-1)",
];

/// Bot A takes the conversation until it crashes at `point` (`occurrence`-th passage); bot B
/// (same instance id, backend and store) recovers; the channel redelivers what A did not
/// acknowledge and the user goes on with the rest of the script.
/// Where a run keeps its journals and its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// `MemoryKv` + `MemoryStore`: separate writes.
    Memory,
    /// A `SqliteStore` and its `durability_kv()`: one transaction per step.
    Sqlite,
}

/// A run's backends: the journals' backend and the store (the SQLite file lives in `_dir`).
struct Backends {
    kv: Arc<dyn DurableKv>,
    store: Arc<dyn Store>,
    _dir: Option<tempfile::TempDir>,
    /// The Postgres server, while the run uses it.
    _server: Option<Hold>,
}

fn backends(backend: Backend) -> Backends {
    match backend {
        Backend::Memory => Backends {
            kv: Arc::new(MemoryKv::new()),
            store: Arc::new(MemoryStore::new()),
            _dir: None,
            _server: None,
        },
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let store = SqliteStore::open(dir.path().join("bot.db"));
            Backends {
                kv: Arc::new(store.durability_kv()),
                store: Arc::new(store),
                _dir: Some(dir),
                _server: None,
            }
        }
    }
}

/// A durable bot on `b` whose journal writes and channel go through one crash switch: the
/// switch, the bot and its mock channel.
fn crashable_bot(
    b: &Backends,
) -> (
    botmesh::testing::Crashable<dyn DurableKv>,
    Bot,
    MockProvider,
) {
    let switch = crashable(b.kv.clone());
    let mock = MockProvider::new();
    let bot = durable_bot(
        CrashableProvider::new(mock.clone(), &switch),
        b.store.clone(),
        Arc::new(switch.clone()),
    );
    (switch, bot, mock)
}

async fn run(
    backend: Backend,
    point: WritePoint,
    phase: WritePhase,
    occurrence: u32,
    register: fn(&Bot),
) -> (Vec<String>, usize) {
    let b = backends(backend);
    let shared = b.kv.clone();
    let store = b.store.clone();
    let (switch, bot_a, mock_a) = crashable_bot(&b);
    switch.crash_at(point, phase, occurrence);
    register(&bot_a);
    bot_a.start().await.unwrap();
    // The first message the channel must deliver to B: one A did not acknowledge, or the
    // one after the message during which A crashed (acknowledged: B's recovery replays it).
    let mut resume_from = SCRIPT.len();
    for (i, (id, text)) in SCRIPT.iter().enumerate() {
        if mock_a.say("alice", id, text).await.is_err() {
            resume_from = i;
            break;
        }
        settle(&bot_a).await;
        if switch.is_crashed() {
            resume_from = i + 1;
            break;
        }
    }
    bot_a.stop().await.unwrap();

    let mock_b = MockProvider::new();
    let bot_b = durable_bot(mock_b.clone(), store.clone(), shared.clone());
    register(&bot_b);
    let mut events = bot_b.subscribe();
    bot_b.start().await.unwrap();
    settle(&bot_b).await;
    // The channel redelivers the message A did not acknowledge (if any), and the user goes on.
    for (id, text) in SCRIPT.iter().skip(resume_from) {
        mock_b.say("alice", id, text).await.unwrap();
        settle(&bot_b).await;
    }
    let mut ambiguous = 0;
    while let Ok(e) = events.try_recv() {
        if matches!(e, BotEvent::Durability(DurabilityEvent::Ambiguous { .. })) {
            ambiguous += 1;
        }
    }
    bot_b.stop().await.unwrap();
    let mut sent = mock_a.texts("alice");
    sent.extend(mock_b.texts("alice"));
    (sent, ambiguous)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_flow_survives_a_crash_at_every_journal_write() {
    let points = botmesh_tests::MESSAGE_WRITE_POINTS;
    for backend in [Backend::Memory, Backend::Sqlite] {
        for point in points {
            for phase in [WritePhase::Before, WritePhase::After] {
                for occurrence in 1..=3 {
                    let (sent, ambiguous) = run(backend, point, phase, occurrence, |b| {
                        b.flow(order);
                    })
                    .await;
                    let row = format!("{backend:?} {} {phase:?} #{occurrence}", point.as_str());
                    for text in EXPECTED {
                        let n = sent.iter().filter(|s| s.as_str() == text).count();
                        if ambiguous == 0 {
                            assert_eq!(n, 1, "{row}: {text:?} sent {n} times: {sent:?}");
                        } else if PROMPTS.contains(&text) {
                            // An ask's prompt is resent when ambiguous: never lost.
                            assert!(
                                (1..=2).contains(&n),
                                "{row}: {text:?} sent {n} times: {sent:?}"
                            );
                        } else {
                            assert!(n <= 1, "{row}: {text:?} sent {n} times: {sent:?}");
                        }
                    }
                    assert!(
                        !sent.iter().any(|s| s.contains("Ordered pears")),
                        "{row}: a replayed answer was taken for the next question: {sent:?}"
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_cut_by_a_crash_runs_once() {
    // The third message's step: the effect ran, then the crash hit the send's journal write.
    let register: fn(&Bot) = |b| {
        b.flow(order_alone);
    };
    assert_an_effect_cut_runs_once(Backend::Memory, register, &CHARGES_ALONE).await;
}

/// A run cut by a crash at the send's journal write of the third message's step, after its
/// effect (on `backend`, with the flow `register` sets up): the effect ran once in all
/// (`charges` counts its runs), and one order was confirmed.
async fn assert_an_effect_cut_runs_once(
    backend: Backend,
    register: fn(&Bot),
    charges: &AtomicUsize,
) {
    let (sent, _) = run(
        backend,
        WritePoint::OutboxJournal,
        WritePhase::Before,
        3,
        register,
    )
    .await;
    assert_eq!(charges.load(Ordering::SeqCst), 1, "charged once in total");
    assert_eq!(
        sent.iter().filter(|s| s.starts_with("Ordered")).count(),
        1,
        "{sent:?}"
    );
}

/// The chat's checkpoint step, the outbox records and the inbound records with their states.
type Leftovers = (
    Option<u64>,
    Vec<(String, OutboxState)>,
    Vec<(String, InboxState)>,
);

/// The state a bot left behind in its store and journals.
async fn leftovers(store: &Arc<dyn Store>, kv: Arc<dyn DurableKv>, scope: Scope) -> Leftovers {
    store.open().await.unwrap();
    let d = KvDurability::new(kv, scope, config()).unwrap();
    let checkpoint = store.checkpoint("alice").await.unwrap().map(|cp| cp.step);
    let mut sends = Vec::new();
    for state in OutboxState::ALL {
        for r in d.outbox().list(state, 100).await.unwrap() {
            sends.push((r.key, r.state));
        }
    }
    let mut inbound = Vec::new();
    for state in InboxState::ALL {
        for r in d.inbox().list(state, 100).await.unwrap() {
            inbound.push((r.id, r.state));
        }
    }
    (checkpoint, sends, inbound)
}

/// A Postgres store and its journals under a table prefix of their own (`None`: no server
/// configured, the suite is skipped).
async fn postgres_backends(prefix: &str) -> Option<Backends> {
    let (url, server) = common::server("BOTMESH_TEST_POSTGRES_URL")?;
    let config = PostgresConfig::default().table_prefix(prefix);
    let store = PostgresStore::connect_with(&url, config).await.unwrap();
    let kv = store.durability_kv();
    kv.open().await.unwrap();
    for table in [
        "durable",
        "checkpoints",
        "chats",
        "contacts",
        "ledger",
        "kv",
        "handoffs",
    ] {
        store
            .pool()
            .get()
            .await
            .unwrap()
            .execute(&format!("TRUNCATE {prefix}{table}"), &[])
            .await
            .unwrap();
    }
    Some(Backends {
        kv: Arc::new(kv),
        store: Arc::new(store),
        _dir: None,
        _server: Some(server),
    })
}

/// Bot A runs `/order` and `pears`, crashing at `point`/`phase` during the second step;
/// returns what it sent, the store and journals as the crash left them, and whether `pears`
/// was acknowledged to the channel.
async fn crash_second_step(
    b: Backends,
    point: WritePoint,
    phase: WritePhase,
) -> (Vec<String>, Leftovers, bool) {
    let (switch, bot, mock) = crashable_bot(&b);
    bot.flow(order);
    let scope = bot.durability().unwrap().scope().clone();
    bot.start().await.unwrap();
    mock.say("alice", "m1", "/order").await.unwrap();
    settle(&bot).await;
    switch.crash_at(point, phase, 1);
    let acknowledged = mock.say("alice", "m2", "pears").await.is_ok();
    settle(&bot).await;
    assert!(
        switch.is_crashed(),
        "the crash at {point} {phase:?} was reached"
    );
    let _ = bot.stop().await;
    let left = leftovers(&b.store, b.kv.clone(), scope).await;
    (mock.texts("alice"), left, acknowledged)
}

fn assert_cut_before_commit(
    (sent, (checkpoint, sends, inbound), acknowledged): (Vec<String>, Leftovers, bool),
) {
    assert_eq!(
        sent,
        vec!["What would you like?"],
        "nothing of the cut step went out"
    );
    assert_eq!(
        checkpoint,
        Some(1),
        "the checkpoint is still the first step's"
    );
    assert!(
        sends.iter().all(|(key, _)| !key.contains("m2")),
        "no outbox record of the cut step: {sends:?}"
    );
    // The step was to journal the message it consumed: cut, the message has no record, and
    // the channel was not told it was taken (it delivers it again).
    assert!(
        inbound.iter().all(|(id, _)| !id.ends_with("m2")),
        "no record of the message that fed the cut step: {inbound:?}"
    );
    assert!(!acknowledged, "the message is not acknowledged");
}

fn assert_cut_after_commit(
    (sent, (checkpoint, sends, inbound), _): (Vec<String>, Leftovers, bool),
) {
    assert_eq!(
        sent,
        vec!["What would you like?"],
        "the crash came before the send"
    );
    assert_eq!(
        checkpoint,
        Some(2),
        "the second step's checkpoint is written"
    );
    let step_sends: Vec<_> = sends.iter().filter(|(key, _)| key.contains("m2")).collect();
    assert_eq!(step_sends.len(), 1, "{sends:?}");
    assert_eq!(
        step_sends[0].1,
        OutboxState::Sending,
        "journaled with the step, leased for the provider call that was to follow it"
    );
    assert_eq!(m2_state(&inbound), InboxState::Done, "{inbound:?}");
}

/// The state of the one inbound record of the message `m2`.
fn m2_state(inbound: &[(String, InboxState)]) -> InboxState {
    let m2: Vec<_> = inbound
        .iter()
        .filter(|(id, _)| id.ends_with("m2"))
        .collect();
    assert_eq!(m2.len(), 1, "{inbound:?}");
    m2[0].1
}

// The second step's one transaction journals "How many?" (leased for its provider call) and
// journals `pears`, done. Cut at the last hook before it, nothing of the step is there (with
// separate writes, the checkpoint and the send would be); cut right after it, all of it is.

/// A test per case: `name: the backends (or none, to skip), the phase the step is cut in,
/// and what must be left`.
macro_rules! step_cuts {
    ($($name:ident: $backends:expr, $phase:ident, $left:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(b) = $backends else {
                return;
            };
            $left(crash_second_step(b, WritePoint::InboxComplete, WritePhase::$phase).await);
        }
    )*};
}

step_cuts! {
    a_sqlite_step_cut_before_its_commit_leaves_nothing_of_it:
        Some(backends(Backend::Sqlite)), Before, assert_cut_before_commit;
    a_sqlite_step_cut_after_its_commit_has_all_of_it:
        Some(backends(Backend::Sqlite)), After, assert_cut_after_commit;
    a_postgres_step_cut_before_its_commit_leaves_nothing_of_it:
        postgres_backends("flowcut_a_").await, Before, assert_cut_before_commit;
    a_postgres_step_cut_after_its_commit_has_all_of_it:
        postgres_backends("flowcut_b_").await, After, assert_cut_after_commit;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_cut_by_a_crash_before_a_sqlite_commit_runs_once() {
    // The third step ran its effect (recorded), then died before its one transaction.
    let register: fn(&Bot) = |b| {
        b.flow(order_sqlite);
    };
    assert_an_effect_cut_runs_once(Backend::Sqlite, register, &CHARGES_SQLITE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_after_the_step_in_the_same_dispatch_survives_a_crash_after_the_commit() {
    // An `after` message hook sends once the step committed: the step's transaction must not
    // have completed the message, or a crash right after it would lose the hook's send.
    fn register(bot: &Bot) {
        bot.flow(order);
        bot.after_message(|ctx| async move {
            if ctx.text() == "pears" {
                let _ = ctx.reply("noted").await;
            }
        });
    }
    let b = backends(Backend::Sqlite);
    let (switch, bot_a, mock_a) = crashable_bot(&b);
    register(&bot_a);
    bot_a.start().await.unwrap();
    mock_a.say("alice", "m1", "/order").await.unwrap();
    settle(&bot_a).await;
    // The next journal write of a send is the second step's commit: die right after it.
    switch.crash_at(WritePoint::OutboxJournal, WritePhase::After, 1);
    let _ = mock_a.say("alice", "m2", "pears").await;
    settle(&bot_a).await;
    assert!(switch.is_crashed());
    let _ = bot_a.stop().await;

    let mock_b = MockProvider::new();
    let bot_b = durable_bot(mock_b.clone(), b.store.clone(), b.kv.clone());
    register(&bot_b);
    let mut events = bot_b.subscribe();
    bot_b.start().await.unwrap();
    settle(&bot_b).await;
    let _ = bot_b.stop().await;
    let mut sent = mock_a.texts("alice");
    sent.extend(mock_b.texts("alice"));
    for text in ["What would you like?", "noted"] {
        let n = sent.iter().filter(|s| s.as_str() == text).count();
        assert_eq!(n, 1, "{text:?} sent {n} times: {sent:?}");
    }
    // The step's own send was leased by its commit: the crash came where the provider call
    // was next, which no journal can tell from a call that went out. It is reported
    // ambiguous and, being an ask's prompt (resent by default: a lost question leaves the
    // chat stuck), sent again.
    let n = sent.iter().filter(|s| s.as_str() == "How many?").count();
    assert_eq!(n, 1, "{sent:?}");
    let mut ambiguous = 0;
    while let Ok(e) = events.try_recv() {
        if matches!(e, BotEvent::Durability(DurabilityEvent::Ambiguous { .. })) {
            ambiguous += 1;
        }
    }
    assert_eq!(ambiguous, 1, "the send cut after its lease is reported");
}
