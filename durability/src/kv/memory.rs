//! `MemoryKv`: the in-memory [`DurableKv`], the reference implementation of the SPI, for tests
//! and for `MemoryDurability`.
//!
//! One mutex guards, per scope, an ordered map of entries and two ordered sets of
//! `(index value, key)` pairs, one per secondary index. Every operation takes the lock, does
//! what the contract in [`super`] says with plain `BTreeMap`/`BTreeSet` calls and lets go: no
//! cache, no deferred index upkeep, nothing the journals' layout is known to. Rust compares
//! `String`s byte by byte, which is the order the contract asks of a range.
//!
//! Clones share the same state, so a test can drop a "crashed" durability and open a new one
//! on the same data. Nothing survives the process: this backend gives retries, backoff and the
//! DLQ, not crash recovery. Versions come from one counter for the whole backend, so a
//! re-created key never gets a version it had before.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    CasOutcome, DurableKv, Entry, Index, KvError, KvOp, KvRecord, RangeQuery, Scope, Versioned,
};

/// The entries of one scope and its two indexes.
#[derive(Default)]
struct ScopeData {
    entries: BTreeMap<String, Versioned>,
    idx1: BTreeSet<(String, String)>,
    idx2: BTreeSet<(String, String)>,
}

impl ScopeData {
    fn index(&self, index: Index) -> &BTreeSet<(String, String)> {
        match index {
            Index::One => &self.idx1,
            Index::Two => &self.idx2,
        }
    }

    /// Takes `key`'s index values out of both indexes.
    fn unindex(&mut self, key: &str, stored: &Versioned) {
        if let Some(v) = &stored.idx1 {
            self.idx1.remove(&(v.clone(), key.to_owned()));
        }
        if let Some(v) = &stored.idx2 {
            self.idx2.remove(&(v.clone(), key.to_owned()));
        }
    }

    fn cas(
        &mut self,
        key: &str,
        expected: Option<u64>,
        entry: Entry,
        last_version: &mut u64,
    ) -> CasOutcome {
        let current = self.entries.get(key).map(|e| e.version);
        if current != expected {
            return CasOutcome::Conflict { current };
        }
        if let Some(old) = self.entries.remove(key) {
            self.unindex(key, &old);
        }
        *last_version += 1;
        let version = *last_version;
        if let Some(v) = &entry.idx1 {
            self.idx1.insert((v.clone(), key.to_owned()));
        }
        if let Some(v) = &entry.idx2 {
            self.idx2.insert((v.clone(), key.to_owned()));
        }
        self.entries.insert(
            key.to_owned(),
            Versioned {
                version,
                value: entry.value,
                idx1: entry.idx1,
                idx2: entry.idx2,
            },
        );
        CasOutcome::Ok { version }
    }

    fn delete(&mut self, key: &str, expected: u64) -> CasOutcome {
        match self.entries.get(key).map(|e| e.version) {
            Some(version) if version == expected => {
                if let Some(old) = self.entries.remove(key) {
                    self.unindex(key, &old);
                }
                CasOutcome::Ok { version }
            }
            current => CasOutcome::Conflict { current },
        }
    }

    /// Whether some entry has a value of `index` in `from..to`.
    fn listed(&self, index: Index, from: &str, to: &str) -> bool {
        from < to
            && self
                .index(index)
                .range((
                    Bound::Included((from.to_owned(), String::new())),
                    Bound::Unbounded,
                ))
                .next()
                .is_some_and(|(value, _)| value.as_str() < to)
    }

    fn apply(&mut self, op: KvOp, last_version: &mut u64) -> CasOutcome {
        if let Some((index, from, to)) = op.guard() {
            if let Some(found) = self.entries.get(op.key()) {
                let current = Some(found.version);
                return CasOutcome::Conflict { current };
            }
            if self.listed(index, from, to) {
                return CasOutcome::Conflict { current: None };
            }
        }
        match op {
            KvOp::Cas {
                key,
                expected,
                entry,
            } => self.cas(&key, expected, entry, last_version),
            // Its range checked above: a create.
            KvOp::CreateIfNoneIn { key, entry, .. } => self.cas(&key, None, entry, last_version),
            KvOp::Delete { key, expected } => self.delete(&key, expected),
        }
    }
}

#[derive(Default)]
struct State {
    scopes: HashMap<String, ScopeData>,
    /// The last version given, to any key of any scope.
    last_version: u64,
}

