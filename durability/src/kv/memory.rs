//! `MemoryKv`: the in-memory [`DurableKv`], for tests and for `MemoryDurability`.
//!
//! Everything lives in one mutex-guarded map per scope plus two ordered indexes, which share
//! the entry's key and index values (`Arc<str>`): a write that re-indexes an entry moves
//! pointers and allocates only the index values that changed. `idx2` is a B-tree set; `idx1`
//! keeps each class of values (`<i|o>/<state>/`) in a sorted deque, where values that arrive
//! in order (the journals' settled records) are appended (see `ClassedIndex`). What the
//! journals write is kept as they wrote it: a record given to [`DurableKv::cas_record`] is stored unencoded
//! (no JSON on the journal's path) and encoded only when the byte API (`get`, `range`) reads
//! it; bytes given to `cas` stay bytes. `idx1`, which the journals change at every write and
//! list only from the sweeper, is brought up to date when it is read (see `DeferredIndex`),
//! and a record's `idx1` left to derive ([`RecordIdx1::Derived`]) is computed only then, once
//! for all the writes since the last read; `idx2` (a chat's open records, read at every send)
//! at every write. A journal change of a record (`update_record`) is decided and applied on
//! the stored record under the lock: no read, no copy into the backend, no compare-and-set.
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
    /// ([`RecordIdx1::Derived`]) and which is computed when the index is brought up to date.
    idx1: Option<Arc<str>>,
    idx1_derived: bool,
    /// Whether `idx1` changed since the index set was last brought up to date (the key is then
    /// in the [`DeferredIndex`]'s list, and the set holds `idx1_indexed` for it).
    idx1_dirty: bool,
    /// The value the index set holds for this key while `idx1_dirty` (none: not in the set).
    idx1_indexed: Option<Arc<str>>,
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

fn word(chunk: &[u8]) -> u64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(chunk);
    u64::from_be_bytes(bytes)
}

/// An index set, in `range` order.
type IndexSet = BTreeSet<IndexEntry>;

/// An ordered set of index entries that an index's upkeep moves entries in and out of.
trait OrderedIndex {
    fn insert(&mut self, entry: IndexEntry);
    fn remove(&mut self, entry: &IndexEntry);
}

impl OrderedIndex for IndexSet {
    fn insert(&mut self, entry: IndexEntry) {
        BTreeSet::insert(self, entry);
    }

    fn remove(&mut self, entry: &IndexEntry) {
        BTreeSet::remove(self, entry);
    }
}

