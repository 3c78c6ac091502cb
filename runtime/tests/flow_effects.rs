//! `cx.effect` runs once per step in total, even when the step is cut by a crash after the
//! effect ran and the message is redelivered to a new bot on the same store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use botmesh::prelude::*;
use botmesh::testing::Transcript;

static CHARGES: AtomicU32 = AtomicU32::new(0);

/// Charges a card once the user confirms.
#[flow(start = command("checkout"))]
#[persistent]
async fn checkout(cx: &mut FlowCx) -> FlowResult {
    let ok: bool = cx.ask("Charge 10 EUR?").await?.is_yes();
    if ok {
        let charge_id: u32 = cx
            .effect(async { CHARGES.fetch_add(1, Ordering::SeqCst) + 100 })
            .await?;
        let at: i64 = cx.now().await;
        cx.send(format!("Charged: charge #{charge_id} at {at}"))
            .await?;
    }
    Ok(())
}

// Paused time: the restart waits out the hung send's stop timeout on tokio's clock.
#[tokio::test(start_paused = true)]
async fn an_effect_cut_by_a_crash_runs_once() {
    let hang = Arc::new(AtomicBool::new(true));
    // Notified when the send after the effect hangs: the "process" dies there.
    let hung = Arc::new(tokio::sync::Notify::new());
    let (h, n) = (hang.clone(), hung.clone());
    let mut t = Transcript::new(move |b| {
        let bot = b.build()?;
        bot.flow(checkout);
        let (h, n) = (h.clone(), n.clone());
        bot.before_send(move |d| {
            let (h, n) = (h.clone(), n.clone());
            async move {
                if h.load(Ordering::SeqCst) && d.outgoing.content.text().starts_with("Charged") {
                    n.notify_one();
                    std::future::pending::<()>().await;
                }
                SendDecision::Proceed(d)
            }
        });
        Ok(bot)
    })
    .await
    .expect("bot starts");
    t.says("ann", "/checkout").await;
    let id = t.says_nowait("ann", "yes").await;
    // the step runs the effect, then hangs in the send: the "process" dies here.
    tokio::time::timeout(std::time::Duration::from_secs(5), hung.notified())
        .await
        .expect("the send after the effect is reached");
    assert_eq!(CHARGES.load(Ordering::SeqCst), 1);
    t.note("crash in the middle of the step");
    hang.store(false, Ordering::SeqCst);
    t.restart().await.expect("restart");
    t.says_id("ann", &id, "yes").await;
    assert_eq!(
        CHARGES.load(Ordering::SeqCst),
        1,
        "the effect ran once in total"
    );
    let effects = t.store().values("flow-effects:ann").await.expect("store");
    assert!(
        effects.is_empty(),
        "effect records are deleted once the flow moves on: {effects:?}"
    );
    insta::assert_snapshot!(t.render());
}
