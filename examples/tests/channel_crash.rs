//! The `shop` binary on each network channel (Telegram long polling and webhook, WhatsApp
//! Cloud, WhatsApp Web over its fake session, Messenger, Instagram, Twilio, Gupshup, Evolution
//! API, WPPConnect, Discord, GoHighLevel, TikTok, email) against a local fake of the channel's API, as a user
//! runs it: SIGKILLed at seeded moments and restarted on its SQLite file, and under 5xx and
//! 429 bursts. What each run checks is the harness's (`channels/mod.rs`); this file only says
//! how each channel is reached.
#![cfg(network_channel)]
#![allow(clippy::expect_used)]

use crate::fakes;

use crate::channels::{
    Channel, FakeApi, Fault, Listen, Posting, post_until_accepted, retries_faults, seeds, surfaced,
    survives_sigkills,
};

/// A webhook POST the shop refuses fails the test from the task that tried it.
#[tokio::test]
#[should_panic(expected = "refused: 403")]
async fn a_webhook_post_refused_fails_the_test() {
    let router = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async { axum::http::StatusCode::FORBIDDEN }),
    );
    let (addr, _) = fakes::serve(router).await;
    let url = format!("http://{addr}/hook");
    surfaced(post_until_accepted("m1".to_owned(), move |client| {
        client.post(&url)
    }))
    .await;
}

/// A fake whose handler panics fails the test (the client sees a 500).
#[tokio::test]
#[should_panic(expected = "handler of POST /boom panicked: the fake broke")]
async fn a_fake_handler_that_panics_fails_the_test() {
    let router = axum::Router::new().route(
        "/boom",
        axum::routing::post(|| async {
            if std::hint::black_box(true) {
                panic!("the fake broke");
            }
        }),
    );
    let (addr, panics) = fakes::serve(router).await;
    let status = fakes::client()
        .post(format!("http://{addr}/boom"))
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(status.ok(), Some(500));
    panics.check("test");
}

/// POSTs a Meta webhook `body` to `path` on the shop (a replica picked per attempt) until
/// accepted, signed with `app_secret` as Meta does (`what`: the message's id, for the failure
/// message).
#[cfg(any(
    feature = "whatsapp-cloud",
    feature = "messenger",
    feature = "instagram"
))]
fn post_meta_webhook(
    what: String,
    listen: &Listen,
    path: &'static str,
    app_secret: &str,
    body: &serde_json::Value,
) -> tokio::task::JoinHandle<()> {
    let body = serde_json::to_vec(body).expect("a JSON body");
    let signature = fakes::meta::sign(app_secret, &body);
    let listen = listen.clone();
    post_until_accepted(what, move |client| {
        client
            .post(format!("http://{}{path}", listen.pick()))
            .header("content-type", "application/json")
            .header("X-Hub-Signature-256", &signature)
            .body(body.clone())
    })
}

/// The seeds a CI run takes per channel (a soak sets `SEEDS`).
const SEEDS: std::ops::Range<u64> = 0..2;

/// A channel's two runs, `$start` (an async constructor) making its fake: `$survives` through
/// SIGKILLs ([`survives_sigkills`]), `$retries` through send faults ([`retries_faults`]).
macro_rules! shop_tests {
    ($start:expr, $survives:ident, $retries:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $survives() {
            survives_sigkills($start, seeds(SEEDS)).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $retries() {
            retries_faults(($start)().await).await;
        }
    };
    // One module per channel of a family: `feature module constructor`.
    ($($feature:literal $module:ident $start:expr),* $(,)?) => {$(
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            shop_tests!($start, shop_survives_sigkills, shop_retries_5xx_and_429_bursts);
        }
    )*};
}

#[cfg(feature = "telegram")]
mod telegram {
    use super::*;
    use crate::channels::telegram::Telegram;

    shop_tests!(
        || Telegram::start(false),
        telegram_polling_shop_survives_sigkills,
        telegram_polling_shop_retries_5xx_and_429_bursts
    );

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn telegram_webhook_shop_survives_sigkills() {
        survives_sigkills(|| Telegram::start(true), seeds(SEEDS)).await;
    }
}

#[cfg(feature = "whatsapp-cloud")]
mod whatsapp {
    use super::*;
    use crate::fakes::whatsapp::{FakeWhatsApp, hooks};