/// `idx1`'s entries, grouped by class and sorted within each class: the class of a value is
/// the value up to its second `/` (the journals' `<i|o>/<state>/`), or the whole value when it
/// has fewer. Ordering by class, then by entry, is ordering by entry (a class is a prefix of
/// each of its values, and a class without its second `/` holds a single value), so a range
/// walks the classes in order.
///
/// Each class is a sorted deque, because the journals' `idx1` values mostly arrive in order
/// within their class: a record settles (`done`, `sent`) with the time it settled, and the
/// upkeep meets the records roughly in the order they were written. An entry that sorts last
/// is pushed at the back with one comparison; one that sorts a little earlier is found by
/// galloping back from the end and inserted there, moving the few entries after it. A B-tree
/// spent a whole descent on each of those (every node's keys compared at its right edge).
#[derive(Default)]
struct ClassedIndex {
    classes: BTreeMap<Box<str>, VecDeque<IndexEntry>>,
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

impl OrderedIndex for ClassedIndex {
    fn insert(&mut self, entry: IndexEntry) {
        let class = class_of(&entry.value);
        let entries = match self.classes.get_mut(class) {
            Some(entries) => entries,
            None => self.classes.entry(Box::from(class)).or_default(),
        };
        // Most entries sort last.
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

    fn remove(&mut self, entry: &IndexEntry) {
        let class = class_of(&entry.value);
        let Some(entries) = self.classes.get_mut(class) else {
            return;
        };
        if let Ok(at) = entries.binary_search(entry) {
            entries.remove(at);
            if entries.is_empty() {
                self.classes.remove(class);
            }
        }
    }
}

impl ClassedIndex {
    /// The entries whose value is at least `from` (every key), in order.
    fn from<'a>(&'a self, from: &'a str) -> impl Iterator<Item = &'a IndexEntry> + 'a {
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
        classes.flat_map(move |(_, entries)| {
            // Before `from`: the entries whose value sorts before it (every key of `from`
            // itself is at or after it).
            let at =
                entries.partition_point(|e| bytewise(e.value.as_bytes(), from.as_bytes()).is_lt());
            entries.range(at..)
        })
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

/// How many keys may wait in a [`DeferredIndex`] before a write brings its set up to date.
const MAX_PENDING: usize = 1 << 14;

/// `idx1`, whose upkeep waits until it is read: the journals change a record's `idx1` at
/// every write (journaled, leased, done or sent) but list it only from the sweeper, now and
/// then. A write marks its entry dirty (`Stored::idx1_dirty`, keeping the value the set holds
/// in `Stored::idx1_indexed`) and, the first time since the last update, lists its key; the
/// set is brought up to date before a range reads it (or when [`MAX_PENDING`] keys wait), so
/// a record written three times between two reads costs the set one move, not three, a
/// derived value is computed once, not at every write, and a write costs the index no hash
/// lookup (the entry is in hand).
///
/// Invariant: a dirty entry's key is in `dirty`, and the set holds its `idx1_indexed`; for any
/// other entry, the set holds its `idx1` (and that `idx1` is not left to derive). A deleted
/// entry leaves the set at once.
#[derive(Default)]
struct DeferredIndex {
    set: ClassedIndex,
    /// The keys of the entries written since the last update (a key may appear twice when
    /// its entry was deleted and created again; its entry, looked up, decides).
    dirty: Vec<Arc<str>>,
}

impl DeferredIndex {
    /// Notes that `stored`'s `idx1` is about to change (called before the change): the first
    /// change since the last update keeps the value the set holds and lists the key. A new
    /// entry is listed by [`DeferredIndex::created`] instead.
    fn changing(&mut self, stored: &mut Stored) {
        if !stored.idx1_dirty {
            stored.idx1_dirty = true;
            // Not dirty: the set holds `idx1`, which is not left to derive.
            stored.idx1_indexed = stored.idx1.clone();
            self.dirty.push(Arc::clone(&stored.key));
        }
    }

    /// Lists the key of a new entry (created dirty, with nothing in the set).
    fn created(&mut self, key: &Arc<str>) {
        self.dirty.push(Arc::clone(key));
    }

    /// Takes a deleted entry out of the set.
    fn deleted(&mut self, stored: &Stored) {
        let in_set = if stored.idx1_dirty {
            stored.idx1_indexed.as_ref()
        } else {
            stored.idx1.as_ref()
        };
        reindex(&mut self.set, &stored.key, in_set, None);
    }

    /// Brings the set up to date when [`MAX_PENDING`] keys wait (before a write notes one
    /// more).
    fn make_room(&mut self, entries: &mut Entries) {
        if self.dirty.len() >= MAX_PENDING {
            self.update(entries);
        }
    }

    /// Moves every dirty entry in the set to its current value, deriving the values left to
    /// derive (and storing them in their entries).
    fn update(&mut self, entries: &mut Entries) {
        // The derived values are built here, then copied into their shared strings.
        let mut derived = String::new();
        for key in self.dirty.drain(..) {
            let Some(stored) = entries.get_mut(&key) else {
                continue;
            };
            if !stored.idx1_dirty {
                continue;
            }
            if stored.idx1_derived {
                derived.clear();
                stored.idx1 = stored
                    .value
                    .push_derived_idx1(&mut derived)
                    .then(|| Arc::from(derived.as_str()));
                stored.idx1_derived = false;
            }
            stored.idx1_dirty = false;
            let indexed = stored.idx1_indexed.take();
            reindex(&mut self.set, &key, indexed.as_ref(), stored.idx1.as_ref());
        }
    }

