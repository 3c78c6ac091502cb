//! [`Payload`]: the opaque JSON content of a journal record, kept as text.
//!
//! The journals never look inside a payload: they store it, hand it back and measure its size.
//! Keeping it as raw JSON text (a `serde_json` `RawValue`) instead of a `Value` tree means a
//! record is encoded by copying the text and decoded by copying it back, with no tree of
//! small allocations built, cloned and dropped on every journal write. The text is shared
//! (`Arc`), so copying a record (a snapshot, a returned record) does not copy its payload. The
//! stored bytes are the same JSON as before, so records written by older versions decode
//! unchanged.

use std::fmt;
use std::sync::{Arc, LazyLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// The JSON content of an inbound event or a send, as text. Cheap to store and to copy;
/// [`decode`](Payload::decode) it into the type it was encoded from.
///
/// Two payloads are equal when their JSON values are equal (the same text, or the same value
/// written with another key order or spacing). A payload also compares with a [`Value`].
#[derive(Clone)]
pub struct Payload(Repr);

#[derive(Clone)]
enum Repr {
    Text(Arc<RawValue>),
    Deferred(Arc<dyn DeferredText>),
}

/// A payload's encoding, run the first time it is read, and an upper bound of its size when
/// one was taken ([`Payload::deferred_bounded`]): one allocation, the encoder (holding the
/// value) inside it.
struct Deferred<F> {
    text: LazyLock<Arc<RawValue>, F>,
    bound: Option<usize>,
}

/// A [`Deferred`] whatever its encoder.
trait DeferredText: Send + Sync {
    /// The JSON, encoded now if it was not yet.
    fn text(&self) -> &RawValue;
    /// Whether it was encoded.
    fn encoded(&self) -> bool;
    /// The upper bound of its size taken when it was made, if any.
    fn bound(&self) -> Option<usize>;
}

impl<F: FnOnce() -> Arc<RawValue> + Send> DeferredText for Deferred<F> {
    fn text(&self) -> &RawValue {
        LazyLock::force(&self.text).as_ref()
    }

    fn encoded(&self) -> bool {
        LazyLock::get(&self.text).is_some()
    }

    fn bound(&self) -> Option<usize> {
        self.bound
    }
}

impl Payload {
    /// A payload of `value` encoded the first time it is read (its text, its size, its
    /// decoded value, or the record holding it encoded), then kept; clones share it. A
    /// backend that keeps records unencoded ([`DurableKv::keeps_records`]) then never
    /// encodes the payload of a record nobody reads back. For values whose encoding cannot
    /// fail: one that does becomes `null` (logged as an error), where [`encode`](Self::encode)
    /// would have refused it.
    ///
    /// [`DurableKv::keeps_records`]: crate::DurableKv::keeps_records
    ///
    /// ```
    /// # use botmesh_durability::outbox::Payload;
    /// let later = Payload::deferred(vec!["a", "b"]);
    /// assert_eq!(later.as_json(), r#"["a","b"]"#);
    /// assert_eq!(later, Payload::encode(&["a", "b"]).unwrap());
    /// ```
    pub fn deferred<T: Serialize + Send + 'static>(value: T) -> Self {
        Self::deferred_with(value, None)
    }

    /// [`deferred`](Self::deferred), with an upper bound of the encoded size taken now (a
    /// walk of the value that writes nothing), so that [`fits`](Self::fits) can answer a
    /// size limit without encoding it. A value whose size cannot be bounded is encoded now.
    ///
    /// ```
    /// # use botmesh_durability::outbox::Payload;
    /// let later = Payload::deferred_bounded(vec!["a", "b"]).unwrap();
    /// assert!(later.fits(1024));
    /// assert_eq!(later.as_json(), r#"["a","b"]"#);
    /// assert!(later.fits(9) && !later.fits(8)); // encoded, the size itself decides
    /// ```
    pub fn deferred_bounded<T: Serialize + Send + 'static>(
        value: T,
    ) -> Result<Self, serde_json::Error> {
        match super::json_bound::json_len_bound(&value) {
            Some(bound) => Ok(Self::deferred_with(value, Some(bound))),
            None => Self::encode(&value),
        }
    }

    fn deferred_with<T: Serialize + Send + 'static>(value: T, bound: Option<usize>) -> Self {
        let encode = move || match serde_json::value::to_raw_value(&value) {
            Ok(raw) => Arc::from(raw),
            Err(e) => {
                tracing::error!(error = %e, "a deferred journal payload does not encode: kept as null");
                Arc::from(RawValue::NULL.to_owned())
            }
        };
        Payload(Repr::Deferred(Arc::new(Deferred {
            text: LazyLock::new(encode),
            bound,
        })))
    }

    /// Whether the JSON text takes at most `limit` bytes; a deferred payload whose size bound
    /// is within the limit answers without being encoded.
    pub fn fits(&self, limit: usize) -> bool {
        if let Repr::Deferred(deferred) = &self.0
            && !deferred.encoded()
            && deferred.bound().is_some_and(|bound| bound <= limit)
        {
            return true;
        }
        self.len() <= limit
    }

    /// The JSON, encoded now if it was deferred.
    fn raw(&self) -> &RawValue {
        match &self.0 {
            Repr::Text(raw) => raw,
            Repr::Deferred(deferred) => deferred.text(),
        }
    }

    /// Encodes `value` as a payload.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Payload::from)
    }

    /// A payload from JSON text (checked to be one valid JSON value).
    pub fn from_json(json: impl Into<String>) -> Result<Self, serde_json::Error> {
        RawValue::from_string(json.into()).map(Payload::from)
    }

    /// Decodes the payload into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.raw().get())
    }

    /// The payload as a JSON value tree (`Null` if it cannot be parsed, which a payload built
    /// by this type never is).
    pub fn to_value(&self) -> Value {
        self.decode().unwrap_or(Value::Null)
    }

    /// The JSON text.
    pub fn as_json(&self) -> &str {
        self.raw().get()
    }

    /// The size of the JSON text in bytes (what `outbox.max_payload_bytes` limits).
    pub fn len(&self) -> usize {
        self.raw().get().len()
    }

    /// Whether the JSON text is empty (never, for a valid payload).
    pub fn is_empty(&self) -> bool {
        self.raw().get().is_empty()
    }
}