    const TOKEN: &str = "EAAG-crash-token";
    const APP_SECRET: &str = "crash-app-secret";

    /// WhatsApp Cloud: messages POSTed to the shop's webhook, signed with the app secret.
    pub(crate) struct WhatsApp(FakeWhatsApp);

    impl WhatsApp {
        pub(crate) async fn start() -> Self {
            Self(FakeWhatsApp::start(TOKEN).await)
        }
    }

    impl Channel for WhatsApp {
        fn name(&self) -> &'static str {
            "whatsapp"
        }

        fn env(&self, _listen: &str) -> Vec<(&'static str, String)> {
            vec![
                ("WHATSAPP_ACCESS_TOKEN", TOKEN.to_owned()),
                ("WHATSAPP_PHONE_NUMBER_ID", "106540352242922".to_owned()),
                ("WHATSAPP_APP_SECRET", APP_SECRET.to_owned()),
                ("WHATSAPP_VERIFY_TOKEN", "crash-verify".to_owned()),
                ("WHATSAPP_API_BASE", self.0.base_url()),
                ("WHATSAPP_WEBHOOK_PATH", "/whatsapp".to_owned()),
            ]
        }

        fn chat(&self, user: u32) -> String {
            format!("1631555{user:04}")
        }

        fn write(&self, user: u32, id: u64, text: &str, listen: &Listen) -> Posting {
            let wamid = format!("wamid.IN{id}");
            let body = hooks::text_from(&self.chat(user), &wamid, text);
            Some(post_meta_webhook(
                wamid,
                listen,
                "/whatsapp",
                APP_SECRET,
                &body,
            ))
        }

        fn fake(&self) -> &dyn FakeApi {
            &self.0
        }

        fn fail_next_send(&self, fault: Fault) {
            match fault {
                Fault::ServerError => self.0.fail_next(503, 2, "Service temporarily unavailable"),
                Fault::RateLimited => self.0.fail_next(429, 130429, "(#130429) Rate limit hit"),
            }
        }
    }

    shop_tests!(
        WhatsApp::start,
        whatsapp_shop_survives_sigkills,
        whatsapp_shop_retries_5xx_and_429_bursts
    );
}

#[cfg(feature = "whatsapp-web")]
mod whatsapp_web {
    use super::*;
    use botmesh_providers::whatsapp_web::{FakeFault, FakeSession};

    /// WhatsApp Web: the shop runs its provider over the fake session of a directory
    /// (`WHATSAPP_WEB_REPLAY_DIR`), which replays every message from the start at each
    /// (re)start, as the server delivers pending messages again. Odd users write by LID
    /// with their phone number beside it, even users by phone number: each is one chat.
    pub(crate) struct WhatsAppWeb {
        _dir: tempfile::TempDir,
        fake: FakeSession,
    }

    impl WhatsAppWeb {
        pub(crate) async fn start() -> Self {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let fake = FakeSession::new(dir.path().join("session")).expect("the fake session");
            Self { _dir: dir, fake }
        }
    }

    /// The fake session has no server that could fail; each fault it answers was a send call.
    impl FakeApi for FakeSession {
        fn check(&self) {}
        fn delivered(&self, chat: &str) -> Vec<String> {
            self.delivered_to(chat)
        }
        fn send_calls(&self) -> usize {
            self.sent().len() + self.faults_taken()
        }
    }

    impl Channel for WhatsAppWeb {
        fn name(&self) -> &'static str {
            "whatsapp-web"
        }

        fn env(&self, _listen: &str) -> Vec<(&'static str, String)> {
            vec![
                (
                    "WHATSAPP_WEB_REPLAY_DIR",
                    self.fake.dir().display().to_string(),
                ),
                // A restarted shop takes the dead one's session within a second.
                ("WHATSAPP_WEB_SESSION_LEASE", "1s".to_owned()),
            ]
        }

        fn chat(&self, user: u32) -> String {
            format!("1555000{user:04}@s.whatsapp.net")
        }

        fn write(&self, user: u32, id: u64, text: &str, _listen: &Listen) -> Posting {
            let pn = self.chat(user);
            let lid = format!("9000000{user:04}@lid");
            let event = if user % 2 == 1 {
                FakeSession::text(&format!("3EB0IN{id:014}"), &lid, Some(&pn), text)
            } else {
                FakeSession::text(&format!("3EB0IN{id:014}"), &pn, Some(&lid), text)
            };
            self.fake.push(&event).expect("a message for the shop");
            None
        }

