//! Which mail the bot must not answer: a robot's (RFC 3834), a list's, a bounce, or its own.
//! Answering those makes mail loops (two auto-responders answering each other) or spams a
//! list, so they are dropped before they reach the bot, with a log line at `info` naming why.
//!
//! | header or shape | why dropped |
//! | --- | --- |
//! | `Auto-Submitted:` anything but `no` (`auto-replied`, `auto-generated`, `auto-notified`) | [`NotAnswered::AutoSubmitted`] |
//! | `X-Autoreply`, `X-Autorespond`, `X-Auto-Response-Suppress: All` / `AutoReply` | [`NotAnswered::AutoSubmitted`] |
//! | `Precedence: bulk`, `list` or `junk` | [`NotAnswered::Bulk`] |
//! | `List-Id` or `List-Unsubscribe` | [`NotAnswered::List`] |
//! | an empty `Return-Path` (`<>`), a `MAILER-DAEMON` sender, a `multipart/report` body (delivery and read reports) | [`NotAnswered::Bounce`] |
//! | sent from the bot's own address | [`NotAnswered::Own`] |
//!
//! It does not rate-limit answers per address, nor check SPF/DKIM (read the provider's
//! `Authentication-Results` yourself before trusting who a `From` names).

/// Why a mail is not answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotAnswered {
    /// Sent by a robot (`Auto-Submitted` or an auto-reply header), with the header's value.
    AutoSubmitted(String),
    /// Bulk mail (`Precedence`), with the value.
    Bulk(String),
    /// A mailing list's mail.
    List,
    /// A bounce or a delivery/read report.
    Bounce,
    /// The bot's own mail.
    Own,
}

impl std::fmt::Display for NotAnswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotAnswered::AutoSubmitted(v) => write!(f, "auto-submitted ({v})"),
            NotAnswered::Bulk(v) => write!(f, "precedence {v}"),
            NotAnswered::List => f.write_str("mailing list"),
            NotAnswered::Bounce => f.write_str("bounce or report"),
            NotAnswered::Own => f.write_str("sent by the bot itself"),
        }
    }
}

/// What the rules read of a mail.
pub(crate) struct Facts<'a> {
    /// Every header, names as given.
    pub(crate) headers: &'a [(String, String)],
    /// The sender's address, lower-case.
    pub(crate) from: &'a str,
    /// The body's content type (`multipart/report`), lower-case.
    pub(crate) content_type: &'a str,
    /// The bot's address, lower-case.
    pub(crate) own: &'a str,
}

impl Facts<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }
}

/// Why `mail` must not be answered, if it must not.
pub(crate) fn check(mail: &Facts<'_>) -> Option<NotAnswered> {
    if mail.from == mail.own {
        return Some(NotAnswered::Own);
    }
    if let Some(v) = mail.header("auto-submitted") {
        let kind = v.split(';').next().unwrap_or_default().trim();
        if !kind.eq_ignore_ascii_case("no") {
            return Some(NotAnswered::AutoSubmitted(kind.to_ascii_lowercase()));
        }
    }
    for name in ["x-autoreply", "x-autorespond"] {
        if mail.header(name).is_some() {
            return Some(NotAnswered::AutoSubmitted(name.to_owned()));
        }
    }
    if let Some(v) = mail.header("x-auto-response-suppress") {
        let v = v.to_ascii_lowercase();
        if v.contains("all") || v.contains("autoreply") {
            return Some(NotAnswered::AutoSubmitted(format!(
                "x-auto-response-suppress: {v}"
            )));
        }
    }
    if let Some(v) = mail.header("precedence") {
        let v = v.to_ascii_lowercase();
        if matches!(v.as_str(), "bulk" | "list" | "junk") {
            return Some(NotAnswered::Bulk(v));
        }
    }
    if mail.header("list-id").is_some() || mail.header("list-unsubscribe").is_some() {
        return Some(NotAnswered::List);
    }
    let empty_return_path = mail.header("return-path").is_some_and(|v| {
        v.trim_matches(|c: char| c == '<' || c == '>' || c.is_whitespace())
            .is_empty()
    });
    let daemon = mail
        .from
        .split('@')
        .next()
        .is_some_and(|local| local.eq_ignore_ascii_case("mailer-daemon"));
    if empty_return_path || daemon || mail.content_type.starts_with("multipart/report") {
        return Some(NotAnswered::Bounce);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts_of(headers: &[(&str, &str)], from: &str, ct: &str) -> Option<NotAnswered> {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        check(&Facts {
            headers: &headers,
            from,
            content_type: ct,
            own: "bot@shop.example",
        })
    }

    #[test]
    fn robots_lists_and_bounces_are_dropped() {
        let human = "ana@example.com";
        assert_eq!(
            facts_of(&[("Auto-Submitted", "no")], human, "text/plain"),
            None
        );
        assert_eq!(facts_of(&[], human, "text/plain"), None);
        assert_eq!(
            facts_of(&[("Auto-Submitted", "auto-replied")], human, "text/plain"),
            Some(NotAnswered::AutoSubmitted("auto-replied".into()))
        );
        assert!(matches!(
            facts_of(&[("X-Autoreply", "yes")], human, "text/plain"),
            Some(NotAnswered::AutoSubmitted(_))
        ));
        assert_eq!(
            facts_of(&[("Precedence", "Bulk")], human, "text/plain"),
            Some(NotAnswered::Bulk("bulk".into()))
        );
        assert_eq!(
            facts_of(&[("List-Unsubscribe", "<mailto:x@y>")], human, "text/plain"),
            Some(NotAnswered::List)
        );
        assert_eq!(
            facts_of(&[("Return-Path", "<>")], human, "text/plain"),
            Some(NotAnswered::Bounce)
        );
        assert_eq!(
            facts_of(&[], "MAILER-DAEMON@mx.example", "text/plain"),
            Some(NotAnswered::Bounce)
        );
        assert_eq!(
            facts_of(&[], human, "multipart/report"),
            Some(NotAnswered::Bounce)
        );
        assert_eq!(
            facts_of(&[], "bot@shop.example", "text/plain"),
            Some(NotAnswered::Own)
        );
    }
}
