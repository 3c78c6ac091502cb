//! [`NativeSession`]: the seam ([`WaSession`]) over the `whatsapp-rust` client.
//!
//! `connect` builds the client on the session's store ([`NativeStore`]), starts it and
//! hands its events, mapped ([`EventMapper`]), to the provider in order. The client
//! reconnects on its own (Fibonacci backoff up to 15 minutes, at once after the 515 that
//! follows a pairing); should its run loop end otherwise than by a logout, a replaced
//! stream or [`disconnect`](WaSession::disconnect), the session starts a new client after a
//! backoff of its own (1 s doubling to 5 minutes). Sends go out under the provider's message
//! id ([`SendOptions::message_id`]). Errors are classed from the client's typed error chain
//! ([`wa_error`]). It does not resolve identities or decide what is answered (the
//! provider's).
//!
//! Incoming messages are acknowledged to WhatsApp only once the bot accepted them: the
//! client's [`InboundDurabilityHook`] ([`AcceptHook`]) hands each decrypted message to the
//! provider ([`WaEvents::deliver`]) and returns once the bot journaled it; the client sends
//! the acknowledgement after the hook returned `Ok`. Before the hook runs, the client keeps
//! the decrypted message in the session store (`wa/pending/…`, [`NativeStore`]), because
//! its Signal session has moved on and the server's copy would no longer decrypt. When the
//! hook fails (the bot did not accept the message), nothing is acknowledged: the session
//! reconnects after [`REDELIVER_AFTER`], the server delivers the message again, and the
//! client hands the kept copy to the hook again. A message redelivered after it was
//! accepted (its acknowledgement lost in a crash) is a duplicate for the bot's inbox.
//!
//! Memory is bounded by waiting, not by dropping: the hook is awaited by the client's
//! receive pipeline and [`WaEvents`] waits while the provider is behind, so a bot that
//! journals slowly slows the socket down. Other events (connection, pairing, receipts) go
//! through the client's ordered mailbox ([`MAILBOX`] events) to a callback that waits on
//! [`WaEvents`] as well; messages never go through it (the hook carries them), so a mailbox
//! full of receipts loses no message.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use botmesh::message::MediaKind;
use whatsapp_rust::bot::{Bot, EventDelivery};
use whatsapp_rust::download::DownloadParams;
use whatsapp_rust::features::{MediaRetryResult, MediaReuploadRequest};
use whatsapp_rust::pair_code::PairCodeOptions;
use whatsapp_rust::send::{SendError, SendOptions};
use whatsapp_rust::types::events::{Event, InboundMessage};
use whatsapp_rust::wacore::download::MediaType;
use whatsapp_rust::wacore::proto_helpers::MessageBuilderExt;
use whatsapp_rust::waproto::whatsapp as wa;
use whatsapp_rust::{Client, ErrorChainExt, InboundDurabilityHook, Jid, UploadOptions};

use super::super::session::{
    Pairing, WaError, WaEvents, WaMedia, WaMediaOrigin, WaOutgoing, WaSend, WaSession,
};
use super::super::store::SessionStore;
use super::events::{EventMapper, fill_sender_alt};
use super::store::NativeStore;

/// The client's ordered mailbox of events other than messages (see the module
/// documentation): the client drops such events (counting them in its stats) only once this
/// many wait for a provider that is behind.
const MAILBOX: usize = 4096;

/// How long the session waits before it reconnects after a message the bot did not accept
/// (the server then delivers it again).
pub(crate) const REDELIVER_AFTER: Duration = Duration::from_secs(5);

/// The first pause before a new client, doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause before a new client.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The WhatsApp Web client over `whatsapp-rust` (see the module documentation). One per
/// session; cheap to share.
pub struct NativeSession {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for NativeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeSession")
            .field("connected", &self.shared.client().is_some())
            .finish_non_exhaustive()
    }
}

impl Default for NativeSession {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Default)]
struct Shared {
    client: Mutex<Option<Arc<Client>>>,
    /// `disconnect` was called: no new client.
    stopped: AtomicBool,
    /// A logout or a replaced stream ended the session: no new client.
    ended: Arc<AtomicBool>,
}

