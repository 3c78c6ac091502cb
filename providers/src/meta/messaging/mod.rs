//! [`MessagingProvider`]: the Send API family, Messenger and Instagram, over the Meta core.
//! The two channels differ only in what their [`Channel`] says (name, webhook `object`, text
//! limit, tags, environment variables); `crate::messenger` and `crate::instagram` name them.
//!
//! | request on the webhook route | answer |
//! | --- | --- |
//! | `GET ?hub.mode=subscribe&hub.verify_token=<ours>&hub.challenge=N` | 200, body `N` |
//! | `GET` with another mode or token | 403 |
//! | `POST` without `X-Hub-Signature-256` | 401, nothing delivered |
//! | `POST` whose HMAC-SHA256 of the raw body (key: the app secret) differs | 403, nothing delivered |
//! | `POST` that is not the channel's envelope (`object` `page` or `instagram`) | 400, nothing delivered |
//! | `POST` with only echoes, reads or other events the bot does not handle | 200 |
//! | `POST` whose every event the pipeline accepted | 200 |
//! | otherwise (not started, rejected) | 503: Meta retries, the runtime dedupes by `mid` |
//!
//! Sends go to `POST /<version>/<account id or me>/messages` with
//! `{"recipient": {"id": <PSID or IGSID>}, "messaging_type", "message"}` (`outbound` has the
//! tables of bodies and error codes); the answer's `message_id` is the sent message's id.
//! The window: inside 24 h of the user's last message (as far as the provider saw it write,
//! [`SessionWindow`](crate::meta)) a send is a `RESPONSE`; after that it goes out with the
//! configured [`MessageTag`] (`MESSAGE_TAG`; `HUMAN_AGENT` only up to 7 days), or fails with
//! `OutsideSessionWindow` without a call. Meta's own refusal (code 10, subcode 2018278) is
//! classified the same, and with a tag configured the send is made again with it.
//! [`MessagingProvider::send_tagged`] sends with a tag of the caller's choice (a human agent's
//! reply: `HUMAN_AGENT`).
//!
//! Media refs are the attachment's hosted URL, `{"url": …}` (v1), journaled and accepted back
//! only as `https` URLs on Meta's CDNs (`fbcdn.net`, `fbsbx.com`, `cdninstagram.com`, or the
//! configured list). A download is a plain GET through the SSRF-guarded client, without the
//! token. The URLs are signed and expire (days): a late replay's download fails, and the
//! runtime reports the media as expired.
//!
//! Typing (`typing_on`) and read marks (`mark_seen`) are sender actions. It does not edit
//! messages (the Send API cannot), subscribe the Page to the app, or follow the handover
//! protocol (`standby` events are ignored).

mod config;
mod inbound;
mod outbound;

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{ChatId, MediaRef, MediaSource, MessageId, Outgoing, SentMessage};
use botmesh::provider::{Capabilities, ProviderError};
use serde_json::{Value, json};

pub use config::{DEFAULT_MEDIA_HOSTS, MessageTag, MessagingConfig};
pub use outbound::TextLimit;

use crate::files::OutgoingMedia;
use crate::meta::MetaCore;
use crate::webhook::{SinkSlot, WebhookApi, WebhookProvider};

/// The largest attachment the provider downloads or uploads (25 MB).
pub const MEDIA_LIMIT: u64 = 25 * 1024 * 1024;

#[doc(hidden)]
pub mod sealed {
    /// Keeps [`Channel`](super::Channel) to this crate's channels.
    pub trait Sealed {}
}

/// What tells Messenger and Instagram apart; implemented by `crate::messenger::Messenger`
/// and `crate::instagram::Instagram` only.
pub trait Channel: sealed::Sealed + std::fmt::Debug + Send + Sync + 'static {
    /// The provider's name, as media refs carry it.
    const NAME: &'static str;
    /// The webhook envelope's `object`.
    const OBJECT: &'static str;
    /// The default webhook route.
    const DEFAULT_PATH: &'static str;
    /// The tags the channel takes.
    const TAGS: &'static [MessageTag];
    /// The environment variables: access token, app secret, verify token, API base, API
    /// version, webhook path, account id, window tag, media hosts.
    const ENV: [&'static str; 9];
    /// The text limit.
    const TEXT_LIMIT: TextLimit;
}

/// A Messenger Page or Instagram account (`MessengerProvider`, `InstagramProvider`):
/// [`Messaging`] on the shared webhook provider. Cheap to clone.
pub type MessagingProvider<C> = WebhookProvider<Messaging<C>>;

