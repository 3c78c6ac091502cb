//! WhatsApp Web, native: the bot links itself as a companion device ("Linked Devices") of a
//! WhatsApp or WhatsApp Business app account. No webhook,
//! no HTTP API: one long-lived socket per session. Unofficial: using it may break Meta's
//! terms and get the number banned (both WhatsApp Web libraries say so).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use botmesh::prelude::*;
//! # use botmesh_providers::whatsapp_web::{WhatsAppWebConfig, WhatsAppWebProvider};
//! # async fn demo(kv: Arc<dyn botmesh::durability::DurableKv>) -> Result<(), Box<dyn std::error::Error>> {
//! // `kv`: the bot's durable backend (SQLite file, Postgres, Redis): the session lives there.
//! let config = WhatsAppWebConfig::new(kv).pair_phone("15551234567");
//! let session = Arc::new(botmesh_providers::whatsapp_web::FakeSession::new("wa-fake")?);
//! let provider = WhatsAppWebProvider::new(config, session)?;
//! # Ok(()) }
//! ```
//!
//! | concern | what the provider does |
//! | --- | --- |
//! | pairing | a QR code rendered in the terminal (stderr), rotating; with [`WhatsAppWebConfig::pair_phone`] also an 8-character pair code; [`WhatsAppWebConfig::on_pairing`] replaces the rendering |
//! | session | the client's credentials and keys in the bot's durable store ([`SessionStore`], scope `whatsapp-web/<session>`): a restart reconnects without pairing; a logout clears them (the next start pairs) |
//! | one process | the session's lock ([`store`](SessionStore) module docs): a second process on the same session waits one lease, then fails with [`WhatsAppWebError::SessionHeld`]; a process that loses the lock disconnects. With replicas, run it as a leader-only transport (`Coordination::leader_only_transport`): only the leader starts it |
//! | reconnects | the client's (Fibonacci backoff); the transport status follows `Connected` / `Disconnected`; a replaced stream or a logout stops the session |
//! | senders | LID and phone-number JIDs resolved to one canonical JID per person, kept in the store (`ids` module) |
//! | acknowledgements | a message is acknowledged to WhatsApp's server only once the bot accepted it (journaled in its durable inbox, or a duplicate, or never answered): the session hands it over with [`WaEvents::deliver`] and acknowledges on `Ok` (the real client through `whatsapp-rust`'s inbound durability hook). One not accepted (the journal failed, the bot is stopping) stays unacknowledged and the session reconnects after a pause, so the server delivers it again. Nothing is dropped for room: the provider's queue (256 events) makes the session wait |
//! | replays | a message's id is its WhatsApp message id; messages the server delivers again after a reconnect or a restart are dropped by the bot's inbox as duplicates; history syncs, the bot's own messages, status broadcasts and protocol messages are never answered |
//! | outgoing ids | chosen from the outbox key (`3EB0` + 16 hex digits of its SHA-256): a send retried after a timeout or a crash goes out under the same id, and the recipient's devices keep one message |
//! | buttons, lists | numbered options in the text (WhatsApp does not render buttons for linked devices); the user answers with the text |
//! | media | inbound: a media ref with the media fields and the message key; a download whose CDN copy expired asks the phone for a re-upload. Outbound: bytes and files uploaded, a received media ref forwarded, URLs refused |
//! | errors | [`WhatsAppWebError`] for the session; send errors classed for the outbox (the `error` module's table) |
//!
//! [`WaSession`] is the seam to the client. [`FakeSession`] replays recorded event shapes
//! from a directory (tests, and the shop's `WHATSAPP_WEB_REPLAY_DIR`). The client over the
//! `whatsapp-rust` crate is the `native` module (feature `whatsapp-web-native`, off by
//! default): [`WhatsAppWebProvider::connect`] runs it; without the feature `connect` fails
//! and says which feature it needs. Another [`WaSession`] can be given to
//! [`WhatsAppWebProvider::new`].

mod error;
mod fake;
mod ids;
mod media;
#[cfg(feature = "whatsapp-web-native")]
#[cfg_attr(docsrs, doc(cfg(feature = "whatsapp-web-native")))]
pub mod native;
mod session;
mod store;

