//! Version policies: a checkpoint written by one layout of a flow and read by a bot running
//! another layout is restarted, abandoned or migrated as the flow says, with its event.

use std::sync::Arc;

use botmesh::durability::{MemoryStore, Store};
use botmesh::testing::Transcript;

mod v1 {
    use botmesh::prelude::*;

    /// The first layout: S2 keeps `item`.
    #[flow(start = command("order"))]
    #[persistent]
    pub(crate) async fn order(cx: &mut FlowCx) -> FlowResult {
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        let qty: u32 = cx.ask("How many?").parse::<u32>("A number.").await?;
        cx.send(format!("{qty} x {item}")).await?;
        Ok(())
    }
}

macro_rules! v2 {
    ($m:ident, $($policy:tt)*) => {
        mod $m {
            use botmesh::prelude::*;

            /// The second layout: S2 also keeps `shop`.
            #[flow(start = command("order"), on_version_mismatch = $($policy)*)]
            #[persistent]
            pub(crate) async fn order(cx: &mut FlowCx) -> FlowResult {
                let shop: String = "main".to_owned();
                let item: String = cx.ask("What would you like?").await?.text().to_owned();
                let qty: u32 = cx.ask("How many?").parse::<u32>("A number.").await?;
                cx.send(format!("{qty} x {item} from {shop}")).await?;
                Ok(())
            }
        }
    };
}

v2!(restarting, restart);
v2!(abandoning, abandon);
v2!(migrating, migrate(super::add_shop));

fn add_shop(mut old: serde_json::Value, old_hash: u64) -> Result<serde_json::Value, String> {
    let _ = old_hash;
    for (_, fields) in old.as_object_mut().ok_or("not an object")?.iter_mut() {
        fields
            .as_object_mut()
            .ok_or("not an object")?
            .insert("shop".into(), "old-shop".into());
    }
    Ok(old)
}

async fn written_by_v1(store: Arc<dyn Store>) -> String {
    let mut t = Transcript::with_store(store, |b| {
        let bot = b.build()?;
        bot.flow(v1::order);
        Ok(bot)
    })
    .await
    .expect("bot starts");
    t.says("ann", "/order").await;
    t.says("ann", "tea").await;
    t.bot().stop().await.expect("stop");
    t.render()
}

async fn read_by<F, T>(flow: F) -> String
where
    F: Fn() -> T + Copy + Send + Sync + 'static,
    T: botmesh::flow::Flow,
{
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let before = written_by_v1(store.clone()).await;
    let mut t = Transcript::with_store(store.clone(), move |b| {
        let bot = b.build()?;
        bot.flow(flow);
        Ok(bot)
    })
    .await
    .expect("bot starts");
    t.bot().idle().await;
    t.says_id("ann", "m3", "2").await;
    format!("{before}· new code\n{}", t.render())
}

#[tokio::test]
async fn restart_policy() {
    insta::assert_snapshot!(read_by(restarting::order).await);
}

#[tokio::test]
async fn abandon_policy() {
    insta::assert_snapshot!(read_by(abandoning::order).await);
}

#[tokio::test]
async fn migrate_policy() {
    insta::assert_snapshot!(read_by(migrating::order).await);
}