/// The Send API channel `C`: its config, Graph client and session window.
pub struct Messaging<C> {
    inner: MetaCore<MessagingConfig<C>>,
}

impl<C: Channel> std::fmt::Debug for Messaging<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessagingProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// How a send goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Inside the window.
    Response,
    /// With a tag.
    Tag(MessageTag),
}

impl<C: Channel> WebhookProvider<Messaging<C>> {
    /// A provider with these settings.
    pub fn new(config: MessagingConfig<C>) -> Result<Self, ProviderError> {
        let inner = MetaCore::new(C::NAME, config, outbound::table, MEDIA_LIMIT)?;
        Ok(Self::with_api(Messaging { inner }))
    }

    /// Records that `chat` wrote at `at_ms` (the webhook does it; tests and restores may too).
    pub fn note_inbound(&self, chat: &ChatId, at_ms: i64) {
        self.api().inner.window.note(chat, at_ms);
    }

    /// Sends `outgoing` with `tag` (`messaging_type: MESSAGE_TAG`), whatever the window: a
    /// human agent's reply goes out as `HUMAN_AGENT` up to 7 days after the user's last
    /// message. A tag the channel does not take is `UnsupportedContent`; `HUMAN_AGENT` to a
    /// chat known to have been silent for longer is `OutsideSessionWindow`; neither makes a
    /// call.
    pub async fn send_tagged(
        &self,
        chat: &ChatId,
        outgoing: &Outgoing,
        tag: MessageTag,
    ) -> Result<SentMessage, ProviderError> {
        let api = self.api();
        if !C::TAGS.contains(&tag) {
            return Err(outbound::unsupported(
                C::NAME,
                format!("the message tag {}", tag.as_str()),
            ));
        }
        if !api.reaches(chat, tag) {
            return Err(api.outside(chat));
        }
        api.send_as(chat, outgoing, Mode::Tag(tag)).await
    }
}

impl<C: Channel> Messaging<C> {
    fn outside(&self, chat: &ChatId) -> ProviderError {
        ProviderError::OutsideSessionWindow {
            provider: C::NAME.to_owned(),
            chat: chat.to_string(),
        }
    }

    /// Whether `tag` still reaches `chat`.
    fn reaches(&self, chat: &ChatId, tag: MessageTag) -> bool {
        match (tag.reach_ms(), self.inner.window.silent_for(chat)) {
            (Some(reach), Some(silent)) => silent <= reach,
            _ => true,
        }
    }

    fn account(&self) -> &str {
        self.inner.config.account_id.as_deref().unwrap_or("me")
    }

    /// Posts one `message` (or sender action, `message: None`) to `chat`.
    async fn post(
        &self,
        chat: &ChatId,
        mode: Mode,
        message: Value,
    ) -> Result<Option<MessageId>, ProviderError> {
        let mut body = json!({ "recipient": { "id": chat.as_str() } });
        match mode {
            Mode::Response => body["messaging_type"] = json!("RESPONSE"),
            Mode::Tag(tag) => {
                body["messaging_type"] = json!("MESSAGE_TAG");
                body["tag"] = json!(tag.as_str());
            }
        }
        body["message"] = message;
        let tail = format!("{}/messages", self.account());
        let answer = self
            .inner
            .graph
            .post_json(&tail, &body, "send", true, Some(chat))
            .await?;
        Ok(answer["message_id"]
            .as_str()
            .map(|id| MessageId(id.to_owned())))
    }

    async fn sender_action(&self, chat: &ChatId, action: &str) -> Result<(), ProviderError> {
        let body = json!({ "recipient": { "id": chat.as_str() }, "sender_action": action });
        let tail = format!("{}/messages", self.account());
        let graph = &self.inner.graph;
        graph
            .post_json(&tail, &body, action, false, Some(chat))
            .await
            .map(|_| ())
    }

