//! An upper bound of a value's compact JSON size (as `serde_json::to_vec` writes it), found
//! by walking the value without writing or escaping anything.
//!
//! A payload encoded later ([`Payload::deferred_bounded`](super::Payload::deferred_bounded))
//! must still be checked against `outbox.max_payload_bytes` before it is journaled; the bound
//! answers that check for every payload well under the limit (all of them, in practice) at a
//! fraction of the encoding's cost. It is not the size: every string byte is counted as the
//! six bytes of its worst escape (`\u001f`) and every number at its widest.
//!
//! What it does not do: decide anything. A value the walk cannot bound (a map key that JSON
//! cannot hold, a custom serializer's error) gives `None`, and the caller encodes.

use serde::ser::{self, Serialize};

/// At most how many bytes `value`'s compact JSON takes; `None` when the walk fails.
pub(crate) fn json_len_bound<T: Serialize + ?Sized>(value: &T) -> Option<usize> {
    let mut bound = Bound(0);
    value.serialize(&mut bound).ok()?;
    Some(bound.0)
}

/// The worst case of a JSON string of `len` bytes: quotes, and six bytes a byte (`\u001f`).
fn string(len: usize) -> usize {
    len.saturating_mul(6).saturating_add(2)
}

/// The widest integer (`-9223372036854775808`, `18446744073709551615`).
const INTEGER: usize = 20;
/// The widest 128-bit integer.
const INTEGER_128: usize = 40;
/// The widest float `serde_json` writes (`ryu`'s shortest form: at most 24 bytes), or `null`.
const FLOAT: usize = 24;

/// The running bound; a serializer of `()` whose every call adds to it.
struct Bound(usize);

impl Bound {
    fn add(&mut self, n: usize) {
        self.0 = self.0.saturating_add(n);
    }
}

/// The walk's error: only a custom serializer's own (`ser::Error::custom`).
#[derive(Debug)]
struct Unbounded;

impl std::fmt::Display for Unbounded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the value cannot be bounded")
    }
}

impl std::error::Error for Unbounded {}

impl ser::Error for Unbounded {
    fn custom<T: std::fmt::Display>(_msg: T) -> Self {
        Unbounded
    }
}

type Done = Result<(), Unbounded>;

