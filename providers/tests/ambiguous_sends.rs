//! Sends whose outcome is unknown, on each network channel against its fake: a request that
//! never left (the connection refused) is a retryable `Network` error; one that may have
//! reached the channel (the fake took it, delivered the message and dropped the connection
//! without answering; or no answer before the timeout) is `Ambiguous`. A durable bot does not
//! retry an ambiguous send as if it were safe: the send's ambiguity policy settles it (`skip`
//! by default: delivered once, recorded `unknown`; `resend` for a send that says so, as an
//! ask's prompt does: delivered again) and `durability:ambiguous` names it, with its text.
#![allow(clippy::expect_used)]

use crate::fakes;

use std::time::Duration;

use botmesh::durability::{DurabilityEvent, OnAmbiguous, OutboxState};
use botmesh::prelude::*;
use botmesh::provider::{ErrorClass, ProviderError};

/// A listener that takes connections and requests and never answers: a send to it times out
/// after its request was written.
async fn silent_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    format!("http://{addr}")
}

/// A local address nothing listens on.
fn closed_port() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    format!("http://127.0.0.1:{port}")
}

fn assert_ambiguous(err: &ProviderError, what: &str) {
    assert!(
        matches!(err, ProviderError::Ambiguous { .. }),
        "{what}: {err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Ambiguous, "{what}");
}

fn assert_network(err: &ProviderError, what: &str) {
    assert!(
        matches!(err, ProviderError::Network { .. }),
        "{what}: {err:?}"
    );
    assert_eq!(err.class(), ErrorClass::Retryable, "{what}");
}

/// The sends of one channel whose outcome is unknown, or known not to have left: after
/// `drop_next()`, a send to the fake at `base` is ambiguous and was `delivered()` all the same
/// (returned, for more checks); with `times_out`, a send to a server that never answers is
/// ambiguous too; a send to a closed port is a retryable network error.
async fn assert_sends_ambiguous_or_not_sent<P: Provider>(
    provider: impl Fn(&str) -> P,
    base: &str,
    chat: ChatId,
    drop_next: impl Fn(),
    delivered: impl Fn() -> Vec<String>,
    times_out: bool,
) -> ProviderError {
    drop_next();
    let dropped = provider(base)
        .send(&chat, &"hi".into())
        .await
        .expect_err("dropped");
    assert_ambiguous(&dropped, "connection dropped after the request");
    assert_eq!(delivered(), ["hi"], "it went out all the same");
    if times_out {
        let err = provider(&silent_server().await)
            .send(&chat, &"hi".into())
            .await
            .expect_err("no answer");
        assert_ambiguous(&err, "timed out after the request");
    }
    let err = provider(&closed_port())
        .send(&chat, &"hi".into())
        .await
        .expect_err("refused");
    assert_network(&err, "connection refused");
    dropped
}

/// A durable bot on `provider` (memory journals, short backoff).
async fn durable_bot(provider: impl Provider) -> Bot {
    let bot = fakes::durable_bot(provider);
    bot.start().await.expect("start");
    bot
}

/// The next `durability:ambiguous` event, as (key, chat, text) (the bot forwards the journal's
/// events from a task of its own: waits for it, 5 s at most).
async fn next_ambiguous(
    events: &mut tokio::sync::broadcast::Receiver<BotEvent>,
) -> (String, String, String) {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(BotEvent::Durability(DurabilityEvent::Ambiguous {
                    key, chat, text, ..
                })) => {
                    return (key, chat, text);
                }
                Ok(_) => {}
                Err(e) => panic!("events ended: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .expect("a durability:ambiguous event")
}

/// The shared run: `drop_next()` arms the fake; `delivered()` and `calls()` read it.
/// A plain send whose connection is dropped after the fake delivered it goes out once and is
/// recorded `unknown`; a send that says `resend` goes out again; both are named.
async fn a_durable_bot_settles_dropped_sends(
    provider: impl Provider,
    chat: &str,
    drop_next: impl Fn(),
    delivered: impl Fn() -> Vec<String>,
    calls: impl Fn() -> usize,
) {
    let bot = durable_bot(provider).await;
    let mut events = bot.subscribe();

    drop_next();
    let skipped = bot
        .send(chat, Outgoing::from("Your order is on its way"))
        .await
        .expect("settled as unknown, not failed");
    assert_eq!(delivered(), ["Your order is on its way"]);
    assert_eq!(calls(), 1, "not retried as if it had not gone out");
    let d = bot.durability().expect("durable");
    // The send ended `state`, and its ambiguity was named with its text.
    let mut settled = async |sent: SendOutcome, text: &str, state: OutboxState| {
        let key = sent.key.clone().expect("an outbox key");
        let record = d.outbox().lookup(&key).await.expect("lookup");
        assert_eq!(record.expect("record").state, state, "{text}");
        let named = next_ambiguous(&mut events).await;
        assert_eq!(named, (key, chat.to_owned(), text.to_owned()));
    };
    settled(skipped, "Your order is on its way", OutboxState::Unknown).await;

    drop_next();
    let resent = bot
        .send(
            chat,
            Outgoing::from("How many?").on_ambiguous(OnAmbiguous::Resend),
        )
        .await
        .expect("sent again");
    assert_eq!(
        delivered(),
        ["Your order is on its way", "How many?", "How many?"],
        "a question is sent again rather than lost"
    );
    assert_eq!(calls(), 3);
    settled(resent, "How many?", OutboxState::Sent).await;
    assert_eq!(d.metrics().outbox_ambiguous, 2);
    bot.stop().await.expect("stop");
}

/// A channel's two tests: `$ambiguous`, a send dropped, refused or timed out (ambiguous on a
/// timeout when `$timeout_ambiguous`), and `$settled`, a durable bot settling dropped sends;
/// both sending to `$to` on the channel's fake (`$start`).
#[cfg(any(feature = "whatsapp-cloud", feature = "twilio"))]
macro_rules! ambiguity_tests {
    ($ambiguous:ident, $settled:ident, $to:expr, $timeout_ambiguous:expr, $start:expr) => {
        #[tokio::test]
        async fn $ambiguous() {
            let fake = $start.await;
            assert_sends_ambiguous_or_not_sent(
                provider,
                &fake.base_url(),
                ChatId::from($to),
                || fake.drop_next(),
                || fake.delivered_to($to),
                $timeout_ambiguous,
            )
            .await;
            fake.check();
        }

        #[tokio::test]
        async fn $settled() {
            let fake = $start.await;
            let (armed, read, counted) = (fake.clone(), fake.clone(), fake.clone());
            a_durable_bot_settles_dropped_sends(
                provider(&fake.base_url()),
                $to,
                move || armed.drop_next(),
                move || read.delivered_to($to),
                move || counted.sent().len(),
            )
            .await;
            fake.check();
        }
    };
}

#[cfg(feature = "telegram")]
mod telegram {
    use super::*;
    use crate::fakes::telegram::FakeTelegram;
    use botmesh_providers::telegram::{TelegramConfig, TelegramProvider};

    const TOKEN: &str = "123456:ambiguous-token";
    const ANA: i64 = 1111;

    fn provider(base: &str) -> TelegramProvider {
        TelegramProvider::new(
            TelegramConfig::new(TOKEN)
                .api_base(base)
                .expect("base")
                .polling(Duration::from_secs(1))
                .request_timeout(Duration::from_millis(300)),
        )
        .expect("provider")
    }

    #[tokio::test]
    async fn a_send_is_ambiguous_once_its_request_may_have_reached_telegram() {
        let fake = FakeTelegram::start(TOKEN).await;
        let err = assert_sends_ambiguous_or_not_sent(
            provider,
            &fake.base_url(),
            ChatId(ANA.to_string()),
            || fake.drop_next("sendMessage"),
            || fake.delivered_to(ANA),
            true,
        )
        .await;
        assert!(!err.to_string().contains("ambiguous-token"), "{err}");
        fake.check();
    }

    #[tokio::test]
    async fn a_durable_bot_settles_a_dropped_telegram_send_by_its_policy() {
        let fake = FakeTelegram::start(TOKEN).await;
        let counted = fake.clone();
        let read = fake.clone();
        let armed = fake.clone();
        a_durable_bot_settles_dropped_sends(
            provider(&fake.base_url()),
            &ANA.to_string(),
            move || armed.drop_next("sendMessage"),
            move || read.delivered_to(ANA),
            move || counted.calls("sendMessage").len(),
        )
        .await;
        fake.check();
    }
}

#[cfg(feature = "whatsapp-cloud")]
mod whatsapp {
    use super::*;
    use crate::fakes::whatsapp::FakeWhatsApp;
    use botmesh_providers::whatsapp::{WhatsAppConfig, WhatsAppProvider};

    const TOKEN: &str = "EAAG-ambiguous";
    const TO: &str = "16315551181";

    fn provider(base: &str) -> WhatsAppProvider {
        WhatsAppProvider::new(
            WhatsAppConfig::new(TOKEN, "106540352242922", "app-secret", "verify")
                .api_base(base)
                .expect("base")
                .request_timeout(Duration::from_millis(300)),
        )
        .expect("provider")
    }

    ambiguity_tests!(
        a_send_is_ambiguous_once_its_request_may_have_reached_the_graph,
        a_durable_bot_settles_a_dropped_whatsapp_send_by_its_policy,
        TO,
        true,
        FakeWhatsApp::start(TOKEN)
    );
}

#[cfg(feature = "twilio")]
mod twilio {
    use super::*;
    use crate::fakes::twilio::FakeTwilio;
    use botmesh_providers::twilio::{TwilioConfig, TwilioProvider, TwilioSender};

    const SID: &str = "ACXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX";
    const TOKEN: &str = "twilio-auth-token";
    const TO: &str = "+15551234567";

    fn provider(base: &str) -> TwilioProvider {
        TwilioProvider::new(
            TwilioConfig::new(SID, TOKEN, TwilioSender::From("+15557654321".into()))
                .api_base(base)
                .expect("base")
                .webhook_base_url("https://bot.example")
                .expect("public url"),
        )
        .expect("provider")
    }

    ambiguity_tests!(
        a_send_is_ambiguous_once_its_request_may_have_reached_twilio,
        a_durable_bot_settles_a_dropped_twilio_send_by_its_policy,
        TO,
        false,
        FakeTwilio::start(SID, TOKEN)
    );
}