pub use error::WhatsAppWebError;
pub use fake::{FakeFault, FakeSession};
pub use session::{
    Pairing, WaContent, WaError, WaEvent, WaEvents, WaMedia, WaMediaOrigin, WaMessage,
    WaMessageInfo, WaOutgoing, WaSend, WaSession, WaSource,
};
pub use store::SessionStore;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::durability::DurableKv;
use botmesh::durability::coordination::Fence;
use botmesh::message::{
    ChatId, Content, InboundMedia, MediaRef, MediaSource, MessageId, Outgoing, OutgoingContent,
    Reaction, SentMessage, UserId,
};
use botmesh::provider::{
    Accepted, Capabilities, DeliveryStatus, EventSink, Provider, ProviderError, ProviderEvent,
    Rejected, StoredMediaRef, TransportStatus,
};
use derive_setters::Setters;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::files::OutgoingMedia;
use ids::{Identities, bare};
use media::MediaToken;
use store::SessionLock;

/// The provider's name (media refs carry it).
pub(crate) const NAME: &str = "whatsapp-web";

/// The longest text of one message WhatsApp accepts.
pub const TEXT_LIMIT: usize = 65_536;

/// The key prefix of the client's own state in the session store (cleared on logout).
pub const CLIENT_PREFIX: &str = "wa/";

/// How many reports a session may queue for the provider before [`WaEvents`] makes it wait.
const EVENTS: usize = 256;

/// How many times a message the session acknowledges only on acceptance is offered to the
/// bot before the session is told it was not accepted (it then stays unacknowledged and the
/// server delivers it again after a reconnect).
const GATED_OFFERS: u32 = 3;

/// How many times an event nothing would deliver again (a status, a message the client
/// acknowledged on its own) is offered: about a minute of backoff.
const UNGATED_OFFERS: u32 = 12;

/// What to show a person who links the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingPrompt {
    /// Scan this QR code (Settings → Linked Devices → Link a device); valid for `timeout`.
    QrCode {
        /// The QR code's text.
        code: String,
        /// How long it is valid.
        timeout: Duration,
    },
    /// Enter this code ("Link with phone number instead"); valid for `timeout`.
    PairCode {
        /// The code.
        code: String,
        /// How long it is valid.
        timeout: Duration,
    },
    /// Linked, as this account.
    Paired {
        /// The account's JID.
        id: String,
    },
}

/// A function shown each pairing prompt.
pub type PairingHandler = Arc<dyn Fn(&PairingPrompt) + Send + Sync>;

/// The WhatsApp Web provider's settings.
#[derive(Clone, Setters)]
#[setters(generate = false)]
pub struct WhatsAppWebConfig {
    store: Arc<dyn DurableKv>,
    /// The session's name: one per linked account in a store.
    #[setters(generate, into)]
    session: String,
    pairing: Pairing,
    /// How long the session's lock lasts unless renewed (renewed every third): a process
    /// that died holding it is replaced within this time.
    #[setters(generate, rename = "session_lease")]
    lease: Duration,
    /// How long a start waits for another holder's lock to run out before failing with
    /// [`WhatsAppWebError::SessionHeld`] (default: the lease and a fifth).
    #[setters(generate, strip_option, rename = "session_wait")]
    wait: Option<Duration>,
    on_pairing: Option<PairingHandler>,
}

impl fmt::Debug for WhatsAppWebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WhatsAppWebConfig")
            .field("session", &self.session)
            .field("pairing", &self.pairing)
            .field("lease", &self.lease)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl WhatsAppWebConfig {
    /// Session `default` in `store` (the bot's durable backend), paired by QR code, with a
    /// 15-second session lease.
    pub fn new(store: Arc<dyn DurableKv>) -> Self {
        Self {
            store,
            session: "default".to_owned(),
            pairing: Pairing::default(),
            lease: Duration::from_secs(15),
            wait: None,
            on_pairing: None,
        }
    }

    /// The settings from the environment: `WHATSAPP_WEB_SESSION` (the session's name
    /// `default`), `WHATSAPP_WEB_PAIR_PHONE` (a pair code for this number as well as the QR
    /// code), `WHATSAPP_WEB_SESSION_LEASE` (`15s`).
    pub fn from_env(store: Arc<dyn DurableKv>) -> Result<Self, WhatsAppWebError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut config = Self::new(store);
        if let Some(session) = var("WHATSAPP_WEB_SESSION") {
            config = config.session(session);
        }
        if let Some(phone) = var("WHATSAPP_WEB_PAIR_PHONE") {
            config = config.pair_phone(phone);
        }
        if let Some(lease) = var("WHATSAPP_WEB_SESSION_LEASE") {
            let lease =
                botmesh::config::parse_duration(&lease).map_err(|e| WhatsAppWebError::Config {
                    option: "WHATSAPP_WEB_SESSION_LEASE",
                    reason: e.to_string(),
                })?;
            config = config.session_lease(lease);
        }
        Ok(config)
    }

    /// Also offer a pair code for this phone number (digits with country code).
    pub fn pair_phone(mut self, phone: impl Into<String>) -> Self {
        let phone: String = phone.into().chars().filter(char::is_ascii_digit).collect();
        self.pairing.phone_number = Some(phone);
        self
    }

    /// Shows pairing prompts with `handler` instead of rendering them on stderr.
    pub fn on_pairing(mut self, handler: impl Fn(&PairingPrompt) + Send + Sync + 'static) -> Self {
        self.on_pairing = Some(Arc::new(handler));
        self
    }

    fn wait(&self) -> Duration {
        self.wait.unwrap_or(self.lease + self.lease / 5)
    }
}

