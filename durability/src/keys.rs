//! Idempotency keys, inbound record ids and content fingerprints.
//!
//! Every send gets a key, by three rules, in this order (as "Idempotency keys" in
//! `docs/durability-and-backends.md` tells a user):
//!
//! | rule | key | recognised again on replay | compared by fingerprint |
//! | --- | --- | --- | --- |
//! | an explicit key (`idempotency_key`) | as given (`invoice:42`) | yes | never: the key names the send |
//! | a send made while handling an inbound | `<inbound record id>:<n>` (n from 1) | yes, if sends keep their order | yes (`on_diverged`) |
//! | neither | `r:<random>` | no (retries and crash survival only) | no |
//!
//! A text over the channel's limit becomes one record per part: `key`, `key#2`, `key#3`, …
//! ([`part_key`]). The part keys depend only on the record key and the part's index, so they
//! are the same on every replay; the link between parts is stored on the records, never read
//! back from a key (your own keys may end in `#2`).
//!
//! Ids and fingerprints use a fixed 128-bit FNV-1a hash over length-prefixed fields, so they
//! are stable across processes, versions and platforms (insta-pinned in the tests). They are not
//! cryptographic: they name records, they do not authenticate them. This module does not read
//! or write any record.

use std::fmt;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which rule produced a send key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyKind {
    /// `<inbound record id>:<n>`: compared by fingerprint on replay.
    Derived,
    /// Given by the caller: never compared.
    Explicit,
    /// Random: a second call is not recognised as the same send.
    Random,
}

/// An idempotency key with the rule that produced it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SendKey {
    key: String,
    kind: KeyKind,
}

impl SendKey {
    /// The key the caller passed (`idempotency_key`).
    pub fn explicit(key: impl Into<String>) -> Self {
        SendKey {
            key: key.into(),
            kind: KeyKind::Explicit,
        }
    }

    /// The `n`-th send (from 1) made for an inbound record: `<inbound id>:<n>`.
    pub fn derived(inbound_id: &str, n: u32) -> Self {
        SendKey {
            key: format!("{inbound_id}:{n}"),
            kind: KeyKind::Derived,
        }
    }

    /// A derived key from a stable send site (a flow's send id) and an occurrence counter:
    /// `<inbound id>:<site>:<n>`.
    pub fn derived_at(inbound_id: &str, site: &str, n: u32) -> Self {
        SendKey {
            key: format!("{inbound_id}:{site}:{n}"),
            kind: KeyKind::Derived,
        }
    }

