//! `MemoryKv`: the in-memory [`DurableKv`], for tests and for `MemoryDurability`.
//!
//! Everything lives in one mutex-guarded map per scope plus two ordered indexes, which share
//! the entry's key and index values (`Arc<str>`): a write that re-indexes an entry moves
//! pointers and allocates only the index values that changed. `idx2` is a B-tree set; `idx1`
//! keeps each class of values (`<i|o>/<state>/`) in sorted deques, where values that arrive
//! in order (the journals' settled records) are appended (see `ClassedIndex`). What the
//! journals write is kept as they wrote it: a record given to [`DurableKv::cas_record`] is
//! stored unencoded (no JSON on the journal's path) and encoded only when the byte API (`get`,
//! `range`) reads it; bytes given to `cas` stay bytes. A record's `idx1` left to derive
//! ([`RecordIdx1::Derived`]) under a key in the journals' layout is indexed by its parts (class,
//! ms, and the id the key holds): no text is built or kept for it (see `Idx1::Parts`). `idx1`,
//! which the journals change at every write and list only from the sweeper, is brought up to
//! date when it is read (see `DeferredIndex`), from moves its writes decided while their
//! entries were at hand; `idx2` (a chat's open records, read at every send) at every write. A
//! journal change of a record (`update_record`) is decided and applied on the stored record
//! under the lock: no read, no copy into the backend, no compare-and-set.
//!
//! Clones share the same state, so a test can drop a "crashed" durability and open a new one
//! on the same data. Nothing survives the process: this backend gives retries, backoff and the
//! DLQ, not crash recovery. Versions come from one counter for the whole backend, so a
//! re-created key never gets a version it had before.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    CasOutcome, DurableKv, Entry, EntryValue, Index, KeyedValue, KvError, KvOp, KvRecord,
    RecordChange, RecordEntry, RecordIdx1, RecordUpdate, RecordUpdated, Scope, Versioned,
    VersionedValue,
};

/// One stored entry. The key and the index values are shared with the index sets (`Arc<str>`),
/// so re-indexing an entry on a write clones pointers, not strings. A journal record written
/// by `cas_record` is kept as it is (not encoded); the byte API encodes it when it reads it.
struct Stored {
    key: Arc<str>,
    version: u64,
    value: EntryValue,
    /// The `idx1` value, unless `idx1_derived`: then the record's own
    /// ([`RecordValue::idx1`](super::RecordValue::idx1)), which the journals left to derive
    /// ([`RecordIdx1::Derived`]).
    idx1: Option<Arc<str>>,
    idx1_derived: bool,
    /// The [`DeferredIndex`] epoch in which `idx1` last changed: while it is the index's
    /// current one, the move of this entry waits in the index's list at `pending_at`.
    pending_epoch: u64,
    pending_at: u32,
    idx2: Option<Arc<str>>,
}

impl Stored {
    /// The current `idx1` value.
    fn idx1(&self) -> Option<String> {
        if self.idx1_derived {
            self.value.derived_idx1()
        } else {
            self.idx1.as_deref().map(str::to_owned)
        }
    }

    /// The current `idx1` value as the index set keeps it: a derived value of a record in
    /// the journals' layout (stored under `<i|o>/<id>`, see [`Idx1::Parts`]) in its parts,
    /// any other as text.
    fn indexed(&self) -> Idx1 {
        if !self.idx1_derived {
            return self.idx1.clone().map_or(Idx1::None, Idx1::Text);
        }
        let EntryValue::Record(record) = &self.value else {
            return Idx1::None;
        };
        let parts = record.idx1_parts();
        let ms = parts.written_ms();
        // The key is `<i|o>/<id>` (the class's first two bytes, then the id), and the ms has
        // 16 digits at most: the value orders as (class, ms, key), see `PartsEntry`.
        let laid_out = self.key.len() == parts.id.len() + 2
            && self.key.as_bytes()[..2] == parts.class.as_bytes()[..2]
            && self.key.as_bytes()[2..] == *parts.id.as_bytes()
            && ms < MS_LIMIT;
        if laid_out {
            Idx1::Parts {
                class: parts.class,
                ms,
            }
        } else {
            let mut text = String::new();
            parts.push_to(&mut text);
            Idx1::Text(Arc::from(text))
        }
    }

    fn versioned(&self, operation: &'static str) -> Result<Versioned, KvError> {
        Ok(Versioned {
            version: self.version,
            value: self.value.to_bytes(operation)?,
            idx1: self.idx1(),
            idx2: self.idx2.as_deref().map(str::to_owned),
        })
    }

    fn versioned_value(&self) -> VersionedValue {
        VersionedValue {
            version: self.version,
            value: self.value.clone(),
            idx1: self.idx1(),
            idx2: self.idx2.as_deref().map(str::to_owned),
        }
    }
}

/// The first ms whose decimal has more than the 16 digits `idx1` pads to.
const MS_LIMIT: u64 = 10_000_000_000_000_000;

/// An `idx1` value as the index set keeps it.
#[derive(Clone, PartialEq, Eq)]
enum Idx1 {
    None,
    /// Any value, as text.
    Text(Arc<str>),
    /// A record's derived value `<class><ms, 16 digits>/<id>` whose key is `<i|o>/<id>`
    /// (the journals' layout), kept as its class and ms: the id is the key's, so the index
    /// holds no text of its own for it, and nothing is formatted to index it.
    Parts {
        class: &'static str,
        ms: u64,
    },
}

/// What a compare-and-set stores: bytes (`cas`) or a record (`cas_record`), with its indexes.
struct NewValue {
    value: EntryValue,
    idx1: RecordIdx1,
    idx2: Option<String>,
}

impl From<Entry> for NewValue {
    fn from(e: Entry) -> Self {
        NewValue {
            value: EntryValue::Bytes(e.value),
            idx1: RecordIdx1::Given(e.idx1),
            idx2: e.idx2,
        }
    }
}

