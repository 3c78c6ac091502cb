//! An inbound mail, however it came (IMAP, a raw MIME post, a provider's parsed fields), read
//! into one [`Mail`] with `mail-parser`, then turned into the events of its thread
//! ([`prepare`]):
//!
//! | mail | events |
//! | --- | --- |
//! | dropped by the rules (`rules`: robots, lists, bounces, the bot's own) | none; a log line at `info` with the reason |
//! | text (the answer part, `strip`) | `Message` with `Content::Text`, id the Message-ID |
//! | N attachments | N `Message`s with `Content::Media` after the text, ids `<Message-ID>/1` … (the first is the Message-ID itself when the text is empty) |
//!
//! The chat is the thread (`threading`), the sender the `From` address (lower-case), the
//! sender's name the `From` display name, `reply_to` the first `In-Reply-To`. A mail without a
//! Message-ID gets `sha256-<digest of From, Date, Subject and the first 1 KB of the body>`, so
//! a redelivered copy is still deduped.

use botmesh::message::{ChatId, Content, InboundMedia, MediaRef, Message, MessageId, UserId};
use botmesh::provider::ProviderEvent;
use mail_parser::{HeaderValue, MessageParser, MimeHeaders, PartType};

use super::NAME;
use super::attachments::{self, ATTACHMENT_LIMIT, Attachment, INLINE_MIN};
use super::error::EmailError;
use super::rules::{self, Facts, NotAnswered};
use super::store::{MailStore, Thread};
use super::strip;
use super::threading;

/// A mail read from any source.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mail {
    /// The Message-ID, bare.
    pub(crate) message_id: Option<String>,
    /// `In-Reply-To`, bare ids.
    pub(crate) in_reply_to: Vec<String>,
    /// `References`, bare ids.
    pub(crate) references: Vec<String>,
    /// The `From` address, lower-case.
    pub(crate) from: Option<String>,
    /// The `From` display name.
    pub(crate) from_name: Option<String>,
    /// The `Reply-To` address, lower-case.
    pub(crate) reply_to: Option<String>,
    /// The subject.
    pub(crate) subject: String,
    /// The `Date` header as written (for the fallback id).
    pub(crate) date: String,
    /// When it was sent (Unix ms; now when unknown).
    pub(crate) timestamp_ms: i64,
    /// Every header, unfolded.
    pub(crate) headers: Vec<(String, String)>,
    /// The body's content type, lower-case (`text/plain`, `multipart/report`).
    pub(crate) content_type: String,
    /// The plain-text body (HTML converted when there is no text part).
    pub(crate) text: String,
    /// The answer part as the provider stripped it (Mailgun's `stripped-text`), if given.
    pub(crate) stripped: Option<String>,
    /// The attachments.
    pub(crate) attachments: Vec<Attachment>,
}

fn id_list(value: &HeaderValue<'_>) -> Vec<String> {
    match value {
        HeaderValue::Text(t) => threading::ids(&format!("<{t}>")),
        HeaderValue::TextList(list) => list
            .iter()
            .map(|t| threading::bare_id(t))
            .filter(|t| !t.is_empty())
            .collect(),
        _ => Vec::new(),
    }
}

fn first_address(value: Option<&mail_parser::Address<'_>>) -> (Option<String>, Option<String>) {
    let Some(addr) = value.and_then(|a| a.first()) else {
        return (None, None);
    };
    (
        addr.address().map(|a| a.trim().to_ascii_lowercase()),
        addr.name()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty()),
    )
}

