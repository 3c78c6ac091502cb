//! Journal records handed to a backend before they are encoded, and values read back as
//! either bytes or such a record.
//!
//! The journals write through [`DurableKv::cas_record`](super::DurableKv::cas_record) and read
//! through [`get_record`](super::DurableKv::get_record) and
//! [`range_records`](super::DurableKv::range_records). A backend that stores bytes (SQLite,
//! Postgres, Redis, the file journal) takes the default of those methods: the record is
//! encoded as JSON, exactly the bytes `cas` would have been given, and read back as bytes. A
//! backend that keeps its values in this process ([`MemoryKv`](super::MemoryKv)) stores the
//! record as it is, so a journal write costs no encoding and a read no decoding. Both kinds of
//! value can sit side by side in one backend: bytes written through `cas` are read back as
//! bytes, and a record read through the byte API (`get`, `range`) is encoded then.
//!
//! This module does not decide anything about records: it only carries them.

use std::fmt;
use std::sync::Arc;

use super::{Entry, KvError, KvRecord, Versioned};
use crate::inbox::InboundRecord;
use crate::journal::JournalRecord;
use crate::outbox::OutboxRecord;

/// A journal record (an inbound event or a send), shared and not encoded yet.
///
/// Cheap to clone. [`encode`](Self::encode) gives the JSON bytes the journals store.
#[derive(Clone, PartialEq)]
pub struct RecordValue(RecordInner);

#[derive(Clone, PartialEq)]
enum RecordInner {
    Inbound(Arc<InboundRecord>),
    Outbound(Arc<OutboxRecord>),
}

impl RecordValue {
    /// The record's JSON, the bytes a byte-storing backend keeps.
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        match &self.0 {
            RecordInner::Inbound(r) => encode_json(&**r, r.payload.len()),
            RecordInner::Outbound(r) => encode_json(&**r, r.payload.len()),
        }
    }

    /// The `idx1` value its journal gives it (`<i|o>/<state>/<16-digit ms>/<id>`, see the
    /// journal's layout in the crate's documentation).
    pub fn idx1(&self) -> String {
        let mut value = String::new();
        self.push_idx1(&mut value);
        value
    }

    /// [`idx1`](Self::idx1) appended to `out`.
    pub(crate) fn push_idx1(&self, out: &mut String) {
        match &self.0 {
            RecordInner::Inbound(r) => JournalRecord::push_idx1(&**r, out),
            RecordInner::Outbound(r) => JournalRecord::push_idx1(&**r, out),
        }
    }

    /// [`idx1`](Self::idx1) in its parts.
    pub(crate) fn idx1_parts(&self) -> crate::journal::index::Idx1Parts<'_> {
        match &self.0 {
            RecordInner::Inbound(r) => r.idx1_parts(),
            RecordInner::Outbound(r) => r.idx1_parts(),
        }
    }

    /// The inbound record, if this is one.
    pub fn as_inbound(&self) -> Option<&InboundRecord> {
        match &self.0 {
            RecordInner::Inbound(r) => Some(r),
            RecordInner::Outbound(_) => None,
        }
    }

    /// The outbox record, if this is one.
    pub fn as_outbound(&self) -> Option<&OutboxRecord> {
        match &self.0 {
            RecordInner::Outbound(r) => Some(r),
            RecordInner::Inbound(_) => None,
        }
    }

    /// The inbound record to change in place, if this is one (copied first when another
    /// value shares it).
    pub(crate) fn inbound_mut(&mut self) -> Option<&mut InboundRecord> {
        match &mut self.0 {
            RecordInner::Inbound(r) => Some(Arc::make_mut(r)),
            RecordInner::Outbound(_) => None,
        }
    }

    /// The outbox record to change in place, if this is one (copied first when another
    /// value shares it).
    pub(crate) fn outbound_mut(&mut self) -> Option<&mut OutboxRecord> {
        match &mut self.0 {
            RecordInner::Outbound(r) => Some(Arc::make_mut(r)),
            RecordInner::Inbound(_) => None,
        }
    }
}

impl From<InboundRecord> for RecordValue {
    fn from(record: InboundRecord) -> Self {
        RecordValue(RecordInner::Inbound(Arc::new(record)))
    }
}

impl From<OutboxRecord> for RecordValue {
    fn from(record: OutboxRecord) -> Self {
        RecordValue(RecordInner::Outbound(Arc::new(record)))
    }
}

impl From<Arc<InboundRecord>> for RecordValue {
    fn from(record: Arc<InboundRecord>) -> Self {
        RecordValue(RecordInner::Inbound(record))
    }
}

impl From<Arc<OutboxRecord>> for RecordValue {
    fn from(record: Arc<OutboxRecord>) -> Self {
        RecordValue(RecordInner::Outbound(record))
    }
}

impl fmt::Debug for RecordValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            RecordInner::Inbound(r) => f.debug_tuple("Inbound").field(&r.id).finish(),
            RecordInner::Outbound(r) => f.debug_tuple("Outbound").field(&r.key).finish(),
        }
    }
}

/// Bytes reserved for a record's fields besides its payload when it is encoded.
const ENCODE_SLACK: usize = 640;

/// `record` as JSON, in a buffer sized for its payload.
pub(crate) fn encode_json<T: serde::Serialize>(
    record: &T,
    payload_len: usize,
) -> Result<Vec<u8>, serde_json::Error> {
    // Sized up front: the payload plus room for the other fields, so the buffer is not grown
    // (copied) several times while the record is written.
    let mut value = Vec::with_capacity(payload_len + ENCODE_SLACK);
    serde_json::to_writer(&mut value, record)?;
    Ok(value)
}