impl From<RecordEntry> for NewValue {
    fn from(e: RecordEntry) -> Self {
        NewValue {
            value: EntryValue::Record(e.value),
            idx1: e.idx1,
            idx2: e.idx2,
        }
    }
}

/// An index entry: `(value, key)`, ordered bytewise by value, then key (the `range` order).
/// The first [`HEAD_WORDS`] words of the value are kept inline (big-endian, zero-padded), so
/// most comparisons in the index's B-tree are decided without following the value's pointer:
/// this is the hot loop of every write's re-indexing.
#[derive(Clone, PartialEq, Eq)]
struct IndexEntry {
    head: [u64; HEAD_WORDS],
    value: Arc<str>,
    key: Arc<str>,
}

/// How many 8-byte words of an index value an [`IndexEntry`] keeps inline: 32 bytes hold
/// `o/sending/<16-digit ms>/` and the first bytes of the id.
const HEAD_WORDS: usize = 4;

impl IndexEntry {
    fn new(value: Arc<str>, key: Arc<str>) -> Self {
        IndexEntry {
            head: head_of(value.as_bytes()),
            value,
            key,
        }
    }
}

/// The first `HEAD_WORDS * 8` bytes of `bytes` as big-endian words, zero-padded. Two heads
/// that differ order their strings as the strings' bytes do (a string that ends inside the
/// head is a prefix of the other one there); equal heads decide nothing.
fn head_of(bytes: &[u8]) -> [u64; HEAD_WORDS] {
    let mut padded = [0u8; HEAD_WORDS * 8];
    let n = bytes.len().min(padded.len());
    padded[..n].copy_from_slice(&bytes[..n]);
    let mut head = [0u64; HEAD_WORDS];
    for (word, chunk) in head.iter_mut().zip(padded.chunks_exact(8)) {
        *word = self::word(chunk);
    }
    head
}

impl Ord for IndexEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.head
            .cmp(&other.head)
            .then_with(|| bytewise(self.value.as_bytes(), other.value.as_bytes()))
            .then_with(|| bytewise(self.key.as_bytes(), other.key.as_bytes()))
    }
}

impl PartialOrd for IndexEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// `a.cmp(b)` for byte strings (lexicographic), comparing big-endian words first.
fn bytewise(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut a_words, mut b_words) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut a_words).zip(&mut b_words) {
        let (x, y) = (word(x), word(y));
        if x != y {
            return x.cmp(&y);
        }
    }
    let done = a.len().min(b.len()) / 8 * 8;
    a[done..].cmp(&b[done..])
}

/// The first 8 bytes of `bytes` as a big-endian word, zero-padded (see [`head_of`]).
fn first_word(bytes: &[u8]) -> u64 {
    let mut padded = [0u8; 8];
    let n = bytes.len().min(8);
    padded[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(padded)
}

fn word(chunk: &[u8]) -> u64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(chunk);
    u64::from_be_bytes(bytes)
}

/// An index set, in `range` order.
type IndexSet = BTreeSet<IndexEntry>;

/// An `idx1` entry kept in parts ([`Idx1::Parts`]): the ms, the first 8 bytes of the id
/// (big-endian, zero-padded) and the key, whose bytes after the first two are the id. Within a
/// class, `(ms, id)` orders as the values do: the ms is written with 16 digits, then `/`, then
/// the id; and equal values have equal keys.
struct PartsEntry {
    ms: u64,
    id_head: u64,
    key: Arc<str>,
}

impl PartsEntry {
    fn new(ms: u64, key: Arc<str>) -> Self {
        PartsEntry {
            ms,
            id_head: first_word(&key.as_bytes()[2..]),
            key,
        }
    }

    fn id(&self) -> &[u8] {
        &self.key.as_bytes()[2..]
    }

    /// The value, as text.
    fn value(&self, class: &str) -> String {
        let mut text = String::with_capacity(class.len() + 17 + self.key.len());
        crate::journal::index::push_idx1_parts(&mut text, class, self.ms, &self.key[2..]);
        text
    }
}

impl PartialEq for PartsEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for PartsEntry {}

impl Ord for PartsEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.ms
            .cmp(&other.ms)
            .then(self.id_head.cmp(&other.id_head))
            .then_with(|| bytewise(self.id(), other.id()))
    }
}

impl PartialOrd for PartsEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Inserts `entry` in the sorted deque `entries` (nothing when an equal one is there).
///
/// The journals' `idx1` values mostly arrive in order within their class: a record settles
/// (`done`, `sent`) with the time it settled. An entry that sorts last is pushed at the back
/// with one comparison; one that sorts a little earlier is found by galloping back from the
/// end and inserted there, moving the few entries after it. A B-tree spent a whole descent on
/// each of those (every node's keys compared at its right edge).
fn insert_sorted<T: Ord>(entries: &mut VecDeque<T>, entry: T) {
    let Some(last) = entries.back() else {
        entries.push_back(entry);
        return;
    };
    match last.cmp(&entry) {
        std::cmp::Ordering::Less => entries.push_back(entry),
        std::cmp::Ordering::Equal => {}
        std::cmp::Ordering::Greater => {
            // Gallop back from the end to a window that holds the entry's place, then
            // search it: `entries[hi] > entry`, and `entries[lo - 1] < entry` (or lo = 0).
            let mut hi = entries.len() - 1;
            let mut step = 1;
            let lo = loop {
                if hi < step {
                    break 0;
                }
                let i = hi - step;
                match entries[i].cmp(&entry) {
                    std::cmp::Ordering::Less => break i + 1,
                    std::cmp::Ordering::Equal => return,
                    std::cmp::Ordering::Greater => {
                        hi = i;
                        step *= 2;
                    }
                }
            };
            let (mut lo, mut hi) = (lo, hi);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match entries[mid].cmp(&entry) {
                    std::cmp::Ordering::Less => lo = mid + 1,
                    std::cmp::Ordering::Equal => return,
                    std::cmp::Ordering::Greater => hi = mid,
                }
            }
            entries.insert(lo, entry);
        }
    }
}

