//! Flows across runs, sub-flows, replicas, handoffs and failing stores.
//!
//! | case | expected |
//! | --- | --- |
//! | a sub-flow called twice in one step | each call sends and runs its effect (uses are counted across the step's frames) |
//! | two replicas: a newer run at the same step as a stale in-memory copy | the stale copy reloads the newer run (step and feeding inbound compared) |
//! | a cancel whose checkpoint delete fails | the ended flow does not take the next message; the delete is tried again |
//! | an idle timeout or `start_flow` while the chat is handed off | nothing sent; the timeout fires once the chat is released; `start_flow` refused |
//! | an effect in a flow's first step, the message replayed after a crash | the effect ran once (a run started by a message is named after it) |
//! | two flows named alike in two modules | refused at registration |
//! | a cancel while a sub-flow waits | the parent ends `cancelled`, not with an error |

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use botmesh::durability::kv::WritePhase;
use botmesh::durability::kv::WritePoint;
use botmesh::durability::{MemoryKv, MemoryStore, Store};
use botmesh::durable::DurabilityOptions;
use botmesh::prelude::*;
use botmesh::testing::{CrashableProvider, MockProvider, Transcript, crashable};
use botmesh_tests::FlakyStore;
use botmesh_tests::flows::order;
use botmesh_tests::settle;

use botmesh_tests::{durable_bot, fast_durability as config};

// ---------------------------------------------------------------------------------------
// A sub-flow called twice within one step.

static GREETS: AtomicUsize = AtomicUsize::new(0);

/// Greets (a send) and records an effect; no ask.
#[flow]
#[persistent]
async fn greet(cx: &mut FlowCx, who: String) -> FlowResult<u32> {
    let n: usize = cx
        .effect(async { GREETS.fetch_add(1, Ordering::SeqCst) })
        .await?;
    cx.send("Hello!").await?;
    let _ = who;
    Ok(n as u32)
}

#[flow(start = command("twice"))]
#[persistent]
async fn twice(cx: &mut FlowCx) -> FlowResult {
    let a: u32 = cx.call(greet("a".to_owned())).await?;
    let b: u32 = cx.call(greet("b".to_owned())).await?;
    cx.send(format!("effects {a} {b}")).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_flow_called_twice_in_one_step_sends_and_runs_its_effect_twice() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .store(MemoryStore::new())
        .durability(
            DurabilityOptions::memory()
                .config(config())
                .instance_id("i1"),
        )
        .build()
        .unwrap();
    bot.flow(twice);
    bot.start().await.unwrap();
    mock.say("ann", "m1", "/twice").await.unwrap();
    settle(&bot).await;
    let sent = mock.texts("ann");
    bot.stop().await.unwrap();
    assert_eq!(
        (sent, GREETS.load(Ordering::SeqCst)),
        (
            vec![
                "Hello!".to_owned(),
                "Hello!".to_owned(),
                "effects 0 1".to_owned()
            ],
            2
        ),
        "each call greets and runs its effect"
    );
}

// ---------------------------------------------------------------------------------------
// Two replicas: a stale in-memory stack at the same step number as a newer run.

#[tokio::test]
async fn a_stale_copy_at_the_step_of_a_newer_run_reloads_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let setup = |b: BotBuilder| {
        let bot = b.build()?;
        bot.flow(order);
        Ok(bot)
    };
    let mut a = Transcript::with_store(store.clone(), setup).await.unwrap();
    let mut b = Transcript::with_store(store.clone(), setup).await.unwrap();
    a.says_id("ann", "m1", "/order").await;
    a.says_id("ann", "m2", "tea").await;
    // the user starts over on replica b
    b.says_id("ann", "m3", "/order").await;
    b.says_id("ann", "m4", "coffee").await;
    a.says_id("ann", "m5", "3").await;
    let last = botmesh_tests::last_reply(&a);
    assert!(
        last.ends_with("Ordered 3 x coffee"),
        "replica a: {}\nreplica b: {}",
        a.render(),
        b.render()
    );
}