/// A mail with the header fields of a parsed message (its text and attachments still empty).
fn with_headers(msg: &mail_parser::Message<'_>) -> Mail {
    let mut mail = Mail::default();
    mail.headers = msg
        .headers_raw()
        .map(|(n, v)| {
            let unfolded = v.replace("\r\n", "").replace('\n', "");
            (n.to_owned(), unfolded.trim().to_owned())
        })
        .collect();
    mail.message_id = msg
        .message_id()
        .map(threading::bare_id)
        .filter(|id| !id.is_empty());
    mail.in_reply_to = id_list(msg.in_reply_to());
    mail.references = id_list(msg.references());
    (mail.from, mail.from_name) = first_address(msg.from());
    mail.reply_to = first_address(msg.reply_to()).0;
    mail.subject = msg.subject().unwrap_or_default().to_owned();
    mail.date = mail
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("date"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    mail.timestamp_ms = msg
        .date()
        .map(|d| d.to_timestamp().saturating_mul(1000))
        .unwrap_or_else(botmesh::clock::now_ms);
    mail.content_type = type_of(msg.root_part(), "text/plain");
    mail
}

/// The error of an input (`what`) that does not parse.
fn unreadable(what: &str, reason: &str) -> EmailError {
    EmailError::Unreadable {
        mail: what.to_owned(),
        reason: reason.to_owned(),
    }
}

/// A part's content type (`type/subtype`, lower-case), `default` when it has none.
pub(crate) fn type_of(part: &mail_parser::MessagePart<'_>, default: &str) -> String {
    part.content_type()
        .map(|ct| match ct.subtype() {
            Some(sub) => format!("{}/{sub}", ct.ctype()),
            None => ct.ctype().to_owned(),
        })
        .unwrap_or_else(|| default.to_owned())
        .to_ascii_lowercase()
}

/// A full RFC 5322 message (IMAP `BODY[]`, Mailgun's `body-mime`, SendGrid's raw `email`).
pub(crate) fn from_mime(raw: &[u8]) -> Result<Mail, EmailError> {
    let msg = MessageParser::default()
        .parse(raw)
        .ok_or_else(|| unreadable("(raw MIME)", "not a MIME message"))?;
    let mut mail = with_headers(&msg);
    mail.text = msg.body_text(0).map(|t| t.into_owned()).unwrap_or_default();
    for part in msg.attachments() {
        let inline = part
            .content_disposition()
            .is_some_and(|d| d.ctype().eq_ignore_ascii_case("inline"));
        let bytes = part.contents();
        if inline && part.content_id().is_some() && bytes.len() < INLINE_MIN {
            continue;
        }
        if matches!(part.body, PartType::Multipart(_)) {
            continue;
        }
        mail.attachments.push(Attachment {
            file_name: part.attachment_name().map(str::to_owned),
            content_type: type_of(part, "application/octet-stream"),
            bytes: bytes.to_vec(),
        });
    }
    Ok(mail)
}

/// A mail given as its header block and its text (the webhooks' parsed fields).
pub(crate) fn from_parts(
    header_block: &str,
    text: String,
    attachments: Vec<Attachment>,
) -> Result<Mail, EmailError> {
    let mut block = header_block
        .trim_end()
        .replace("\r\n", "\n")
        .replace('\n', "\r\n");
    block.push_str("\r\n\r\n");
    let msg = MessageParser::default()
        .parse_headers(block.as_bytes())
        .ok_or_else(|| unreadable("(header block)", "no header could be read"))?;
    let mut mail = with_headers(&msg);
    mail.text = text;
    mail.attachments = attachments;
    Ok(mail)
}

/// A mail ready to be delivered: its events, and what to keep before delivery.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The mail's id (bare Message-ID, or the fallback).
    pub(crate) id: String,
    /// The thread's chat.
    pub(crate) chat: ChatId,
    /// How to answer it.
    pub(crate) thread: Thread,
    /// Its events, in order.
    pub(crate) events: Vec<ProviderEvent>,
    /// Its attachments' bytes, by index.
    pub(crate) blobs: Vec<(usize, Vec<u8>)>,
}

/// What becomes of a mail.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Not answered, with why.
    Dropped {
        /// The mail's id.
        id: String,
        /// Why.
        why: NotAnswered,
    },
    /// Delivered.
    Deliver(Box<Prepared>),
}

impl Outcome {
    /// The mail to deliver, or `None` (logged at `info` with the reason) when it is dropped.
    pub(crate) fn into_prepared(self) -> Option<Prepared> {
        match self {
            Outcome::Deliver(p) => Some(*p),
            Outcome::Dropped { id, why } => {
                tracing::info!(mail = %id, reason = %why, "email: not answered, dropped");
                None
            }
        }
    }
}

/// The fallback id of a mail without a Message-ID.
fn fallback_id(mail: &Mail) -> String {
    let head: String = mail.text.chars().take(1024).collect();
    let seed = format!(
        "{}\n{}\n{}\n{head}",
        mail.from.as_deref().unwrap_or_default(),
        mail.date,
        mail.subject
    );
    format!("sha256-{}", &attachments::sha256_hex(seed.as_bytes())[..32])
}