/// The WhatsApp Web provider (see the module documentation). Cheap to clone.
#[derive(Clone)]
pub struct WhatsAppWebProvider {
    inner: Arc<Inner>,
}

impl fmt::Debug for WhatsAppWebProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WhatsAppWebProvider")
            .field("session", &self.inner.config.session)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: WhatsAppWebConfig,
    session: Arc<dyn WaSession>,
    store: SessionStore,
    ids: Identities,
    lock: SessionLock,
    connected: AtomicBool,
    running: tokio::sync::Mutex<Option<Running>>,
}

/// A started session: its lock's fence and its tasks.
struct Running {
    fence: Arc<Mutex<Fence>>,
    tasks: Vec<JoinHandle<()>>,
}

impl WhatsAppWebProvider {
    /// A provider over `session` (the seam: [`FakeSession`], or a client).
    pub fn new(
        config: WhatsAppWebConfig,
        session: Arc<dyn WaSession>,
    ) -> Result<Self, WhatsAppWebError> {
        let store = SessionStore::new(Arc::clone(&config.store), &config.session);
        let lock = SessionLock::new(&store, &config.session, config.lease)?;
        Ok(Self {
            inner: Arc::new(Inner {
                ids: Identities::new(store.clone()),
                store,
                lock,
                session,
                config,
                connected: AtomicBool::new(false),
                running: tokio::sync::Mutex::new(None),
            }),
        })
    }

    /// A provider over the real WhatsApp Web client ([`native::NativeSession`], the
    /// `whatsapp-rust` crate), with the crate feature `whatsapp-web-native`.
    #[cfg(feature = "whatsapp-web-native")]
    pub fn connect(config: WhatsAppWebConfig) -> Result<Self, WhatsAppWebError> {
        Self::new(config, Arc::new(native::NativeSession::new()))
    }

    /// A provider over the real WhatsApp Web client: this build has none (the crate feature
    /// `whatsapp-web-native` is off), so it fails with [`WhatsAppWebError::Config`].
    #[cfg(not(feature = "whatsapp-web-native"))]
    pub fn connect(config: WhatsAppWebConfig) -> Result<Self, WhatsAppWebError> {
        let _ = config;
        Err(WhatsAppWebError::Config {
            option: "client",
            reason: "this build has no WhatsApp Web client: build with the feature \
                     `whatsapp-web-native` (botmesh-providers), or run the fake session \
                     (WHATSAPP_WEB_REPLAY_DIR, or WhatsAppWebProvider::new with a WaSession)"
                .to_owned(),
        })
    }

    /// The session's store.
    pub fn store(&self) -> &SessionStore {
        &self.inner.store
    }

