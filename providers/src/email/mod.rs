//! [`EmailProvider`]: email as a chat channel. Mail goes out over SMTP (`lettre`), comes in by
//! IMAP IDLE (`async-imap`), by Mailgun Routes or by SendGrid Inbound Parse (routes on the
//! shared webhook server), and is read with `mail-parser`.
//!
//! - **A chat is a thread** (`threading`): `<the person's address>/<the thread's root
//!   Message-ID>`; the sender is the `From` address. A send to a chat answers the thread's
//!   last mail (`In-Reply-To`, `References`, `Re: <subject>`); a send to a bare address
//!   starts a thread.
//! - **The answer text** is the mail's new text: quoted history and signature cut off
//!   (`strip`).
//! - **Not answered** (`rules`): auto-submitted mail, bulk/list/junk precedence,
//!   `List-Id`/`List-Unsubscribe`, bounces and reports, the bot's own mail; each is dropped
//!   with a log line naming why. The bot's own mail carries `Auto-Submitted: auto-replied`
//!   (`auto-generated` when it starts a thread), so other robots leave it alone.
//! - **Duplicates**: every event's id is the Message-ID (the same mail through IMAP and a
//!   webhook, or redelivered, is one message for the inbox, which drops the copy).
//! - **Own Message-IDs**: derived from the send's outbox key
//!   ([`current_send_nonce`](botmesh::provider::current_send_nonce)), so a resend after a
//!   crash carries the same Message-ID (`smtp` has the error classes: 4xx retried, 5xx final,
//!   connection errors retried).
//! - **Attachments** are media refs `{"attachment": "<Message-ID>|<index>|<sha256>"}` whose
//!   bytes are kept in the bot's store (`attachments`, `store`); an outgoing media send
//!   attaches the file.
//! - **IMAP** (`imap`): the read position (UIDVALIDITY, last UID) in the bot's store, so a
//!   restart resumes; IDLE renewed every 28 minutes; a poll after each (re)connect; a new
//!   UIDVALIDITY re-reads the mailbox (the inbox dedupes by Message-ID).
//!
//! | content sent | what the mail carries |
//! | --- | --- |
//! | text | a `text/plain` body |
//! | text with buttons, list | the text with numbered options (`1. Yes`); the answer comes back as text |
//! | media: bytes, a file, an attachment received | the caption as text and the file attached (at most 25 MiB) |
//! | media by URL | the caption and the URL as text |
//! | location, contacts | readable text |
//! | template, reaction | `UnsupportedContent` |
//!
//! It does not send HTML, edit, show typing or read receipts, move or flag mail on the IMAP
//! server (it reads with `BODY.PEEK[]` and only moves its position), or check SPF/DKIM.
//! `docs/email.md` has the setup of each inbound path.

mod attachments;
mod config;
mod error;
mod form;
mod imap;
mod inbound;
mod mailgun;
mod rules;
mod sendgrid;
mod smtp;
mod store;
mod strip;
mod threading;

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{
    ChatId, MediaRef, MediaSource, MessageId, Outgoing, OutgoingContent, SentMessage,
};
use botmesh::provider::{
    Capabilities, EventSink, MediaUnavailableReason, Provider, ProviderError, ProviderEvent,
    StoredMediaRef,
};

pub use attachments::{ATTACHMENT_LIMIT, INLINE_MIN};
pub use config::{EmailConfig, EmailConfigError, IDLE_RENEW, ImapConfig};
pub use error::EmailError;
pub use mailgun::mailgun_signature;
pub use rules::NotAnswered;
pub use store::Position;

use crate::task::TaskSlot;
use crate::webhook::{Refused, SinkSlot, WebhookRequest};
use form::Form;
use inbound::{Mail, Outcome, Prepared};
use store::MailStore;

/// The provider's name, as media refs carry it.
pub const NAME: &str = "email";

/// The longest text one mail carries (the runtime splits a longer one into several mails).
pub const TEXT_LIMIT: usize = 50_000;

/// The largest inbound-parse post read (Mailgun and SendGrid carry up to about 25–30 MB).
pub const ROUTE_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// The journaled media ref's field.
const MEDIA_FIELD: &str = "attachment";

