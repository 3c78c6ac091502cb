//! How journal records are laid out in a [`DurableKv`](crate::DurableKv) scope.
//!
//! | what | value |
//! | --- | --- |
//! | key | `i/<inbound id>` or `o/<outbox key>` |
//! | `idx1` (due-time order) | `<i\|o>/<state>/<16-digit ms>/<id>`: the ms is the due time (pending, failed), the lease expiry (processing, sending) or the last update (done, sent, dead, unknown, quarantine) |
//! | `idx2` (per-chat order of sends) | `o/<chat length, 8 hex>:<chat>:<20-digit seq>.<4-digit part>`, only while the send is open (pending, failed, sending); inbound records have none |
//!
//! `idx1` ends with the id so every value is unique and a scan can resume after the last value
//! it saw. `idx2` being present only on open sends makes "is an earlier send of this chat still
//! waiting?" a one-row range query. The chat is length-prefixed, so a chat id that contains `:`
//! cannot run into another chat's range. Inbound records need no such query (a replay sorts
//! the due records by their `seq`), so their writes keep no `idx2`: two index writes less per
//! message on every backend.

use crate::metrics::RecordKind;

/// Appends `n` in decimal, zero-padded to `width` digits (wider when it needs more): what
/// `write!(out, "{n:0width$}")` writes, without the formatting machinery (these values are
/// built on every journal write).
fn push_decimal(out: &mut String, n: u64, width: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    for _ in digits.len()..width {
        out.push('0');
    }
    out.push_str(digits);
}

/// How many digits [`push_hex8`] writes for `n`.
fn hex8_width(n: usize) -> u32 {
    (usize::BITS - n.leading_zeros()).div_ceil(4).max(8)
}

/// Appends `n` in lowercase hexadecimal, zero-padded to 8 digits (wider when it needs more).
fn push_hex8(out: &mut String, n: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..hex8_width(n)).rev() {
        out.push(char::from(HEX[(n >> (shift * 4)) & 0xf]));
    }
}

fn prefix(kind: RecordKind) -> &'static str {
    match kind {
        RecordKind::Inbound => "i",
        RecordKind::Outbound => "o",
    }
}

/// The storage key of a record.
pub(crate) fn storage_key(kind: RecordKind, id: &str) -> String {
    let mut key = String::with_capacity(2 + id.len());
    key.push_str(prefix(kind));
    key.push('/');
    key.push_str(id);
    key
}

/// The record id of a storage key of `kind`.
pub(crate) fn id_of(kind: RecordKind, key: &str) -> Option<&str> {
    key.strip_prefix(prefix(kind))?.strip_prefix('/')
}

/// The `idx1` value of a record in `state`, ordered by `ms` (built in one allocation).
pub(crate) fn idx1(kind: RecordKind, state: &str, ms: i64, id: &str) -> String {
    let mut value = String::with_capacity(2 + state.len() + 1 + 20 + 1 + id.len());
    push_idx1(&mut value, kind, state, ms, id);
    value
}

/// Appends the `idx1` value of [`idx1`] to `out`.
fn push_idx1(out: &mut String, kind: RecordKind, state: &str, ms: i64, id: &str) {
    out.push_str(prefix(kind));
    out.push('/');
    out.push_str(state);
    out.push('/');
    push_decimal(out, u64::try_from(ms).unwrap_or(0), 16);
    out.push('/');
    out.push_str(id);
}

/// The `idx1` range of every record in `state`.
pub(crate) fn state_range(kind: RecordKind, state: &str) -> (String, String) {
    let p = prefix(kind);
    (format!("{p}/{state}/"), format!("{p}/{state}0"))
}

/// The `idx1` range of the records in `state` whose ms is at most `ms`.
pub(crate) fn state_until(kind: RecordKind, state: &str, ms: i64) -> (String, String) {
    let p = prefix(kind);
    (
        format!("{p}/{state}/"),
        format!("{p}/{state}/{:016}", ms.max(-1).saturating_add(1)),
    )
}

/// The `idx2` prefix of a chat, in a string with room for `extra` more bytes.
fn chat_prefix_with(kind: RecordKind, chat: &str, extra: usize) -> String {
    let mut value = String::with_capacity(2 + 8 + 1 + chat.len() + 1 + extra);
    value.push_str(prefix(kind));
    value.push('/');
    push_hex8(&mut value, chat.len());
    value.push(':');
    value.push_str(chat);
    value.push(':');
    value
}

