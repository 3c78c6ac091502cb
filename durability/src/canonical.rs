//! Canonical JSON (object keys sorted) of any `Serialize` value, written straight from it.
//!
//! A fingerprint ([`crate::keys::Fingerprint`]) hashes the canonical JSON of a send's content. A
//! content is a Rust value, and building a `serde_json::Value` tree of it (a map node and a
//! string per field, then freed) only to write it out again was most of a fingerprint's cost.
//! [`write`] writes the same bytes without the tree: an object's entries are written into one
//! scratch buffer, then copied out in key order. A `Value` goes through it too, so there is
//! one canonical writer.
//!
//! The bytes are exactly those the tree-walking writer of earlier versions gave for
//! `serde_json::to_value(v)`, so fingerprints kept in journals still compare equal (the tests
//! keep that writer as their reference). Where `to_value` has a rule of its own that this
//! writer does not copy (a map key that is not a string, a 128-bit integer, `serde_json`'s
//! raw values), it reports [`Unsupported`] and the caller writes `to_value`'s tree instead.

use std::fmt;
use std::ops::Range;

use serde::ser::{self, Serialize};

/// This writer does not handle the value (the caller falls back to `serde_json::to_value`).
#[derive(Debug)]
pub(crate) struct Unsupported(String);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not written canonically here: {}", self.0)
    }
}

impl std::error::Error for Unsupported {}

impl ser::Error for Unsupported {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Unsupported(msg.to_string())
    }
}

/// Appends the canonical JSON of `value` to `out`; on `Err`, `out` holds partial output.
pub(crate) fn write<T: Serialize + ?Sized>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), Unsupported> {
    value.serialize(Canonical { out })
}

/// Writes a scalar as `serde_json` writes it (writing to a `Vec` cannot fail).
fn json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let _ = serde_json::to_writer(&mut *out, value);
}

/// `Canonical`'s methods that write a scalar of one argument's type.
macro_rules! write_scalars {
    ($($method:ident($arg:ty)),* $(,)?) => {
        $(
            fn $method(self, v: $arg) -> Result<(), Unsupported> {
                json(self.out, &v);
                Ok(())
            }
        )*
    };
}

/// `Canonical`'s methods that open a variant with content, `{"variant":`, then its content
/// (`$open`, given `out` and the length), closed by [`Wrapped`].
macro_rules! variant_methods {
    ($($method:ident -> $content:ty: |$out:ident, $len:ident| $open:expr;)*) => {
        $(
            fn $method(
                self,
                _: &'static str,
                _: u32,
                variant: &'static str,
                $len: usize,
            ) -> Result<Wrapped<$content>, Unsupported> {
                wrap(self.out, variant);
                let $out = self.out;
                Ok(Wrapped($open))
            }
        )*
    };
}

/// The serializer: writes one value into `out`.
struct Canonical<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> ser::Serializer for Canonical<'a> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Array<'a>;
    type SerializeTuple = Array<'a>;
    type SerializeTupleStruct = Array<'a>;
    type SerializeTupleVariant = Wrapped<Array<'a>>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Wrapped<Object<'a>>;

    // Written as `serde_json` writes them, which is how `to_value`'s tree writes them.
    write_scalars! {
        serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
        serialize_i64(i64), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32),
        serialize_u64(u64), serialize_char(char),
    }
    fn serialize_i128(self, _: i128) -> Result<(), Unsupported> {
        Err(Unsupported("a 128-bit integer".into()))
    }
    fn serialize_u128(self, _: u128) -> Result<(), Unsupported> {
        Err(Unsupported("a 128-bit integer".into()))
    }
    fn serialize_f32(self, v: f32) -> Result<(), Unsupported> {
        // `to_value` widens an f32 to f64 before it is written.
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Unsupported> {
        // `to_value` makes a non-finite float `null`; `serde_json` writes it `null` too.
        json(self.out, &v);
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        json(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Unsupported> {
        // `to_value` makes bytes an array of numbers.
        self.out.push(b'[');
        for (i, b) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            json(self.out, b);
        }
        self.out.push(b']');
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Unsupported> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unsupported> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unsupported> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unsupported> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Unsupported> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        // `{"variant": value}`: one key, so already in order.
        wrap(self.out, variant);
        value.serialize(Canonical {
            out: &mut *self.out,
        })?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Array<'a>, Unsupported> {
        self.out.push(b'[');
        Ok(Array {
            out: self.out,
            first: true,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Array<'a>, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Array<'a>, Unsupported> {
        self.serialize_seq(Some(len))
    }
    variant_methods! {
        serialize_tuple_variant -> Array<'a>: |out, len| Canonical { out }.serialize_seq(Some(len))?;
        serialize_struct_variant -> Object<'a>: |out, _len| Object::new(out);
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Object<'a>, Unsupported> {
        Ok(Object::new(self.out))
    }
    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Object<'a>, Unsupported> {
        if name.starts_with("$serde_json::private::") {
            return Err(Unsupported(format!("`{name}`")));
        }
        Ok(Object::new(self.out))
    }
}

/// Opens `{"variant":` around a variant's content.
fn wrap(out: &mut Vec<u8>, variant: &str) {
    out.push(b'{');
    json(out, variant);
    out.push(b':');
}

/// An array being written.
struct Array<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl Array<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        value.serialize(Canonical {
            out: &mut *self.out,
        })
    }

    fn close(self) {
        self.out.push(b']');
    }
}

/// An array is what serde calls a sequence, a tuple and a tuple struct.
macro_rules! array_impl {
    ($($trait:ident::$method:ident),*) => {
        $(
            impl ser::$trait for Array<'_> {
                type Ok = ();
                type Error = Unsupported;
                fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
                    self.element(value)
                }
                fn end(self) -> Result<(), Unsupported> {
                    self.close();
                    Ok(())
                }
            }
        )*
    };
}