        fn fake(&self) -> &dyn FakeApi {
            &self.fake
        }

        fn fail_next_send(&self, fault: Fault) {
            let fault = match fault {
                Fault::ServerError => FakeFault::ServerError,
                Fault::RateLimited => FakeFault::RateLimited,
            };
            self.fake.fail_next(fault).expect("a fault");
        }
    }

    shop_tests!(
        WhatsAppWeb::start,
        whatsapp_web_shop_survives_sigkills,
        whatsapp_web_shop_retries_5xx_and_429_bursts
    );
}

#[cfg(any(feature = "messenger", feature = "instagram"))]
mod meta_messaging {
    use std::marker::PhantomData;

    use super::*;
    use crate::fakes::meta_messaging::{FakeSendApi, hooks};
    use botmesh_providers::meta::messaging::{Channel as Meta, TextLimit};
    use serde_json::json;

    const TOKEN: &str = "EAAG-crash-page-token";
    const APP_SECRET: &str = "crash-app-secret";

    /// Messenger or Instagram (`C`): events POSTed to the shop's webhook, signed with the app
    /// secret; the shop configured through the channel's variables.
    pub(crate) struct MetaMessaging<C> {
        fake: FakeSendApi,
        channel: PhantomData<C>,
    }

    impl<C: Meta> MetaMessaging<C> {
        pub(crate) async fn start() -> Self {
            let fake = match C::TEXT_LIMIT {
                TextLimit::Chars(n) => FakeSendApi::start(TOKEN, n, false).await,
                TextLimit::Bytes(n) => FakeSendApi::start(TOKEN, n, true).await,
            };
            Self {
                fake,
                channel: PhantomData,
            }
        }
    }

    impl<C: Meta> Channel for MetaMessaging<C> {
        fn name(&self) -> &'static str {
            C::NAME
        }

        fn env(&self, _listen: &str) -> Vec<(&'static str, String)> {
            let [token, secret, verify, base, ..] = C::ENV;
            vec![
                (token, TOKEN.to_owned()),
                (secret, APP_SECRET.to_owned()),
                (verify, "crash-verify".to_owned()),
                (base, self.fake.base_url()),
            ]
        }

        fn chat(&self, user: u32) -> String {
            format!("65432{user:05}")
        }

        fn write(&self, user: u32, id: u64, text: &str, listen: &Listen) -> Posting {
            let mid = format!("m_IN{id}");
            let item = hooks::item_from(
                &self.chat(user),
                "message",
                json!({"mid": mid, "text": text}),
            );
            let body = hooks::envelope(C::OBJECT, vec![item]);
            Some(post_meta_webhook(
                mid,
                listen,
                C::DEFAULT_PATH,
                APP_SECRET,
                &body,
            ))
        }

        fn fake(&self) -> &dyn FakeApi {
            &self.fake
        }

        fn fail_next_send(&self, fault: Fault) {
            match fault {
                Fault::ServerError => {
                    self.fake
                        .fail_next(503, 2, None, "Service temporarily unavailable")
                }
                Fault::RateLimited => self.fake.fail_next(
                    400,
                    613,
                    None,
                    "Calls to this api have exceeded the rate limit.",
                ),
            }
        }
    }

    shop_tests!(
        "messenger" messenger MetaMessaging::<botmesh_providers::messenger::Messenger>::start,
        "instagram" instagram MetaMessaging::<botmesh_providers::instagram::Instagram>::start,
    );
}

#[cfg(feature = "discord")]
mod discord {
    use super::*;
    use crate::channels::discord::Discord;

    // Through two SIGKILLs: 0 replies twice and every chat confirmed, ambiguous sends or not
    // (nonces), and what users wrote while the shop was down is replayed by the resume.
    shop_tests!(
        Discord::start,
        discord_shop_survives_sigkills,
        discord_shop_retries_5xx_and_429_bursts
    );
}

#[cfg(feature = "twilio")]
mod twilio {
    use super::*;
    use crate::fakes::twilio::FakeTwilio;

    const SID: &str = "AC00000000000000000000000000crash";
    const TOKEN: &str = "crash-auth-token";
    const FROM: &str = "+15550000000";

    /// Twilio Messaging (SMS): messages POSTed to the shop's webhook, signed with the auth
    /// token over the public URL.
    pub(crate) struct Twilio(FakeTwilio);