/// Removes the entry equal to `entry` from the sorted deque `entries`, if it is there.
fn remove_sorted<T: Ord>(entries: &mut VecDeque<T>, entry: &T) {
    if let Ok(at) = entries.binary_search(entry) {
        entries.remove(at);
    }
}

/// The entries of one `idx1` class: values kept as text, and values kept in parts (which
/// all start with the class), each sorted.
#[derive(Default)]
struct Class {
    text: VecDeque<IndexEntry>,
    parts: VecDeque<PartsEntry>,
}

/// `idx1`'s entries, grouped by class and sorted within each class: the class of a value is
/// the value up to its second `/` (the journals' `<i|o>/<state>/`), or the whole value when it
/// has fewer. Ordering by class, then by entry, is ordering by entry (a class is a prefix of
/// each of its values, and a class without its second `/` holds a single value), so a range
/// walks the classes in order, merging each class's text and parts entries.
#[derive(Default)]
struct ClassedIndex {
    classes: BTreeMap<Box<str>, Class>,
}

/// The class of an index value (see [`ClassedIndex`]).
fn class_of(value: &str) -> &str {
    let mut slashes = 0;
    for (at, byte) in value.bytes().enumerate() {
        if byte == b'/' {
            slashes += 1;
            if slashes == 2 {
                return &value[..=at];
            }
        }
    }
    value
}

/// One entry of a range of `idx1`: its value (built for an entry kept in parts) and key.
struct Listed<'a> {
    value: std::borrow::Cow<'a, str>,
    key: &'a Arc<str>,
}

impl ClassedIndex {
    fn insert(&mut self, value: Idx1, key: Arc<str>) {
        let name = match &value {
            Idx1::None => return,
            Idx1::Text(value) => class_of(value),
            Idx1::Parts { class, .. } => class,
        };
        let class = match self.classes.get_mut(name) {
            Some(class) => class,
            None => self.classes.entry(Box::from(name)).or_default(),
        };
        match value {
            Idx1::None => {}
            Idx1::Text(value) => insert_sorted(&mut class.text, IndexEntry::new(value, key)),
            Idx1::Parts { ms, .. } => insert_sorted(&mut class.parts, PartsEntry::new(ms, key)),
        }
    }

    fn remove(&mut self, value: &Idx1, key: &Arc<str>) {
        let class = match value {
            Idx1::None => return,
            Idx1::Text(value) => class_of(value),
            Idx1::Parts { class, .. } => class,
        };
        let Some(entries) = self.classes.get_mut(class) else {
            return;
        };
        match value {
            Idx1::None => {}
            Idx1::Text(value) => remove_sorted(
                &mut entries.text,
                &IndexEntry::new(Arc::clone(value), Arc::clone(key)),
            ),
            Idx1::Parts { ms, .. } => {
                remove_sorted(&mut entries.parts, &PartsEntry::new(*ms, Arc::clone(key)));
            }
        }
        if entries.text.is_empty() && entries.parts.is_empty() {
            self.classes.remove(class);
        }
    }

    /// The entries whose value is at least `from` (every key), in (value, key) order.
    fn from<'a>(&'a self, from: &'a str) -> impl Iterator<Item = Listed<'a>> + 'a {
        // The last class at or before `from` is the only earlier one that can hold values
        // from `from` on (it is then `from`'s own class); the later ones all can.
        let first = self
            .classes
            .range::<str, _>((Bound::Unbounded, Bound::Included(from)))
            .next_back()
            .map(|(class, _)| &**class);
        let classes = match first {
            Some(first) => self
                .classes
                .range::<str, _>((Bound::Included(first), Bound::Unbounded)),
            None => self.classes.range::<str, _>(..),
        };
        classes.flat_map(move |(name, entries)| {
            // Before `from`: the entries whose value sorts before it (every key of `from`
            // itself is at or after it).
            let at = entries
                .text
                .partition_point(|e| bytewise(e.value.as_bytes(), from.as_bytes()).is_lt());
            let text = entries.text.range(at..).map(|e| Listed {
                value: std::borrow::Cow::Borrowed(&*e.value),
                key: &e.key,
            });
            let at = entries
                .parts
                .partition_point(|e| bytewise(e.value(name).as_bytes(), from.as_bytes()).is_lt());
            let parts = entries.parts.range(at..).map(move |e| Listed {
                value: std::borrow::Cow::Owned(e.value(name)),
                key: &e.key,
            });
            Merged {
                a: text.peekable(),
                b: parts.peekable(),
            }
        })
    }
}

/// Two iterators of [`Listed`] entries, each in (value, key) order, merged in that order.
struct Merged<A: Iterator, B: Iterator> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<'a, A, B> Iterator for Merged<A, B>
where
    A: Iterator<Item = Listed<'a>>,
    B: Iterator<Item = Listed<'a>>,
{
    type Item = Listed<'a>;

    fn next(&mut self) -> Option<Listed<'a>> {
        let a_first = match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) => bytewise(a.value.as_bytes(), b.value.as_bytes())
                .then_with(|| bytewise(a.key.as_bytes(), b.key.as_bytes()))
                .is_le(),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if a_first {
            self.a.next()
        } else {
            self.b.next()
        }
    }
}

/// The entries of a scope, by key.
type Entries = HashMap<Arc<str>, Stored, foldhash::fast::RandomState>;

#[derive(Default)]
struct ScopeData {
    entries: Entries,
    idx1: DeferredIndex,
    idx2: IndexSet,
}

/// The empty key, which sorts first: a range's start among the entries of one index value.
static NO_KEY: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

/// How many moves may wait in a [`DeferredIndex`] before a write brings its set up to date.
const MAX_PENDING: usize = 1 << 14;

