//! What the gateway fakes (Gupshup, Evolution API, WPPConnect) share: the log of calls
//! ([`Log`], Twilio's too) and the checks of their webhooks' shared secret.

use serde_json::Value;

pub use super::log::Log;

/// Checks a gateway's webhook `route` (`{base}/gupshup`) with the shared `secret`, on a
/// provider started on `rec`: without the secret 401, with a wrong one (in the path or the
/// header) 403, each of `refused` (posted with the secret) its status, and nothing delivered;
/// then `good` is taken with the secret in the path and in the header.
pub async fn assert_guarded(
    route: &str,
    secret: &str,
    good: &Value,
    refused: &[(Value, u16)],
    rec: &super::Recorder,
) {
    let post = async |url: String, header: Option<&str>, body: &Value| {
        super::post_json(&url, header, body).await.0
    };
    assert_eq!(post(route.to_owned(), None, good).await, 401, "no secret");
    let wrong = format!("{route}/not-the-secret-0123456789");
    assert_eq!(post(wrong, None, good).await, 403, "a wrong path secret");
    assert_eq!(
        post(route.to_owned(), Some("nope"), good).await,
        403,
        "a wrong header"
    );
    for (body, status) in refused {
        assert_eq!(
            post(format!("{route}/{secret}"), None, body).await,
            *status,
            "{body}"
        );
    }
    assert!(rec.events().is_empty(), "{:?}", rec.events());
    assert_eq!(
        post(format!("{route}/{secret}"), None, good).await,
        200,
        "the path secret"
    );
    assert_eq!(
        post(route.to_owned(), Some(secret), good).await,
        200,
        "the header"
    );
    assert_eq!(rec.wait_for(2).await.len(), 2);
}

/// POSTs each of `bodies` to `url` (a gateway's route with its secret): each is answered 200.
pub async fn post_all_accepted(url: &str, bodies: &[Value]) {
    for body in bodies {
        assert_eq!(super::post_json(url, None, body).await.0, 200, "{body}");
    }
}

/// [`super::crash_before_the_200`] for a gateway: the JSON webhook `body` posted on `path`
/// (which carries the secret).
pub async fn crash_before_the_200<P: botmesh::provider::Provider>(
    channel: (impl Fn() -> P, impl Fn(&P) -> axum::Router),
    path: &str,
    body: &Value,
) {
    let body = serde_json::to_vec(body).expect("a JSON body");
    super::crash_before_the_signed_200(channel, path, &body, &[]).await;
}

/// One line per event, to compare with what a webhook should have delivered: `text <text>
/// <chat>`, `media <kind> <token> <caption>`, `location <lat> <lng> <name>`, `press <data>
/// <title>`, `status <status> <message id>`.
pub fn summary(events: &[botmesh::provider::ProviderEvent]) -> Vec<String> {
    use botmesh::message::Content;
    use botmesh::provider::ProviderEvent;
    events
        .iter()
        .map(|e| match e {
            ProviderEvent::Message(m) => match &m.content {
                Content::Text(t) => format!("text {t} {}", m.chat.as_str()),
                Content::Media(media) => format!(
                    "media {:?} {} {:?}",
                    media.kind, media.media_ref.token, media.caption
                ),
                Content::Location(l) => {
                    format!("location {} {} {:?}", l.latitude, l.longitude, l.name)
                }
                other => format!("{other:?}"),
            },
            ProviderEvent::Interaction(i) => format!("press {} {:?}", i.data, i.title),
            ProviderEvent::Status(s) => format!("status {} {}", s.status, s.message_id.as_str()),
            other => format!("{other:?}"),
        })
        .collect()
}