/// Email as a chat channel. Cheap to clone; clones share the SMTP pool and the IMAP task.
///
/// ```no_run
/// use std::sync::Arc;
/// use botmesh::durability::{DurableKv, MemoryKv};
/// use botmesh::prelude::*;
/// use botmesh_providers::email::{EmailConfig, EmailProvider};
/// use botmesh_providers::webhook::WebhookServer;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new()); // the bot's durable store in production
/// let email = EmailProvider::new(EmailConfig::from_env(kv)?)?;
/// let server = WebhookServer::new().mount(email.webhook_routes()).bind("0.0.0.0:8080").await?;
/// Bot::builder(email).build()?.run().await?;
/// server.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EmailProvider {
    shared: Arc<Shared>,
    slot: SinkSlot,
    imap_task: Arc<TaskSlot>,
}

/// What the provider's parts share: the settings, the store and the SMTP client.
pub(crate) struct Shared {
    config: EmailConfig,
    store: MailStore,
    smtp: smtp::Smtp,
    own: String,
}

impl std::fmt::Debug for EmailProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailProvider")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

fn unsupported(what: impl Into<String>) -> ProviderError {
    crate::errors::unsupported_content(NAME, what)
}

fn unreachable_chat(chat: &ChatId, reason: &str) -> ProviderError {
    ProviderError::RecipientUnreachable {
        provider: NAME.to_owned(),
        chat: chat.to_string(),
        reason: reason.to_owned(),
    }
}

impl Shared {
    /// A mail's events and what to keep, or `None` when the rules drop it.
    fn outcome(&self, mail: Mail) -> Result<Option<Prepared>, Refused> {
        inbound::prepare(mail, &self.own)
            .map(Outcome::into_prepared)
            .map_err(|e| Refused::Malformed(e.to_string()))
    }

    /// The mail of a webhook request read by `mail_of`, prepared.
    fn prepared(
        &self,
        request: &WebhookRequest,
        mail_of: fn(&Form) -> Result<Mail, String>,
    ) -> Result<Option<Prepared>, Refused> {
        let form = form::of_request(request)?;
        let mail = mail_of(&form).map_err(Refused::Malformed)?;
        self.outcome(mail)
    }

    /// A webhook's events (nothing kept: see `events_kept`).
    fn events(
        &self,
        request: &WebhookRequest,
        mail_of: fn(&Form) -> Result<Mail, String>,
    ) -> Result<Vec<ProviderEvent>, Refused> {
        Ok(self
            .prepared(request, mail_of)?
            .map(|p| p.events)
            .unwrap_or_default())
    }

    /// A webhook's events, once the mail's thread and attachments are kept in the store.
    fn events_kept(
        self: Arc<Self>,
        request: &WebhookRequest,
        mail_of: fn(&Form) -> Result<Mail, String>,
    ) -> impl std::future::Future<Output = Result<Vec<ProviderEvent>, Refused>> + Send + use<> {
        let prepared = self.prepared(request, mail_of);
        async move {
            let Some(p) = prepared? else {
                return Ok(Vec::new());
            };
            inbound::keep(&self.store, &p)
                .await
                .map_err(|e| Refused::Unavailable(e.to_string()))?;
            Ok(p.events)
        }
    }
}

/// An inbound-parse provider's part of its route (Mailgun, SendGrid): how a post is
/// authenticated and how its form reads as a mail. [`ParseRoute`] does the rest.
pub(crate) trait ParseApi: Send + Sync + 'static {
    /// Checks the post's signature or secret.
    fn verify(&self, config: &EmailConfig, request: &WebhookRequest) -> Result<(), Refused>;
    /// The mail of the post's form.
    fn mail_of(form: &Form) -> Result<Mail, String>;
}

/// An inbound-parse route: the provider's part, and the shared state and sink.
pub(crate) struct ParseRoute<A> {
    api: A,
    shared: Arc<Shared>,
    slot: SinkSlot,
}

impl<A: ParseApi> crate::webhook::WebhookChannel for ParseRoute<A> {
    fn slot(&self) -> &SinkSlot {
        &self.slot
    }

    fn verify(&self, request: &WebhookRequest) -> Result<(), Refused> {
        self.api.verify(&self.shared.config, request)
    }

    fn parse(&self, request: &WebhookRequest) -> Result<Vec<ProviderEvent>, Refused> {
        self.shared.events(request, A::mail_of)
    }

    fn parse_and_keep(
        &self,
        request: &WebhookRequest,
    ) -> impl std::future::Future<Output = Result<Vec<ProviderEvent>, Refused>> + Send {
        self.shared.clone().events_kept(request, A::mail_of)
    }
}

impl EmailProvider {
    /// The route of `api` on `path`.
    fn parse_route<A: ParseApi>(&self, api: A, path: &str) -> Router {
        let route = Arc::new(ParseRoute {
            api,
            shared: self.shared.clone(),
            slot: self.slot.clone(),
        });
        crate::webhook::route_limited(route, path, ROUTE_BODY_LIMIT)
    }