impl From<Box<RawValue>> for Payload {
    fn from(raw: Box<RawValue>) -> Self {
        Payload(Repr::Text(Arc::from(raw)))
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Payload::from)
    }
}

impl Default for Payload {
    /// `null`.
    fn default() -> Self {
        Payload::from(Value::Null)
    }
}

impl From<&Value> for Payload {
    fn from(value: &Value) -> Self {
        // A `Value` always serializes (its map keys are strings); `null` otherwise.
        Payload::from(serde_json::value::to_raw_value(value).unwrap_or_default())
    }
}

impl From<Value> for Payload {
    fn from(value: Value) -> Self {
        Payload::from(&value)
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.as_json() == other.as_json() || self.to_value() == other.to_value()
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({})", self.as_json())
    }
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_compares_by_value() {
        let p = Payload::from(json!({"b": 1, "a": [true, null]}));
        assert_eq!(p.as_json(), r#"{"a":[true,null],"b":1}"#);
        assert_eq!(p, json!({"a": [true, null], "b": 1}));
        let spaced = Payload::from_json(r#"{ "b": 1, "a": [true, null] }"#).unwrap();
        assert_eq!(p, spaced);
        assert_eq!(p.len(), 23);
        assert!(Payload::from_json("{").is_err());
        let back: Value = p.decode().unwrap();
        assert_eq!(back, json!({"a": [true, null], "b": 1}));
        #[derive(Serialize, Deserialize)]
        struct R {
            payload: Payload,
        }
        let text = serde_json::to_string(&R { payload: p.clone() }).unwrap();
        assert_eq!(text, r#"{"payload":{"a":[true,null],"b":1}}"#);
        let r: R = serde_json::from_str(&text).unwrap();
        assert_eq!(r.payload, p);
        assert_eq!(Payload::default(), Value::Null);
        // Through a `Value` too (a record converted with `serde_json::from_value`).
        let via_value: R = serde_json::from_value(json!({"payload": {"a": 1}})).unwrap();
        assert_eq!(via_value.payload, json!({"a": 1}));
    }

    /// A bounded deferred payload answers a limit above its bound without being encoded; at
    /// or under the bound it is encoded and its size decides.
    #[test]
    fn a_bounded_payload_fits_a_limit_without_being_encoded() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        /// Counts its serializations: one for the bound, one more once encoded.
        struct Counted(Arc<AtomicUsize>);
        impl Serialize for Counted {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.0.fetch_add(1, Ordering::SeqCst);
                serializer.serialize_str("héllo \"you\"")
            }
        }
        let calls = Arc::new(AtomicUsize::new(0));
        let p = Payload::deferred_bounded(Counted(calls.clone())).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "bounded, not encoded");
        assert!(p.fits(1024));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "fits without encoding");
        let exact = r#""héllo \"you\"""#;
        // A limit under the bound: encoded, then the exact size answers.
        assert!(p.fits(exact.len()));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(!p.fits(exact.len() - 1));
        assert_eq!(p.as_json(), exact);
        assert_eq!(calls.load(Ordering::SeqCst), 2, "encoded once");
        // Encoded eagerly, or deferred without a bound: the size itself.
        let now = Payload::encode("abc").unwrap();
        assert!(now.fits(5) && !now.fits(4));
        let unbounded = Payload::deferred("abc");
        assert!(unbounded.fits(5) && !unbounded.fits(4));
    }

    #[test]
    fn a_deferred_payload_is_the_encoded_one() {
        #[derive(Serialize)]
        struct Event {
            chat: String,
            text: &'static str,
        }
        let event = || Event {
            chat: "c1".into(),
            text: "hi \"there\"",
        };
        let now = Payload::encode(&event()).unwrap();
        let later = Payload::deferred(event());
        let copy = later.clone();
        assert_eq!(later.len(), now.len());
        assert_eq!(copy.as_json(), now.as_json());
        assert_eq!(later, now);
        #[derive(Serialize)]
        struct R {
            payload: Payload,
        }
        assert_eq!(
            serde_json::to_string(&R { payload: later }).unwrap(),
            serde_json::to_string(&R { payload: now }).unwrap()
        );
        let back: Value = copy.decode().unwrap();
        assert_eq!(back, json!({"chat": "c1", "text": "hi \"there\""}));
        // A value that does not encode (a map with non-string keys) is kept as null.
        let refused = std::collections::BTreeMap::from([((1, 2), "x")]);
        assert!(Payload::encode(&refused).is_err());
        assert_eq!(Payload::deferred(refused), Value::Null);
    }
}