    impl Twilio {
        pub(crate) async fn start() -> Self {
            Self(FakeTwilio::start(SID, TOKEN).await)
        }
    }

    impl Channel for Twilio {
        fn name(&self) -> &'static str {
            "twilio"
        }

        fn env(&self, listen: &str) -> Vec<(&'static str, String)> {
            vec![
                ("TWILIO_ACCOUNT_SID", SID.to_owned()),
                ("TWILIO_AUTH_TOKEN", TOKEN.to_owned()),
                ("TWILIO_FROM", FROM.to_owned()),
                ("TWILIO_WEBHOOK_BASE_URL", format!("http://{listen}")),
                ("TWILIO_WEBHOOK_PATH", "/twilio".to_owned()),
                ("TWILIO_API_BASE", self.0.base_url()),
            ]
        }

        fn chat(&self, user: u32) -> String {
            format!("+1555000{user:04}")
        }

        fn write(&self, user: u32, id: u64, text: &str, listen: &Listen) -> Posting {
            // Signed over the public URL; posted to whichever shop takes it.
            let url = format!("http://{}/twilio", listen.public());
            let listen = listen.clone();
            let params: Vec<(String, String)> = [
                ("AccountSid", SID.to_owned()),
                ("MessageSid", format!("SM{id:032x}")),
                ("From", self.chat(user)),
                ("To", FROM.to_owned()),
                ("Body", text.to_owned()),
                ("NumMedia", "0".to_owned()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
            let pairs: Vec<(&str, &str)> = params
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let signature = botmesh_providers::twilio::signature(TOKEN, &url, &pairs);
            let body = serde_urlencoded::to_string(&params).expect("a form");
            Some(post_until_accepted(format!("SM{id:032x}"), move |client| {
                client
                    .post(format!("http://{}/twilio", listen.pick()))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .header("X-Twilio-Signature", &signature)
                    .body(body.clone())
            }))
        }

        fn fake(&self) -> &dyn FakeApi {
            &self.0
        }

        fn fail_next_send(&self, fault: Fault) {
            match fault {
                Fault::ServerError => self.0.fail_next(500, 20500, "Internal Server Error", None),
                Fault::RateLimited => self.0.fail_next(429, 20429, "Too Many Requests", Some(1)),
            }
        }
    }

    shop_tests!(
        Twilio::start,
        twilio_shop_survives_sigkills,
        twilio_shop_retries_5xx_and_429_bursts
    );
}

/// The HTTP gateways (Gupshup, Evolution API, WPPConnect) and the REST channels with signed
/// JSON webhooks (GoHighLevel, TikTok): webhooks POSTed to the shop with the shared secret in the path
/// or the channel's signature headers, until accepted (WPPConnect itself never retries a
/// webhook; the harness does, for every channel, to test the bot rather than the gateway).
/// One [`Channel`] serves them all; each only says how it is reached.
#[cfg(rest_channel)]
mod gateways {
    use serde_json::Value;

    use super::*;
    use crate::fakes::Served;

    /// The signature headers of a webhook body.
    type Sign = Box<dyn Fn(Vec<u8>) -> Vec<(&'static str, String)> + Send + Sync>;

    /// A gateway's fake (whose calls are logged) and how a user writes through it.
    pub(crate) struct Gateway<S> {
        name: &'static str,
        fake: Served<S>,
        env: Vec<(&'static str, String)>,
        /// User `n`'s chat id.
        chat: fn(u32) -> String,
        /// What the fake records a chat's messages under.
        to: fn(&str) -> &str,
        /// Message `id` with a text from a chat: (its id, the webhook path, the body).
        hook: fn(&str, u64, &str) -> (String, String, Value),
        /// The signature headers of a webhook body (none for the gateways: the secret is in
        /// the path).
        sign: Sign,
        /// Makes the fake answer the next send with `fault`.
        fail: fn(&Served<S>, Fault),
    }

    impl<S: Send + 'static> Channel for Gateway<S>
    where
        Served<S>: FakeApi,
    {
        fn name(&self) -> &'static str {
            self.name
        }

        fn env(&self, _listen: &str) -> Vec<(&'static str, String)> {
            self.env.clone()
        }

        fn chat(&self, user: u32) -> String {
            (self.chat)(user)
        }

        fn write(&self, user: u32, id: u64, text: &str, listen: &Listen) -> Posting {
            let (what, path, body) = (self.hook)(&self.chat(user), id, text);
            let body = serde_json::to_vec(&body).expect("a JSON body");
            let headers = (self.sign)(body.clone());
            let listen = listen.clone();
            Some(post_until_accepted(what, move |client| {
                let request = client
                    .post(format!("http://{}{path}", listen.pick()))
                    .header("content-type", "application/json");
                let signed = headers.iter().fold(request, |r, (k, v)| r.header(*k, v));
                signed.body(body.clone())
            }))
        }

        fn fake(&self) -> &dyn FakeApi {
            &self.fake
        }

        fn delivered(&self, user: u32) -> Vec<String> {
            self.fake.delivered((self.to)(&self.chat(user)))
        }

        fn fail_next_send(&self, fault: Fault) {
            (self.fail)(&self.fake, fault);
        }
    }

    impl<S: Send + 'static> Gateway<S> {
        /// The fake's base URL in the shop's variable `var`, beside the others.
        fn with_base_url(mut self, var: &'static str) -> Self {
            self.env.push((var, self.fake.base_url()));
            self
        }
    }