    /// The set, up to date.
    fn read(&mut self, entries: &mut Entries) -> &ClassedIndex {
        if !self.dirty.is_empty() {
            self.update(entries);
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
fn reindex(
    set: &mut impl OrderedIndex,
    key: &Arc<str>,
    old: Option<&Arc<str>>,
    new: Option<&Arc<str>>,
) {
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
/// `version`, moving it in both index sets.
fn restore(
    set1: &mut DeferredIndex,
    set2: &mut IndexSet,
    stored: &mut Stored,
    idx1: RecordIdx1,
    idx2: Option<String>,
    version: u64,
) {
    match idx1 {
        RecordIdx1::Given(idx1) => {
            let old = (!stored.idx1_derived)
                .then_some(stored.idx1.as_ref())
                .flatten();
            let idx1 = shared_value(idx1, old);
            if stored.idx1_derived || stored.idx1.as_deref() != idx1.as_deref() {
                set1.changing(stored);
            }
            stored.idx1 = idx1;
            stored.idx1_derived = false;
        }
        RecordIdx1::Derived => {
            set1.changing(stored);
            stored.idx1_derived = true;
        }
    }
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
        set1.make_room(entries);
        match entries.get_mut(key) {
            // Replace in place: one lookup, no new key.
            Some(stored) if expected == Some(stored.version) => {
                stored.value = entry.value;
                restore(set1, set2, stored, entry.idx1, entry.idx2, next_version);
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
                set1.created(&key);
                let idx2 = entry.idx2.map(Arc::from);
                reindex(set2, &key, None, idx2.as_ref());
                entries.insert(
                    Arc::clone(&key),
                    Stored {
                        key,
                        version: next_version,
                        value: entry.value,
                        idx1,
                        idx1_derived,
                        idx1_dirty: true,
                        idx1_indexed: None,
                        idx2,
                    },
                );
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
        set1.make_room(entries);
        let Some(stored) = entries.get_mut(key) else {
            return Ok(RecordUpdated::Missing);
        };
        let EntryValue::Record(record) = &mut stored.value else {
            return Ok(RecordUpdated::NotARecord);
        };
        match update.apply(record, stored.version)? {
            RecordChange::Keep => Ok(RecordUpdated::Kept),
            RecordChange::Foreign => Ok(RecordUpdated::NotARecord),
            RecordChange::Changed { idx1, idx2 } => {
                restore(set1, set2, stored, idx1, idx2, next_version);
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
        let listed = |from: &mut dyn Iterator<Item = &IndexEntry>, entries: &Entries| {
            from.take_while(|e| bytewise(e.value.as_bytes(), to.as_bytes()).is_lt())
                .filter_map(|e| entries.get(&e.key).map(|stored| make(&e.key, stored)))
                .take(limit)
                .collect()
        };
        match index {
            Index::One => {
                let set = idx1.read(entries);
                listed(&mut set.from(from), entries)
            }
            Index::Two => {
                let start = IndexEntry::new(Arc::from(from), Arc::clone(&NO_KEY));
                listed(&mut idx2.range(start..), entries)
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
            rng.bool().then(|| match rng.u8(..8) {
                0 => ["o", "o/a", "o/b", "o/"][rng.usize(..4)].to_owned(),
                1 => format!("o/a/x/{:02}", rng.u32(..20)),
                _ => format!("o/{}/{:04}", ["a", "b", "c"][rng.usize(..3)], rng.u32(..50)),
            })
        };
        // A journal record whose `idx1` the backend derives (`i/done/<ms>/<id>`).
        let record = |id: &str, ms: i64| {
            RecordValue::from(crate::inbox::InboundRecord {
                id: id.to_owned(),
                chat: "c".to_owned(),
                payload: crate::journal::Payload::encode(&0).unwrap(),
                media_ref: None,
                state: crate::inbox::InboxState::Done,
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
        for step in 0..(MAX_PENDING * 3) {
            let key = format!("k{}", rng.usize(..300));
            match rng.u8(..10) {
                0 => {
                    if let Some((version, ..)) = model.get(&key).cloned() {
                        let out = kv.delete(&scope, &key, version).await.unwrap();
                        assert!(out.is_ok());
                        model.remove(&key);
                    }
                }
                // A record whose idx1 is left to derive, in place of bytes or of a record.
                2 | 3 => {
                    let expected = model.get(&key).map(|(v, ..)| *v);
                    let written = record(&key, i64::from(rng.u32(..50)));
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
                    ][rng.usize(..6)];
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