    /// A provider with these settings (no connection yet: SMTP connects on the first send,
    /// IMAP at `start`).
    pub fn new(config: EmailConfig) -> Result<Self, ProviderError> {
        let domain = config.domain();
        let smtp = smtp::Smtp::new(&config.smtp_url, &domain, config.smtp_timeout)?;
        let store = MailStore::new(config.kv.clone(), &config.account);
        let own = config.own_address();
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                store,
                smtp,
                own,
            }),
            slot: SinkSlot::default(),
            imap_task: Arc::default(),
        })
    }

    /// The inbound-parse routes to mount on a
    /// [`WebhookServer`](crate::webhook::WebhookServer): Mailgun's when its signing key is
    /// set, SendGrid's (the route and the secret path under it) when its secret is set; empty
    /// otherwise (IMAP only).
    pub fn webhook_routes(&self) -> Router {
        let c = &self.shared.config;
        let mut router = Router::new();
        if c.mailgun_key.is_some() {
            router = router.merge(self.parse_route(mailgun::Mailgun::default(), &c.mailgun_path));
        }
        if c.sendgrid_secret.is_some() {
            // The route, and the secret as the path segment under it.
            let under = format!("{}/{{*rest}}", c.sendgrid_path.trim_end_matches('/'));
            router = router
                .merge(self.parse_route(sendgrid::SendGrid, &c.sendgrid_path))
                .merge(self.parse_route(sendgrid::SendGrid, &under));
        }
        router
    }

    /// The stored IMAP read position of the configured mailbox (`None` before the first
    /// connection, or without IMAP).
    pub async fn imap_position(&self) -> Result<Option<Position>, EmailError> {
        match &self.shared.config.imap {
            Some(imap) => self.shared.store.position(&imap.mailbox).await,
            None => Ok(None),
        }
    }

    /// The bytes a media send attaches: `(file name, content type, bytes)`.
    async fn attachment_of(
        &self,
        source: &MediaSource,
        mime: Option<&str>,
    ) -> Result<(String, String, Vec<u8>), ProviderError> {
        let (name, bytes, mime) = match source {
            MediaSource::Bytes { data, file_name } => (
                file_name.clone().unwrap_or_else(|| "attachment".to_owned()),
                data.clone(),
                mime.map(str::to_owned),
            ),
            MediaSource::Path { path } => {
                let bytes = tokio::fs::read(path)
                    .await
                    .map_err(|e| unsupported(format!("the file {}: {e}", path.display())))?;
                let name = path.file_name().map_or_else(
                    || "attachment".to_owned(),
                    |n| n.to_string_lossy().into_owned(),
                );
                (name, bytes, mime.map(str::to_owned))
            }
            MediaSource::Token { token } => {
                let media = MediaRef {
                    provider: NAME.to_owned(),
                    token: token.clone(),
                };
                let bytes = self.download_media(&media).await?;
                ("attachment".to_owned(), bytes, mime.map(str::to_owned))
            }
            MediaSource::Url { .. } => return Err(unsupported("media by URL as an attachment")),
        };
        if bytes.len() > ATTACHMENT_LIMIT {
            return Err(ProviderError::PayloadTooLarge {
                provider: NAME.to_owned(),
                size: bytes.len() as u64,
                limit: ATTACHMENT_LIMIT as u64,
            });
        }
        let mime = mime
            .filter(|m| lettre::message::header::ContentType::parse(m).is_ok())
            .unwrap_or_else(|| "application/octet-stream".to_owned());
        Ok((name, mime, bytes))
    }

    /// The text and attachment of a send.
    async fn body_of(
        &self,
        content: &OutgoingContent,
    ) -> Result<(String, Option<(String, String, Vec<u8>)>), ProviderError> {
        Ok(match content {
            OutgoingContent::Text { text, buttons } => {
                if text.trim().is_empty() {
                    return Err(unsupported("an empty text"));
                }
                (crate::readable::numbered(text, buttons), None)
            }
            OutgoingContent::List { text, sections, .. } => (
                crate::readable::numbered(text, sections.iter().flat_map(|s| &s.rows)),
                None,
            ),
            OutgoingContent::Media {
                source: MediaSource::Url { url },
                caption,
                ..
            } => {
                let caption = caption.as_deref().unwrap_or_default();
                (format!("{caption}\n\n{url}").trim().to_owned(), None)
            }
            OutgoingContent::Media {
                source,
                caption,
                mime,
                ..
            } => {
                let attachment = self.attachment_of(source, mime.as_deref()).await?;
                let text = caption
                    .clone()
                    .filter(|c| !c.trim().is_empty())
                    .unwrap_or_else(|| format!("Attached: {}", attachment.0));
                (text, Some(attachment))
            }
            OutgoingContent::Location(l) => {
                let body = crate::readable::location(l);
                (body, None)
            }
            OutgoingContent::Contacts(cards) => {
                let Some(body) = crate::readable::contacts(cards) else {
                    return Err(unsupported("an empty list of contacts"));
                };
                (body, None)
            }
            OutgoingContent::Template { .. } => return Err(unsupported("templates")),
            OutgoingContent::Reaction(_) => return Err(unsupported("reactions")),
        })
    }
}

