//! The harness of the channel crash tests: the `shop` binary run as a user runs it
//! (`shop --channel …`, its SQLite file, the channel's environment variables) against a local
//! fake of the channel's API (`providers/tests/fakes/`), with a dozen chats each taking an
//! order in a closed loop (each answer written once its question arrived).
//!
//! A channel is a [`Channel`]: how the shop is configured for it, how a user writes (a
//! `getUpdates` update, or a signed webhook POST retried until a 2xx as the channel does),
//! what reached the user, and how a send is made to fail. The runs are the same for every
//! channel:
//!
//! - [`survives_sigkills`]: the shop is SIGKILLed twice at seeded moments and restarted on the
//!   same file. No reply twice unless a `send outcome is ambiguous` log line names its chat, no
//!   answer taken for another question, every question in order, and every chat confirmed or
//!   named by an ambiguous line (the one send that may be skipped is the confirmation: a
//!   question of unknown outcome is sent again, so no chat is left without its next question).
//!   On a channel that drops resends (Discord's nonces) no ambiguous line excuses anything:
//!   every reply exactly once and every chat confirmed.
//! - [`retries_faults`]: a 5xx after every 5th reply delivered, three 429s in a row after every
//!   12th: every reply arrives exactly once, in order, and every chat is confirmed.
//!
//! `SEED=n` runs one seed, `SEEDS=a..b` a range (the soak: `examples/crash-soak.sh`).
#![allow(dead_code, unreachable_pub, clippy::expect_used, clippy::print_stdout)]

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::fakes::poll::Poll;

#[cfg(feature = "discord")]
pub mod discord;
pub mod replicas;
#[cfg(feature = "telegram")]
pub mod telegram;

/// How many chats order at once.
pub const CHATS: u32 = 12;
/// The order each chat places, as (the question's start, the answer).
const SCRIPT: [(&str, &str); 3] = [
    ("What would you like?", "Coffee"),
    ("How many Coffee?", "2"),
    ("2 × Coffee for", "yes"),
];
/// The start of the confirmation.
const DONE: &str = "Order #";
/// Replies that mean an answer was fed to the wrong question.
const WRONG: [&str; 3] = [
    "Sorry, we don't sell that.",
    "Please answer with a whole number",
    "Please answer Yes or No.",
];

/// A send failure the fake answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A 5xx.
    ServerError,
    /// A 429 (with a retry-after of one second where the channel has one).
    RateLimited,
}

/// A channel's fake and how the shop talks to it.
pub trait Channel: Send + Sync + 'static {
    /// The `--channel` value.
    fn name(&self) -> &'static str;
    /// The shop's environment: the fake's base URL, the credentials, the webhook's settings
    /// (`listen`: the `host:port` the shop's webhook server listens on).
    fn env(&self, listen: &str) -> Vec<(&'static str, String)>;
    /// The chat id of user `user`, as the shop names it in its logs.
    fn chat(&self, user: u32) -> String;
    /// User `user` writes `text` as message `id` (unique in a run). A webhook channel POSTs
    /// it to a shop `listen` picks for each attempt until it gets a 2xx, as the real channel
    /// retries, in the task it returns (see [`post_until_accepted`]).
    fn write(&self, user: u32, id: u64, text: &str, listen: &Listen) -> Posting;
    /// The fake the shop's sends reach.
    fn fake(&self) -> &dyn FakeApi;
    /// The texts of the sends to `user` that succeeded, in order: by default what the fake
    /// recorded under the user's chat id.
    fn delivered(&self, user: u32) -> Vec<String> {
        self.fake().delivered(&self.chat(user))
    }
    /// The next send call is answered with `fault`.
    fn fail_next_send(&self, fault: Fault);
    /// When a shop's call fetching updates came while another shop's was being answered,
    /// with both shops' webhook addresses (a polled channel; `None` for a webhook channel):
    /// several replicas must never poll at once.
    fn poll_overlaps(&self) -> Option<Vec<(std::time::Instant, String, String)>> {
        None
    }
    /// The channel drops a resend of a message it already created (Discord's nonces): no
    /// ambiguous send excuses a reply twice or a chat left unconfirmed.
    fn resends_deduplicated(&self) -> bool {
        false
    }
}

/// A user's message on its way: the task POSTing it until the shop accepts it, or `None` when
/// the channel's fake took it at once.
pub type Posting = Option<JoinHandle<()>>;

/// A channel's fake API as the runs read it.
pub trait FakeApi {
    /// Fails the test if the fake failed (a handler panicked).
    fn check(&self);
    /// The texts of the sends to `chat` that succeeded, in order.
    fn delivered(&self, chat: &str) -> Vec<String>;
    /// How many send calls the fake answered (successes and failures).
    fn send_calls(&self) -> usize;
}