    /// The status and `Retry-After` a fault is answered with.
    fn fault_status(fault: Fault) -> (u16, Option<u64>) {
        match fault {
            Fault::ServerError => (503, None),
            Fault::RateLimited => (429, Some(1)),
        }
    }

    #[cfg(feature = "gupshup")]
    pub(crate) async fn gupshup() -> Gateway<crate::fakes::gupshup::S> {
        use crate::fakes::gupshup::{FakeGupshup, hooks};
        const SECRET: &str = "crash-callback-secret-0001";
        Gateway {
            name: "gupshup",
            fake: FakeGupshup::start("crash-gupshup-key").await,
            env: vec![
                ("GUPSHUP_API_KEY", "crash-gupshup-key".to_owned()),
                ("GUPSHUP_APP_NAME", "CrashShop".to_owned()),
                ("GUPSHUP_SOURCE", "917834811114".to_owned()),
                ("GUPSHUP_WEBHOOK_SECRET", SECRET.to_owned()),
            ],
            chat: |user| format!("9198765{user:05}"),
            to: |chat| chat,
            hook: |chat, id, text| {
                let message_id = format!("ABEGkYaYVSEEAhAL{id:08}");
                let body = hooks::text_from("CrashShop", chat, &message_id, text);
                (message_id, format!("/gupshup/{SECRET}"), body)
            },
            sign: Box::new(|_| Vec::new()),
            fail: |fake, fault| {
                let (status, retry_after) = fault_status(fault);
                fake.fail_next(status, "Service Unavailable", retry_after);
            },
        }
        .with_base_url("GUPSHUP_API_BASE")
    }

    #[cfg(feature = "evolution")]
    pub(crate) async fn evolution() -> Gateway<crate::fakes::evolution::S> {
        use crate::fakes::evolution::{FakeEvolution, hooks};
        const SECRET: &str = "crash-evolution-secret-01";
        Gateway {
            name: "evolution",
            fake: FakeEvolution::start("crash-evolution-key", "crash-shop").await,
            env: vec![
                ("EVOLUTION_API_KEY", "crash-evolution-key".to_owned()),
                ("EVOLUTION_INSTANCE", "crash-shop".to_owned()),
                ("EVOLUTION_WEBHOOK_SECRET", SECRET.to_owned()),
            ],
            chat: |user| format!("5511999{user:05}@s.whatsapp.net"),
            to: |chat| chat,
            hook: |chat, id, text| {
                let key_id = format!("3EB0{id:016X}");
                let body =
                    hooks::text_from("crash-shop", "crash-evolution-key", chat, &key_id, text);
                (key_id, format!("/evolution/{SECRET}"), body)
            },
            sign: Box::new(|_| Vec::new()),
            fail: |fake, fault| {
                let (status, retry_after) = fault_status(fault);
                let message = serde_json::json!(["Service Unavailable"]);
                fake.fail_next(status, message, retry_after);
            },
        }
        .with_base_url("EVOLUTION_API_URL")
    }

