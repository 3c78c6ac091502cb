//! The tests every HTTP-gateway channel (Gupshup, Evolution API, WPPConnect) passes, written
//! once over a [`GatewayCase`] (the channel's fake, its provider and its webhooks): the shared
//! secret guarding the webhook route, a send the outbox retries after a 5xx and a 429 while
//! the webhook is redelivered, and a crash before the 200. Each channel's test file names its
//! case and runs these, and keeps the tests of what is its own.

use botmesh_providers::webhook::{RunningWebhookServer, WebhookApi, WebhookProvider};
use serde_json::Value;

use crate::fakes::log::Logs;
use crate::fakes::{self, Recorder, Served};

/// A gateway channel as its tests drive it.
pub(crate) trait GatewayCase {
    /// The channel's API.
    type Api: WebhookApi;
    /// The state of its fake server.
    type State: Logs;

    /// The webhook route (`/gupshup`).
    const ROUTE: &'static str;
    /// The webhook's shared secret.
    const SECRET: &'static str;
    /// The recipient of the bot's answers to [`text`](Self::text), as the fake records it.
    const ANSWERED: &'static str;

    /// The fake server.
    async fn fake() -> Served<Self::State>;

    /// A provider on `fake`.
    fn provider(fake: &Served<Self::State>) -> WebhookProvider<Self::Api>;

    /// The webhook of the user's text message `id` saying `text`.
    fn text(id: &str, text: &str) -> Value;

    /// The fake answers its next call `status` (5xx or 429, with `Retry-After`) as the
    /// channel's API does.
    fn fail_next(fake: &Served<Self::State>, status: u16, retry_after: Option<u64>);
}

/// The case's fake and a provider on it.
pub(crate) async fn started<G: GatewayCase>() -> (Served<G::State>, WebhookProvider<G::Api>) {
    let fake = G::fake().await;
    let provider = G::provider(&fake);
    (fake, provider)
}

/// The webhook route's guard ([`fakes::gateway::assert_guarded`]), with the user's text and
/// the `refused` bodies (each with its status), on a provider started on a recorder; returns
/// the recorder (with the two texts taken), the server and the route's URL.
pub(crate) async fn assert_guarded<G: GatewayCase>(
    refused: &[(Value, u16)],
) -> (Recorder, RunningWebhookServer, String) {
    let (_, provider) = started::<G>().await;
    let (rec, server, local) = fakes::started(&provider, provider.webhook_routes()).await;
    let route = format!("{local}{}", G::ROUTE);
    let hi = G::text("3EB0C431C26A1916B5F2", "hi");
    fakes::gateway::assert_guarded(&route, G::SECRET, &hi, refused, &rec).await;
    (rec, server, route)
}

/// Sends fail with a 5xx (`server_error`) and a 429 while the webhook of a `ping` is
/// redelivered: the outbox retries, the bot answers once, and the fake got three calls.
pub(crate) async fn assert_retried_and_answered_once<G: GatewayCase>(server_error: u16) {
    let (fake, provider) = started::<G>().await;
    G::fail_next(&fake, server_error, None);
    G::fail_next(&fake, 429, Some(0));
    let ping = G::text("3EB0PING00000001", "ping");
    let path = format!("{}/{}", G::ROUTE, G::SECRET);
    let delivered = || fake.delivered_to(G::ANSWERED);
    fakes::retried_and_answered_once(provider, &path, &ping, delivered).await;
    assert_eq!(fake.sent().len(), 3, "two failures, then the send");
}

/// A crash before the 200 ([`fakes::gateway::crash_before_the_200`]): the `ping` is answered
/// once.
pub(crate) async fn assert_crash_before_the_200_answered_once<G: GatewayCase>() {
    let fake = G::fake().await;
    let body = G::text("3EB0CRASH0000001", "ping");
    let channel = (|| G::provider(&fake), WebhookProvider::webhook_routes);
    let path = format!("{}/{}", G::ROUTE, G::SECRET);
    fakes::gateway::crash_before_the_200(channel, &path, &body).await;
    assert_eq!(fake.delivered_to(G::ANSWERED), ["pong: ping"]);
}
