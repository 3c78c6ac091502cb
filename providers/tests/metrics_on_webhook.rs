//! `/metrics` mounted on the shared webhook server next to a channel's routes: one server, one
//! port, the bot's counters served as OpenMetrics text.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use botmesh::durable::DurabilityOptions;
use botmesh::operating::http::metrics_router;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use botmesh_providers::webhook::WebhookServer;

#[tokio::test]
async fn the_webhook_server_serves_metrics_beside_the_channel_routes() {
    let mock = MockProvider::new();
    let bot = Bot::builder(mock.clone())
        .durability(DurabilityOptions::memory())
        .build()
        .expect("bot");
    bot.command("hi", |ctx: Ctx| async move {
        ctx.reply("hello").await?;
        Ok(())
    });
    bot.start().await.expect("start");
    mock.say("alice", "m1", "/hi").await.expect("accepted");
    mock.say("bob", "m2", "/hi").await.expect("accepted");
    assert_eq!(mock.wait_for_sends(2, Duration::from_secs(10)).await, 2);
    bot.idle().await;

    let channel = Router::new().route("/hook", post(|| async { "ok" }));
    let server = WebhookServer::new()
        .mount(channel)
        .mount(metrics_router(&bot))
        .bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", server.local_addr());
    let client = reqwest::Client::new();

    let response = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().expect("ascii");
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().await.expect("body");
    for line in [
        "botmesh_sent_total 2",
        "botmesh_received_total 2",
        "botmesh_durability_outbox_journaled_total 2",
        "botmesh_durability_inbound_journaled_total 2",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));
    let hook = client
        .post(format!("{base}/hook"))
        .send()
        .await
        .expect("hook");
    assert_eq!(hook.status(), 200, "the channel's route still answers");

    server.shutdown().await;
    bot.stop().await.expect("stop");
}