    /// A fresh random key `r:<32 hex digits>`.
    pub fn random() -> Self {
        SendKey {
            key: format!("r:{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..)),
            kind: KeyKind::Random,
        }
    }

    /// A key of a given kind (for records read back).
    pub fn with_kind(key: impl Into<String>, kind: KeyKind) -> Self {
        SendKey {
            key: key.into(),
            kind,
        }
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        &self.key
    }

    /// The rule that produced it.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The key text, by value.
    pub fn into_string(self) -> String {
        self.key
    }
}

impl fmt::Display for SendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

/// The key of part `n` (from 1) of the send `key`: `key`, `key#2`, `key#3`, …
pub fn part_key(key: &str, n: u32) -> String {
    if n <= 1 {
        key.to_owned()
    } else {
        format!("{key}#{n}")
    }
}

/// Appends `part` to `out` with `%` written `%25` and `/` written `%2F`, so that a path
/// joined from escaped parts with `/` splits back into the same parts (a scope's id, an
/// inbound record's `<chat>/<message id>`).
///
/// ```
/// let mut id = String::new();
/// botmesh_durability::keys::push_escaped(&mut id, "a/b%c");
/// assert_eq!(id, "a%2Fb%25c");
/// ```
pub fn push_escaped(out: &mut String, part: &str) {
    let mut rest = part;
    while let Some(at) = rest.find(['%', '/']) {
        out.push_str(&rest[..at]);
        out.push_str(if rest.as_bytes()[at] == b'%' {
            "%25"
        } else {
            "%2F"
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// The key under which diverged content of the derived key `key` is sent (`on_diverged:
/// send`): `key~<first 12 hex digits of the new fingerprint>`, the same on every replay.
pub fn diverged_key(key: &str, fingerprint: &Fingerprint) -> String {
    let short: String = fingerprint.as_str().chars().take(12).collect();
    format!("{key}~{short}")
}

/// The scope-stable id of an inbound record, from its chat and the channel's message id: the
/// same message redelivered gets the same id, two chats never share one.
pub fn inbound_id(chat: &str, message_id: &str) -> String {
    let mut h = Fnv128::new();
    h.field(b"inbound");
    h.field(chat.as_bytes());
    h.field(message_id.as_bytes());
    format!("in:{:032x}", h.finish())
}

/// A fingerprint of a send: its chat and content, before the `before('send')` hooks.
///
/// Either computed at once ([`of`](Self::of), [`of_content`](Self::of_content)) or
/// [`deferred`](Self::deferred): computed the first time it is read (compared, written into
/// a record, shown), then kept. Clones share the computed value.
#[derive(Clone)]
pub struct Fingerprint(Repr);

#[derive(Clone)]
enum Repr {
    Hex(String),
    Deferred(Arc<dyn DeferredFingerprint>),
}

/// The computation of a deferred fingerprint, run once (a `LazyLock` holding its closure:
/// one allocation).
trait DeferredFingerprint: Send + Sync {
    fn get(&self) -> &Fingerprint;
}

impl<F: FnOnce() -> Fingerprint + Send> DeferredFingerprint for LazyLock<Fingerprint, F> {
    fn get(&self) -> &Fingerprint {
        LazyLock::force(self)
    }
}

impl Fingerprint {
    /// A fingerprint computed by `compute` the first time it is read (see the type's docs).
    /// `compute` must give what [`of_content`](Self::of_content) would give for the send's
    /// content before the hooks.
    ///
    /// ```
    /// # use botmesh_durability::keys::Fingerprint;
    /// let content = serde_json::json!({"text": "hi"});
    /// let later = Fingerprint::deferred({
    ///     let content = content.clone();
    ///     move || Fingerprint::of("c", &content)
    /// });
    /// assert_eq!(later, Fingerprint::of("c", &content));
    /// ```
    pub fn deferred(compute: impl FnOnce() -> Fingerprint + Send + 'static) -> Self {
        Fingerprint(Repr::Deferred(Arc::new(LazyLock::new(compute))))
    }

    /// The fingerprint of `content` sent to `chat`. Object keys are sorted first, so two equal
    /// JSON values always give the same fingerprint.
    pub fn of(chat: &str, content: &Value) -> Self {
        Self::of_content(chat, content)
    }

    /// The fingerprint of `content` (any serializable value) sent to `chat`: the same as
    /// [`of`](Self::of) its `serde_json::to_value` (`null` when that fails), computed without
    /// building the value tree.
    ///
    /// ```
    /// # use botmesh_durability::keys::Fingerprint;
    /// #[derive(serde::Serialize)]
    /// struct Text { text: &'static str, buttons: Vec<&'static str> }
    /// let content = Text { text: "hi", buttons: vec!["a"] };
    /// let value = serde_json::json!({"buttons": ["a"], "text": "hi"});
    /// assert_eq!(Fingerprint::of_content("c", &content), Fingerprint::of("c", &value));
    /// ```
    pub fn of_content<T: Serialize + ?Sized>(chat: &str, content: &T) -> Self {
        let mut canonical = Vec::with_capacity(256);
        if crate::canonical::write(content, &mut canonical).is_err() {
            // A shape the direct writer leaves to `to_value` (see `canonical`); a `Value` it
            // always writes (string keys, 64-bit numbers).
            canonical.clear();
            let value = serde_json::to_value(content).unwrap_or(Value::Null);
            if crate::canonical::write(&value, &mut canonical).is_err() {
                canonical.clear();
                canonical.extend_from_slice(b"null");
            }
        }
        Self::of_canonical(chat, &canonical)
    }

    /// The fingerprint of canonical JSON already written.
    pub(crate) fn of_canonical(chat: &str, canonical: &[u8]) -> Self {
        let mut h = Fnv128::new();
        h.field(b"send");
        h.field(chat.as_bytes());
        h.field(canonical);
        Fingerprint(Repr::Hex(hex32(h.finish())))
    }

    /// The hex text (computed now if it was deferred).
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Hex(hex) => hex,
            Repr::Deferred(lazy) => lazy.get().as_str(),
        }
    }
}

impl PartialEq for Fingerprint {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Fingerprint {}

impl std::hash::Hash for Fingerprint {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Fingerprint").field(&self.as_str()).finish()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|hex| Fingerprint(Repr::Hex(hex)))
    }
}

/// `{n:032x}`.
fn hex32(n: u128) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    (0..32)
        .rev()
        .map(|i| char::from(HEX[((n >> (4 * i)) & 0xf) as usize]))
        .collect()
}

/// FNV-1a, 128 bits, over length-prefixed fields (so `("ab","c")` ≠ `("a","bc")`).
struct Fnv128(u128);

impl Fnv128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

    fn new() -> Self {
        Fnv128(Self::OFFSET)
    }

    fn bytes(&mut self, data: &[u8]) {
        for b in data {
            self.0 ^= u128::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn field(&mut self, data: &[u8]) {
        self.bytes(&(data.len() as u64).to_le_bytes());
        self.bytes(data);
    }

    fn finish(&self) -> u128 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_keys() {
        assert_eq!(part_key("k", 1), "k");
        assert_eq!(part_key("k", 2), "k#2");
        assert_eq!(part_key("k#2", 3), "k#2#3");
    }

    #[test]
    fn escaped_parts_join_without_collisions() {
        let escaped = |part: &str| {
            let mut out = String::new();
            push_escaped(&mut out, part);
            out
        };
        assert_eq!(escaped("plain"), "plain");
        assert_eq!(escaped("%/%2F/"), "%25%2F%252F%2F");
        assert_eq!(escaped(""), "");
    }

    #[test]
    fn ids_are_field_separated() {
        assert_ne!(inbound_id("ab", "c"), inbound_id("a", "bc"));
        assert_eq!(inbound_id("a", "1"), inbound_id("a", "1"));
    }

    #[test]
    fn fingerprint_ignores_key_order() {
        let a = serde_json::json!({"text": "hi", "buttons": [1, 2]});
        let b = serde_json::json!({"buttons": [1, 2], "text": "hi"});
        assert_eq!(Fingerprint::of("c", &a), Fingerprint::of("c", &b));
        assert_ne!(Fingerprint::of("c", &a), Fingerprint::of("d", &a));
    }

    #[test]
    fn a_deferred_fingerprint_is_computed_once_when_read() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let runs = Arc::new(AtomicUsize::new(0));
        let content = serde_json::json!({"text": "hi"});
        let deferred = Fingerprint::deferred({
            let (runs, content) = (runs.clone(), content.clone());
            move || {
                runs.fetch_add(1, Ordering::SeqCst);
                Fingerprint::of("c", &content)
            }
        });
        let copy = deferred.clone();
        assert_eq!(
            runs.load(Ordering::SeqCst),
            0,
            "not computed before it is read"
        );
        let eager = Fingerprint::of("c", &content);
        assert_eq!(deferred, eager);
        assert_eq!(copy.as_str(), eager.as_str());
        assert_eq!(
            serde_json::to_string(&copy).unwrap(),
            serde_json::to_string(&eager).unwrap()
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "clones share the computed value"
        );
        let back: Fingerprint =
            serde_json::from_str(&serde_json::to_string(&copy).unwrap()).unwrap();
        assert_eq!(back, eager);
        assert_eq!(diverged_key("k", &deferred), diverged_key("k", &eager));
    }

    /// Fingerprints are kept in journals: the value of a nested tree (unsorted keys, escapes,
    /// floats, empty containers), as the tree-walking writer of earlier versions computed it.
    #[test]
    fn fingerprint_is_the_one_journals_hold() {
        let v = serde_json::json!({
            "z": [1, -2, 0.5, 1e300, null, true],
            "a": {"é\"\n": "x", "B": {}},
            "m": []
        });
        assert_eq!(
            Fingerprint::of("chat", &v).as_str(),
            "dbc9b37a926689cee9bc9fe6f2eaa6a7"
        );
    }
}