fn encode_error(operation: &'static str, e: serde_json::Error) -> KvError {
    KvError::Unavailable {
        operation,
        source: Box::new(e),
    }
}

/// The first index value of a record write ([`RecordEntry`], [`RecordChange::Changed`]).
///
/// The journals change a record's `idx1` (due-time order) at every write but list it only
/// from the sweeper, so they leave it to the backend to derive from the record
/// ([`RecordValue::idx1`]): a backend that stores bytes derives it at once, when it encodes
/// the record; one that keeps records may wait until its `idx1` is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordIdx1 {
    /// This value (or no value).
    Given(Option<String>),
    /// The value [`RecordValue::idx1`] gives for the record written.
    Derived,
}

impl RecordIdx1 {
    /// The value for `record`.
    pub fn resolve(self, record: &RecordValue) -> Option<String> {
        match self {
            RecordIdx1::Given(value) => value,
            RecordIdx1::Derived => Some(record.idx1()),
        }
    }
}

/// What [`DurableKv::cas_record`](super::DurableKv::cas_record) stores: a record and its two
/// index values.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordEntry {
    /// The record.
    pub value: RecordValue,
    /// The first secondary index value.
    pub idx1: RecordIdx1,
    /// The second secondary index value.
    pub idx2: Option<String>,
}

impl RecordEntry {
    /// The byte entry of this record (what the default `cas_record` hands to `cas`).
    pub fn encode(self) -> Result<Entry, KvError> {
        let idx1 = self.idx1.resolve(&self.value);
        Ok(Entry {
            value: self.value.encode().map_err(|e| encode_error("encode", e))?,
            idx1,
            idx2: self.idx2,
        })
    }
}

/// What a [`RecordUpdate`] decided about the record it was shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordChange {
    /// Leave the entry as it is (no write, no new version).
    Keep,
    /// The record was changed in place: store it at a new version with these index values.
    Changed {
        /// The new first secondary index value.
        idx1: RecordIdx1,
        /// The new second secondary index value.
        idx2: Option<String>,
    },
    /// Not a record this update changes (one of the other journal): nothing was changed; the
    /// caller reads the entry instead.
    Foreign,
}

/// A change of one stored record, decided and applied under the backend's lock by
/// [`DurableKv::update_record`](super::DurableKv::update_record).
///
/// The journals implement it; a backend only calls [`apply`](Self::apply) once with the record
/// stored under the key and acts on the answer.
pub trait RecordUpdate {
    /// Decides on `record` (stored at `version`). It changes `record` only when it returns
    /// [`RecordChange::Changed`]; an error (a journal write hook that refused the write) leaves
    /// it untouched and aborts the update.
    fn apply(&mut self, record: &mut RecordValue, version: u64) -> Result<RecordChange, KvError>;
}

/// The outcome of [`DurableKv::update_record`](super::DurableKv::update_record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordUpdated {
    /// No entry under the key.
    Missing,
    /// The entry holds bytes, or a record the update answered [`RecordChange::Foreign`] to:
    /// nothing was changed; read and decode it instead.
    NotARecord,
    /// The update left the record as it was.
    Kept,
    /// The record was changed; `version` is its new version.
    Written {
        /// The version written.
        version: u64,
    },
}

/// A stored value as read back: bytes, or a record kept as it was written.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryValue {
    /// Bytes, as written by `cas` (or by `cas_record` on a byte-storing backend).
    Bytes(Vec<u8>),
    /// A record written by `cas_record` on a backend that keeps records.
    Record(RecordValue),
}

impl EntryValue {
    /// The bytes of the value (a record is encoded).
    pub fn into_bytes(self) -> Result<Vec<u8>, serde_json::Error> {
        match self {
            EntryValue::Bytes(bytes) => Ok(bytes),
            EntryValue::Record(record) => record.encode(),
        }
    }

    /// The `idx1` value of a record ([`RecordValue::idx1`]); `None` for bytes.
    pub(crate) fn derived_idx1(&self) -> Option<String> {
        match self {
            EntryValue::Bytes(_) => None,
            EntryValue::Record(record) => Some(record.idx1()),
        }
    }

    /// The bytes of the value, for the byte API of a backend that keeps records.
    pub(crate) fn to_bytes(&self, operation: &'static str) -> Result<Vec<u8>, KvError> {
        match self {
            EntryValue::Bytes(bytes) => Ok(bytes.clone()),
            EntryValue::Record(record) => record.encode().map_err(|e| encode_error(operation, e)),
        }
    }
}

/// A stored value with its version and index values (what `get_record` reads).
#[derive(Debug, Clone, PartialEq)]
pub struct VersionedValue {
    /// The version of this entry; changes on every write.
    pub version: u64,
    /// The value.
    pub value: EntryValue,
    /// The first secondary index value.
    pub idx1: Option<String>,
    /// The second secondary index value.
    pub idx2: Option<String>,
}

impl From<Versioned> for VersionedValue {
    fn from(v: Versioned) -> Self {
        VersionedValue {
            version: v.version,
            value: EntryValue::Bytes(v.value),
            idx1: v.idx1,
            idx2: v.idx2,
        }
    }
}

/// One value returned by [`DurableKv::range_records`](super::DurableKv::range_records).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedValue {
    /// The entry's key.
    pub key: String,
    /// The value.
    pub entry: VersionedValue,
}

impl From<KvRecord> for KeyedValue {
    fn from(r: KvRecord) -> Self {
        KeyedValue {
            key: r.key,
            entry: r.entry.into(),
        }
    }
}