array_impl!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field
);

/// A variant's content, closed by `}` after its own end.
struct Wrapped<S>(S);

impl ser::SerializeTupleVariant for Wrapped<Array<'_>> {
    type Ok = ();
    type Error = Unsupported;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        self.0.element(value)
    }
    fn end(self) -> Result<(), Unsupported> {
        let Array { out, .. } = self.0;
        out.extend_from_slice(b"]}");
        Ok(())
    }
}

/// An object's fields by name: what serde calls a struct, and, wrapped, a struct variant. The
/// object is `$object` of `$this` (the value the trait is for); `$close` ends it.
macro_rules! fields_impl {
    ($($trait:ident for $ty:ty: |$this:ident| $object:expr, $close:literal;)*) => {
        $(
            impl ser::$trait for $ty {
                type Ok = ();
                type Error = Unsupported;
                fn serialize_field<T: Serialize + ?Sized>(
                    &mut self,
                    key: &'static str,
                    value: &T,
                ) -> Result<(), Unsupported> {
                    let $this = self;
                    $object.entry(key, value)
                }
                fn end(self) -> Result<(), Unsupported> {
                    let $this = self;
                    $object.finish().extend_from_slice($close);
                    Ok(())
                }
            }
        )*
    };
}

fields_impl! {
    SerializeStruct for Object<'_>: |object| object, b"}";
    // The object's `}`, then the variant's.
    SerializeStructVariant for Wrapped<Object<'_>>: |wrapped| wrapped.0, b"}}";
}

/// An object being written: its entries go to a scratch buffer as they come (the key as
/// raw text, the value as canonical JSON), and are copied to `out` in key order at the end.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    scratch: Vec<u8>,
    /// (key, value) byte ranges in `scratch`, in arrival order.
    entries: Vec<(Range<usize>, Range<usize>)>,
    /// The key given by `serialize_key`, waiting for its value.
    key: Option<Range<usize>>,
}

impl<'a> Object<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        Object {
            out,
            scratch: Vec::new(),
            entries: Vec::new(),
            key: None,
        }
    }

    fn push_key(&mut self, key: &str) -> Range<usize> {
        let start = self.scratch.len();
        self.scratch.extend_from_slice(key.as_bytes());
        start..self.scratch.len()
    }

    fn push_value<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> Result<Range<usize>, Unsupported> {
        let start = self.scratch.len();
        value.serialize(Canonical {
            out: &mut self.scratch,
        })?;
        Ok(start..self.scratch.len())
    }

    fn entry<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Unsupported> {
        let key = self.push_key(key);
        let value = self.push_value(value)?;
        self.entries.push((key, value));
        Ok(())
    }

    /// Writes `{` and the entries in key order (a key given twice keeps its last value, as a
    /// `serde_json::Map` does), and returns `out` for the caller's closing `}`.
    fn finish(self) -> &'a mut Vec<u8> {
        let Object {
            out,
            scratch,
            mut entries,
            ..
        } = self;
        // Stable: among equal keys, the last one given is last.
        entries.sort_by(|a, b| scratch[a.0.clone()].cmp(&scratch[b.0.clone()]));
        out.push(b'{');
        let mut first = true;
        for (i, (key, value)) in entries.iter().enumerate() {
            let overridden = entries
                .get(i + 1)
                .is_some_and(|next| scratch[next.0.clone()] == scratch[key.clone()]);
            if overridden {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            // The key was pushed from a `&str`.
            json(
                out,
                std::str::from_utf8(&scratch[key.clone()]).unwrap_or_default(),
            );
            out.push(b':');
            out.extend_from_slice(&scratch[value.clone()]);
        }
        out
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Unsupported;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unsupported> {
        let key = key.serialize(MapKey)?;
        self.key = Some(self.push_key(&key));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        let key = self
            .key
            .take()
            .ok_or_else(|| Unsupported("a map value without its key".into()))?;
        let value = self.push_value(value)?;
        self.entries.push((key, value));
        Ok(())
    }
    fn end(self) -> Result<(), Unsupported> {
        self.finish().push(b'}');
        Ok(())
    }
}