/// The `idx2` prefix of a chat: where its range starts.
pub(crate) fn chat_prefix(kind: RecordKind, chat: &str) -> String {
    chat_prefix_with(kind, chat, 0)
}

/// The chat's prefix of an `idx2` value of `chat` ([`chat_prefix`] without building it).
pub(crate) fn chat_prefix_of<'a>(kind: RecordKind, chat: &str, idx2: &'a str) -> &'a str {
    let hex = hex8_width(chat.len()) as usize;
    let len = prefix(kind).len() + 1 + hex + 1 + chat.len() + 1;
    idx2.get(..len).unwrap_or(idx2)
}

/// The `idx2` range of every open record of a chat.
pub(crate) fn chat_range(kind: RecordKind, chat: &str) -> (String, String) {
    let from = chat_prefix(kind, chat);
    let mut to = from.clone();
    to.pop();
    to.push(';');
    (from, to)
}

/// The `idx2` value of an open record (built in one allocation).
pub(crate) fn idx2(kind: RecordKind, chat: &str, seq: u64, part: u32) -> String {
    let mut value = chat_prefix_with(kind, chat, 20 + 1 + 10);
    push_decimal(&mut value, seq, 20);
    value.push('.');
    push_decimal(&mut value, u64::from(part), 4);
    value
}

/// The smallest index value after `value` (to resume a scan).
pub(crate) fn after(value: &str) -> String {
    format!("{value}\u{0}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chat_prefix_of_an_idx2_value_is_the_chat_prefix() {
        let long = "x".repeat(70_000);
        for chat in ["", "a", "alice", "chat:with:colons", "é.ü", long.as_str()] {
            for kind in [RecordKind::Inbound, RecordKind::Outbound] {
                for (seq, part) in [(0, 0), (7, 1), (u64::MAX, 123_456)] {
                    let value = idx2(kind, chat, seq, part);
                    assert_eq!(chat_prefix_of(kind, chat, &value), chat_prefix(kind, chat));
                }
            }
        }
    }

    #[test]
    fn decimals_are_zero_padded_to_their_width() {
        for n in [
            0,
            7,
            10,
            99,
            100,
            101,
            12_345,
            1_700_000_000_000,
            u64::MAX / 3,
            u64::MAX,
        ] {
            for width in [1, 4, 16, 20] {
                let mut out = String::from("x");
                push_decimal(&mut out, n, width);
                assert_eq!(out, format!("x{n:0width$}"), "{n} at width {width}");
            }
        }
    }

    #[test]
    fn ranges_hold_their_values() {
        let v = idx1(RecordKind::Outbound, "pending", 42, "k");
        let (from, to) = state_until(RecordKind::Outbound, "pending", 42);
        assert!(from <= v && v < to);
        let (_, to41) = state_until(RecordKind::Outbound, "pending", 41);
        assert!(v >= to41);
        let (from, to) = state_range(RecordKind::Outbound, "pending");
        assert!(from <= v && v < to);
        let c = idx2(RecordKind::Outbound, "a:b", 7, 2);
        let (from, to) = chat_range(RecordKind::Outbound, "a:b");
        assert!(from <= c && c < to);
        let other = idx2(RecordKind::Outbound, "a", 7, 2);
        assert!(!(from <= other && other < to));
        assert_eq!(id_of(RecordKind::Inbound, "i/x/y"), Some("x/y"));
        assert_eq!(id_of(RecordKind::Inbound, "o/x"), None);
    }

    #[test]
    fn values_are_the_formatted_numbers() {
        for ms in [-5, 0, 7, 1_764_720_065_123, i64::MAX] {
            let expected = format!("o/sent/{:016}/k", ms.max(0));
            assert_eq!(idx1(RecordKind::Outbound, "sent", ms, "k"), expected);
        }
        for (chat, seq, part) in [
            ("", 0, 0),
            ("a:b", 7, 2),
            (&*"c".repeat(300), u64::MAX, 12_345),
        ] {
            let expected = format!("i/{:08x}:{chat}:{seq:020}.{part:04}", chat.len());
            assert_eq!(idx2(RecordKind::Inbound, chat, seq, part), expected);
        }
        for n in [
            0,
            1,
            15,
            16,
            255,
            4096,
            0xffff_ffff,
            0x1_0000_0000,
            usize::MAX,
        ] {
            let mut hex = String::from("x");
            push_hex8(&mut hex, n);
            assert_eq!(hex, format!("x{n:08x}"));
        }
    }
}