/// [`FakeApi`] for the fakes whose own `check`, `delivered_to` and `sent` say it.
macro_rules! fake_api_of_its_log {
    ($($(#[$cfg:meta])* impl<$($g:ident: $bound:path)?> $fake:ty),* $(,)?) => {$(
        $(#[$cfg])*
        impl<$($g: $bound)?> FakeApi for $fake {
            fn check(&self) {
                <$fake>::check(self);
            }
            fn delivered(&self, chat: &str) -> Vec<String> {
                self.delivered_to(chat)
            }
            fn send_calls(&self) -> usize {
                self.sent().len()
            }
        }
    )*};
}

fake_api_of_its_log!(
    // Twilio, the gateways, GoHighLevel and TikTok.
    #[cfg(any(rest_channel, feature = "twilio"))]
    impl<S: crate::fakes::log::Logs> crate::fakes::Served<S>,
    #[cfg(feature = "whatsapp-cloud")]
    impl<> crate::fakes::whatsapp::FakeWhatsApp,
    #[cfg(any(feature = "messenger", feature = "instagram"))]
    impl<> crate::fakes::meta_messaging::FakeSendApi,
);

#[cfg(feature = "discord")]
impl FakeApi for crate::fakes::discord::FakeDiscord {
    fn check(&self) {
        self.api.check();
    }
    fn delivered(&self, chat: &str) -> Vec<String> {
        self.delivered_to(chat)
    }
    /// The messages created (Discord's sends).
    fn send_calls(&self) -> usize {
        self.creates().len()
    }
}

/// Where a webhook is POSTed: the one shop, or a random one of several replicas for each
/// attempt (a load balancer without chat affinity; a replica that is down refuses the
/// connection and the next attempt goes elsewhere).
#[derive(Clone)]
pub struct Listen {
    addrs: Arc<Vec<String>>,
    rng: Arc<std::sync::Mutex<fastrand::Rng>>,
}

impl Listen {
    fn new(addrs: Vec<String>, seed: u64) -> Self {
        Self {
            addrs: Arc::new(addrs),
            rng: Arc::new(std::sync::Mutex::new(fastrand::Rng::with_seed(seed))),
        }
    }

    /// The address users reach the shop at (the first replica's: what a channel signs).
    pub fn public(&self) -> &str {
        &self.addrs[0]
    }

    /// The shop the next attempt goes to.
    pub fn pick(&self) -> String {
        let i = self
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .usize(..self.addrs.len());
        self.addrs[i].clone()
    }
}

/// A free local port for the shop's webhook server (the same across its restarts).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

/// POSTs a webhook until the shop answers 2xx (as Telegram, Meta and Twilio with retries
/// do), in a task of its own; `request` builds each attempt. The task panics when the shop
/// refuses it (a 4xx) or never accepts it: the harness awaits it ([`Users::surface`]), so
/// that panic fails the test.
pub fn post_until_accepted(
    what: String,
    request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("a test client");
        // The shop is a real process, maybe restarting: tried again shortly.
        let poll = Poll::within(Duration::from_secs(90));
        loop {
            match request(&client).send().await {
                Ok(r) if r.status().is_success() => return,
                Ok(r) if r.status().is_client_error() && r.status().as_u16() != 429 => {
                    panic!("webhook {what} refused: {}", r.status())
                }
                _ => assert!(poll.again().await, "webhook {what} never accepted"),
            }
        }
    })
}

/// One shop process and where it keeps its things.
struct Shop {
    db: PathBuf,
    listen: String,
    child: Option<Child>,
    /// More arguments (a replica's store and id).
    args: Vec<String>,
    rust_log: &'static str,
    /// The length of the log when the running process started.
    log_from: usize,
}

impl Shop {
    fn new(db: PathBuf) -> Self {
        Self {
            db,
            listen: format!("127.0.0.1:{}", free_port()),
            child: None,
            args: Vec::new(),
            rust_log: "warn",
            log_from: 0,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.db.with_extension("log")
    }

    fn start(&mut self, channel: &dyn Channel) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("the shop's log file");
        self.log_from = self.log().len();
        let child = Command::new(env!("CARGO_BIN_EXE_shop"))
            .args(["--channel", channel.name(), "--db"])
            .arg(&self.db)
            .args(["--listen", &self.listen])
            .args(&self.args)
            // Nothing of the caller's environment: only the channel's settings.
            .env_clear()
            .envs(channel.env(&self.listen))
            .env("RUST_LOG", self.rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the shop starts");
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the shop");
            child.wait().expect("reap the shop");
        }
    }

