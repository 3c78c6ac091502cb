//! The in-memory image of a [`FileDurability`](super::FileDurability) file, and the
//! evaluation of a group of writes against it.
//!
//! Reads are served from [`State`] alone. The writer thread evaluates a group of write
//! requests with a [`Pending`] overlay on top of the state (so a later request of the group
//! sees the earlier ones), persists the resulting [`Change`]s, and only then applies them to
//! the state. A reader therefore never sees a write that is not durable yet, and a write that
//! failed to persist leaves the state untouched.
//!
//! Versions come from one counter for the whole file (`last_version`), carried by the snapshot
//! and raised by every replayed `put`, so a re-created key never gets a version it had before.

use std::collections::{BTreeSet, HashMap};

use super::format::{Change, StoredEntry};
use crate::kv::{CasOutcome, Entry, Index, KvOp, KvRecord, Versioned};

#[derive(Debug, Default)]
struct ScopeData {
    entries: HashMap<String, Versioned>,
    idx1: BTreeSet<(String, String)>,
    idx2: BTreeSet<(String, String)>,
}

/// Every entry of the file, per scope, with the two indexes.
#[derive(Debug, Default)]
pub(crate) struct State {
    scopes: HashMap<String, ScopeData>,
    /// The highest version ever given.
    pub(crate) last_version: u64,
}

impl State {
    /// One entry.
    pub(crate) fn get(&self, scope: &str, key: &str) -> Option<&Versioned> {
        self.scopes.get(scope)?.entries.get(key)
    }

    /// Entries whose `index` value is in `from..to`, sorted by (value, key), at most `limit`.
    pub(crate) fn range(
        &self,
        scope: &str,
        index: Index,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Vec<KvRecord> {
        if from >= to || limit == 0 {
            return Vec::new();
        }
        let Some(data) = self.scopes.get(scope) else {
            return Vec::new();
        };
        let set = match index {
            Index::One => &data.idx1,
            Index::Two => &data.idx2,
        };
        set.range((from.to_owned(), String::new())..)
            .take_while(|(value, _)| value.as_str() < to)
            .filter_map(|(_, key)| {
                data.entries.get(key).map(|entry| KvRecord {
                    key: key.clone(),
                    entry: entry.clone(),
                })
            })
            .take(limit)
            .collect()
    }

    /// How many entries the file holds.
    pub(crate) fn len(&self) -> usize {
        self.scopes.values().map(|s| s.entries.len()).sum()
    }

    /// Stores `entry` (from a snapshot).
    pub(crate) fn load(&mut self, entry: StoredEntry) {
        self.last_version = self.last_version.max(entry.version);
        self.put(
            &entry.scope,
            entry.key,
            Versioned {
                version: entry.version,
                value: entry.value,
                idx1: entry.idx1,
                idx2: entry.idx2,
            },
        );
    }

    /// Applies one committed (or replayed) change.
    pub(crate) fn apply(&mut self, scope: &str, change: Change) {
        match change {
            Change::Put {
                key,
                version,
                value,
                idx1,
                idx2,
            } => {
                self.last_version = self.last_version.max(version);
                self.put(
                    scope,
                    key,
                    Versioned {
                        version,
                        value,
                        idx1,
                        idx2,
                    },
                );
            }
            Change::Del { key } => {
                if let Some(data) = self.scopes.get_mut(scope) {
                    if let Some(old) = data.entries.remove(&key) {
                        unindex(data, &key, &old);
                    }
                    if data.entries.is_empty() {
                        self.scopes.remove(scope);
                    }
                }
            }
        }
    }

    fn put(&mut self, scope: &str, key: String, entry: Versioned) {
        let data = self.scopes.entry(scope.to_owned()).or_default();
        if let Some(old) = data.entries.remove(&key) {
            unindex(data, &key, &old);
        }
        if let Some(v) = &entry.idx1 {
            data.idx1.insert((v.clone(), key.clone()));
        }
        if let Some(v) = &entry.idx2 {
            data.idx2.insert((v.clone(), key.clone()));
        }
        data.entries.insert(key, entry);
    }

    /// Every entry, as stored in a snapshot, with `pending` changes applied on top.
    pub(crate) fn stored<'a>(
        &'a self,
        pending: Option<&'a Pending<'a>>,
    ) -> impl Iterator<Item = StoredEntry> + 'a {
        let touched = move |scope: &str, key: &str| {
            pending.is_some_and(|p| p.touched.contains_key(&(scope.to_owned(), key.to_owned())))
        };
        let base = self.scopes.iter().flat_map(move |(scope, data)| {
            data.entries
                .iter()
                .filter(move |(key, _)| !touched(scope, key))
                .map(move |(key, v)| stored(scope, key, v))
        });
        let overlay = pending.into_iter().flat_map(|p| {
            p.touched
                .iter()
                .filter_map(|((scope, key), v)| v.as_ref().map(|v| stored(scope, key, v)))
        });
        base.chain(overlay)
    }
}