    /// Sends `outgoing` in `mode`: its messages one after the other, the last one's id.
    async fn send_as(
        &self,
        chat: &ChatId,
        outgoing: &Outgoing,
        mode: Mode,
    ) -> Result<SentMessage, ProviderError> {
        let messages = match OutgoingMedia::of(&outgoing.content) {
            Some(media) => {
                let kind = outbound::attachment_type(media.kind);
                let payload = match media.source {
                    MediaSource::Url { url } => json!({ "url": url, "is_reusable": true }),
                    MediaSource::Token { token } => json!({ "attachment_id": token }),
                    local => {
                        let (data, name) = crate::files::read(local, C::NAME).await?;
                        let name = name.unwrap_or_else(|| kind.to_owned());
                        json!({ "attachment_id": self.upload(kind, data, name, media.mime).await? })
                    }
                };
                let mut list = vec![json!({ "attachment": { "type": kind, "payload": payload } })];
                if let Some(c) = media.caption.filter(|c| !c.trim().is_empty()) {
                    list.extend(
                        C::TEXT_LIMIT
                            .split(c)
                            .into_iter()
                            .map(|p| json!({ "text": p })),
                    );
                }
                list
            }
            None => outbound::messages(C::NAME, C::TEXT_LIMIT, &outgoing.content)?,
        };
        let mut last = None;
        for message in messages {
            last = self.post(chat, mode, message).await?.or(last);
        }
        Ok(SentMessage { message_id: last })
    }

    /// Uploads an attachment (`POST /<account>/message_attachments`): its `attachment_id`.
    async fn upload(
        &self,
        kind: &str,
        data: Vec<u8>,
        file_name: String,
        mime: Option<&str>,
    ) -> Result<String, ProviderError> {
        if data.len() as u64 > MEDIA_LIMIT {
            return Err(ProviderError::PayloadTooLarge {
                provider: C::NAME.to_owned(),
                size: data.len() as u64,
                limit: MEDIA_LIMIT,
            });
        }
        let mut part = reqwest::multipart::Part::bytes(data).file_name(file_name);
        if let Some(m) = mime {
            part = part
                .mime_str(m)
                .map_err(|_| outbound::unsupported(C::NAME, format!("MIME type {m:?}")))?;
        }
        let message = json!({ "attachment": { "type": kind, "payload": { "is_reusable": true } } });
        let form = reqwest::multipart::Form::new()
            .text("message", message.to_string())
            .part("filedata", part);
        let tail = format!("{}/message_attachments", self.account());
        let graph = &self.inner.graph;
        let answer = graph
            .post_multipart(&tail, form, "attachment upload")
            .await?;
        answer["attachment_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| graph.error("the upload returned no attachment_id", false))
    }

    /// Whether `url` is a hosted attachment URL this provider journals and downloads.
    fn hosted(&self, url: &str) -> bool {
        crate::meta::url_allowed(
            self.inner.graph.api_base(),
            url,
            &self.inner.config.media_hosts,
        )
    }
}

#[async_trait]
impl<C: Channel> WebhookApi for Messaging<C> {
    const NAME: &'static str = C::NAME;
    const MEDIA_FIELD: &'static str = "url";

    fn capabilities(&self) -> Capabilities {
        let limits = (C::TEXT_LIMIT.chars(), Some(outbound::BUTTON_TEXT_LIMIT));
        Capabilities {
            typing: true,
            mark_read: true,
            ..crate::capabilities::rest(limits.0, limits.1, false)
        }
    }

    /// The GET (verification) and POST (events) routes.
    fn routes(&self, slot: &SinkSlot) -> Router {
        let inbound = inbound::Inbound {
            name: C::NAME,
            object: C::OBJECT,
            account_id: self.inner.config.account_id.clone(),
        };
        self.inner.route(slot, inbound)
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let tag = self.inner.config.window_tag;
        let closed = self.inner.window.closed(chat);
        let mode = match tag {
            _ if !closed => Mode::Response,
            Some(tag) if self.reaches(chat, tag) => Mode::Tag(tag),
            _ => return Err(self.outside(chat)),
        };
        match (self.send_as(chat, outgoing, mode).await, tag) {
            (Err(ProviderError::OutsideSessionWindow { .. }), Some(tag))
                if mode == Mode::Response && self.reaches(chat, tag) =>
            {
                tracing::debug!(provider = C::NAME, chat = %chat, tag = tag.as_str(), "outside the window: sent again with the tag");
                self.send_as(chat, outgoing, Mode::Tag(tag)).await
            }
            (result, _) => result,
        }
    }

    async fn typing(&self, chat: &ChatId) -> Result<(), ProviderError> {
        self.sender_action(chat, "typing_on").await
    }

    async fn mark_read(&self, chat: &ChatId, _message_id: &MessageId) -> Result<(), ProviderError> {
        self.sender_action(chat, "mark_seen").await
    }

    fn media_token_ok(&self, token: &str) -> bool {
        self.hosted(token)
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        if !self.hosted(&media.token) {
            return Err(self.inner.graph.error(
                "the attachment URL is not on a Meta CDN host: not downloaded",
                false,
            ));
        }
        self.inner
            .graph
            .download(&media.token, false, MEDIA_LIMIT)
            .await
    }
}
