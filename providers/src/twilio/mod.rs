//! [`TwilioProvider`]: SMS, MMS and WhatsApp through Twilio Programmable Messaging.
//!
//! | request on a webhook route | answer |
//! | --- | --- |
//! | no `X-Twilio-Signature` | 401, nothing delivered |
//! | a body that is not a form | 400, nothing delivered |
//! | a signature that does not match the public URL and every parameter | 403, nothing delivered |
//! | a form without `MessageSid`, `From`, `To` (or a status without `MessageStatus`) | 400 |
//! | accepted by the pipeline | 200 with an empty TwiML `<Response/>` |
//! | otherwise (not started, rejected) | 503 |
//!
//! Twilio does not retry a 5xx by default (it calls the number's fallback URL); add
//! `#rc=3&rp=ct,rt,5xx` to the webhook URL configured at Twilio so that a 503, a refused
//! connection (the bot restarting) and a read timeout (the bot dying mid-request) are all
//! retried (`rp=5xx` alone would drop the connection retries Twilio makes by default), and
//! the runtime dedupes by `MessageSid`.
//!
//! Sends go to `POST /2010-04-01/Accounts/<sid>/Messages.json` (form, Basic auth):
//!
//! | content | what Twilio gets |
//! | --- | --- |
//! | text | `Body`: one create per send (the runtime splits a text over 1600 characters into sends; a `Body` over 1600 is refused as `UnsupportedContent`) |
//! | text with buttons, list | `Body` with numbered options (`1. Yes`); the runtime splits a longer text so that its last part leaves 400 characters for the options, and options over 400 characters are refused; a reply with a number or a title comes back as an `Interaction` with the option's id (remembered in memory per chat when the request of the send leaves, and replaced by the next text without options; a restart forgets them, and a number is then a plain text) |
//! | media by URL | `MediaUrl` and the caption as `Body` (bytes, paths and tokens: `UnsupportedContent`: Twilio fetches media itself) |
//! | location, contacts | a readable `Body` |
//! | template | `ContentSid` (the template name, `HX…`) and `ContentVariables` (`{"1": …}`) |
//! | reaction | `UnsupportedContent` |
//!
//! | Twilio answer | class |
//! | --- | --- |
//! | 429 / 20429 | `RateLimited` (with `Retry-After` when given) |
//! | 5xx (Twilio answered: the message was not created) | retryable `Api` |
//! | no connection | `Network` (retryable) |
//! | a timeout or a connection lost after the request was written | `Ambiguous`: it may have been created (`crate::http::call_error`) |
//! | 21211, 21214, 21408, 21610, 21612, 21614 | `RecipientUnreachable` |
//! | 63016 | `OutsideSessionWindow` |
//! | 21617 (body too long), 21620 (media too large) | `PayloadTooLarge` |
//! | 21619 (no body and no media), 21623 | `UnsupportedContent` |
//! | other 4xx (20003 credentials, 21606, 21608 sender) | final `Api` |
//!
//! Media: the journaled reference is `{"url": …}` (v1), accepted back only when it is on the
//! API origin or an `https` `twilio.com` host, because the download sends the account's
//! credentials (Basic auth) through the SSRF-guarded [`GuardedClient`]; the redirect to
//! Twilio's CDN drops them. It does not delete media (that is retention's job) or handle
//! voice calls.

mod config;
mod inbound;
mod outbound;
mod signature;
mod webhook;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::Router;
use botmesh::message::{
    Button, ChatId, MediaRef, MediaSource, MessageId, Outgoing, OutgoingContent, SentMessage,
};
use botmesh::provider::{Capabilities, ProviderError};
use serde_json::{Value, json};

pub use config::{DEFAULT_API_BASE, TwilioConfig, TwilioConfigError, TwilioSender};
pub use signature::{signature, verify};

use crate::http::{Auth, GuardedClient};
use crate::webhook::{SinkSlot, WebhookApi, WebhookProvider};

/// The provider's name, as media refs carry it.
pub const NAME: &str = "twilio";

/// Twilio's `Body` limit.
pub const TEXT_LIMIT: usize = 1600;

/// Room kept in a `Body` for the numbered options of a text with buttons (`\n1. Yes`…: ten
/// options of 35-character titles): the runtime splits a longer text so that its last part,
/// options included, goes out as one message, and one send is one create (a retry of a send
/// made of several creates would send its first ones again).
pub const OPTIONS_ROOM: usize = 400;

/// The largest media a download reads.
pub const MEDIA_LIMIT: u64 = 20 * 1024 * 1024;

const TWIML_EMPTY: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response/>";

/// A Twilio sender (a number, a WhatsApp sender, or a Messaging Service). Cheap to clone.
///
/// ```no_run
/// use botmesh::prelude::*;
/// use botmesh_providers::twilio::{TwilioConfig, TwilioProvider};
/// use botmesh_providers::webhook::WebhookServer;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let twilio = TwilioProvider::new(TwilioConfig::from_env()?)?;
/// let server = WebhookServer::new().mount(twilio.webhook_routes()).bind("0.0.0.0:8080").await?;
/// Bot::builder(twilio).build()?.run().await?;
/// server.shutdown().await;
/// # Ok(()) }
/// ```
pub type TwilioProvider = WebhookProvider<Twilio>;