fn stored(scope: &str, key: &str, v: &Versioned) -> StoredEntry {
    StoredEntry {
        scope: scope.to_owned(),
        key: key.to_owned(),
        version: v.version,
        value: v.value.clone(),
        idx1: v.idx1.clone(),
        idx2: v.idx2.clone(),
    }
}

fn unindex(data: &mut ScopeData, key: &str, old: &Versioned) {
    if let Some(v) = &old.idx1 {
        data.idx1.remove(&(v.clone(), key.to_owned()));
    }
    if let Some(v) = &old.idx2 {
        data.idx2.remove(&(v.clone(), key.to_owned()));
    }
}

/// A group of writes being evaluated: the changes so far, over the committed state.
pub(crate) struct Pending<'a> {
    base: &'a State,
    touched: HashMap<(String, String), Option<Versioned>>,
    /// The highest version given so far (committed or pending).
    pub(crate) last_version: u64,
}

impl<'a> Pending<'a> {
    /// An empty overlay on `base`.
    pub(crate) fn new(base: &'a State) -> Self {
        Pending {
            base,
            touched: HashMap::new(),
            last_version: base.last_version,
        }
    }

    fn current(&self, scope: &str, key: &str) -> Option<u64> {
        match self.touched.get(&(scope.to_owned(), key.to_owned())) {
            Some(v) => v.as_ref().map(|v| v.version),
            None => self.base.get(scope, key).map(|v| v.version),
        }
    }

    /// Whether some entry of `scope` has a value of `index` in `from..to`, the group's
    /// changes so far included.
    fn listed(&self, scope: &str, index: Index, from: &str, to: &str) -> bool {
        let in_range = |v: &Versioned| {
            let value = match index {
                Index::One => v.idx1.as_deref(),
                Index::Two => v.idx2.as_deref(),
            };
            value.is_some_and(|v| v >= from && v < to)
        };
        let touched = |key: &str| {
            self.touched
                .contains_key(&(scope.to_owned(), key.to_owned()))
        };
        // A touched entry counts with its pending value; the stored ones only when untouched
        // (one more than the touched keys is enough to find an untouched one).
        self.touched
            .iter()
            .any(|((s, _), v)| s == scope && v.as_ref().is_some_and(in_range))
            || self
                .base
                .range(scope, index, from, to, self.touched.len() + 1)
                .iter()
                .any(|r| !touched(&r.key))
    }

    /// Evaluates one operation; the change to persist when it succeeds.
    pub(crate) fn eval(&mut self, scope: &str, op: KvOp) -> (CasOutcome, Option<Change>) {
        if let Some((index, from, to)) = op.guard() {
            if let Some(current) = self.current(scope, op.key()) {
                let current = Some(current);
                return (CasOutcome::Conflict { current }, None);
            }
            if self.listed(scope, index, from, to) {
                return (CasOutcome::Conflict { current: None }, None);
            }
        }
        match op {
            // Checked above: from here a create.
            KvOp::CreateIfNoneIn { key, entry, .. } => self.eval(
                scope,
                KvOp::Cas {
                    key,
                    expected: None,
                    entry,
                },
            ),
            KvOp::Cas {
                key,
                expected,
                entry,
            } => {
                let current = self.current(scope, &key);
                if current != expected {
                    return (CasOutcome::Conflict { current }, None);
                }
                self.last_version += 1;
                let version = self.last_version;
                let Entry { value, idx1, idx2 } = entry;
                let versioned = Versioned {
                    version,
                    value: value.clone(),
                    idx1: idx1.clone(),
                    idx2: idx2.clone(),
                };
                self.touched
                    .insert((scope.to_owned(), key.clone()), Some(versioned));
                let change = Change::Put {
                    key,
                    version,
                    value,
                    idx1,
                    idx2,
                };
                (CasOutcome::Ok { version }, Some(change))
            }
            KvOp::Delete { key, expected } => {
                let current = self.current(scope, &key);
                if current != Some(expected) {
                    return (CasOutcome::Conflict { current }, None);
                }
                self.touched.insert((scope.to_owned(), key.clone()), None);
                (
                    CasOutcome::Ok { version: expected },
                    Some(Change::Del { key }),
                )
            }
        }
    }
}