// ---------------------------------------------------------------------------------------
// A cancel whose checkpoint delete fails.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_flow_whose_delete_failed_does_not_come_back() {
    let store = FlakyStore::default();
    let (bot, mock) = botmesh_tests::shop_on(Arc::new(store.clone()), |bot| {
        bot.flow(order);
    })
    .await;
    mock.say("ann", "m1", "/order").await.unwrap();
    settle(&bot).await;
    store.fail_delete.store(true, Ordering::SeqCst);
    assert!(bot.cancel_flow("ann").await.unwrap());
    settle(&bot).await;
    mock.say("ann", "m2", "hello").await.unwrap();
    settle(&bot).await;
    let sent = mock.texts("ann");
    assert_eq!(
        store.checkpoint("ann").await.unwrap(),
        None,
        "the leftover checkpoint is deleted at the next message"
    );
    bot.stop().await.unwrap();
    assert_eq!(
        sent,
        ["What would you like?", "Send /order to order."],
        "the cancelled flow must not take the next message"
    );
}

// ---------------------------------------------------------------------------------------
// Idle timeouts and start_flow while the chat is handed off to a human.

#[flow(start = command("pay"))]
#[persistent]
async fn slow(cx: &mut FlowCx) -> FlowResult {
    match cx.ask("Pay?").idle(Duration::from_secs(60)).await {
        Ok(_) => cx.send("Paid.").await?,
        Err(_) => cx.send("Too slow: not paid.").await?,
    }
    Ok(())
}

#[tokio::test]
async fn timeouts_and_starts_wait_for_a_handoff_to_end() {
    let mut t = botmesh_tests::transcript_of_flow(slow).await;
    t.says("ann", "/pay").await;
    t.bot().handoff("ann", None, None).await.unwrap();
    t.note("handed off");
    t.advance(Duration::from_secs(61)).await;
    let refused = t.bot().start_flow("ann", slow).await;
    assert!(
        matches!(refused, Err(BotError::HandedOff { .. })),
        "{refused:?}"
    );
    t.bot().idle().await;
    let after: Vec<String> = t
        .lines()
        .into_iter()
        .skip_while(|l| l != "· handed off")
        .filter(|l| l.starts_with("bot →"))
        .collect();
    assert!(
        after.is_empty(),
        "sent during the handoff: {after:?}\n{}",
        t.render()
    );
    // Once the human gives the chat back, the timeout that passed meanwhile fires.
    t.bot().release("ann").await.unwrap();
    t.advance(Duration::from_secs(1)).await;
    t.bot().idle().await;
    let last = botmesh_tests::last_reply(&t);
    assert!(last.ends_with("Too slow: not paid."), "{}", t.render());
}

// ---------------------------------------------------------------------------------------
// An effect in a flow's first step, cut by a crash, then the command replayed.

static PAY_CHARGES: AtomicUsize = AtomicUsize::new(0);