    #[cfg(feature = "wppconnect")]
    pub(crate) async fn wppconnect() -> Gateway<crate::fakes::wppconnect::S> {
        use crate::fakes::wppconnect::{FakeWppConnect, hooks};
        const SECRET: &str = "crash-wppconnect-secret-01";
        Gateway {
            name: "wppconnect",
            fake: FakeWppConnect::start("crash-wppconnect-token", "crash-shop").await,
            env: vec![
                ("WPPCONNECT_SESSION", "crash-shop".to_owned()),
                ("WPPCONNECT_TOKEN", "crash-wppconnect-token".to_owned()),
                ("WPPCONNECT_WEBHOOK_SECRET", SECRET.to_owned()),
            ],
            chat: |user| format!("5521999{user:05}@c.us"),
            // The fake records the `phone` of a send: the chat id without its domain.
            to: |chat| chat.split('@').next().unwrap_or(chat),
            hook: |chat, id, text| {
                let body = hooks::text_from("crash-shop", chat, &format!("3EB0{id:016X}"), text);
                let what = body["id"].as_str().unwrap_or_default().to_owned();
                (what, format!("/wppconnect/{SECRET}"), body)
            },
            sign: Box::new(|_| Vec::new()),
            fail: |fake, fault| {
                let (status, retry_after) = fault_status(fault);
                let body =
                    serde_json::json!({"status": "error", "message": "Error on send message"});
                fake.fail_next(status, body, retry_after);
            },
        }
        .with_base_url("WPPCONNECT_API_URL")
    }

    #[cfg(feature = "gohighlevel")]
    pub(crate) async fn gohighlevel() -> Gateway<crate::fakes::gohighlevel::S> {
        use crate::fakes::gohighlevel::{FakeGhl, Keys, hooks};
        const LOCATION: &str = "crashLocation0000001";
        let keys = Keys::new();
        Gateway {
            name: "gohighlevel",
            fake: FakeGhl::start("pit-crash-token").await,
            env: vec![
                ("GHL_ACCESS_TOKEN", "pit-crash-token".to_owned()),
                ("GHL_LOCATION_ID", LOCATION.to_owned()),
                ("GHL_WEBHOOK_PUBLIC_KEY", keys.ed25519_pem()),
            ],
            chat: |user| format!("SMS:contact{user:05}"),
            to: |chat| chat,
            hook: |chat, id, text| {
                let contact = chat.trim_start_matches("SMS:");
                let message_id = format!("msg{id:016}");
                let body = hooks::inbound(LOCATION, "SMS", contact, &message_id, text);
                (message_id, "/gohighlevel".to_owned(), body)
            },
            // HighLevel signs with Ed25519; the shop answers 429 until it accepts a webhook.
            sign: Box::new(move |body| vec![("X-GHL-Signature", keys.sign(&body))]),
            fail: |fake, fault| match fault {
                Fault::ServerError => fake.fail_next(502, "Bad Gateway", None),
                Fault::RateLimited => fake.fail_next(429, "Too Many Requests", Some(1)),
            },
        }
        .with_base_url("GHL_API_BASE")
    }

    #[cfg(feature = "tiktok")]
    pub(crate) async fn tiktok() -> Gateway<crate::fakes::tiktok::S> {
        use crate::fakes::tiktok::{FakeTikTok, hooks};
        const BUSINESS: &str = "crash-business-0001";
        const SECRET: &str = "crash-tiktok-client-secret";
        Gateway {
            name: "tiktok",
            fake: FakeTikTok::start("act.crash-token", BUSINESS).await,
            env: vec![
                ("TIKTOK_ACCESS_TOKEN", "act.crash-token".to_owned()),
                ("TIKTOK_BUSINESS_ID", BUSINESS.to_owned()),
                ("TIKTOK_APP_SECRET", SECRET.to_owned()),
            ],
            // A conversation per user, as TikTok keys its chats.
            chat: |user| format!("conv-{user:05}"),
            to: |chat| chat,
            hook: |chat, id, text| {
                let message_id = format!("tt-{id:016}");
                let user = chat.replace("conv-", "user-");
                let body = hooks::text(BUSINESS, chat, &user, &message_id, text);
                (message_id, "/tiktok".to_owned(), body)
            },
            // Signed once, when written: within the 5 minutes the shop takes a signature.
            sign: Box::new(|body| vec![("TikTok-Signature", hooks::sign(SECRET, &body))]),
            fail: |fake, fault| match fault {
                Fault::ServerError => fake.fail_next(500, None),
                Fault::RateLimited => fake.fail_next_code(40100, "Too many requests."),
            },
        }
        .with_base_url("TIKTOK_API_BASE")
    }

