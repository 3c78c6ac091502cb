//! `MemoryKv`: the in-memory [`DurableKv`], for tests and for `MemoryDurability`.
//!
//! Everything lives in one mutex-guarded map per scope plus two ordered index sets, which share
//! the entry's key and index values (`Arc<str>`): a write that re-indexes an entry moves
//! pointers and allocates only the index values that changed. Clones
//! share the same state, so a test can drop a "crashed" durability and open a new one on the
//! same data. Nothing survives the process: this backend gives retries, backoff and the DLQ,
//! not crash recovery. Versions come from one counter for the whole backend, so a re-created
//! key never gets a version it had before.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{CasOutcome, DurableKv, Entry, Index, KvError, KvOp, KvRecord, Scope, Versioned};

/// One stored entry. The key and the index values are shared with the index sets (`Arc<str>`),
/// so re-indexing an entry on a write clones pointers, not strings.
struct Stored {
    version: u64,
    value: Vec<u8>,
    idx1: Option<Arc<str>>,
    idx2: Option<Arc<str>>,
}

impl Stored {
    fn versioned(&self) -> Versioned {
        Versioned {
            version: self.version,
            value: self.value.clone(),
            idx1: self.idx1.as_deref().map(str::to_owned),
            idx2: self.idx2.as_deref().map(str::to_owned),
        }
    }
}

/// An index set: `(value, key)` pairs in byte order.
type IndexSet = BTreeSet<(Arc<str>, Arc<str>)>;

#[derive(Default)]
struct ScopeData {
    entries: HashMap<Arc<str>, Stored>,
    idx1: IndexSet,
    idx2: IndexSet,
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
        set.remove(&(Arc::clone(o), Arc::clone(key)));
    }
    if let Some(n) = new {
        set.insert((Arc::clone(n), Arc::clone(key)));
    }
}

impl ScopeData {
    fn apply_cas(
        &mut self,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
        next_version: u64,
    ) -> CasOutcome {
        let current = self.entries.get_key_value(key);
        if current.map(|(_, s)| s.version) != expected {
            return CasOutcome::Conflict {
                current: current.map(|(_, s)| s.version),
            };
        }
        let (key, old) = match current {
            Some((k, s)) => (Arc::clone(k), Some((s.idx1.clone(), s.idx2.clone()))),
            None => (Arc::from(key), None),
        };
        let (old1, old2) = old.unwrap_or((None, None));
        let idx1 = shared_value(entry.idx1, old1.as_ref());
        let idx2 = shared_value(entry.idx2, old2.as_ref());
        reindex(&mut self.idx1, &key, old1.as_ref(), idx1.as_ref());
        reindex(&mut self.idx2, &key, old2.as_ref(), idx2.as_ref());
        self.entries.insert(
            key,
            Stored {
                version: next_version,
                value: entry.value,
                idx1,
                idx2,
            },
        );
        CasOutcome::Ok {
            version: next_version,
        }
    }

    fn apply_delete(&mut self, key: &str, expected: u64) -> CasOutcome {
        let current = self.entries.get(key).map(|s| s.version);
        if current != Some(expected) {
            return CasOutcome::Conflict { current };
        }
        if let Some((key, old)) = self.entries.remove_entry(key) {
            reindex(&mut self.idx1, &key, old.idx1.as_ref(), None);
            reindex(&mut self.idx2, &key, old.idx2.as_ref(), None);
        }
        CasOutcome::Ok { version: expected }
    }
}

#[derive(Default)]
struct Shared {
    scopes: Mutex<HashMap<String, ScopeData>>,
    versions: AtomicU64,
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

    fn lock(&self) -> MutexGuard<'_, HashMap<String, ScopeData>> {
        // A panic while holding the lock cannot leave a half-applied write (each write is
        // computed before it is applied), so a poisoned lock is still consistent.
        self.shared
            .scopes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the data of `scope`, created on first use (the lookup of an existing scope
    /// allocates nothing).
    fn with_scope<T>(&self, scope: &Scope, f: impl FnOnce(&mut ScopeData) -> T) -> T {
        let mut scopes = self.lock();
        if let Some(data) = scopes.get_mut(scope.id()) {
            return f(data);
        }
        f(scopes.entry(scope.id().to_owned()).or_default())
    }

    fn next_version(&self) -> u64 {
        self.shared.versions.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// How many entries a scope holds (for tests).
    pub fn len(&self, scope: &Scope) -> usize {
        self.lock().get(scope.id()).map_or(0, |s| s.entries.len())
    }

    /// Whether a scope holds no entry.
    pub fn is_empty(&self, scope: &Scope) -> bool {
        self.len(scope) == 0
    }
}

#[async_trait]
impl DurableKv for MemoryKv {
    async fn get(&self, scope: &Scope, key: &str) -> Result<Option<Versioned>, KvError> {
        Ok(self
            .lock()
            .get(scope.id())
            .and_then(|s| s.entries.get(key).map(Stored::versioned)))
    }

    async fn cas(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        let version = self.next_version();
        Ok(self.with_scope(scope, |data| data.apply_cas(key, expected, entry, version)))
    }

    async fn delete(&self, scope: &Scope, key: &str, expected: u64) -> Result<CasOutcome, KvError> {
        Ok(self.with_scope(scope, |data| data.apply_delete(key, expected)))
    }

    async fn range(
        &self,
        scope: &Scope,
        index: Index,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<KvRecord>, KvError> {
        if from >= to || limit == 0 {
            return Ok(Vec::new());
        }
        let scopes = self.lock();
        let Some(data) = scopes.get(scope.id()) else {
            return Ok(Vec::new());
        };
        let set = match index {
            Index::One => &data.idx1,
            Index::Two => &data.idx2,
        };
        let start: (Arc<str>, Arc<str>) = (Arc::from(from), Arc::from(""));
        let out = set
            .range(start..)
            .take_while(|(value, _)| &**value < to)
            .filter_map(|(_, key)| {
                data.entries.get(key).map(|entry| KvRecord {
                    key: key.to_string(),
                    entry: entry.versioned(),
                })
            })
            .take(limit)
            .collect();
        Ok(out)
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        let versions: Vec<u64> = ops.iter().map(|_| self.next_version()).collect();
        Ok(self.with_scope(scope, |data| {
            ops.into_iter()
                .zip(versions)
                .map(|(op, version)| match op {
                    KvOp::Cas {
                        key,
                        expected,
                        entry,
                    } => data.apply_cas(&key, expected, entry, version),
                    KvOp::Delete { key, expected } => data.apply_delete(&key, expected),
                })
                .collect()
        }))
    }
}
