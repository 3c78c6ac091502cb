//! Threads: the chat of a mail, and the headers of a reply (RFC 5322 §3.6.4).
//!
//! - A chat is a thread: `<counterpart address>/<root Message-ID>` (the address lower-case,
//!   the id without its angle brackets). The root is the first id of `References`, else the
//!   first of `In-Reply-To`, else the mail's own Message-ID. The address scopes it: two people
//!   answering the same announcement are two chats. A chat that is a bare address is a thread
//!   the bot starts (a send to `ana@example.com`); the answer to it is then a chat of its own,
//!   rooted at the bot's first Message-ID.
//! - A reply has `In-Reply-To: <the last mail of the thread>`, `References:` that mail's
//!   references followed by its id (trimmed to the root and the last ids when long), and the
//!   thread's subject with one `Re: ` in front.
//! - The bot's own Message-ID of a send is `<bm.<nonce>@<the From domain>>`, the nonce a
//!   digest of the send's outbox key: every attempt of one send (a retry, a resend after a
//!   crash) carries the same Message-ID, so clients and our own inbound dedupe see one mail.
//!
//! It does not thread by subject alone (mail that lost its headers starts a new chat).

use botmesh::message::ChatId;

/// The most ids a `References` header keeps: the root and the latest ones.
pub(crate) const REFERENCES_KEPT: usize = 10;

/// An id without surrounding spaces and angle brackets.
pub(crate) fn bare_id(id: &str) -> String {
    id.trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim()
        .to_owned()
}

/// The ids of a `References` or `In-Reply-To` value (`<a@x> <b@y>`), bare, in order.
pub(crate) fn ids(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find('<') {
        let Some(len) = rest[start..].find('>') else {
            break;
        };
        let id = bare_id(&rest[start..start + len + 1]);
        if !id.is_empty() {
            out.push(id);
        }
        rest = &rest[start + len + 1..];
    }
    if out.is_empty() {
        out.extend(
            value
                .split_whitespace()
                .map(bare_id)
                .filter(|s| !s.is_empty()),
        );
    }
    out
}

/// The root of a thread: the first reference, else the first `In-Reply-To`, else `own`.
pub(crate) fn root<'a>(
    references: &'a [String],
    in_reply_to: &'a [String],
    own: &'a str,
) -> &'a str {
    references
        .first()
        .or_else(|| in_reply_to.first())
        .map_or(own, String::as_str)
}

/// The chat of a thread with `address`.
pub(crate) fn chat_id(address: &str, root: &str) -> ChatId {
    ChatId(format!("{}/{root}", address.to_ascii_lowercase()))
}

/// A chat split into its address and its root (`None` for a bare address: a new thread).
pub(crate) fn split_chat(chat: &str) -> Option<(&str, Option<&str>)> {
    let at = chat.find('@')?;
    match chat[at..].find('/') {
        Some(slash) => {
            let (address, root) = chat.split_at(at + slash);
            let root = &root[1..];
            (!root.is_empty()).then_some((address, Some(root)))
        }
        None => Some((chat, None)),
    }
}

/// The subject with its reply and forward prefixes (`Re:`, `Fwd:`, `AW:`, `SV:`, `RE[2]:`)
/// removed.
pub(crate) fn base_subject(subject: &str) -> &str {
    let mut s = subject.trim();
    loop {
        let Some(colon) = s.find(':') else {
            return s;
        };
        let prefix = s[..colon].trim().to_ascii_lowercase();
        let word = prefix.split_once('[').map_or(prefix.as_str(), |(w, n)| {
            if n.trim_end_matches(']').bytes().all(|b| b.is_ascii_digit()) {
                w
            } else {
                ""
            }
        });
        if matches!(word, "re" | "fwd" | "fw" | "aw" | "sv" | "wg" | "tr" | "rv") {
            s = s[colon + 1..].trim_start();
        } else {
            return s;
        }
    }
}

/// The subject of a reply: the thread's with one `Re: ` in front.
pub(crate) fn reply_subject(subject: &str) -> String {
    let base = base_subject(subject);
    if base.is_empty() {
        "Re: your message".to_owned()
    } else {
        format!("Re: {base}")
    }
}

/// The `References` of a reply to a mail with `references` and id `parent`: its references
/// then its id, kept to the root and the latest [`REFERENCES_KEPT`]` - 1`.
pub(crate) fn reply_references(references: &[String], parent: &str) -> Vec<String> {
    let mut all: Vec<String> = references.to_vec();
    if all.last().map(String::as_str) != Some(parent) {
        all.push(parent.to_owned());
    }
    if all.len() > REFERENCES_KEPT {
        let tail = all.split_off(all.len() - (REFERENCES_KEPT - 1));
        all.truncate(1);
        all.extend(tail);
    }
    all
}

/// Ids as a header value: `<a@x> <b@y>`.
pub(crate) fn header_ids(ids: &[String]) -> String {
    ids.iter()
        .map(|id| format!("<{id}>"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The bot's Message-ID of a send (bare): from the send's nonce when it has one (durable
/// sends), else random.
pub(crate) fn own_message_id(nonce: Option<&str>, domain: &str) -> String {
    match nonce {
        Some(n) => format!("bm.{n}@{domain}"),
        None => format!(
            "bm.r{:016x}{:016x}@{domain}",
            fastrand::u64(..),
            fastrand::u64(..)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_roots_and_chats() {
        let refs = ids("<root@x> <b@y>\r\n <c@z>");
        assert_eq!(refs, ["root@x", "b@y", "c@z"]);
        assert_eq!(ids("plain@id"), ["plain@id"]);
        assert_eq!(root(&refs, &[], "own@me"), "root@x");
        assert_eq!(root(&[], &["p@q".to_owned()], "own@me"), "p@q");
        assert_eq!(root(&[], &[], "own@me"), "own@me");
        let chat = chat_id("Ana@Example.com", "root/with+slash@x");
        assert_eq!(chat.as_str(), "ana@example.com/root/with+slash@x");
        assert_eq!(
            split_chat(chat.as_str()),
            Some(("ana@example.com", Some("root/with+slash@x")))
        );
        assert_eq!(
            split_chat("ana@example.com"),
            Some(("ana@example.com", None))
        );
        assert_eq!(split_chat("nobody"), None);
    }

    #[test]
    fn subjects_and_references() {
        assert_eq!(base_subject("Re: RE[2]: Fwd: AW: Order 42"), "Order 42");
        assert_eq!(base_subject("Ticket: 42"), "Ticket: 42");
        assert_eq!(reply_subject("Re: Order 42"), "Re: Order 42");
        assert_eq!(reply_subject(""), "Re: your message");
        let refs: Vec<String> = (0..12).map(|i| format!("m{i}@x")).collect();
        let kept = reply_references(&refs, "p@x");
        assert_eq!(kept.len(), REFERENCES_KEPT);
        assert_eq!(kept[0], "m0@x");
        assert_eq!(kept.last().map(String::as_str), Some("p@x"));
        assert_eq!(header_ids(&kept[..2]), "<m0@x> <m4@x>");
        assert_eq!(
            own_message_id(Some("abc"), "shop.example"),
            "bm.abc@shop.example"
        );
    }
}