/// `idx1`, whose upkeep waits until it is read: the journals change a record's `idx1` at
/// every write (journaled, leased, done or sent) but list it only from the sweeper, now and
/// then. The first write of an entry since the last update lists a move of it (its key, the
/// value the set holds, its new value), later ones change that move's new value; the set is
/// brought up to date before a range reads it (or when [`MAX_PENDING`] moves wait). So a
/// record written three times between two reads costs the set one move, not three, and the
/// update touches neither the entries nor their records: every move was decided by its
/// writes, when the entry was at hand.
///
/// Invariant: an entry whose `pending_epoch` is `epoch` has its move at `pending_at`, whose
/// `old` the set holds and whose `new` is the entry's current value ([`Stored::indexed`]); the
/// set holds any other entry's current value. A key can have two moves (deleted and created
/// again); they apply in order.
struct DeferredIndex {
    set: ClassedIndex,
    moves: Vec<IndexMove>,
    /// Ends at each update (starts at 1: a new entry's 0 names no epoch).
    epoch: u64,
}

impl Default for DeferredIndex {
    fn default() -> Self {
        DeferredIndex {
            set: ClassedIndex::default(),
            moves: Vec::new(),
            epoch: 1,
        }
    }
}

/// A move of an entry in the `idx1` set, waiting for the next update.
struct IndexMove {
    key: Arc<str>,
    old: Idx1,
    new: Idx1,
}

impl DeferredIndex {
    /// What the set holds for `stored` if its value changes now: `None` when a move of it
    /// already waits (it holds that move's `old`). Called before the change.
    fn before_change(&self, stored: &Stored) -> Option<Idx1> {
        (stored.pending_epoch != self.epoch).then(|| stored.indexed())
    }

    /// Lists or updates the move of `stored`, whose value changed (`old`: what
    /// [`before_change`](Self::before_change) answered).
    fn changed(&mut self, stored: &mut Stored, old: Option<Idx1>) {
        let new = stored.indexed();
        match old {
            Some(old) if old == new => {}
            Some(old) => self.listed(stored, old, new),
            None => {
                if let Some(m) = self.moves.get_mut(stored.pending_at as usize) {
                    m.new = new;
                }
            }
        }
    }

    /// Lists the move of a new entry (nothing in the set).
    fn created(&mut self, stored: &mut Stored) {
        let new = stored.indexed();
        if new != Idx1::None {
            self.listed(stored, Idx1::None, new);
        }
    }

    fn listed(&mut self, stored: &mut Stored, old: Idx1, new: Idx1) {
        stored.pending_epoch = self.epoch;
        // At most MAX_PENDING moves wait (see `make_room`).
        stored.pending_at = u32::try_from(self.moves.len()).unwrap_or(u32::MAX);
        self.moves.push(IndexMove {
            key: Arc::clone(&stored.key),
            old,
            new,
        });
    }

    /// Takes a deleted entry out of the set (at the update when a move of it waits).
    fn deleted(&mut self, stored: &Stored) {
        if stored.pending_epoch == self.epoch {
            if let Some(m) = self.moves.get_mut(stored.pending_at as usize) {
                m.new = Idx1::None;
            }
        } else {
            self.set.remove(&stored.indexed(), &stored.key);
        }
    }

    /// Brings the set up to date when [`MAX_PENDING`] moves wait (before a write lists one
    /// more).
    fn make_room(&mut self) {
        if self.moves.len() >= MAX_PENDING {
            self.update();
        }
    }

    /// Applies every waiting move, in order.
    fn update(&mut self) {
        for m in self.moves.drain(..) {
            if m.old != m.new {
                self.set.remove(&m.old, &m.key);
                self.set.insert(m.new, m.key);
            }
        }
        self.epoch += 1;
    }

    /// The set, up to date.
    fn read(&mut self) -> &ClassedIndex {
        if !self.moves.is_empty() {
            self.update();
        }
        &self.set
    }
}

/// The index value to store: the one already stored when it did not change (no allocation),
/// a new shared string otherwise.
fn shared_value(new: Option<String>, old: Option<&Arc<str>>) -> Option<Arc<str>> {
    match (new, old) {
        (Some(v), Some(o)) if *v == **o => Some(Arc::clone(o)),
        (Some(v), _) => Some(Arc::from(v)),
        (None, _) => None,
    }
}

/// Moves `key` in `set` from `old` to `new` (either may be absent).
fn reindex(set: &mut IndexSet, key: &Arc<str>, old: Option<&Arc<str>>, new: Option<&Arc<str>>) {
    if old.map(|o| &**o) == new.map(|n| &**n) {
        return;
    }
    if let Some(o) = old {
        set.remove(&IndexEntry::new(Arc::clone(o), Arc::clone(key)));
    }
    if let Some(n) = new {
        set.insert(IndexEntry::new(Arc::clone(n), Arc::clone(key)));
    }
}

/// Gives `stored` (whose value was just replaced or changed) its new index values and
/// `version`, moving it in both index sets; `old`: what the `idx1` set's
/// [`before_change`](DeferredIndex::before_change) answered before the change.
fn restore(
    set1: &mut DeferredIndex,
    set2: &mut IndexSet,
    stored: &mut Stored,
    old: Option<Idx1>,
    idx1: RecordIdx1,
    idx2: Option<String>,
    version: u64,
) {
    match idx1 {
        RecordIdx1::Given(idx1) => {
            let kept = (!stored.idx1_derived)
                .then_some(stored.idx1.as_ref())
                .flatten();
            stored.idx1 = shared_value(idx1, kept);
            stored.idx1_derived = false;
        }
        RecordIdx1::Derived => {
            stored.idx1 = None;
            stored.idx1_derived = true;
        }
    }
    set1.changed(stored, old);
    let idx2 = shared_value(idx2, stored.idx2.as_ref());
    reindex(set2, &stored.key, stored.idx2.as_ref(), idx2.as_ref());
    stored.version = version;
    stored.idx2 = idx2;
}

