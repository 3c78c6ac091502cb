//! Attachments as media refs. A mail's attachment is named by the mail's Message-ID, its index
//! among the mail's attachments, and the SHA-256 digest of its bytes: the token
//! `<message-id>|<index>|<sha256 hex>` (journaled as `{"attachment": token}`, v1). The bytes
//! are kept in the bot's store before the mail is delivered (`store`), so a download after a
//! restart or on a replay reads them back and checks them against the digest; a token whose
//! digest does not match the stored bytes is refused.
//!
//! It does not keep inline images that the HTML references (`cid:`) as attachments when they
//! are under [`INLINE_MIN`] bytes (logos and signature images), nor unpack `winmail.dat`.

use sha2::{Digest, Sha256};

/// Inline parts smaller than this are taken for logos and signature images and left out.
pub const INLINE_MIN: usize = 4 * 1024;

/// The largest attachment kept (bigger ones are left out with a log line): 25 MiB, what
/// Mailgun and SendGrid carry at most.
pub const ATTACHMENT_LIMIT: usize = 25 * 1024 * 1024;

/// One attachment of an inbound mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attachment {
    /// Its file name, when given.
    pub(crate) file_name: Option<String>,
    /// Its content type (`application/pdf`), lower-case.
    pub(crate) content_type: String,
    /// The bytes.
    pub(crate) bytes: Vec<u8>,
}

/// Lower-case hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The media token of attachment `index` of mail `message_id`.
pub(crate) fn token(message_id: &str, index: usize, digest: &str) -> String {
    format!("{message_id}|{index}|{digest}")
}

/// A token split into the Message-ID, the index and the digest; `None` when it is not one.
pub(crate) fn parse_token(token: &str) -> Option<(&str, usize, &str)> {
    let mut parts = token.rsplitn(3, '|');
    let digest = parts.next()?;
    let index = parts.next()?.parse().ok()?;
    let id = parts.next()?;
    let hex_digest = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_digest && !id.is_empty()).then_some((id, index, digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        let digest = sha256_hex(b"hello");
        let t = token("a|b@x", 2, &digest);
        assert_eq!(parse_token(&t), Some(("a|b@x", 2, digest.as_str())));
        assert_eq!(parse_token("x|1|abc"), None);
        assert_eq!(parse_token(&format!("|1|{digest}")), None);
    }
}
