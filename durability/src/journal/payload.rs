//! [`Payload`]: the opaque JSON content of a journal record, kept as text.
//!
//! The journals never look inside a payload: they store it, hand it back and measure its size.
//! Keeping it as raw JSON text (a `serde_json` `RawValue`) instead of a `Value` tree means a
//! record is encoded by copying the text and decoded by copying it back, with no tree of
//! small allocations built, cloned and dropped on every journal write. The text is shared
//! (`Arc`), so copying a record (a snapshot, a returned record) does not copy its payload.

use std::fmt;
use std::sync::Arc;

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
pub struct Payload(Arc<RawValue>);

impl Payload {
    fn raw(&self) -> &RawValue {
        &self.0
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
        Payload(Arc::from(raw))
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
}
