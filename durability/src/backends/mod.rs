//! Durability backends carried by a real server, each behind its cargo feature:
//!
//! | feature | module | [`DurableKv`](crate::DurableKv) | [`Store`](crate::Store) |
//! | --- | --- | --- | --- |
//! | `postgres` | [`postgres`] | `PostgresKv` (table `{prefix}durable`) | `PostgresStore` (tables `{prefix}chats`, …) |
//! | `redis` | [`redis`] | `RedisKv` (keys `{prefix}:{durable:<scope>}:…`) | `RedisStore` (keys `{prefix}:store:…`) |
//!
//! Both are shared between processes ([`DurableKv::shared_between_processes`] is `true`), keep
//! scopes apart, and never touch each other's tables or keys: the durable journal and the store
//! may live on the same server. This module also holds the order-preserving escape both use to
//! keep index values with a NUL byte (which PostgreSQL `text` cannot hold, and which the Redis
//! sorted-set members use as a separator) in byte order. It does not hold the embedded backends
//! (memory, SQLite, file): those live in [`crate::kv`] and [`crate::store`].
//!
//! [`DurableKv::shared_between_processes`]: crate::DurableKv::shared_between_processes

use std::borrow::Cow;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

/// Escapes `text` so that it holds no NUL byte while keeping byte order: `\0` becomes
/// `\x01\x01`, `\x01` becomes `\x01\x02`, every other byte stays. The code is prefix-free and
/// monotone, so `escape(a) < escape(b)` exactly when `a < b` (bytewise), prefixes included.
pub(crate) fn order_escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['\0', '\u{1}']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        match c {
            '\0' => out.push_str("\u{1}\u{1}"),
            '\u{1}' => out.push_str("\u{1}\u{2}"),
            other => out.push(other),
        }
    }
    Cow::Owned(out)
}

/// Reverses [`order_escape`] (Redis keeps raw values next to the members, so only PostgreSQL
/// reads escaped text back); a stray `\x01` (not written by `order_escape`) is kept as it is.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn order_unescape(text: &str) -> Cow<'_, str> {
    if !text.contains('\u{1}') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1}' {
            match chars.peek() {
                Some('\u{1}') => {
                    chars.next();
                    out.push('\0');
                }
                Some('\u{2}') => {
                    chars.next();
                    out.push('\u{1}');
                }
                _ => out.push(c),
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{order_escape, order_unescape};

    #[test]
    fn escape_round_trips_and_keeps_byte_order() {
        let mut values = vec![
            "", "a", "a\0", "a\0\0", "a\u{1}", "a\u{2}", "ab", "\0", "é", "Z",
        ];
        for v in &values {
            assert!(!order_escape(v).contains('\0'));
            assert_eq!(order_unescape(&order_escape(v)), *v);
        }
        values.sort();
        let mut escaped: Vec<String> = values.iter().map(|v| order_escape(v).into()).collect();
        let before = escaped.clone();
        escaped.sort();
        assert_eq!(escaped, before, "escaping must keep the order");
    }
}