/// A map key: a string or a char, as `to_value` takes them; anything else is left to it.
struct MapKey;

/// `MapKey`'s methods that refuse a key of one argument's type.
macro_rules! refuse_keys {
    ($($method:ident($arg:ty)),* $(,)?) => {
        $(
            fn $method(self, _: $arg) -> Result<String, Unsupported> {
                Err(key_unsupported())
            }
        )*
    };
}

impl ser::Serializer for MapKey {
    type Ok = String;
    type Error = Unsupported;
    type SerializeSeq = ser::Impossible<String, Unsupported>;
    type SerializeTuple = ser::Impossible<String, Unsupported>;
    type SerializeTupleStruct = ser::Impossible<String, Unsupported>;
    type SerializeTupleVariant = ser::Impossible<String, Unsupported>;
    type SerializeMap = ser::Impossible<String, Unsupported>;
    type SerializeStruct = ser::Impossible<String, Unsupported>;
    type SerializeStructVariant = ser::Impossible<String, Unsupported>;

    fn serialize_str(self, v: &str) -> Result<String, Unsupported> {
        Ok(v.to_owned())
    }
    fn serialize_char(self, v: char) -> Result<String, Unsupported> {
        Ok(v.to_string())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<String, Unsupported> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<String, Unsupported> {
        value.serialize(self)
    }
    refuse_keys! {
        serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
        serialize_i64(i64), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32),
        serialize_u64(u64), serialize_f32(f32), serialize_f64(f64), serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    }
    fn serialize_none(self) -> Result<String, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<String, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_unit(self) -> Result<String, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, Unsupported> {
        Err(key_unsupported())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Unsupported> {
        Err(key_unsupported())
    }
}

fn key_unsupported() -> Unsupported {
    Unsupported("a map key that is not a string".into())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde::Serialize;
    use serde_json::{Value, json};

    use crate::keys::Fingerprint;

    /// The canonical JSON of earlier versions, which walked a `serde_json::Value` tree: the
    /// reference the direct writer must match byte for byte (fingerprints are kept in
    /// journals).
    fn reference_canonical(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Object(map) => {
                out.push(b'{');
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    let _ = serde_json::to_writer(&mut *out, k);
                    out.push(b':');
                    reference_canonical(v, out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    reference_canonical(v, out);
                }
                out.push(b']');
            }
            other => {
                let _ = serde_json::to_writer(&mut *out, other);
            }
        }
    }

    /// The fingerprint of `value`'s `to_value` tree by the reference writer.
    fn reference<T: Serialize>(value: &T) -> Fingerprint {
        let tree = serde_json::to_value(value).unwrap_or(Value::Null);
        let mut out = Vec::new();
        reference_canonical(&tree, &mut out);
        Fingerprint::of_canonical("chat", &out)
    }

    /// The fingerprint both ways: written directly (with its fallback), and by the reference.
    fn both<T: Serialize>(value: &T) -> (Fingerprint, Fingerprint) {
        (Fingerprint::of_content("chat", value), reference(value))
    }

    fn same<T: Serialize + std::fmt::Debug>(value: &T) {
        let (direct, tree) = both(value);
        assert_eq!(direct, tree, "{value:?}");
    }