impl Shared {
    fn client(&self) -> Option<Arc<Client>> {
        self.client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_client(&self, client: Option<Arc<Client>>) {
        *self.client.lock().unwrap_or_else(|e| e.into_inner()) = client;
    }
}

impl NativeSession {
    /// A session not started yet.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared::default()),
        }
    }

    fn connected(&self) -> Result<Arc<Client>, WaError> {
        self.shared.client().ok_or(WaError::NotConnected)
    }
}

/// What builds a client (again, after its run loop ended).
#[derive(Clone)]
struct Recipe {
    backend: NativeStore,
    pairing: Pairing,
    events: WaEvents,
    mapper: Arc<EventMapper>,
    ended: Arc<AtomicBool>,
}

impl Recipe {
    async fn build(&self) -> Result<Bot, WaError> {
        let (events, mapper, ended) = (
            self.events.clone(),
            Arc::clone(&self.mapper),
            Arc::clone(&self.ended),
        );
        let hook = AcceptHook::new(
            self.events.clone(),
            Arc::clone(&self.mapper),
            self.backend.clone(),
        );
        let mut builder = Bot::builder()
            .with_backend(self.backend.clone())
            .with_event_delivery(EventDelivery::Ordered { capacity: MAILBOX })
            .with_inbound_durability_hook(hook)
            // A bot answers new messages only: the phone's history is acknowledged unread.
            .skip_history_sync()
            .on_event(move |event: Arc<Event>, _client| {
                if matches!(&*event, Event::LoggedOut(_) | Event::StreamReplaced(_)) {
                    ended.store(true, Ordering::Relaxed);
                }
                // Messages the hook handed over are not mapped again (`hook_committed`).
                let mapped = mapper.map(&event);
                let events = events.clone();
                async move {
                    for event in mapped {
                        // Waits while the provider is behind; fails only once it stopped.
                        if events.report(event).await.is_err() {
                            return;
                        }
                    }
                }
            });
        if let Some(phone) = &self.pairing.phone_number {
            builder = builder.with_pair_code(PairCodeOptions {
                phone_number: phone.clone(),
                ..PairCodeOptions::default()
            });
        }
        builder
            .build()
            .await
            .map_err(|e| WaError::Client(format!("the WhatsApp Web client did not start: {e}")))
    }
}

/// The client's inbound durability hook: hands each decrypted message to the provider and
/// returns once the bot accepted it, so that the client acknowledges it only then (see the
/// module documentation).
pub(crate) struct AcceptHook {
    events: WaEvents,
    mapper: Arc<EventMapper>,
    backend: NativeStore,
    /// A reconnect after a message not accepted is pending.
    reconnecting: Arc<AtomicBool>,
}

