//! `MemoryKv`: the in-memory [`DurableKv`], for tests and for `MemoryDurability`.
//!
//! Everything lives in one mutex-guarded map per scope plus two ordered index sets. Clones
//! share the same state, so a test can drop a "crashed" durability and open a new one on the
//! same data. Nothing survives the process: this backend gives retries, backoff and the DLQ,
//! not crash recovery. Versions come from one counter for the whole backend, so a re-created
//! key never gets a version it had before.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{CasOutcome, DurableKv, Entry, Index, KvError, KvOp, KvRecord, Scope, Versioned};

#[derive(Default)]
struct ScopeData {
    entries: HashMap<String, Versioned>,
    idx1: BTreeSet<(String, String)>,
    idx2: BTreeSet<(String, String)>,
}

impl ScopeData {
    fn unindex(&mut self, key: &str, old: &Versioned) {
        if let Some(v) = &old.idx1 {
            self.idx1.remove(&(v.clone(), key.to_owned()));
        }
        if let Some(v) = &old.idx2 {
            self.idx2.remove(&(v.clone(), key.to_owned()));
        }
    }

    fn apply_cas(
        &mut self,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
        next_version: u64,
    ) -> CasOutcome {
        let current = self.entries.get(key).map(|v| v.version);
        if current != expected {
            return CasOutcome::Conflict { current };
        }
        if let Some(old) = self.entries.remove(key) {
            self.unindex(key, &old);
        }
        if let Some(v) = &entry.idx1 {
            self.idx1.insert((v.clone(), key.to_owned()));
        }
        if let Some(v) = &entry.idx2 {
            self.idx2.insert((v.clone(), key.to_owned()));
        }
        self.entries.insert(
            key.to_owned(),
            Versioned {
                version: next_version,
                value: entry.value,
                idx1: entry.idx1,
                idx2: entry.idx2,
            },
        );
        CasOutcome::Ok {
            version: next_version,
        }
    }

    fn apply_delete(&mut self, key: &str, expected: u64) -> CasOutcome {
        let current = self.entries.get(key).map(|v| v.version);
        if current != Some(expected) {
            return CasOutcome::Conflict { current };
        }
        if let Some(old) = self.entries.remove(key) {
            self.unindex(key, &old);
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
            .and_then(|s| s.entries.get(key).cloned()))
    }

    async fn cas(
        &self,
        scope: &Scope,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
    ) -> Result<CasOutcome, KvError> {
        let version = self.next_version();
        let mut scopes = self.lock();
        let data = scopes.entry(scope.id().to_owned()).or_default();
        Ok(data.apply_cas(key, expected, entry, version))
    }

    async fn delete(
        &self,
        scope: &Scope,
        key: &str,
        expected: u64,
    ) -> Result<CasOutcome, KvError> {
        let mut scopes = self.lock();
        let data = scopes.entry(scope.id().to_owned()).or_default();
        Ok(data.apply_delete(key, expected))
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
        let start = (from.to_owned(), String::new());
        let out = set
            .range(start..)
            .take_while(|(value, _)| value.as_str() < to)
            .filter_map(|(_, key)| {
                data.entries.get(key).map(|entry| KvRecord {
                    key: key.clone(),
                    entry: entry.clone(),
                })
            })
            .take(limit)
            .collect();
        Ok(out)
    }

    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        let versions: Vec<u64> = ops.iter().map(|_| self.next_version()).collect();
        let mut scopes = self.lock();
        let data = scopes.entry(scope.id().to_owned()).or_default();
        Ok(ops
            .into_iter()
            .zip(versions)
            .map(|(op, version)| match op {
                KvOp::Cas {
                    key,
                    expected,
                    entry,
                } => data.apply_cas(&key, expected, entry, version),
                KvOp::Delete { key, expected } => data.apply_delete(&key, expected),
            })
            .collect())
    }
}