    shop_tests!(
        "gupshup" gupshup gupshup,
        "evolution" evolution evolution,
        "wppconnect" wppconnect wppconnect,
        "gohighlevel" gohighlevel gohighlevel,
        "tiktok" tiktok tiktok
    );
}

#[cfg(feature = "email")]
mod email {
    use super::*;
    use crate::fakes::smtp::{FakeSmtp, Stage};

    const KEY: &str = "crash-mailgun-signing-key";

    /// Email: each user's mails POSTed by Mailgun Routes to the shop's webhook (signed afresh
    /// for each attempt, as Mailgun signs each post), all in one thread per user; the shop's
    /// replies reach the fake SMTP server.
    pub(crate) struct Email(FakeSmtp);

    impl Email {
        pub(crate) async fn start() -> Self {
            Self(FakeSmtp::start().await)
        }

        fn address(user: u32) -> String {
            format!("user{user:04}@example.com")
        }
    }

    /// The SMTP server's mailboxes (by address) and every SMTP transaction tried.
    impl FakeApi for FakeSmtp {
        // The run's report, beside the harness's own lines.
        #[allow(clippy::print_stdout)]
        fn check(&self) {
            let resent = self.resent();
            if resent > 0 {
                println!(
                    "email: {resent} mails resent with their first Message-ID (one mail each in the mailbox)"
                );
            }
        }
        fn delivered(&self, address: &str) -> Vec<String> {
            self.delivered_to(address)
        }
        fn send_calls(&self) -> usize {
            self.calls()
        }
    }

    impl Channel for Email {
        fn name(&self) -> &'static str {
            "email"
        }

        fn env(&self, _listen: &str) -> Vec<(&'static str, String)> {
            vec![
                ("EMAIL_FROM", "Shop <shop@shop.example>".to_owned()),
                ("EMAIL_SMTP_URL", self.0.url()),
                ("EMAIL_MAILGUN_SIGNING_KEY", KEY.to_owned()),
            ]
        }

        fn chat(&self, user: u32) -> String {
            format!("{}/thread-{user:04}@example.com", Self::address(user))
        }

        fn write(&self, user: u32, id: u64, text: &str, listen: &Listen) -> Posting {
            let root = format!("<thread-{user:04}@example.com>");
            let message_id = format!("<in-{id}@example.com>");
            let from = Self::address(user);
            let headers = serde_json::json!([
                ["From", from],
                ["To", "shop@shop.example"],
                ["Subject", "Re: Order"],
                ["Message-Id", message_id],
                ["In-Reply-To", root],
                ["References", root],
            ])
            .to_string();
            let fields: Vec<(String, String)> = vec![
                ("recipient".into(), "shop@shop.example".into()),
                ("from".into(), from.clone()),
                ("body-plain".into(), text.to_owned()),
                ("message-headers".into(), headers),
            ];
            let listen = listen.clone();
            Some(post_until_accepted(message_id.clone(), move |client| {
                let timestamp = (botmesh::clock::now_ms() / 1000).to_string();
                let token = format!("{:032x}", fastrand::u128(..));
                let signature =
                    botmesh_providers::email::mailgun_signature(KEY, &timestamp, &token);
                let mut form = fields.clone();
                form.extend([
                    ("timestamp".to_owned(), timestamp),
                    ("token".to_owned(), token),
                    ("signature".to_owned(), signature),
                ]);
                client
                    .post(format!("http://{}/email/mailgun", listen.pick()))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(serde_urlencoded::to_string(&form).expect("a form"))
            }))
        }

        fn fake(&self) -> &dyn FakeApi {
            &self.0
        }

        /// As the user's mailbox shows them: one mail per Message-ID.
        fn delivered(&self, user: u32) -> Vec<String> {
            self.0.delivered_to(&Self::address(user))
        }

        fn fail_next_send(&self, fault: Fault) {
            match fault {
                Fault::ServerError => self.0.fail_next(Stage::Data, "451 4.3.0 try again later"),
                Fault::RateLimited => self
                    .0
                    .fail_next(Stage::Mail, "421 4.7.0 too many messages, slow down"),
            }
        }
    }

    shop_tests!(
        Email::start,
        email_shop_survives_sigkills,
        email_shop_retries_4xx_bursts
    );
}