impl ser::Serializer for &mut Bound {
    type Ok = ();
    type Error = Unbounded;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, _v: bool) -> Done {
        self.add(5);
        Ok(())
    }
    fn serialize_i8(self, _v: i8) -> Done {
        self.add(INTEGER);
        Ok(())
    }
    fn serialize_i16(self, _v: i16) -> Done {
        self.add(INTEGER);
        Ok(())
    }
    fn serialize_i32(self, _v: i32) -> Done {
        self.add(INTEGER);
        Ok(())
    }
    fn serialize_i64(self, _v: i64) -> Done {
        self.add(INTEGER);
        Ok(())
    }
    fn serialize_i128(self, _v: i128) -> Done {
        self.add(INTEGER_128);
        Ok(())
    }
    fn serialize_u8(self, _v: u8) -> Done {
        self.add(INTEGER);
        Ok(())
    }
    fn serialize_u16(self, _v: u16) -> Done {
        self.add(INTEGER);
        Ok(())
    }
    fn serialize_u32(self, _v: u32) -> Done {
        self.add(INTEGER);
        Ok(())
    }
    fn serialize_u64(self, _v: u64) -> Done {
        self.add(INTEGER);
        Ok(())
    }
    fn serialize_u128(self, _v: u128) -> Done {
        self.add(INTEGER_128);
        Ok(())
    }
    fn serialize_f32(self, _v: f32) -> Done {
        self.add(FLOAT);
        Ok(())
    }
    fn serialize_f64(self, _v: f64) -> Done {
        self.add(FLOAT);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Done {
        self.add(string(v.len_utf8()));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Done {
        self.add(string(v.len()));
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Done {
        // An array of numbers: `[255,…]`.
        self.add(v.len().saturating_mul(4).saturating_add(2));
        Ok(())
    }
    fn serialize_none(self) -> Done {
        self.add(4);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        self.add(4);
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Done {
        self.add(4);
        Ok(())
    }
    fn serialize_unit_variant(self, _name: &'static str, _i: u32, variant: &'static str) -> Done {
        self.add(string(variant.len()));
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Done {
        // `serde_json::value::RawValue` and the like are written as the text they carry,
        // which the string bound covers.
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        value: &T,
    ) -> Done {
        // `{"variant":value}`
        self.add(string(variant.len()).saturating_add(3));
        value.serialize(self)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self, Unbounded> {
        self.add(2);
        Ok(self)
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self, Unbounded> {
        self.add(2);
        Ok(self)
    }
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self, Unbounded> {
        self.add(2);
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self, Unbounded> {
        // `{"variant":[…]}`
        self.add(string(variant.len()).saturating_add(5));
        Ok(self)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self, Unbounded> {
        self.add(2);
        Ok(self)
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, Unbounded> {
        self.add(2);
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self, Unbounded> {
        // `{"variant":{…}}`
        self.add(string(variant.len()).saturating_add(5));
        Ok(self)
    }
}

/// An element of an array: the value and its comma.
fn element<T: Serialize + ?Sized>(bound: &mut Bound, value: &T) -> Done {
    bound.add(1);
    value.serialize(bound)
}

/// The compound serializers whose parts are array elements (`method(value)`).
macro_rules! elements {
    ($($trait:ident :: $method:ident),+) => {$(
        impl ser::$trait for &mut Bound {
            type Ok = ();
            type Error = Unbounded;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
                element(self, value)
            }
            fn end(self) -> Done {
                Ok(())
            }
        }
    )+};
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for &mut Bound {
    type Ok = ();
    type Error = Unbounded;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Done {
        // The comma, the colon, and quotes around a key written as a number or a bool.
        self.add(4);
        key.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

/// A field of an object: its name, the colon, the value and its comma.
fn field<T: Serialize + ?Sized>(bound: &mut Bound, key: &'static str, value: &T) -> Done {
    bound.add(string(key.len()).saturating_add(2));
    value.serialize(bound)
}

/// The compound serializers whose parts are object fields (`serialize_field(key, value)`).
macro_rules! fields {
    ($($trait:ident),+) => {$(
        impl ser::$trait for &mut Bound {
            type Ok = ();
            type Error = Unbounded;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Done {
                field(self, key, value)
            }
            fn end(self) -> Done {
                Ok(())
            }
        }
    )+};
}

fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;
    use serde_json::json;

    use super::json_len_bound;

    #[derive(Serialize)]
    #[serde(tag = "kind", content = "data", rename_all = "snake_case")]
    enum Content {
        Text {
            text: String,
            buttons: Vec<(String, String)>,
        },
        Pin(f64, f64),
        Unit,
        Wrapped(Option<u64>),
    }

    #[derive(Serialize)]
    enum External {
        Struct { a: i128, b: char },
        Tuple(u8, bool),
        Newtype(Vec<u8>),
        Unit,
    }

    #[derive(Serialize)]
    struct Outgoing {
        content: Content,
        reply_to: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        extra: serde_json::Value,
        by_number: BTreeMap<u32, &'static str>,
        raw: Box<serde_json::value::RawValue>,
        external: Vec<External>,
        unit: (),
    }

    /// The bound holds for every kind of value, including the worst escapes, and is never
    /// absurdly loose for plain text.
    #[test]
    fn the_bound_is_never_under_the_encoded_size() {
        let nasty = "\u{1}\u{1f}\"\\\n\t é 漢 🎉".repeat(3);
        let values = vec![
            Outgoing {
                content: Content::Text {
                    text: nasty.clone(),
                    buttons: vec![
                        ("id\u{0}".into(), nasty.clone()),
                        (String::new(), "b".into()),
                    ],
                },
                reply_to: Some("m\"1".into()),
                key: None,
                extra: json!({"n": -1.5e300, "list": [null, true, i64::MIN, u64::MAX, "\u{7f}"]}),
                by_number: BTreeMap::from([(7, "x"), (u32::MAX, "y\u{2}")]),
                raw: serde_json::value::to_raw_value(&json!({"a": [1, 2.5, "\u{3}"]})).unwrap(),
                external: vec![
                    External::Struct {
                        a: i128::MIN,
                        b: '\u{8}',
                    },
                    External::Tuple(255, false),
                    External::Newtype(vec![0, 255, 7]),
                    External::Unit,
                ],
                unit: (),
            },
            Outgoing {
                content: Content::Pin(-0.000_000_123_456_789_012_345, f64::MAX),
                reply_to: None,
                key: Some("k".into()),
                extra: serde_json::Value::Null,
                by_number: BTreeMap::new(),
                raw: serde_json::value::to_raw_value(&"x").unwrap(),
                external: Vec::new(),
                unit: (),
            },
        ];
        for value in &values {
            let size = serde_json::to_vec(value).unwrap().len();
            let bound = json_len_bound(value).expect("bounded");
            assert!(bound >= size, "bound {bound} under the size {size}");
        }
        for content in [
            Content::Unit,
            Content::Wrapped(Some(u64::MAX)),
            Content::Wrapped(None),
        ] {
            let size = serde_json::to_vec(&content).unwrap().len();
            assert!(json_len_bound(&content).unwrap() >= size);
        }
        let plain = "a plain reply of some length ".repeat(10);
        let size = serde_json::to_vec(&plain).unwrap().len();
        let bound = json_len_bound(&plain).unwrap();
        assert!(bound >= size && bound <= 6 * size, "{bound} vs {size}");
    }

    #[test]
    fn a_value_whose_serializer_fails_is_not_bounded() {
        struct Refuses;
        impl Serialize for Refuses {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        assert_eq!(json_len_bound(&Refuses), None);
        assert_eq!(json_len_bound(&vec![Some(Refuses)]), None);
    }
}