/// The events of `mail` for a bot whose address is `own`, or why it is dropped.
pub(crate) fn prepare(mail: Mail, own: &str) -> Result<Outcome, EmailError> {
    let id = mail
        .message_id
        .clone()
        .unwrap_or_else(|| fallback_id(&mail));
    let Some(from) = mail.from.clone().filter(|f| f.contains('@')) else {
        return Err(EmailError::Unreadable {
            mail: id,
            reason: "no From address".to_owned(),
        });
    };
    if let Some(why) = rules::check(&Facts {
        headers: &mail.headers,
        from: &from,
        content_type: &mail.content_type,
        own,
    }) {
        return Ok(Outcome::Dropped { id, why });
    }
    let root = threading::root(&mail.references, &mail.in_reply_to, &id).to_owned();
    let chat = threading::chat_id(&from, &root);
    let thread = Thread {
        reply_to: mail.reply_to.clone().unwrap_or_else(|| from.clone()),
        subject: mail.subject.clone(),
        last_id: id.clone(),
        references: mail.references.clone(),
    };
    let text = match &mail.stripped {
        Some(s) => s.trim().to_owned(),
        None => strip::answer_text(&mail.text),
    };
    let sender = UserId(from.clone());
    let reply_to = mail.in_reply_to.first().map(|p| MessageId(p.clone()));
    let message = |mid: String, content: Content| {
        ProviderEvent::Message(Message {
            id: MessageId(mid),
            chat: chat.clone(),
            sender: sender.clone(),
            sender_name: mail.from_name.clone(),
            is_group: false,
            mentions_bot: false,
            timestamp_ms: mail.timestamp_ms,
            content,
            reply_to: reply_to.clone(),
            lang_hint: None,
        })
    };
    let mut events = Vec::new();
    if !text.is_empty() || mail.attachments.is_empty() {
        events.push(message(id.clone(), Content::Text(text)));
    }
    let mut blobs = Vec::new();
    for (index, a) in mail.attachments.into_iter().enumerate() {
        if a.bytes.len() > ATTACHMENT_LIMIT {
            tracing::warn!(mail = %id, index, size = a.bytes.len(), "email: an attachment over the limit is left out");
            continue;
        }
        let digest = attachments::sha256_hex(&a.bytes);
        let mid = if events.is_empty() {
            id.clone()
        } else {
            format!("{id}/{}", events.len())
        };
        events.push(message(
            mid,
            Content::Media(InboundMedia {
                kind: crate::media::kind_of_mime(&a.content_type),
                media_ref: MediaRef {
                    provider: NAME.to_owned(),
                    token: attachments::token(&id, index, &digest),
                },
                mime: Some(a.content_type),
                caption: None,
                file_name: a.file_name,
                size: Some(a.bytes.len() as u64),
            }),
        ));
        blobs.push((index, a.bytes));
    }
    Ok(Outcome::Deliver(Box::new(Prepared {
        id,
        chat,
        thread,
        events,
        blobs,
    })))
}

/// Keeps what a prepared mail needs after delivery (its thread, its attachments' bytes) in
/// the store, before it is delivered.
pub(crate) async fn keep(store: &MailStore, prepared: &Prepared) -> Result<(), EmailError> {
    let id_digest = attachments::sha256_hex(prepared.id.as_bytes());
    for (index, bytes) in &prepared.blobs {
        store
            .set_attachment(&id_digest, *index, bytes.clone())
            .await?;
    }
    store
        .set_thread(prepared.chat.as_str(), &prepared.thread)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAW: &str = "Return-Path: <ana@example.com>\r\n\
From: Ana <Ana@Example.com>\r\n\
To: Shop <bot@shop.example>\r\n\
Subject: Re: Order 42\r\n\
Date: Mon, 1 Dec 2026 10:00:00 +0000\r\n\
Message-ID: <m2@example.com>\r\n\
In-Reply-To: <bm.1@shop.example>\r\n\
References: <root@example.com> <bm.1@shop.example>\r\n\
MIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"b\"\r\n\
\r\n\
--b\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
\r\n\
Two please.\r\n\
\r\n\
On Mon, 1 Dec 2026, Shop wrote:\r\n\
> How many?\r\n\
--b\r\n\
Content-Type: application/pdf; name=\"order.pdf\"\r\n\
Content-Disposition: attachment; filename=\"order.pdf\"\r\n\
Content-Transfer-Encoding: base64\r\n\
\r\n\
JVBERi0xLjQK\r\n\
--b--\r\n";

    #[test]
    fn a_mime_mail_becomes_a_thread_message_and_a_media_ref() {
        let mail = from_mime(RAW.as_bytes()).expect("parse");
        assert_eq!(mail.message_id.as_deref(), Some("m2@example.com"));
        assert_eq!(mail.references, ["root@example.com", "bm.1@shop.example"]);
        assert_eq!(mail.attachments.len(), 1);
        let Outcome::Deliver(p) = prepare(mail, "bot@shop.example").expect("prepare") else {
            panic!("dropped");
        };
        assert_eq!(p.chat.as_str(), "ana@example.com/root@example.com");
        assert_eq!(p.events.len(), 2);
        let ProviderEvent::Message(text) = &p.events[0] else {
            panic!("not a message")
        };
        assert_eq!(text.content, Content::Text("Two please.".into()));
        assert_eq!(text.id.0, "m2@example.com");
        let ProviderEvent::Message(media) = &p.events[1] else {
            panic!("not a message")
        };
        assert_eq!(media.id.0, "m2@example.com/1");
        let Content::Media(m) = &media.content else {
            panic!("not media")
        };
        let (id, index, digest) = attachments::parse_token(&m.media_ref.token).expect("token");
        assert_eq!((id, index), ("m2@example.com", 0));
        assert_eq!(digest, attachments::sha256_hex(b"%PDF-1.4\n"));
        assert_eq!(p.blobs, vec![(0, b"%PDF-1.4\n".to_vec())]);
    }
}