impl ScopeData {
    fn apply_cas(
        &mut self,
        key: &str,
        expected: Option<u64>,
        entry: NewValue,
        next_version: u64,
    ) -> CasOutcome {
        let ScopeData {
            entries,
            idx1: set1,
            idx2: set2,
        } = self;
        set1.make_room();
        match entries.get_mut(key) {
            // Replace in place: one lookup, no new key.
            Some(stored) if expected == Some(stored.version) => {
                let old = set1.before_change(stored);
                stored.value = entry.value;
                restore(
                    set1,
                    set2,
                    stored,
                    old,
                    entry.idx1,
                    entry.idx2,
                    next_version,
                );
            }
            Some(stored) => {
                return CasOutcome::Conflict {
                    current: Some(stored.version),
                };
            }
            None if expected.is_some() => return CasOutcome::Conflict { current: None },
            None => {
                let key: Arc<str> = Arc::from(key);
                let (idx1, idx1_derived) = match entry.idx1 {
                    RecordIdx1::Given(idx1) => (idx1.map(Arc::from), false),
                    RecordIdx1::Derived => (None, true),
                };
                let idx2 = entry.idx2.map(Arc::from);
                reindex(set2, &key, None, idx2.as_ref());
                let mut stored = Stored {
                    key: Arc::clone(&key),
                    version: next_version,
                    value: entry.value,
                    idx1,
                    idx1_derived,
                    pending_epoch: 0,
                    pending_at: 0,
                    idx2,
                };
                set1.created(&mut stored);
                entries.insert(key, stored);
            }
        }
        CasOutcome::Ok {
            version: next_version,
        }
    }

    /// Runs `update` on the record under `key` and stores what it changed at `next_version`.
    fn apply_update(
        &mut self,
        key: &str,
        update: &mut dyn RecordUpdate,
        next_version: u64,
    ) -> Result<RecordUpdated, KvError> {
        let ScopeData {
            entries,
            idx1: set1,
            idx2: set2,
        } = self;
        set1.make_room();
        let Some(stored) = entries.get_mut(key) else {
            return Ok(RecordUpdated::Missing);
        };
        let old = set1.before_change(stored);
        let EntryValue::Record(record) = &mut stored.value else {
            return Ok(RecordUpdated::NotARecord);
        };
        match update.apply(record, stored.version)? {
            RecordChange::Keep => Ok(RecordUpdated::Kept),
            RecordChange::Foreign => Ok(RecordUpdated::NotARecord),
            RecordChange::Changed { idx1, idx2 } => {
                restore(set1, set2, stored, old, idx1, idx2, next_version);
                Ok(RecordUpdated::Written {
                    version: next_version,
                })
            }
        }
    }

    fn apply_delete(&mut self, key: &str, expected: u64) -> CasOutcome {
        let current = self.entries.get(key).map(|s| s.version);
        if current != Some(expected) {
            return CasOutcome::Conflict { current };
        }
        if let Some(old) = self.entries.remove(key) {
            self.idx1.deleted(&old);
            reindex(&mut self.idx2, &old.key, old.idx2.as_ref(), None);
        }
        CasOutcome::Ok { version: expected }
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
}

/// The data of each scope, found by the scope's id. A journal asks with the same [`Scope`]
/// (or clones of it) for its whole life, so the scope asked for is nearly always the one found
/// last, and is recognised by its id's address: no hash, no comparison of the id. Scopes are
/// never removed, so the index of a scope never changes.
#[derive(Default)]
struct Scopes {
    /// Each scope's id (a clone of the first [`Scope`] that asked, which keeps it alive: no
    /// other id can take its address) and data.
    data: Vec<(Arc<str>, ScopeData)>,
    by_id: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    /// The index of the scope found last.
    last: usize,
}

impl Scopes {
    /// The index of `scope`'s data, if it has any.
    fn index_of(&self, scope: &Scope) -> Option<usize> {
        match self.data.get(self.last) {
            Some((id, _)) if Arc::ptr_eq(id, scope.id_shared()) => Some(self.last),
            _ => self.by_id.get(scope.id()).copied(),
        }
    }

    /// [`index_of`](Self::index_of), remembered as the scope found last.
    fn find(&mut self, scope: &Scope) -> Option<usize> {
        let at = self.index_of(scope)?;
        self.last = at;
        Some(at)
    }

    fn get(&self, scope: &Scope) -> Option<&ScopeData> {
        let at = self.index_of(scope)?;
        self.data.get(at).map(|(_, data)| data)
    }

    fn get_mut(&mut self, scope: &Scope) -> Option<&mut ScopeData> {
        let at = self.find(scope)?;
        self.data.get_mut(at).map(|(_, data)| data)
    }

    /// `scope`'s data, created on first use.
    fn get_or_create(&mut self, scope: &Scope) -> &mut ScopeData {
        let at = match self.find(scope) {
            Some(at) => at,
            None => {
                let at = self.data.len();
                let id = Arc::clone(scope.id_shared());
                self.by_id.insert(Arc::clone(&id), at);
                self.data.push((id, ScopeData::default()));
                self.last = at;
                at
            }
        };
        &mut self.data[at].1
    }
}

/// Everything a [`MemoryKv`] holds, under its one lock.
#[derive(Default)]
struct State {
    scopes: Scopes,
    /// The last version given (to any key of any scope). Taken under the lock a write holds
    /// anyway, rather than from an atomic counter the workers' cores would pass between them
    /// at every write.
    last_version: u64,
}

/// The next version after `last`, which it becomes.
fn next_version(last: &mut u64) -> u64 {
    *last += 1;
    *last
}

/// An in-memory [`DurableKv`]; `Clone` shares the same data.
#[derive(Clone, Default)]
pub struct MemoryKv {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MemoryKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryKv").finish_non_exhaustive()
    }
}