/// The Twilio channel: its config, HTTP clients, and the numbered options last sent to each
/// chat.
pub struct Twilio {
    inner: Arc<Inner>,
}

struct Inner {
    config: TwilioConfig,
    http: reqwest::Client,
    media: GuardedClient,
    options: Mutex<HashMap<ChatId, Vec<Button>>>,
}

impl std::fmt::Debug for Twilio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwilioProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

fn api_error(
    status: Option<u16>,
    code: Option<i64>,
    message: String,
    retryable: bool,
) -> ProviderError {
    ProviderError::Api {
        provider: NAME.to_owned(),
        status,
        code: code.map(|c| c.to_string()),
        message,
        retryable,
    }
}

/// The one `Body` of a text or a list: the text with its numbered options. A send is one
/// create (a send made of several creates would make them all again when a later one fails and
/// the send is retried), so a body over [`TEXT_LIMIT`] is refused. The runtime splits a longer
/// text, with buttons or a list, into sends whose last leaves [`OPTIONS_ROOM`] characters for
/// the options; only options longer than that (or a send made without the runtime) reach this.
fn one_body(text: &str, options: &[Button]) -> Result<String, ProviderError> {
    let body = outbound::with_options(text, options);
    let count = body.chars().count();
    if count <= TEXT_LIMIT {
        return Ok(body);
    }
    let options_len = count - text.chars().count();
    Err(unsupported(
        if options.is_empty() || options_len <= OPTIONS_ROOM {
            format!("a body of {count} characters, over the limit of {TEXT_LIMIT} for one message")
        } else {
            format!(
                "{} numbered options taking {options_len} characters, over the {OPTIONS_ROOM} a \
             message leaves them beside its text (shorten the titles or send fewer)",
                options.len()
            )
        },
    ))
}

fn unsupported(what: impl Into<String>) -> ProviderError {
    crate::errors::unsupported_content(NAME, what)
}

impl WebhookProvider<Twilio> {
    /// A provider with these settings.
    pub fn new(config: TwilioConfig) -> Result<Self, ProviderError> {
        // An empty auth token would accept any request signed with the empty key: the
        // webhook would not be authenticated at all.
        if config.auth_token.is_empty() {
            return Err(api_error(
                None,
                None,
                "the auth token is empty: the webhook could not authenticate Twilio".to_owned(),
                false,
            ));
        }
        let (http, media) =
            crate::http::channel_clients(config.request_timeout, config.media_client.as_ref())
                .map_err(|e| api_error(None, None, e, false))?;
        let inner = Arc::new(Inner {
            config,
            http,
            media,
            options: Mutex::new(HashMap::new()),
        });
        Ok(Self::with_api(Twilio { inner }))
    }
}

impl Twilio {
    /// Whether a media URL may be journaled and downloaded with the account's credentials:
    /// on the API origin, or an `https` URL on a `twilio.com` host.
    fn media_url_allowed(&self, url: &str) -> bool {
        let Ok(u) = url::Url::parse(url) else {
            return false;
        };
        let api_origin = url::Url::parse(&self.inner.config.api_base).map(|a| a.origin());
        if api_origin.is_ok_and(|o| o == u.origin()) {
            return true;
        }
        u.scheme() == "https"
            && u.host_str().is_some_and(|h| {
                h.eq_ignore_ascii_case("twilio.com")
                    || h.to_ascii_lowercase().ends_with(".twilio.com")
            })
    }

    async fn create(
        &self,
        chat: &ChatId,
        mut form: Vec<(String, String)>,
    ) -> Result<Option<MessageId>, ProviderError> {
        let c = &self.inner.config;
        form.insert(0, ("To".to_owned(), chat.to_string()));
        match &c.sender {
            TwilioSender::From(f) => form.push(("From".to_owned(), f.clone())),
            TwilioSender::MessagingService(m) => {
                form.push(("MessagingServiceSid".to_owned(), m.clone()))
            }
        }
        if let Some(cb) = &c.status_callback {
            form.push(("StatusCallback".to_owned(), cb.clone()));
        }
        let url = format!(
            "{}/2010-04-01/Accounts/{}/Messages.json",
            c.api_base, c.account_sid
        );
        let resp = self
            .inner
            .http
            .post(url)
            .basic_auth(&c.account_sid, Some(&*c.auth_token))
            .form(&form)
            .send()
            .await
            .map_err(|e| crate::http::call_error(NAME, "send", e, true))?;
        let status = resp.status().as_u16();
        let retry_after = crate::http::retry_after(&resp);
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return Ok(body["sid"].as_str().map(|s| MessageId(s.to_owned())));
        }
        let size = form.iter().map(|(_, v)| v.len() as u64).sum();
        Err(outbound::classify(status, &body, chat, retry_after, size))
    }

    fn remember_options(&self, chat: &ChatId, options: Vec<Button>) {
        let mut map = self.inner.options.lock().unwrap_or_else(|e| e.into_inner());
        if options.is_empty() {
            map.remove(chat);
        } else {
            map.insert(chat.clone(), options);
        }
    }
}