    /// Whether the session is connected.
    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::Relaxed)
    }

    /// Takes the session's lock and starts the client, delivering its messages to `sink`:
    /// [`Provider::start`] with the typed error.
    pub async fn open(&self, sink: EventSink) -> Result<(), WhatsAppWebError> {
        let inner = &self.inner;
        let mut running = inner.running.lock().await;
        if running.is_some() {
            return Ok(());
        }
        let fence = inner.lock.acquire(inner.config.wait()).await?;
        let (tx, rx) = WaEvents::channel(EVENTS);
        if let Err(source) = inner
            .session
            .connect(inner.store.clone(), inner.config.pairing.clone(), tx)
            .await
        {
            inner.lock.release(&fence).await;
            return Err(WhatsAppWebError::Session {
                session: inner.config.session.clone(),
                source,
            });
        }
        tracing::info!(session = %inner.config.session, "WhatsApp Web session started");
        let fence = Arc::new(Mutex::new(fence));
        let events = tokio::spawn(event_loop(Arc::clone(inner), sink.clone(), rx));
        let renew = tokio::spawn(renew_loop(Arc::clone(inner), sink, Arc::clone(&fence)));
        *running = Some(Running {
            fence,
            tasks: vec![events, renew],
        });
        Ok(())
    }

    /// Stops the client and gives the session's lock back.
    pub async fn close(&self) {
        let inner = &self.inner;
        let Some(running) = inner.running.lock().await.take() else {
            return;
        };
        for task in &running.tasks {
            task.abort();
        }
        inner.session.disconnect().await;
        inner.connected.store(false, Ordering::Relaxed);
        let fence = running
            .fence
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        inner.lock.release(&fence).await;
    }

    async fn call<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, WaError>>,
    ) -> Result<T, ProviderError> {
        f.await.map_err(error::classify)
    }
}

/// The message id of a send: derived from the outbox key, so a resend is the same message.
pub fn message_id_for(key: Option<&str>) -> String {
    let digest = match key {
        Some(key) => Sha256::digest(key.as_bytes()),
        None => Sha256::digest(fastrand::u128(..).to_be_bytes()),
    };
    format!("3EB0{}", hex::encode_upper(&digest[..8]))
}

/// What the session sends for `media`: a received media ref forwarded, bytes or a file
/// uploaded; a URL is refused.
async fn wa_media(media: OutgoingMedia<'_>) -> Result<WaOutgoing, ProviderError> {
    let caption = media.caption.map(str::to_owned);
    let (data, file_name) = match media.source {
        MediaSource::Token { token } => {
            let token = MediaToken::parse(&MediaRef {
                provider: NAME.to_owned(),
                token: token.clone(),
            })?;
            let mut forwarded = token.media;
            forwarded.caption = caption;
            return Ok(WaOutgoing::Forward(forwarded));
        }
        MediaSource::Url { .. } => {
            return Err(crate::errors::unsupported_content(
                NAME,
                "media by URL (give the bytes or a file: WhatsApp Web uploads them)",
            ));
        }
        local => crate::files::read(local, NAME).await?,
    };
    Ok(WaOutgoing::Upload {
        kind: media.kind,
        data,
        mimetype: media.mime.unwrap_or("application/octet-stream").to_owned(),
        caption,
        file_name,
    })
}

/// What the session sends for `outgoing`.
async fn wa_outgoing(outgoing: &Outgoing) -> Result<WaOutgoing, ProviderError> {
    let unsupported = |what: &str| crate::errors::unsupported_content(NAME, what);
    if let Some(media) = OutgoingMedia::of(&outgoing.content) {
        return wa_media(media).await;
    }
    let quoted = outgoing.reply_to.as_ref().map(|id| id.0.clone());
    Ok(match &outgoing.content {
        OutgoingContent::Text { text, buttons } => WaOutgoing::Text {
            text: crate::readable::numbered(text, buttons),
            quoted,
        },
        OutgoingContent::List { text, sections, .. } => WaOutgoing::Text {
            text: crate::readable::numbered(text, sections.iter().flat_map(|s| &s.rows)),
            quoted,
        },
        // Taken by `wa_media` above: never reached.
        OutgoingContent::Media { .. } => return Err(unsupported("media outside the media path")),
        OutgoingContent::Reaction(Reaction { message_id, emoji }) => WaOutgoing::Reaction {
            target_id: message_id.0.clone(),
            emoji: emoji.clone(),
        },
        OutgoingContent::Location(_) => return Err(unsupported("location")),
        OutgoingContent::Contacts(_) => return Err(unsupported("contact cards")),
        OutgoingContent::Template { .. } => {
            return Err(unsupported("templates (a WhatsApp Cloud API feature)"));
        }
    })
}