#[async_trait]
impl Provider for EmailProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities::rest(TEXT_LIMIT, None, false)
    }

    /// Takes webhook posts from now on, and starts the IMAP task when IMAP is configured.
    async fn start(&self, sink: EventSink) -> Result<(), ProviderError> {
        self.slot.start(sink.clone());
        if let Some(imap) = self.shared.config.imap.clone() {
            let task = tokio::spawn(imap::run(self.shared.clone(), imap, sink));
            self.imap_task.set(task);
        }
        Ok(())
    }

    /// Refuses webhook posts (503: redelivered later) and ends the IMAP connection.
    async fn stop(&self) -> Result<(), ProviderError> {
        self.slot.set(None);
        self.imap_task.stop().await;
        Ok(())
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let Some((address, root)) = threading::split_chat(chat.as_str()) else {
            return Err(unreachable_chat(chat, "not an email thread or address"));
        };
        let (text, attachment) = self.body_of(&outgoing.content).await?;
        let c = &self.shared.config;
        let thread = match root {
            Some(_) => self.shared.store.thread(chat.as_str()).await?,
            None => None,
        };
        let (to, subject, in_reply_to, references) = match (thread, root) {
            (Some(t), _) => {
                let refs = threading::reply_references(&t.references, &t.last_id);
                (
                    t.reply_to,
                    threading::reply_subject(&t.subject),
                    Some(t.last_id),
                    refs,
                )
            }
            // A thread the store does not know (its state lost): answer its root.
            (None, Some(root)) => (
                address.to_owned(),
                threading::reply_subject(""),
                Some(root.to_owned()),
                vec![root.to_owned()],
            ),
            (None, None) => {
                let subject = c.subject.clone().unwrap_or_else(|| {
                    format!(
                        "Message from {}",
                        c.from
                            .name
                            .clone()
                            .unwrap_or_else(|| c.from.email.to_string())
                    )
                });
                (address.to_owned(), subject, None, Vec::new())
            }
        };
        let to = to
            .parse()
            .map_err(|_| unreachable_chat(chat, "not a valid address"))?;
        let nonce = botmesh::provider::current_send_nonce();
        let message_id = threading::own_message_id(nonce.as_deref(), &c.domain());
        let draft = smtp::Draft {
            from: c.from.clone(),
            to,
            subject,
            message_id: message_id.clone(),
            in_reply_to,
            references,
            text,
            attachment,
        };
        self.shared.smtp.send(chat, draft).await?;
        Ok(SentMessage {
            message_id: Some(MessageId(message_id)),
        })
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        crate::media::own(media, NAME)?;
        let unavailable = |message: String| ProviderError::MediaUnavailable {
            reason: MediaUnavailableReason::RehydrateFailed,
            message,
        };
        let Some((id, index, digest)) = attachments::parse_token(&media.token) else {
            return Err(unavailable("not an email attachment token".to_owned()));
        };
        let id_digest = attachments::sha256_hex(id.as_bytes());
        let Some(bytes) = self.shared.store.attachment(&id_digest, index).await? else {
            return Err(unavailable(format!(
                "attachment {index} of {id} is not in the store"
            )));
        };
        if attachments::sha256_hex(&bytes) != digest {
            return Err(unavailable(format!(
                "attachment {index} of {id} does not match its digest"
            )));
        }
        Ok(bytes)
    }

    fn serialize_media_ref(&self, media: &MediaRef) -> Option<StoredMediaRef> {
        crate::media::store(media, NAME, MEDIA_FIELD, |t| {
            attachments::parse_token(t).is_some()
        })
    }

    fn rehydrate_media_ref(&self, stored: &StoredMediaRef) -> Result<MediaRef, ProviderError> {
        crate::media::rehydrate(stored, NAME, MEDIA_FIELD, |t| {
            attachments::parse_token(t).is_some()
        })
    }
}