#[flow(start = command("charge"))]
#[persistent]
async fn charge(cx: &mut FlowCx) -> FlowResult {
    let receipt: String = cx
        .effect(async {
            PAY_CHARGES.fetch_add(1, Ordering::SeqCst);
            "r1".to_owned()
        })
        .await?;
    let _more = cx
        .ask(format!("Charged ({receipt}). Anything else?"))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_step_effect_runs_once_across_a_crash() {
    let kv: Arc<dyn botmesh::durability::DurableKv> = Arc::new(MemoryKv::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let switch = crashable(kv.clone());
    // the first outbox write: the prompt of the first step, after its effect ran
    switch.crash_at(WritePoint::OutboxJournal, WritePhase::Before, 1);
    let mock_a = MockProvider::new();
    let bot_a = durable_bot(
        CrashableProvider::new(mock_a.clone(), &switch),
        store.clone(),
        Arc::new(switch.clone()),
    );
    bot_a.flow(charge);
    bot_a.start().await.unwrap();
    let _ = mock_a.say("alice", "m1", "/charge").await;
    settle(&bot_a).await;
    assert!(switch.is_crashed());
    assert_eq!(PAY_CHARGES.load(Ordering::SeqCst), 1);
    let _ = bot_a.stop().await;

    let mock_b = MockProvider::new();
    let bot_b = durable_bot(mock_b.clone(), store.clone(), kv.clone());
    bot_b.flow(charge);
    bot_b.start().await.unwrap();
    settle(&bot_b).await;
    // the channel redelivers it too (a duplicate of a journaled message is dropped)
    let _ = mock_b.say("alice", "m1", "/charge").await;
    settle(&bot_b).await;
    let sent = mock_b.texts("alice");
    let _ = bot_b.stop().await;
    assert_eq!(sent, ["Charged (r1). Anything else?"]);
    assert_eq!(
        PAY_CHARGES.load(Ordering::SeqCst),
        1,
        "the effect ran again on the replay of the step"
    );
}

// ---------------------------------------------------------------------------------------
// Two flows whose functions share a name, in different modules.

flow_builds! {
    mod fa: #[flow(start = command("a"))] fn start(cx) {
        let x: String = cx.ask("A?").await?.text().to_owned();
        cx.send(format!("A got {x}")).await?;
        Ok(())
    }

    mod fb: #[flow(start = command("b"))] fn start(cx) {
        let x: String = cx.ask("B?").await?.text().to_owned();
        cx.send(format!("B got {x}")).await?;
        Ok(())
    }
}