/// Renews the session's lock; on losing it, disconnects (another process took over).
async fn renew_loop(inner: Arc<Inner>, sink: EventSink, fence: Arc<Mutex<Fence>>) {
    loop {
        tokio::time::sleep(inner.lock.renew_every()).await;
        let held = fence.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match inner.lock.renew(&held).await {
            Ok(Some(renewed)) => *fence.lock().unwrap_or_else(|e| e.into_inner()) = renewed,
            Ok(None) => {
                tracing::error!(
                    session = %inner.config.session,
                    "another process took the WhatsApp Web session over; disconnecting"
                );
                inner.session.disconnect().await;
                inner.connected.store(false, Ordering::Relaxed);
                sink.transport_status(TransportStatus::Stopped);
                return;
            }
            Err(e) => tracing::warn!(error = %e, "renewing the WhatsApp Web session lock failed"),
        }
    }
}

/// Hands the session's events to the bot, in order, and answers each message handed over
/// with [`WaEvents::deliver`] once the bot accepted it or not.
async fn event_loop(inner: Arc<Inner>, sink: EventSink, mut rx: mpsc::Receiver<session::Report>) {
    while let Some(session::Report { event, accepted }) = rx.recv().await {
        let outcome = handle(&inner, &sink, event, accepted.is_some()).await;
        match accepted {
            Some(done) => {
                let _ = done.send(outcome);
            }
            None => {
                if let Err(e) = outcome {
                    tracing::error!(session = %inner.config.session, error = %e, "a WhatsApp Web message the client acknowledged on its own was not accepted and is lost");
                }
            }
        }
    }
}