    /// SIGTERM: the shop drains and exits.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            child.wait().expect("reap the shop");
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The chats named by `send outcome is ambiguous` lines of the log.
    fn ambiguous_chats(&self) -> HashSet<String> {
        self.log()
            .lines()
            .filter(|l| l.contains("send outcome is ambiguous"))
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("chat="))
                    .map(|c| c.trim_matches('"').to_owned())
            })
            .collect()
    }
}

impl Drop for Shop {
    /// A failing test unwinds: the shop goes with it.
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The users' side of the conversation: answers each chat's last question once.
#[derive(Default)]
struct Users {
    /// Per user, how many of the script's messages were written (0: not even `/order`).
    stage: HashMap<u32, usize>,
    next_id: u64,
    /// The webhook POSTs still being tried.
    posting: Vec<JoinHandle<()>>,
}

impl Users {
    /// Writes, for every chat, the answer to its last question if not written yet. Returns
    /// whether every chat is confirmed.
    fn drive(&mut self, channel: &dyn Channel, listen: &Listen) -> bool {
        let mut done = true;
        for user in 1..=CHATS {
            let texts = channel.delivered(user);
            if texts.iter().any(|t| t.starts_with(DONE)) {
                continue;
            }
            done = false;
            let stage = self.stage.entry(user).or_insert(0);
            let text = match *stage {
                0 => "/order",
                n => match SCRIPT.get(n - 1) {
                    Some((question, answer)) if texts.iter().any(|t| t.starts_with(question)) => {
                        answer
                    }
                    _ => continue,
                },
            };
            self.next_id += 1;
            self.posting
                .extend(channel.write(user, self.next_id, text, listen));
            *stage += 1;
        }
        done
    }

    /// Fails the test with the panic of a finished POST task (a webhook refused, or never
    /// accepted) or of the fake.
    async fn surface(&mut self, channel: &dyn Channel) {
        channel.fake().check();
        let (finished, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.posting)
            .into_iter()
            .partition(JoinHandle::is_finished);
        self.posting = running;
        for task in finished {
            surfaced(task).await;
        }
    }

    /// Waits for every POST task (each gives up, panicking, after its own deadline) and fails
    /// the test with the first panic.
    async fn settle(&mut self, channel: &dyn Channel) {
        for task in std::mem::take(&mut self.posting) {
            surfaced(task).await;
        }
        channel.fake().check();
    }

    /// Drives until every chat is confirmed or `within` passed.
    async fn drive_until_done(&mut self, channel: &dyn Channel, listen: &Listen, within: Duration) {
        self.drive_for(channel, listen, within, |confirmed| confirmed)
            .await;
    }

    /// Drives the users and surfaces the POST tasks' panics, over and over (the users read
    /// the replies real shop processes send to the fake), until `done` holds (given whether
    /// every chat is confirmed) or `within` passed; whether it held.
    async fn drive_for(
        &mut self,
        channel: &dyn Channel,
        listen: &Listen,
        within: Duration,
        mut done: impl FnMut(bool) -> bool,
    ) -> bool {
        let poll = Poll::within(within);
        loop {
            let confirmed = self.drive(channel, listen);
            self.surface(channel).await;
            if done(confirmed) {
                return true;
            }
            if !poll.again().await {
                return false;
            }
        }
    }
}

/// Waits for `task` and raises its panic again in the test (a task cancelled is not a
/// failure).
pub async fn surfaced(task: JoinHandle<()>) {
    if let Err(e) = task.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// What a run came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Replies delivered twice (each in a chat an ambiguous line names).
    pub duplicates: usize,
    /// Chats named by an ambiguous line.
    pub ambiguous: usize,
}

/// Checks what every chat received from `shops` (see the module docs); `faults`: no
/// ambiguity allowed.
fn check(channel: &dyn Channel, shops: &[Shop], faults: bool) -> Outcome {
    channel.fake().check();
    let ambiguous: HashSet<String> = shops.iter().flat_map(Shop::ambiguous_chats).collect();
    let mut outcome = Outcome {
        ambiguous: ambiguous.len(),
        ..Outcome::default()
    };
    let mut failures = Vec::new();
    for user in 1..=CHATS {
        let chat = channel.chat(user);
        let named = !faults && !channel.resends_deduplicated() && ambiguous.contains(&chat);
        let texts = channel.delivered(user);
        if let Some(wrong) = texts
            .iter()
            .find(|t| WRONG.iter().any(|w| t.starts_with(w)))
        {
            failures.push(format!(
                "chat {chat}: an answer was taken for another question ({wrong:?}): {texts:?}"
            ));
        }
        let mut seen = HashSet::new();
        for t in &texts {
            if !seen.insert(t) {
                outcome.duplicates += 1;
                if !named {
                    failures.push(format!(
                        "chat {chat}: {t:?} twice, and no ambiguous send names the chat: {texts:?}"
                    ));
                }
            }
        }
        let mut at = 0;
        for (question, _) in SCRIPT {
            match texts.iter().position(|t| t.starts_with(question)) {
                None => failures.push(format!("chat {chat}: never asked {question:?}: {texts:?}")),
                Some(i) if i < at => failures.push(format!("chat {chat}: out of order: {texts:?}")),
                Some(i) => at = i,
            }
        }
        if !texts.iter().any(|t| t.starts_with(DONE)) && !named {
            failures.push(format!(
                "chat {chat}: no confirmation, and no ambiguous send names the chat: {texts:?}"
            ));
        }
    }
    let logs: Vec<String> = shops
        .iter()
        .map(|s| format!("{}:\n{}", s.log_path().display(), s.log()))
        .collect();
    assert!(
        failures.is_empty(),
        "{} shop:\n{}\nlogs:\n{}",
        channel.name(),
        failures.join("\n"),
        logs.join("\n")
    );
    outcome
}

/// The seeds to run: `SEED=n`, `SEEDS=a..b`, else `default`.
pub fn seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    if let Some(seed) = std::env::var("SEED").ok().and_then(|s| s.parse().ok()) {
        return seed..seed + 1;
    }
    std::env::var("SEEDS")
        .ok()
        .and_then(|s| {
            let (a, b) = s.split_once("..")?;
            Some(a.parse().ok()?..b.parse().ok()?)
        })
        .unwrap_or(default)
}