impl MemoryKv {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write (each write is
        // computed before it is applied), so a poisoned lock is still consistent.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the data of `scope`, created on first use (the lookup of an existing scope
    /// allocates nothing), with the last version given.
    fn with_scope<T>(&self, scope: &Scope, f: impl FnOnce(&mut ScopeData, &mut u64) -> T) -> T {
        let mut state = self.lock();
        let State {
            scopes,
            last_version,
        } = &mut *state;
        f(scopes.get_or_create(scope), last_version)
    }

    /// A compare-and-set of bytes or of a record.
    fn cas_value(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: NewValue,
    ) -> CasOutcome {
        self.with_scope(scope, |data, last| {
            data.apply_cas(key, expected, entry, next_version(last))
        })
    }

    /// The entries whose `index` value is in `from..to`, in (value, key) order, at most
    /// `limit`, each made into a `T` by `make`.
    fn range_with<T>(
        &self,
        scope: &Scope,
        index: Index,
        from: &str,
        to: &str,
        limit: usize,
        make: impl Fn(&str, &Stored) -> Result<T, KvError>,
    ) -> Result<Vec<T>, KvError> {
        if from >= to || limit == 0 {
            return Ok(Vec::new());
        }
        let mut state = self.lock();
        let Some(data) = state.scopes.get_mut(scope) else {
            return Ok(Vec::new());
        };
        let ScopeData {
            entries,
            idx1,
            idx2,
        } = data;
        let listed = |from: &mut dyn Iterator<Item = Listed<'_>>| {
            from.take_while(|e| bytewise(e.value.as_bytes(), to.as_bytes()).is_lt())
                .filter_map(|e| entries.get(e.key).map(|stored| make(e.key, stored)))
                .take(limit)
                .collect()
        };
        match index {
            Index::One => listed(&mut idx1.read().from(from)),
            Index::Two => {
                let start = IndexEntry::new(Arc::from(from), Arc::clone(&NO_KEY));
                listed(&mut idx2.range(start..).map(|e| Listed {
                    value: std::borrow::Cow::Borrowed(&*e.value),
                    key: &e.key,
                }))
            }
        }
    }

    /// How many entries a scope holds (for tests).
    pub fn len(&self, scope: &Scope) -> usize {
        self.lock().scopes.get(scope).map_or(0, |s| s.entries.len())
    }

    /// Whether a scope holds no entry.
    pub fn is_empty(&self, scope: &Scope) -> bool {
        self.len(scope) == 0
    }
}