impl AcceptHook {
    pub(crate) fn new(events: WaEvents, mapper: Arc<EventMapper>, backend: NativeStore) -> Self {
        Self {
            events,
            mapper,
            backend,
            reconnecting: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Hands `batch` over in order and returns once the bot accepted every message; stops
    /// at the first one it did not accept (the client then acknowledges none of the batch
    /// and the server delivers it all again: the accepted ones are duplicates then).
    pub(crate) async fn accept(&self, batch: &[InboundMessage]) -> Result<(), WaError> {
        for item in batch {
            let Some(key) = self.mapper.unseen(&item.info) else {
                continue;
            };
            let mut message = super::events::message(&item.message, &item.info);
            fill_sender_alt(&self.backend, &mut message).await;
            self.events.deliver(message).await?;
            self.mapper.remember(key);
        }
        Ok(())
    }
}

#[async_trait]
impl InboundDurabilityHook for AcceptHook {
    async fn on_messages(
        &self,
        client: Arc<Client>,
        batch: &[InboundMessage],
    ) -> whatsapp_rust::anyhow::Result<()> {
        let Err(e) = self.accept(batch).await else {
            return Ok(());
        };
        tracing::warn!(error = %e, messages = batch.len(), "WhatsApp Web messages not accepted by the bot: not acknowledged; reconnecting so that the server delivers them again");
        // Not from here: the hook runs inside the receive pipeline, which a reconnect flushes.
        if !self.events.is_closed() && !self.reconnecting.swap(true, Ordering::AcqRel) {
            let (reconnecting, events) = (Arc::clone(&self.reconnecting), self.events.clone());
            tokio::spawn(async move {
                tokio::time::sleep(REDELIVER_AFTER).await;
                reconnecting.store(false, Ordering::Release);
                if !events.is_closed() {
                    client.reconnect().await;
                }
            });
        }
        Err(whatsapp_rust::anyhow::Error::new(e))
    }
}

/// Runs clients until the session stops or ends (see the module documentation).
async fn supervise(shared: Arc<Shared>, recipe: Recipe, first: Bot) {
    let mut bot = Some(first);
    let mut backoff = FIRST_BACKOFF;
    loop {
        if let Some(b) = bot.take() {
            let handle = b.spawn();
            shared.set_client(Some(handle.client()));
            let started = tokio::time::Instant::now();
            handle.await;
            shared.set_client(None);
            if started.elapsed() > MAX_BACKOFF {
                backoff = FIRST_BACKOFF;
            }
        }
        if shared.stopped.load(Ordering::Relaxed) || shared.ended.load(Ordering::Relaxed) {
            return;
        }
        tracing::warn!(
            ?backoff,
            "the WhatsApp Web client stopped; starting a new one after a pause"
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        if shared.stopped.load(Ordering::Relaxed) {
            return;
        }
        match recipe.build().await {
            Ok(b) => bot = Some(b),
            Err(e) => tracing::error!(error = %e, "a new WhatsApp Web client did not start"),
        }
    }
}

#[async_trait]
impl WaSession for NativeSession {
    async fn connect(
        &self,
        store: SessionStore,
        pairing: Pairing,
        events: WaEvents,
    ) -> Result<(), WaError> {
        self.shared.stopped.store(false, Ordering::Relaxed);
        self.shared.ended.store(false, Ordering::Relaxed);
        let recipe = Recipe {
            backend: NativeStore::new(store),
            pairing,
            events,
            mapper: Arc::new(EventMapper::new()),
            ended: Arc::clone(&self.shared.ended),
        };
        let first = recipe.build().await?;
        tokio::spawn(supervise(Arc::clone(&self.shared), recipe, first));
        Ok(())
    }

    async fn disconnect(&self) {
        self.shared.stopped.store(true, Ordering::Relaxed);
        if let Some(client) = self.shared.client() {
            client.disconnect().await;
        }
    }

    async fn send(&self, send: &WaSend) -> Result<String, WaError> {
        let client = self.connected()?;
        let to = jid(&send.to)?;
        let message = match &send.content {
            WaOutgoing::Upload {
                kind,
                data,
                mimetype,
                caption,
                file_name,
            } => {
                let uploaded = client
                    .upload(data.clone(), media_type(*kind), UploadOptions::new())
                    .await
                    .map_err(|e| anyhow_error(&e))?;
                media_message(&WaMedia {
                    kind: *kind,
                    direct_path: uploaded.direct_path,
                    media_key: uploaded.media_key.to_vec(),
                    file_sha256: uploaded.file_sha256.to_vec(),
                    file_enc_sha256: uploaded.file_enc_sha256.to_vec(),
                    file_length: uploaded.file_length,
                    mimetype: Some(mimetype.clone()),
                    caption: caption.clone(),
                    file_name: file_name.clone(),
                })
            }
            other => outgoing_message(&send.to, other),
        };
        let sent = client
            .send_message_with_options(to, message, send_options(send))
            .await
            .map_err(|e| send_error(&e, &send.to))?;
        Ok(sent.message_id)
    }

    async fn edit(&self, to: &str, id: &str, text: &str) -> Result<(), WaError> {
        let client = self.connected()?;
        client
            .edit_message(jid(to)?, id, wa::Message::text(text))
            .await
            .map_err(|e| send_error(&e, to))?;
        Ok(())
    }

    async fn typing(&self, to: &str) -> Result<(), WaError> {
        let client = self.connected()?;
        client
            .chatstate()
            .send_composing(&jid(to)?)
            .await
            .map_err(|e| wa_error(&e))
    }

    async fn mark_read(&self, chat: &str, sender: &str, ids: &[String]) -> Result<(), WaError> {
        let client = self.connected()?;
        let chat = jid(chat)?;
        let sender = jid(sender)?;
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let sender = (sender != chat).then_some(&sender);
        client
            .mark_as_read(&chat, sender, &ids)
            .await
            .map_err(|e| anyhow_error(&e))
    }

    async fn download(&self, media: &WaMedia) -> Result<Vec<u8>, WaError> {
        let client = self.connected()?;
        let params = DownloadParams::encrypted(
            media.direct_path.clone(),
            &media.media_key,
            &media.file_sha256,
            &media.file_enc_sha256,
            media.file_length,
            media_type(media.kind),
        );
        client
            .download_from_params(&params)
            .await
            .map_err(|e| anyhow_error(&e))
    }

    async fn request_reupload(
        &self,
        media: &WaMedia,
        origin: &WaMediaOrigin,
    ) -> Result<String, WaError> {
        let client = self.connected()?;
        let chat = jid(&origin.chat)?;
        let participant = origin.participant.as_deref().map(jid).transpose()?;
        let request = MediaReuploadRequest {
            msg_id: &origin.message_id,
            chat_jid: &chat,
            media_key: &media.media_key,
            is_from_me: origin.is_from_me,
            participant: participant.as_ref(),
        };
        match client.media_reupload().request(&request).await {
            Ok(MediaRetryResult::Success { direct_path }) => Ok(direct_path),
            Ok(MediaRetryResult::NotFound) => Err(WaError::MediaGone(
                "the phone no longer has the file".to_owned(),
            )),
            Ok(MediaRetryResult::DecryptionError) => Err(WaError::MediaGone(
                "the phone's answer did not decrypt".to_owned(),
            )),
            Ok(MediaRetryResult::GeneralError) => Err(WaError::MediaGone(
                "the phone could not upload the file again".to_owned(),
            )),
            Err(e) => Err(wa_error(&e)),
        }
    }
}

/// A JID from its text.
fn jid(text: &str) -> Result<Jid, WaError> {
    text.parse().map_err(|e| WaError::Refused {
        code: 400,
        message: format!("`{text}` is not a WhatsApp JID: {e}"),
    })
}

/// The send's options: the provider's message id, so a resend is the same message.
pub(crate) fn send_options(send: &WaSend) -> SendOptions {
    SendOptions::default().with_message_id(send.id.clone())
}

/// The client's media type of a media kind.
pub(crate) fn media_type(kind: MediaKind) -> MediaType {
    match kind {
        MediaKind::Image => MediaType::Image,
        MediaKind::Video => MediaType::Video,
        MediaKind::Audio | MediaKind::Voice => MediaType::Audio,
        MediaKind::Document => MediaType::Document,
        MediaKind::Sticker => MediaType::Sticker,
    }
}

/// The message of a send, media already on the CDN included (uploads are built by the
/// session after the upload).
pub(crate) fn outgoing_message(to: &str, content: &WaOutgoing) -> wa::Message {
    match content {
        WaOutgoing::Text { text, quoted: None } => wa::Message::text(text.clone()),
        WaOutgoing::Text {
            text,
            quoted: Some(quoted),
        } => wa::Message::text_with_context(
            text.clone(),
            wa::ContextInfo {
                stanza_id: Some(quoted.clone()),
                // A direct chat's quoted message is the user's (a group's: its author,
                // which the seam does not carry; WhatsApp then shows the quote unattributed).
                participant: Some(to.to_owned()),
                ..Default::default()
            },
        ),
        WaOutgoing::Forward(media) => media_message(media),
        WaOutgoing::Upload { .. } => wa::Message::default(),
        WaOutgoing::Reaction { target_id, emoji } => wa::Message {
            reaction_message: whatsapp_rust::buffa::MessageField::some(
                wa::message::ReactionMessage {
                    key: whatsapp_rust::buffa::MessageField::some(wa::MessageKey {
                        remote_jid: Some(to.to_owned()),
                        from_me: Some(false),
                        id: Some(target_id.clone()),
                        participant: None,
                    }),
                    text: Some(emoji.clone()),
                    sender_timestamp_ms: Some(
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                    ),
                    ..Default::default()
                },
            ),
            ..Default::default()
        },
    }
}

/// The message carrying media on the CDN.
pub(crate) fn media_message(m: &WaMedia) -> wa::Message {
    use whatsapp_rust::buffa::MessageField;
    macro_rules! fields {
        ($ty:ty) => {
            <$ty>::default_with(|x: &mut $ty| {
                x.direct_path = Some(m.direct_path.clone());
                x.media_key = Some(m.media_key.clone());
                x.file_sha256 = Some(m.file_sha256.clone());
                x.file_enc_sha256 = Some(m.file_enc_sha256.clone());
                x.file_length = Some(m.file_length);
                x.mimetype = m.mimetype.clone();
            })
        };
    }
    let mut message = wa::Message::default();
    match m.kind {
        MediaKind::Image => {
            message.image_message = MessageField::some(fields!(wa::message::ImageMessage));
            if let Some(x) = message.image_message.as_option_mut() {
                x.caption = m.caption.clone();
            }
        }
        MediaKind::Video => {
            message.video_message = MessageField::some(fields!(wa::message::VideoMessage));
            if let Some(x) = message.video_message.as_option_mut() {
                x.caption = m.caption.clone();
            }
        }
        MediaKind::Audio | MediaKind::Voice => {
            message.audio_message = MessageField::some(fields!(wa::message::AudioMessage));
            if let Some(x) = message.audio_message.as_option_mut() {
                x.ptt = Some(m.kind == MediaKind::Voice);
            }
        }
        MediaKind::Document => {
            message.document_message = MessageField::some(fields!(wa::message::DocumentMessage));
            if let Some(x) = message.document_message.as_option_mut() {
                x.caption = m.caption.clone();
                x.file_name = m.file_name.clone();
            }
        }
        MediaKind::Sticker => {
            message.sticker_message = MessageField::some(fields!(wa::message::StickerMessage));
        }
    }
    message
}

/// Builds a default value and lets `f` fill it.
trait DefaultWith: Default {
    fn default_with(f: impl FnOnce(&mut Self)) -> Self {
        let mut value = Self::default();
        f(&mut value);
        value
    }
}

impl<T: Default> DefaultWith for T {}

/// The seam's error of a failed send or edit to `to`.
pub(crate) fn send_error(e: &SendError, to: &str) -> WaError {
    match e {
        SendError::NotLoggedIn => WaError::NotConnected,
        SendError::InvalidRequest(message) => WaError::Refused {
            code: 400,
            message: message.clone(),
        },
        other => match wa_error(other) {
            WaError::Refused { code: 463, message } => WaError::Unreachable {
                to: to.to_owned(),
                reason: format!("463: {message}"),
            },
            classified => classified,
        },
    }
}

/// The seam's error of an `anyhow` error of the client.
fn anyhow_error(e: &whatsapp_rust::anyhow::Error) -> WaError {
    let cause: &(dyn StdError + 'static) = e.as_ref();
    wa_error(cause)
}

/// The seam's error of any error of the client, from its typed chain: the CDN's HTTP
/// status, the server's rejection code and backoff, timeouts, a closed socket, the store.
pub(crate) fn wa_error<E: ErrorChainExt + ?Sized>(e: &E) -> WaError {
    let message = e.as_dyn_error().to_string();
    if let Some(status) = e.http_status() {
        return match status {
            404 | 410 => WaError::MediaExpired { status },
            429 => WaError::RateLimited { retry_after: None },
            500..=599 => WaError::Server {
                code: status,
                message,
            },
            code => WaError::Refused { code, message },
        };
    }
    if let Some(rejection) = e.server_rejection() {
        return match rejection.code {
            429 => WaError::RateLimited {
                retry_after: rejection.backoff.map(|s| Duration::from_secs(u64::from(s))),
            },
            code @ 500..=599 => WaError::Server {
                code,
                message: rejection.text.to_owned(),
            },
            code => WaError::Refused {
                code,
                message: rejection.text.to_owned(),
            },
        };
    }
    if e.store_failure().is_some() {
        return WaError::Store(message);
    }
    if e.is_timeout() {
        return WaError::Timeout(Duration::ZERO);
    }
    if e.is_transport_unavailable() {
        return WaError::NotConnected;
    }
    for cause in e.sources() {
        if let Some(
            whatsapp_rust::ClientError::NotConnected | whatsapp_rust::ClientError::NotLoggedIn,
        ) = cause.downcast_ref::<whatsapp_rust::ClientError>()
        {
            return WaError::NotConnected;
        }
    }
    WaError::Client(message)
}