/// Checkpoints find their flow by its function name: a second flow of a name already taken
/// is refused (a panic when registered, as a router refuses overlapping routes; an error from
/// `start_flow`), instead of one silently answering for the other after a restart.
#[tokio::test]
async fn two_flows_of_one_name_are_refused() {
    let bot = Bot::builder(MockProvider::new()).build().unwrap();
    bot.flow(fa::start);
    bot.flow(fa::start); // the same flow again: nothing happens
    let refused = bot.start_flow("ann", fb::start).await;
    assert!(
        matches!(&refused, Err(BotError::Config { .. })),
        "{refused:?}"
    );
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        bot.flow(fb::start);
    }))
    .expect_err("a second flow named `start` is refused");
    let message = panicked
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("two different flows are named `start`"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------
// Cancelling a flow that waits inside a sub-flow.

#[flow]
#[persistent]
async fn inner_ask(cx: &mut FlowCx) -> FlowResult<String> {
    let n: String = cx.ask("Name?").await?.text().to_owned();
    Ok(n)
}

#[flow(start = command("outer"))]
#[persistent]
async fn outer(cx: &mut FlowCx) -> FlowResult {
    let n: String = cx.call(inner_ask).await?;
    cx.send(n).await?;
    Ok(())
}

#[tokio::test]
async fn a_cancel_inside_a_sub_flow_ends_the_parent_as_cancelled() {
    let mut t = botmesh_tests::transcript_of_flow(outer).await;
    t.says("ann", "/outer").await;
    assert!(t.bot().cancel_flow("ann").await.unwrap());
    t.bot().idle().await;
    let r = t.render();
    assert!(r.contains("· flow outer ended:cancelled"), "{r}");
    assert!(!r.contains("· error"), "{r}");
}

// ---------------------------------------------------------------------------------------
// A kept local's own type changes shape between two builds.

/// `shop` of one build (module `$m`, its items `$item`): it keeps a `Cart` (the type of that
/// name in scope) made with `items: $items` across an ask; `$flow` are more `#[flow]` arguments.
macro_rules! cart_build {
    ($(#[$doc:meta])* $m:ident { $($item:item)* }, items: $items:expr $(, $($flow:tt)*)?) => {
        flow_builds! {
            $(#[$doc])*
            mod $m { $($item)* }: #[flow(start = command("cart") $(, $($flow)*)?)] fn shop(cx) {
                let cart: Cart = Cart {
                    items: $items,
                    total_cents: 0,
                };
                let _a = cx.ask("Item?").await?;
                cx.send(format!("{} {}", cart.items.len(), cart.total_cents))
                    .await?;
                Ok(())
            }
        }
    };
}

cart_build! {
    cart_v1 {
        #[derive(serde::Serialize, serde::Deserialize)]
        pub(crate) struct Cart {
            pub(crate) items: Vec<String>,
            pub(crate) total_cents: u64,
        }
    },
    items: vec!["tea".to_owned()]
}

cart_build! {
    /// The next build: `Cart` changed shape, the flow did not (same layout hash).
    cart_v2 {
        #[derive(serde::Serialize, serde::Deserialize)]
        pub(crate) struct Cart {
            pub(crate) items: Vec<(String, u32)>,
            pub(crate) total_cents: u64,
        }
    },
    items: Vec::new()
}

cart_build! {
    /// The same code, with `version = 2` bumped by hand.
    cart_v2_versioned { use super::cart_v2::Cart; },
    items: Vec::new(),
    version = 2
}

/// The layout fingerprint sees a kept local's type as written: `version = N` changes it by
/// hand, and a checkpoint that no longer decodes meets the version policy (`restart` by
/// default: the user is told, the flow starts over, and the pending message is not taken as
/// an answer) instead of being dropped with an error.
#[tokio::test]
async fn a_kept_type_that_changed_shape_meets_the_version_policy() {
    let v1 = botmesh::flow::info(cart_v1::shop).layout_hash;
    assert_eq!(
        v1,
        botmesh::flow::info(cart_v2::shop).layout_hash,
        "types by name only"
    );
    assert_ne!(
        v1,
        botmesh::flow::info(cart_v2_versioned::shop).layout_hash,
        "version = 2 changes the hash"
    );

    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut old = botmesh_tests::transcript_of(Some(store.clone()), |bot| {
        bot.flow(cart_v1::shop);
    })
    .await;
    old.says_id("ann", "m1", "/cart").await;
    let mut new = botmesh_tests::transcript_of(Some(store.clone()), |bot| {
        bot.flow(cart_v2::shop);
    })
    .await;
    new.says_id("ann", "m2", "tea").await;
    let r = new.render();
    assert!(r.contains("version_mismatch:restarted"), "{r}");
    assert!(!r.contains("abandoned"), "{r}");
    let said: Vec<String> = new
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("bot →"))
        .collect();
    assert!(
        said[0].ends_with(botmesh::flow::DEFAULT_RESTART_NOTICE),
        "the user is told: {r}"
    );
    assert!(said[1].ends_with("Item?"), "the flow started over: {r}");
    assert_eq!(said.len(), 2, "and `tea` answered no other question: {r}");
}

// ---------------------------------------------------------------------------------------
// A loop resumed in the middle of an iteration.

#[flow(start = command("cart"))]
#[persistent]
async fn cart_loop(cx: &mut FlowCx) -> FlowResult {
    let mut cart: Vec<String> = Vec::new();
    let total: usize = 'shopping: loop {
        // A loop-local moved after the ask (moved once per iteration, also when resumed).
        let item: String = format!("item {}", cart.len() + 1);
        let a = cx.ask(format!("Add {item}?")).await?;
        match a.text() {
            "skip" => continue,
            "done" => break 'shopping cart.len(),
            "stop" => break cart.len() + 100,
            _ => {}
        }
        cart.push(item);
    };
    cx.send(format!("{total}: {}", cart.join(", "))).await?;
    Ok(())
}

/// The rest of a resumed iteration runs once, outside the loop, with `continue`, `break`,
/// labelled `break` and `break value` keeping their meaning, across restarts.
#[tokio::test]
async fn a_loop_resumed_mid_iteration_keeps_break_and_continue() {
    for (answers, expected) in [
        (&["yes", "skip", "yes", "done"][..], "2: item 1, item 2"),
        (&["yes", "stop"][..], "101: item 1"),
    ] {
        let mut t = botmesh_tests::transcript_of_flow(cart_loop).await;
        t.says("ann", "/cart").await;
        for a in answers {
            t.restart().await.unwrap();
            t.says("ann", a).await;
        }
        let last = botmesh_tests::last_reply(&t);
        assert!(last.ends_with(expected), "{}", t.render());
    }
}