#[async_trait]
impl DurableKv for MemoryKv {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        self.lock()
            .scopes
            .get(scope)
            .and_then(|s| s.entries.get(key))
            .map(|stored| stored.versioned("get"))
            .transpose()
    }

    async fn get_record(
        &self,
        scope: &Scope,
        key: &str,
    ) -> Result<Option<VersionedValue>, KvError> {
        Ok(self
            .lock()
            .scopes
            .get(scope)
            .and_then(|s| s.entries.get(key).map(Stored::versioned_value)))
    }

    async fn cas(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        Ok(self.cas_value(scope, key, expected, entry.into()))
    }

    fn keeps_records(&self) -> bool {
        true
    }

    fn may_refuse_journal_writes(&self) -> bool {
        false
    }

    async fn cas_record(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: RecordEntry,
    ) -> Result<CasOutcome, KvError> {
        Ok(self.cas_value(scope, key, expected, entry.into()))
    }

    fn cas_record_now(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: RecordEntry,
    ) -> Result<Result<CasOutcome, KvError>, RecordEntry> {
        Ok(Ok(self.cas_value(scope, key, expected, entry.into())))
    }

    fn first_key_now(
        &self,
        scope: &Scope,
        index: Index,
        from: &str,
        to: &str,
    ) -> Option<Result<Option<String>, KvError>> {
        let first = self.range_with(scope, index, from, to, 1, |key, _| Ok(key.to_owned()));
        Some(first.map(|keys| keys.into_iter().next()))
    }

    fn update_record(
        &self,
        scope: &Scope,
        key: &str,
        update: &mut dyn RecordUpdate,
    ) -> Option<Result<RecordUpdated, KvError>> {
        let mut state = self.lock();
        let State {
            scopes,
            last_version,
        } = &mut *state;
        Some(match scopes.get_mut(scope) {
            Some(data) => data.apply_update(key, update, next_version(last_version)),
            None => Ok(RecordUpdated::Missing),
        })
    }

    async fn delete(&self, scope: &Scope, key: &str, expected: u64) -> Result<CasOutcome, KvError> {
        Ok(self.with_scope(scope, |data, _| data.apply_delete(key, expected)))
    }

    async fn range(
        &self,
        scope: &Scope,
        index: Index,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<KvRecord>, KvError> {
        self.range_with(scope, index, from, to, limit, |key, stored| {
            Ok(KvRecord {
                key: key.to_owned(),
                entry: stored.versioned("range")?,
            })
        })
    }

    async fn range_records(
        &self,
        scope: &Scope,
        index: Index,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<KeyedValue>, KvError> {
        self.range_with(scope, index, from, to, limit, |key, stored| {
            Ok(KeyedValue {
                key: key.to_owned(),
                entry: stored.versioned_value(),
            })
        })
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        Ok(self.with_scope(scope, |data, last| {
            ops.into_iter()
                .map(|op| match op {
                    KvOp::Cas {
                        key,
                        expected,
                        entry,
                    } => data.apply_cas(&key, expected, entry.into(), next_version(last)),
                    KvOp::Delete { key, expected } => data.apply_delete(&key, expected),
                })
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{IndexEntry, bytewise};

    #[test]
    fn bytewise_is_the_byte_order() {
        let words = [
            "",
            "a",
            "ab",
            "abcdefgh",
            "abcdefgh\u{0}",
            "abcdefghi",
            "abcdefgg",
            "o/sent/0001/k",
            "o/sending/0001764720065123/alice/m1",
            "o/sending/0001764720065123/alice/m1\u{0}",
            "o/sending/0001764720065123/alice/m2",
            "o/sending/0001764720065124/",
            "o/sending/0001764720065123/alice/m1:order/ask1#1",
            "o/sent/0001/k\u{0}",
            "o/sent/0002",
            "o/sent0",
            "o/sending/9",
            "é",
            "\u{ff}",
        ];
        for a in words {
            for b in words {
                assert_eq!(
                    bytewise(a.as_bytes(), b.as_bytes()),
                    a.cmp(b),
                    "{a:?} vs {b:?}"
                );
                let entry = |v: &str| IndexEntry::new(Arc::from(v), Arc::from("key"));
                assert_eq!(entry(a).cmp(&entry(b)), a.cmp(b), "entries {a:?} vs {b:?}");
            }
        }
    }

    /// A key written, deleted and created again between two reads of `idx1` is listed once,
    /// under its last value: the deleted entry left the set at once, and the key listed twice
    /// as dirty is moved once.
    #[tokio::test]
    async fn a_key_deleted_and_created_again_between_reads_is_listed_once() {
        use super::super::{CasOutcome, DurableKv, Entry, Index, Scope};
        use super::MemoryKv;

        /// `idx1`'s `a/` range, as (value, key).
        async fn listed(kv: &MemoryKv, scope: &Scope) -> Vec<(String, String)> {
            kv.range(scope, Index::One, "a/", "a0", 10)
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r.entry.idx1.unwrap_or_default(), r.key))
                .collect()
        }
        /// Writes `idx1` under `key` over whatever version it has.
        async fn put(kv: &MemoryKv, scope: &Scope, key: &str, idx1: &str) {
            let expected = kv.get(scope, key).await.unwrap().map(|v| v.version);
            let entry = Entry {
                value: vec![1],
                idx1: Some(idx1.to_owned()),
                idx2: None,
            };
            let out = kv.cas(scope, key, expected, entry).await.unwrap();
            assert!(matches!(out, CasOutcome::Ok { .. }), "{key} written");
        }
        async fn remove(kv: &MemoryKv, scope: &Scope, key: &str) {
            let version = kv.get(scope, key).await.unwrap().unwrap().version;
            assert!(kv.delete(scope, key, version).await.unwrap().is_ok());
        }
        let pair = |v: &str, k: &str| (v.to_owned(), k.to_owned());

        let (kv, scope) = (MemoryKv::new(), Scope::custom("again"));
        put(&kv, &scope, "k", "a/1").await;
        assert_eq!(listed(&kv, &scope).await, [pair("a/1", "k")]);
        // Changed, deleted and created again before the next read.
        put(&kv, &scope, "k", "a/2").await;
        remove(&kv, &scope, "k").await;
        put(&kv, &scope, "k", "a/3").await;
        put(&kv, &scope, "j", "a/0").await;
        assert_eq!(
            listed(&kv, &scope).await,
            [pair("a/0", "j"), pair("a/3", "k")]
        );
        // Changed, then deleted before the next read: gone from the listing.
        put(&kv, &scope, "k", "a/4").await;
        remove(&kv, &scope, "k").await;
        assert_eq!(listed(&kv, &scope).await, [pair("a/0", "j")]);
    }

    /// A scope is found by its id whether the caller asks with the scope that created it, a
    /// clone, or an equal scope built apart, and whichever scope was asked for last.
    #[tokio::test]
    async fn a_scope_is_found_by_its_id_however_it_is_asked_for() {
        use super::super::{DurableKv, Entry, Scope};
        use super::MemoryKv;

        let kv = MemoryKv::new();
        let entry = |v: u8| Entry {
            value: vec![v],
            idx1: None,
            idx2: None,
        };
        let (a, b) = (Scope::custom("a"), Scope::custom("b"));
        kv.cas(&a, "k", None, entry(1)).await.unwrap();
        kv.cas(&b, "k", None, entry(2)).await.unwrap();
        let a_apart = Scope::custom("a");
        for scope in [&a, &b, &a_apart, &a.clone(), &b, &a_apart] {
            let expected = if scope.id() == "a" { 1 } else { 2 };
            let got = kv.get(scope, "k").await.unwrap().unwrap();
            assert_eq!(got.value, vec![expected], "scope {}", scope.id());
            assert_eq!(kv.len(scope), 1);
        }
        assert!(kv.is_empty(&Scope::custom("c")));
    }

    /// Random writes, deletes and range reads of both indexes (with the deferred `idx1` kept
    /// waiting across many writes and brought up to date at reads and at its limit) answer
    /// exactly what a plain sorted model of the entries answers.
    #[tokio::test]
    async fn ranges_match_a_model_whatever_the_writes() {
        use std::collections::BTreeMap;

        use super::super::{
            CasOutcome, DurableKv, Entry, Index, RecordEntry, RecordIdx1, RecordValue, Scope,
        };
        use super::{MAX_PENDING, MemoryKv};

        let kv = MemoryKv::new();
        let scope = Scope::custom("model");
        let mut rng = fastrand::Rng::with_seed(7);
        // key -> (version, idx1, idx2)
        let mut model: BTreeMap<String, (u64, Option<String>, Option<String>)> = BTreeMap::new();
        // Values of several `idx1` classes (see `ClassedIndex`): `<x>/<y>/…` ones, deeper
        // ones, and values with fewer than two `/` (a class of their own).
        let value = |rng: &mut fastrand::Rng| {
            rng.bool().then(|| match rng.u8(..9) {
                0 => ["o", "o/a", "o/b", "o/"][rng.usize(..4)].to_owned(),
                1 => format!("o/a/x/{:02}", rng.u32(..20)),
                // Text among the values a record's parts stand for.
                2 => format!("i/done/{:016}/k{}", rng.u32(..50), rng.u32(..300)),
                _ => format!("o/{}/{:04}", ["a", "b", "c"][rng.usize(..3)], rng.u32(..50)),
            })
        };
        // A journal record whose `idx1` the backend derives (`i/<done|dead>/<ms>/<id>`).
        let record = |id: &str, ms: i64, dead: bool| {
            RecordValue::from(crate::inbox::InboundRecord {
                id: id.to_owned(),
                chat: "c".to_owned(),
                payload: crate::journal::Payload::encode(&0).unwrap(),
                media_ref: None,
                state: if dead {
                    crate::inbox::InboxState::Dead
                } else {
                    crate::inbox::InboxState::Done
                },
                attempts: 1,
                lease: None,
                fence: 1,
                next_attempt_ms: 0,
                last_error: None,
                seq: 1,
                created_ms: 0,
                updated_ms: ms,
                rows_recorded: false,
            })
        };
        // The ms of a record: mostly small (many equal), sometimes negative (written as 0) or
        // past 16 digits (kept as text).
        let ms = |rng: &mut fastrand::Rng| match rng.u8(..20) {
            0 => -i64::from(rng.u32(..5)),
            1 => 10_i64.pow(16) + i64::from(rng.u32(..3)),
            2 => 9 * 10_i64.pow(15) + i64::from(rng.u32(..3)),
            _ => i64::from(rng.u32(..50)),
        };
        for step in 0..(MAX_PENDING * 3) {
            let n = rng.usize(..300);
            // Keys in the journals' layout (`i/<id>`, the record's id after `i/`: its `idx1`
            // is kept in parts; ids longer than the 8 bytes compared first) and others (kept
            // as text).
            let key = if n.is_multiple_of(3) {
                format!("i/k{n}")
            } else if n % 3 == 1 {
                format!("i/chat/{}/m{n}", n % 2)
            } else {
                format!("k{n}")
            };
            match rng.u8(..10) {
                0 => {
                    if let Some((version, ..)) = model.get(&key).cloned() {
                        let out = kv.delete(&scope, &key, version).await.unwrap();
                        assert!(out.is_ok());
                        model.remove(&key);
                    }
                }
                // A record whose idx1 is left to derive, in place of bytes or of a record.
                2..=4 => {
                    let expected = model.get(&key).map(|(v, ..)| *v);
                    let id = key.strip_prefix("i/").unwrap_or(&key);
                    let written = record(id, ms(&mut rng), rng.u8(..4) == 0);
                    let idx1 = Some(written.idx1());
                    let idx2 = value(&mut rng);
                    let entry = RecordEntry {
                        value: written,
                        idx1: RecordIdx1::Derived,
                        idx2: idx2.clone(),
                    };
                    match kv.cas_record(&scope, &key, expected, entry).await.unwrap() {
                        CasOutcome::Ok { version } => {
                            model.insert(key, (version, idx1, idx2));
                        }
                        CasOutcome::Conflict { .. } => panic!("the model's version conflicted"),
                    }
                }
                1 if step % 7 == 0 => {
                    let index = if rng.bool() { Index::One } else { Index::Two };
                    let (from, to) = [
                        ("o/a", "o/c/0025"),
                        ("i/done/0000000000000010", "i/done/0000000000000040"),
                        ("o", "o/b/0010"),
                        ("o/a/x/05", "p"),
                        ("o/", "o/a/"),
                        ("o/a/0010", "o/a/x"),
                        ("i/", "i0"),
                        ("i/done/", "i/done0"),
                        ("i/done/0000000000000020/k1", "i/done/0000000000000030/k2"),
                        ("i/dead/0000000000000000/", "i/done/0000000000000005"),
                    ][rng.usize(..10)];
                    let got: Vec<String> = kv
                        .range(&scope, index, from, to, 1000)
                        .await
                        .unwrap()
                        .into_iter()
                        .map(|r| r.key)
                        .collect();
                    let mut want: Vec<(String, String)> = model
                        .iter()
                        .filter_map(|(k, (_, i1, i2))| {
                            let v = match index {
                                Index::One => i1.as_ref(),
                                Index::Two => i2.as_ref(),
                            }?;
                            (v.as_str() >= from && v.as_str() < to).then(|| (v.clone(), k.clone()))
                        })
                        .collect();
                    want.sort();
                    let want: Vec<String> = want.into_iter().map(|(_, k)| k).collect();
                    assert_eq!(got, want, "step {step}");
                    // A read of one entry gives its current idx1, derived or not.
                    if let Some((_, i1, _)) = model.get(&key) {
                        let read = kv.get(&scope, &key).await.unwrap().unwrap();
                        assert_eq!(&read.idx1, i1, "step {step}: idx1 of {key}");
                    }
                }
                _ => {
                    let expected = model.get(&key).map(|(v, ..)| *v);
                    let (idx1, idx2) = (value(&mut rng), value(&mut rng));
                    let entry = Entry {
                        value: vec![1],
                        idx1: idx1.clone(),
                        idx2: idx2.clone(),
                    };
                    match kv.cas(&scope, &key, expected, entry).await.unwrap() {
                        CasOutcome::Ok { version } => {
                            model.insert(key, (version, idx1, idx2));
                        }
                        CasOutcome::Conflict { .. } => panic!("the model's version conflicted"),
                    }
                }
            }
        }
        // More keys change between two reads than the deferred index keeps waiting: the
        // writes past the limit bring it up to date on the way, and the read sees every one.
        for n in 0..(MAX_PENDING + 10) {
            let entry = Entry {
                value: vec![2],
                idx1: Some(format!("z/{n:06}")),
                idx2: None,
            };
            let out = kv.cas(&scope, &format!("z{n}"), None, entry).await.unwrap();
            assert!(out.is_ok());
        }
        let listed = kv
            .range(&scope, Index::One, "z/", "z0", usize::MAX)
            .await
            .unwrap();
        assert_eq!(listed.len(), MAX_PENDING + 10);
        assert!(listed.windows(2).all(|w| w[0].entry.idx1 < w[1].entry.idx1));
    }
}