    #[derive(Debug, Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Tagged {
        Text {
            text: String,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            buttons: Vec<String>,
        },
        Pin(Pin),
        Nothing,
    }

    #[derive(Debug, Serialize)]
    struct Pin {
        lat: f64,
        lon: f32,
        name: Option<String>,
    }

    #[derive(Debug, Serialize)]
    enum External {
        Unit,
        Newtype(u8),
        Tuple(i32, String),
        Struct { z: bool, a: char },
    }

    #[derive(Debug, Serialize)]
    struct Flattened {
        b: u64,
        #[serde(flatten)]
        rest: BTreeMap<String, Value>,
    }

    #[derive(Debug, Serialize)]
    struct Unit;

    #[derive(Debug, Serialize)]
    struct Newtype(String);

    #[derive(Debug, Serialize)]
    struct TupleStruct(i8, Unit, Newtype);

    struct Bytes(&'static [u8]);

    impl Serialize for Bytes {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    impl std::fmt::Debug for Bytes {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Bytes({:?})", self.0)
        }
    }

    #[test]
    fn rust_values_fingerprint_as_their_json_trees() {
        same(&Tagged::Text {
            text: "hé \"quoted\" \n\u{1}".into(),
            buttons: vec!["b".into(), "a".into()],
        });
        same(&Tagged::Text {
            text: "no buttons".into(),
            buttons: vec![],
        });
        same(&Tagged::Pin(Pin {
            lat: 0.1,
            lon: 0.1,
            name: None,
        }));
        same(&Tagged::Pin(Pin {
            lat: f64::NAN,
            lon: f32::INFINITY,
            name: Some("x".into()),
        }));
        same(&Tagged::Pin(Pin {
            lat: -0.0,
            lon: 1e30,
            name: Some(String::new()),
        }));
        same(&Tagged::Nothing);
        same(&vec![
            External::Unit,
            External::Newtype(7),
            External::Tuple(-3, "t".into()),
            External::Struct { z: true, a: 'é' },
        ]);
        same(&Flattened {
            b: u64::MAX,
            rest: [("a".to_owned(), json!(1)), ("c".to_owned(), json!([null]))]
                .into_iter()
                .collect(),
        });
        // A key given twice (a flattened map repeating a field): the last one wins in both.
        same(&Flattened {
            b: 1,
            rest: [("b".to_owned(), json!("again"))].into_iter().collect(),
        });
        same(&TupleStruct(-128, Unit, Newtype("n".into())));
        same(&(1u16, i64::MIN, Option::<u8>::None, Some(2u32), ()));
        same(&Bytes(b"\x00\xffab"));
        let unordered: HashMap<String, u32> = (0..40).map(|i| (format!("k{i}"), i)).collect();
        same(&unordered);
        let chars: BTreeMap<char, bool> = [('b', true), ('a', false)].into_iter().collect();
        same(&chars);
    }

    #[test]
    fn shapes_left_to_the_tree_still_fingerprint_as_their_tree() {
        // Integer map keys, 128-bit integers and raw JSON go through `to_value`.
        let int_keys: BTreeMap<u32, &str> = [(10, "x"), (9, "y")].into_iter().collect();
        same(&int_keys);
        same(&(1u128, -1i128));
        let raw = serde_json::value::RawValue::from_string(r#"{"b":1,"a":2}"#.to_owned())
            .expect("valid JSON");
        same(&raw);
        let (direct, _) = both(&raw);
        assert_eq!(direct, Fingerprint::of("chat", &json!({"a": 2, "b": 1})));
        // A value `to_value` refuses is `null` both ways.
        let bad: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into_iter().collect();
        same(&bad);
        assert_eq!(both(&bad).0, Fingerprint::of("chat", &Value::Null));
    }

    /// A random JSON tree: nested objects and arrays of every scalar kind.
    fn random_value(rng: &mut fastrand::Rng, depth: u32) -> Value {
        let keys = ["", "a", "b", "B", "é", "a\"b", "\u{7f}", "z", "aa", "\n"];
        match rng.u8(..if depth == 0 { 6 } else { 8 }) {
            0 => Value::Null,
            1 => Value::Bool(rng.bool()),
            2 => json!(rng.i64(..)),
            3 => json!(rng.u64(..)),
            4 => json!(rng.f64() * 10f64.powi(rng.i32(-20..20))),
            5 => Value::String(keys[rng.usize(..keys.len())].repeat(rng.usize(..3))),
            6 => Value::Array(
                (0..rng.usize(..4))
                    .map(|_| random_value(rng, depth - 1))
                    .collect(),
            ),
            _ => Value::Object(
                (0..rng.usize(..5))
                    .map(|_| {
                        let key = keys[rng.usize(..keys.len())].to_owned();
                        (key, random_value(rng, depth - 1))
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn random_json_trees_fingerprint_the_same_both_ways() {
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..3000 {
            let value = random_value(&mut rng, 4);
            assert_eq!(
                Fingerprint::of("chat", &value),
                reference(&value),
                "{value}"
            );
            assert_eq!(Fingerprint::of_content("chat", &value), reference(&value));
        }
    }
}