/// The shop on `channel` (one fresh fake per seed, from `fake`) through two SIGKILLs at
/// seeded moments of the conversation, restarted on the same file each time; see the module
/// docs for what is checked.
pub async fn survives_sigkills<C: Channel, F: std::future::Future<Output = C>>(
    fake: impl Fn() -> F,
    seeds: std::ops::Range<u64>,
) {
    for seed in seeds {
        let channel = Arc::new(fake().await);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut shop = Shop::new(dir.path().join("shop.db"));
        shop.start(&*channel);
        let listen = Listen::new(vec![shop.listen.clone()], seed);
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut users = Users::default();
        for _ in 0..2 {
            // The seeded moment of the SIGKILL, in a real process.
            let until = Duration::from_millis(rng.u64(150..900));
            users.drive_for(&*channel, &listen, until, |_| false).await;
            shop.kill9();
            shop.start(&*channel);
        }
        // A chat whose confirmation was skipped as ambiguous never finishes: give the others
        // their time, then let `check` decide.
        users
            .drive_until_done(&*channel, &listen, Duration::from_secs(60))
            .await;
        users.settle(&*channel).await;
        shop.stop();
        let outcome = check(&*channel, std::slice::from_ref(&shop), false);
        println!(
            "{} seed {seed}: {CHATS} chats ordered through 2 SIGKILLs; {outcome:?}",
            channel.name()
        );
    }
}

/// The shop on `channel` with a 5xx after every 5th reply delivered and three 429s in a row
/// after every 12th: every chat confirmed, every reply once, in order.
pub async fn retries_faults<C: Channel>(channel: C) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut shop = Shop::new(dir.path().join("shop.db"));
    shop.start(&channel);
    let listen = Listen::new(vec![shop.listen.clone()], 0);
    let mut users = Users::default();
    // Faults follow progress (the replies delivered), so a send retried alone at the end is not
    // failed again and again until it is dead-lettered.
    let mut injected_for = 0;
    let poll = Poll::within(Duration::from_secs(90));
    loop {
        let delivered: usize = (1..=CHATS).map(|u| channel.delivered(u).len()).sum();
        for n in injected_for + 1..=delivered {
            if n % 12 == 0 {
                for _ in 0..3 {
                    channel.fail_next_send(Fault::RateLimited);
                }
            } else if n % 5 == 0 {
                channel.fail_next_send(Fault::ServerError);
            }
        }
        injected_for = injected_for.max(delivered);
        if users.drive(&channel, &listen) {
            break;
        }
        users.surface(&channel).await;
        if !poll.again().await {
            let chats: Vec<String> = (1..=CHATS)
                .map(|u| format!("{}: {:?}", channel.chat(u), channel.delivered(u)))
                .collect();
            panic!(
                "{}: not every chat finished its order under the faults\n{}\nlog:\n{}",
                channel.name(),
                chats.join("\n"),
                shop.log()
            );
        }
    }
    users.settle(&channel).await;
    shop.stop();
    check(&channel, std::slice::from_ref(&shop), true);
    let delivered: usize = (1..=CHATS).map(|u| channel.delivered(u).len()).sum();
    assert!(
        channel.fake().send_calls() > delivered,
        "{}: no send failed: the faults were not injected",
        channel.name()
    );
}