/// An in-memory [`DurableKv`]; `Clone` shares the same data.
#[derive(Clone, Default)]
pub struct MemoryKv {
    state: Arc<Mutex<State>>,
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
        // Each operation checks before it changes anything and cannot panic half-way, so a
        // poisoned lock still guards consistent data.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the data of `scope` (created on first use) and the version counter.
    fn write<T>(&self, scope: &Scope, f: impl FnOnce(&mut ScopeData, &mut u64) -> T) -> T {
        let mut state = self.lock();
        let State {
            scopes,
            last_version,
        } = &mut *state;
        f(
            scopes.entry(scope.id().to_owned()).or_default(),
            last_version,
        )
    }

    /// How many entries a scope holds (for tests).
    pub fn len(&self, scope: &Scope) -> usize {
        self.lock()
            .scopes
            .get(scope.id())
            .map_or(0, |s| s.entries.len())
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
            .scopes
            .get(scope.id())
            .and_then(|s| s.entries.get(key))
            .cloned())
    }

    async fn apply(&self, scope: &Scope, op: KvOp) -> Result<CasOutcome, KvError> {
        Ok(self.write(scope, |data, last| data.apply(op, last)))
    }

    async fn scan(&self, scope: &Scope, query: RangeQuery<'_>) -> Result<Vec<KvRecord>, KvError> {
        let (index, from, to, limit) = (query.index, query.from, query.to, query.limit);
        if from >= to {
            return Ok(Vec::new());
        }
        let state = self.lock();
        let Some(data) = state.scopes.get(scope.id()) else {
            return Ok(Vec::new());
        };
        let start = (from.to_owned(), String::new());
        Ok(data
            .index(index)
            .range((Bound::Included(start), Bound::Unbounded))
            .take_while(|(value, _)| value.as_str() < to)
            .take(limit)
            .filter_map(|(_, key)| {
                let entry = data.entries.get(key)?.clone();
                Some(KvRecord {
                    key: key.clone(),
                    entry,
                })
            })
            .collect())
    }

    /// All operations under one lock: nothing else runs between them.
    async fn batch(&self, scope: &Scope, ops: Vec<KvOp>) -> Result<Vec<CasOutcome>, KvError> {
        Ok(self.write(scope, |data, last| {
            ops.into_iter().map(|op| data.apply(op, last)).collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{CasOutcome, DurableKv, Entry, Index, Scope};
    use super::MemoryKv;

    /// A scope is found by its id whether the caller asks with the scope that created it, a
    /// clone, or an equal scope built apart.
    #[tokio::test]
    async fn a_scope_is_found_by_its_id_however_it_is_asked_for() {
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
        for scope in [&a, &b, &a_apart, &a.clone()] {
            let expected = if scope.id() == "a" { 1 } else { 2 };
            let got = kv.get(scope, "k").await.unwrap().unwrap();
            assert_eq!(got.value, vec![expected], "scope {}", scope.id());
            assert_eq!(kv.len(scope), 1);
        }
        assert!(kv.is_empty(&Scope::custom("c")));
    }

    /// Random writes, deletes and range reads of both indexes answer exactly what a plain
    /// sorted model of the entries answers.
    #[tokio::test]
    async fn ranges_match_a_model_whatever_the_writes() {
        let kv = MemoryKv::new();
        let scope = Scope::custom("model");
        let mut rng = fastrand::Rng::with_seed(7);
        // key -> (version, idx1, idx2)
        let mut model: BTreeMap<String, (u64, Option<String>, Option<String>)> = BTreeMap::new();
        let value = |rng: &mut fastrand::Rng| {
            rng.bool().then(|| match rng.u8(..4) {
                0 => ["o", "o/a", "o/b", "o/", "é", "\u{ff}"][rng.usize(..6)].to_owned(),
                1 => format!("o/a/x/{:02}", rng.u32(..20)),
                _ => format!("o/{}/{:04}", ["a", "b", "c"][rng.usize(..3)], rng.u32(..50)),
            })
        };
        for step in 0..3000 {
            let key = format!("k{}", rng.usize(..300));
            match rng.u8(..10) {
                0 => {
                    if let Some((version, ..)) = model.get(&key).cloned() {
                        let out = kv.delete(&scope, &key, version).await.unwrap();
                        assert!(out.is_ok());
                        model.remove(&key);
                    }
                }
                1 => {
                    let index = if rng.bool() { Index::One } else { Index::Two };
                    let (from, to) = [
                        ("o/a", "o/c/0025"),
                        ("o", "o/b/0010"),
                        ("o/a/x/05", "p"),
                        ("o/", "o/a/"),
                        ("o/a/0010", "o/a/x"),
                        ("", "\u{10FFFF}"),
                    ][rng.usize(..6)];
                    let limit = rng.usize(1..400);
                    let got: Vec<String> = kv
                        .range(&scope, index, from, to, limit)
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
                    let want: Vec<String> = want.into_iter().take(limit).map(|(_, k)| k).collect();
                    assert_eq!(got, want, "step {step}");
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
    }
}