/// Handles one event; for a message, `Ok` once the bot accepted it (`gated`: the session
/// acknowledges it only then, and delivers it again otherwise, so it is offered a few times
/// only).
async fn handle(
    inner: &Inner,
    sink: &EventSink,
    event: WaEvent,
    gated: bool,
) -> Result<(), WaError> {
    let session = &inner.config.session;
    match event {
        WaEvent::PairingQrCode { code, timeout_secs } => prompt(
            inner,
            PairingPrompt::QrCode {
                code,
                timeout: Duration::from_secs(timeout_secs),
            },
        ),
        WaEvent::PairingCode { code, timeout_secs } => prompt(
            inner,
            PairingPrompt::PairCode {
                code,
                timeout: Duration::from_secs(timeout_secs),
            },
        ),
        WaEvent::PairSuccess { id } => {
            tracing::info!(%session, account = %id, "WhatsApp Web linked");
            prompt(inner, PairingPrompt::Paired { id });
        }
        WaEvent::Connected => {
            tracing::info!(%session, "WhatsApp Web connected");
            inner.connected.store(true, Ordering::Relaxed);
            sink.transport_status(TransportStatus::Ready);
        }
        WaEvent::Disconnected => {
            tracing::warn!(%session, "WhatsApp Web disconnected; the client reconnects");
            inner.connected.store(false, Ordering::Relaxed);
            sink.transport_status(TransportStatus::Disconnected);
        }
        WaEvent::Message(message) => {
            let WaMessage { info, content } = *message;
            let not_accepted = |reason: String| WaError::NotAccepted {
                id: info.id.clone(),
                reason,
            };
            let event = match to_event(inner, &info, content).await {
                Ok(Some(event)) => event,
                Ok(None) => return Ok(()),
                Err(e) => {
                    tracing::error!(%session, id = %info.id, error = %e, "a WhatsApp Web message could not be read");
                    return Err(not_accepted(format!("reading it failed: {e}")));
                }
            };
            let offers = if gated { GATED_OFFERS } else { UNGATED_OFFERS };
            return offer(sink, event, offers)
                .await
                .map(|_| ())
                .map_err(|e| not_accepted(e.to_string()));
        }
        WaEvent::Receipt {
            chat,
            sender,
            is_group,
            ids,
            status,
        } => {
            let chat = if is_group {
                Ok(bare(&chat))
            } else {
                inner
                    .ids
                    .resolve(&chat, (sender != chat).then_some(&sender[..]))
                    .await
            };
            match chat {
                Ok(chat) => {
                    for id in ids {
                        let status = DeliveryStatus {
                            chat: ChatId(chat.clone()),
                            message_id: MessageId(id),
                            status: status.clone(),
                            error: None,
                        };
                        if let Err(e) =
                            offer(sink, ProviderEvent::Status(status), UNGATED_OFFERS).await
                        {
                            tracing::error!(%session, error = %e, "a WhatsApp Web receipt was not accepted and is dropped");
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(%session, error = %e, "a WhatsApp Web receipt could not be read")
                }
            }
        }
        WaEvent::HistorySync { messages } => {
            tracing::debug!(%session, messages, "history sync: old messages are not answered");
        }
        WaEvent::Undecryptable { id, chat } => {
            tracing::warn!(%session, %id, %chat, "a WhatsApp Web message could not be decrypted");
        }
        WaEvent::LoggedOut { reason } => {
            tracing::error!(%session, %reason, "WhatsApp Web logged out: the device was removed; the next start pairs again");
            inner.connected.store(false, Ordering::Relaxed);
            if let Err(e) = inner.store.clear(CLIENT_PREFIX).await {
                tracing::error!(%session, error = %e, "clearing the logged-out session failed");
            }
            sink.transport_status(TransportStatus::Stopped);
        }
        WaEvent::StreamReplaced => {
            tracing::error!(%session, "another client connected with this session's credentials; this one stops");
            inner.connected.store(false, Ordering::Relaxed);
            inner.session.disconnect().await;
            sink.transport_status(TransportStatus::Stopped);
        }
        WaEvent::TemporaryBan { code, expires_secs } => {
            tracing::error!(%session, code, ?expires_secs, "the WhatsApp account is temporarily banned");
        }
    }
    Ok(())
}

/// Offers an event to the bot up to `offers` times while its journal is away (backoff from
/// 50 ms, doubling up to 10 s); a bot that is not running is not asked again.
async fn offer(sink: &EventSink, event: ProviderEvent, offers: u32) -> Result<Accepted, Rejected> {
    let mut wait = Duration::from_millis(50);
    let mut left = offers.max(1);
    loop {
        left -= 1;
        match sink.deliver(event.clone()).await {
            Ok(accepted) => return Ok(accepted),
            Err(e @ Rejected::NotRunning) => return Err(e),
            Err(e) if left == 0 => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, chat = %event.chat(), "the bot did not accept a WhatsApp Web event; offering it again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
        }
    }
}

fn prompt(inner: &Inner, prompt: PairingPrompt) {
    match &inner.config.on_pairing {
        Some(handler) => handler(&prompt),
        None => render_prompt(&prompt),
    }
}

/// Renders a pairing prompt on stderr (a QR code in block characters).
fn render_prompt(prompt: &PairingPrompt) {
    use std::io::Write;
    let text = match prompt {
        PairingPrompt::QrCode { code, timeout } => {
            let qr = qrcode::QrCode::new(code.as_bytes())
                .map(|qr| {
                    qr.render::<qrcode::render::unicode::Dense1x2>()
                        .quiet_zone(true)
                        .build()
                })
                .unwrap_or_else(|e| format!("(cannot render the QR code: {e}) {code}"));
            format!(
                "{qr}\nScan with WhatsApp: Settings → Linked Devices → Link a device (valid {}s)\n",
                timeout.as_secs()
            )
        }
        PairingPrompt::PairCode { code, timeout } => format!(
            "Pair code: {code} (WhatsApp: Linked Devices → Link a device → Link with phone number instead; valid {}s)\n",
            timeout.as_secs()
        ),
        PairingPrompt::Paired { id } => format!("WhatsApp Web linked as {id}\n"),
    };
    // The terminal is where a person scans the code: stderr, beside the logs.
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// The bot's event for a message, or `None` for what is never answered.
async fn to_event(
    inner: &Inner,
    info: &WaMessageInfo,
    content: WaContent,
) -> Result<Option<ProviderEvent>, WaError> {
    let source = &info.source;
    let chat_jid = bare(&source.chat);
    if source.is_from_me || chat_jid.ends_with("@broadcast") || chat_jid.ends_with("@newsletter") {
        return Ok(None);
    }
    let sender = inner
        .ids
        .resolve(&source.sender, source.sender_alt.as_deref())
        .await?;
    let chat = if source.is_group {
        chat_jid
    } else {
        sender.clone()
    };
    let content = match content {
        WaContent::Text { text } => Content::Text(text),
        WaContent::Media(media) => {
            let token = MediaToken {
                origin: WaMediaOrigin {
                    message_id: info.id.clone(),
                    chat: bare(&source.chat),
                    participant: source.is_group.then(|| source.sender.clone()),
                    is_from_me: false,
                },
                media: media.clone(),
            };
            Content::Media(InboundMedia {
                kind: media.kind,
                media_ref: token.media_ref(),
                mime: media.mimetype,
                caption: media.caption,
                file_name: media.file_name,
                size: Some(media.file_length),
            })
        }
        WaContent::Reaction { target_id, emoji } => {
            return Ok(Some(ProviderEvent::Reaction {
                chat: ChatId(chat),
                sender: UserId(sender),
                reaction: Reaction {
                    message_id: MessageId(target_id),
                    emoji,
                },
            }));
        }
        WaContent::Other { kind } => {
            tracing::debug!(id = %info.id, %kind, "a WhatsApp Web message of a kind not answered");
            return Ok(None);
        }
    };
    Ok(Some(ProviderEvent::Message(botmesh::message::Message {
        id: MessageId(info.id.clone()),
        chat: ChatId(chat),
        sender: UserId(sender),
        sender_name: info.push_name.clone(),
        is_group: source.is_group,
        mentions_bot: false,
        timestamp_ms: info.timestamp.saturating_mul(1000),
        content,
        reply_to: None,
        lang_hint: None,
    })))
}

#[async_trait]
impl Provider for WhatsAppWebProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        // Edits, typing and read marks: the defaults.
        Capabilities {
            text_limit: TEXT_LIMIT,
            ..Capabilities::default()
        }
    }

    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        Ok(self.open(sink).await?)
    }

    async fn stop(&self) -> Result<(), ProviderError> {
        self.close().await;
        Ok(())
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let content = wa_outgoing(outgoing).await?;
        let key = botmesh::provider::current_send_key();
        let send = WaSend {
            to: chat.0.clone(),
            id: message_id_for(key.as_deref()),
            content,
        };
        let id = match self.inner.session.send(&send).await {
            // A contact that moved to a LID may refuse sends to its phone number (ack 463):
            // the same message, same id, to the LID the events named beside it.
            Err(refused @ WaError::Unreachable { .. }) if !chat.0.ends_with("@lid") => {
                let lid = self
                    .inner
                    .ids
                    .aliases(chat.as_str())
                    .await
                    .map_err(error::classify)?
                    .into_iter()
                    .find(|a| a.ends_with("@lid"));
                match lid {
                    Some(lid) => {
                        tracing::info!(chat = %chat, %lid, "the phone number was refused; sending to the LID");
                        let send = WaSend { to: lid, ..send };
                        self.call(self.inner.session.send(&send)).await?
                    }
                    None => return Err(error::classify(refused)),
                }
            }
            other => other.map_err(error::classify)?,
        };
        Ok(SentMessage {
            message_id: Some(MessageId(id)),
        })
    }

    async fn edit(
        &self,
        chat: &ChatId,
        message_id: &MessageId,
        content: &OutgoingContent,
    ) -> Result<(), ProviderError> {
        let OutgoingContent::Text { text, .. } = content else {
            return Err(crate::errors::unsupported(NAME, "edit of media"));
        };
        self.call(
            self.inner
                .session
                .edit(chat.as_str(), message_id.as_str(), text),
        )
        .await
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        self.call(self.inner.session.typing(chat.as_str())).await
    }

    async fn mark_read(&self, chat: &ChatId, message_id: &MessageId) -> Result<(), ProviderError> {
        let ids = [message_id.0.clone()];
        self.call(
            self.inner
                .session
                .mark_read(chat.as_str(), chat.as_str(), &ids),
        )
        .await
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        let token = MediaToken::parse(media)?;
        match self.inner.session.download(&token.media).await {
            Err(WaError::MediaExpired { status }) => {
                tracing::info!(id = %token.origin.message_id, status, "media expired on the CDN; asking the phone to upload it again");
                let path = self
                    .call(
                        self.inner
                            .session
                            .request_reupload(&token.media, &token.origin),
                    )
                    .await?;
                let mut media = token.media;
                media.direct_path = path;
                self.call(self.inner.session.download(&media)).await
            }
            other => other.map_err(error::classify),
        }
    }

    fn serialize_media_ref(&self, media: &MediaRef) -> Option<StoredMediaRef> {
        MediaToken::parse(media).ok()?.stored()
    }

    fn rehydrate_media_ref(&self, stored: &StoredMediaRef) -> Result<MediaRef, ProviderError> {
        MediaToken::rehydrate(stored)
    }
}