#[async_trait]
impl WebhookApi for Twilio {
    const NAME: &'static str = NAME;
    const MEDIA_FIELD: &'static str = "url";

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            text_limit: TEXT_LIMIT,
            buttons_text_limit: Some(TEXT_LIMIT - OPTIONS_ROOM),
            interactions_require_ack: false,
            edits: false,
            typing: false,
            mark_read: false,
            resends_deduplicated: false,
        }
    }

    /// The inbound message and status callback routes.
    fn routes(&self, slot: &SinkSlot) -> Router {
        let route = |kind, path: &str| {
            let channel = webhook::Channel {
                inner: self.inner.clone(),
                slot: slot.clone(),
                kind,
            };
            crate::webhook::route(Arc::new(channel), path)
        };
        route(webhook::Kind::Inbound, &self.inner.config.path)
            .merge(route(webhook::Kind::Status, &self.inner.config.status_path))
    }

    async fn send(&self, chat: &ChatId, outgoing: &Outgoing) -> Result<SentMessage, ProviderError> {
        let kv = |k: &str, v: String| (k.to_owned(), v);
        let (form, options): (Vec<(String, String)>, Option<Vec<Button>>) = match &outgoing.content
        {
            OutgoingContent::Text { text, buttons } => {
                if text.trim().is_empty() {
                    return Err(unsupported("an empty text"));
                }
                let body = one_body(text, buttons)?;
                (vec![kv("Body", body)], Some(buttons.clone()))
            }
            OutgoingContent::List { text, sections, .. } => {
                let rows: Vec<Button> = sections.iter().flat_map(|s| s.rows.clone()).collect();
                let body = one_body(text, &rows)?;
                (vec![kv("Body", body)], Some(rows))
            }
            OutgoingContent::Media {
                source, caption, ..
            } => {
                let MediaSource::Url { url } = source else {
                    return Err(unsupported(
                        "media other than a public URL (Twilio fetches MediaUrl itself)",
                    ));
                };
                let mut form = vec![kv("MediaUrl", url.clone())];
                if let Some(c) = caption.as_ref().filter(|c| !c.is_empty()) {
                    if c.chars().count() > TEXT_LIMIT {
                        return Err(unsupported(format!(
                            "a caption over {TEXT_LIMIT} characters"
                        )));
                    }
                    form.push(kv("Body", c.clone()));
                }
                (form, None)
            }
            OutgoingContent::Location(l) => {
                let body = crate::readable::location(l);
                (vec![kv("Body", body)], None)
            }
            OutgoingContent::Contacts(cards) => {
                let Some(body) = crate::readable::contacts(cards) else {
                    return Err(unsupported("an empty list of contacts"));
                };
                (vec![kv("Body", body)], None)
            }
            OutgoingContent::Template { name, params, .. } => {
                if !name.starts_with("HX") {
                    return Err(unsupported(format!(
                        "template {name:?}: Twilio templates are Content SIDs (HX…)"
                    )));
                }
                let vars: serde_json::Map<String, Value> = params
                    .iter()
                    .enumerate()
                    .map(|(i, p)| ((i + 1).to_string(), json!(p)))
                    .collect();
                (
                    vec![
                        kv("ContentSid", name.clone()),
                        kv("ContentVariables", Value::Object(vars).to_string()),
                    ],
                    None,
                )
            }
            OutgoingContent::Reaction(_) => return Err(unsupported("reactions")),
        };
        // Remembered before the request: the user may read the message, and answer it, before
        // Twilio's response reaches us; an answer read against the options of the message
        // before would pick the wrong one (a quantity "2" taken for the second item).
        if let Some(options) = options {
            self.remember_options(chat, options);
        }
        let message_id = self.create(chat, form).await?;
        Ok(SentMessage { message_id })
    }

    fn media_token_ok(&self, token: &str) -> bool {
        self.media_url_allowed(token)
    }

    async fn download_media(&self, media: &MediaRef) -> Result<Vec<u8>, ProviderError> {
        if !self.media_url_allowed(&media.token) {
            return Err(api_error(
                None,
                None,
                "refusing to send the account's credentials to a media URL off the API origin and twilio.com".to_owned(),
                false,
            ));
        }
        let c = &self.inner.config;
        let auth = Auth::Basic {
            user: c.account_sid.clone(),
            password: c.auth_token.to_string(),
        };
        crate::media::fetch(
            &self.inner.media,
            &media.token,
            Some(&auth),
            MEDIA_LIMIT,
            NAME,
        )
        .await
    }
}
