//! Outbound mail over SMTP with `lettre`: the message of a send (threading headers, our own
//! Message-ID, `Auto-Submitted`) and the SMTP answers as the runtime's retry classes.
//!
//! | SMTP outcome | class |
//! | --- | --- |
//! | 2xx after `DATA` | sent (accepted by the server: a bounce may still come later, as a mail the rules drop) |
//! | 4xx (mailbox busy, greylisting, rate limit) | retryable `Api` with the code |
//! | 5xx on a recipient (550, 551, 553) | `RecipientUnreachable` |
//! | other 5xx | final `Api` with the code (dead-lettered) |
//! | no connection, TLS failure, connection lost, timeout | `Network` (retryable) |
//!
//! A connection lost after the final `.` of `DATA` may have delivered the mail: the retry sends
//! it again with the same Message-ID (made from the send's outbox key), which clients (Gmail
//! among them) and our own inbound dedupe take for one mail. The provider does not claim
//! `resends_deduplicated`: no SMTP server promises to drop the second copy.

use std::time::Duration;

use botmesh::message::ChatId;
use botmesh::provider::ProviderError;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::NAME;

/// The SMTP client of one provider (one connection pool).
#[derive(Clone)]
pub(crate) struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

/// What a mail carries besides its recipient.
pub(crate) struct Draft {
    /// The bot's mailbox.
    pub(crate) from: Mailbox,
    /// The recipient.
    pub(crate) to: Mailbox,
    /// The subject.
    pub(crate) subject: String,
    /// Our Message-ID (bare).
    pub(crate) message_id: String,
    /// `In-Reply-To` (bare), for a reply.
    pub(crate) in_reply_to: Option<String>,
    /// `References` (bare ids), for a reply.
    pub(crate) references: Vec<String>,
    /// The plain-text body.
    pub(crate) text: String,
    /// An attachment: file name, content type, bytes.
    pub(crate) attachment: Option<(String, String, Vec<u8>)>,
}

fn local(message: String) -> ProviderError {
    crate::errors::local(NAME, message)
}

impl Smtp {
    /// The client of `url` (`smtp://`, `smtps://`, `?tls=required`), greeting with `domain`.
    pub(crate) fn new(url: &str, domain: &str, timeout: Duration) -> Result<Self, ProviderError> {
        let builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| local(format!("the SMTP URL is unusable: {e}")))?;
        let builder = builder
            .hello_name(ClientId::Domain(domain.to_owned()))
            .timeout(Some(timeout));
        // A plain `smtp://` URL without `tls=` to a host other than this machine would send the
        // credentials in clear: ask for STARTTLS there.
        let parsed = url::Url::parse(url).map_err(|e| local(e.to_string()))?;
        let plain = parsed.scheme() == "smtp" && !parsed.query_pairs().any(|(k, _)| k == "tls");
        let host = parsed.host_str().unwrap_or_default().to_owned();
        let loopback = host == "localhost"
            || host
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let builder = if plain && !loopback {
            let params =
                TlsParameters::new(host).map_err(|e| local(format!("TLS parameters: {e}")))?;
            builder.tls(Tls::Required(params))
        } else {
            builder
        };
        Ok(Self {
            transport: builder.build(),
        })
    }

    /// Sends `draft` to `chat`'s recipient.
    pub(crate) async fn send(&self, chat: &ChatId, draft: Draft) -> Result<(), ProviderError> {
        let message = build(draft)?;
        match self.transport.send(message).await {
            Ok(_) => Ok(()),
            Err(e) => Err(classify(&e, chat)),
        }
    }
}

/// The lettre message of a draft.
fn build(d: Draft) -> Result<lettre::Message, ProviderError> {
    let ids = super::threading::header_ids;
    let mut b = lettre::Message::builder()
        .from(d.from)
        .to(d.to)
        .subject(d.subject)
        .message_id(Some(format!("<{}>", d.message_id)));
    let auto = if d.in_reply_to.is_some() {
        "auto-replied"
    } else {
        "auto-generated"
    };
    if let Some(parent) = &d.in_reply_to {
        b = b
            .in_reply_to(format!("<{parent}>"))
            .references(ids(&d.references));
    }
    let name = HeaderName::new_from_ascii_str("Auto-Submitted");
    b = b.raw_header(HeaderValue::new(name, auto.to_owned()));
    let text_part = SinglePart::builder()
        .header(ContentType::TEXT_PLAIN)
        .body(d.text);
    let built = match d.attachment {
        None => b.singlepart(text_part),
        Some((file_name, content_type, bytes)) => {
            let ct = ContentType::parse(&content_type).unwrap_or_else(|_| {
                ContentType::parse("application/octet-stream").unwrap_or(ContentType::TEXT_PLAIN)
            });
            b.multipart(
                MultiPart::mixed()
                    .singlepart(text_part)
                    .singlepart(Attachment::new(file_name).body(bytes, ct)),
            )
        }
    };
    built.map_err(|e| local(format!("the mail cannot be built: {e}")))
}

/// An SMTP failure as the runtime's class (see the module table).
pub(crate) fn classify(e: &lettre::transport::smtp::Error, chat: &ChatId) -> ProviderError {
    let code = e.status().map(|c| c.to_string());
    let status: Option<u16> = code.as_deref().and_then(|c| c.parse().ok());
    if e.is_transient() {
        return ProviderError::Api {
            provider: NAME.to_owned(),
            status,
            code,
            message: e.to_string(),
            retryable: true,
        };
    }
    if e.is_permanent() {
        if matches!(status, Some(550 | 551 | 553)) {
            return ProviderError::RecipientUnreachable {
                provider: NAME.to_owned(),
                chat: chat.to_string(),
                reason: e.to_string(),
            };
        }
        return ProviderError::Api {
            provider: NAME.to_owned(),
            status,
            code,
            message: e.to_string(),
            retryable: false,
        };
    }
    ProviderError::Network {
        provider: NAME.to_owned(),
        message: e.to_string(),
    }
}
