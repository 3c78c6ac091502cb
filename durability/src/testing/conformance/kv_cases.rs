//! Conformance cases on the raw `DurableKv` contract (no journal involved).

use std::sync::Arc;

use super::{Ctx, ensure, ensure_count};
use crate::kv::{CasOutcome, DurableKv, Entry, Index, KvOp, Scope};

type Case = Result<(), String>;

pub(super) fn scope() -> Scope {
    Scope::new("tenant", "test", "bot", "conn")
}

pub(super) fn entry(value: &str, idx1: Option<&str>, idx2: Option<&str>) -> Entry {
    Entry {
        value: value.as_bytes().to_vec(),
        idx1: idx1.map(str::to_owned),
        idx2: idx2.map(str::to_owned),
    }
}

fn version(outcome: CasOutcome) -> Result<u64, String> {
    match outcome {
        CasOutcome::Ok { version } => Ok(version),
        CasOutcome::Conflict { current } => {
            Err(format!("unexpected conflict (current {current:?})"))
        }
    }
}

/// Writes `entry` at `key` with a compare-and-set on `expected`: its new version, or an
/// error naming the write (a conflict included).
async fn written(
    kv: &Arc<dyn DurableKv>,
    s: &Scope,
    key: &str,
    expected: Option<u64>,
    entry: Entry,
) -> Result<u64, String> {
    let what = format!("cas of {key:?} expecting {expected:?}");
    version(kv.cas(s, key, expected, entry).await.ctx(&what)?).map_err(|e| format!("{what}: {e}"))
}

pub(super) async fn keys_in(
    kv: &Arc<dyn DurableKv>,
    s: &Scope,
    index: Index,
    from: &str,
    to: &str,
) -> Result<Vec<String>, String> {
    Ok(kv
        .range(s, index, from, to, 100)
        .await
        .ctx("range")?
        .into_iter()
        .map(|r| r.key)
        .collect())
}

pub(super) async fn create_only_if_absent(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    ensure!(
        kv.get(&s, "k").await.ctx("get")?.is_none(),
        "a missing key must read as None"
    );
    let v1 = written(&kv, &s, "k", None, entry("a", None, None)).await?;
    let again = kv
        .cas(&s, "k", None, entry("b", None, None))
        .await
        .ctx("second create")?;
    ensure!(
        again == CasOutcome::Conflict { current: Some(v1) },
        "second create must conflict with the current version, got {again:?}"
    );
    let got = kv
        .get(&s, "k")
        .await
        .ctx("get")?
        .ok_or("created key is missing")?;
    ensure!(
        got.value == b"a" && got.version == v1,
        "the first create must stay, got {got:?}"
    );
    Ok(())
}

fn guarded(key: &str, value: &str, idx2: &str, from: &str, to: &str) -> KvOp {
    KvOp::CreateIfNoneIn {
        key: key.into(),
        entry: entry(value, None, Some(idx2)),
        index: Index::Two,
        from: from.into(),
        to: to.into(),
    }
}

/// A guarded create writes only when its key is absent and its range lists nothing: an entry
/// in the range answers `Conflict { current: None }` and writes nothing, the range's ends are
/// half-open, and the key found answers its version (also when its range lists entries).
pub(super) async fn guarded_create_checks_its_range(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let earlier = written(&kv, &s, "a1", None, entry("1", None, Some("c/a/1"))).await?;
    kv.cas(&s, "b1", None, entry("1", None, Some("c/b/1")))
        .await
        .ctx("create b1")?;
    let behind = kv
        .apply(&s, guarded("a2", "2", "c/a/2", "c/a/", "c/a/2"))
        .await
        .ctx("guarded create behind a1")?;
    ensure!(
        behind == CasOutcome::Conflict { current: None },
        "an entry in the range must answer Conflict {{ current: None }}, got {behind:?}"
    );
    ensure!(
        kv.get(&s, "a2").await.ctx("get a2")?.is_none(),
        "a guarded create whose range lists an entry must write nothing"
    );
    // The range is half-open: `c/a/1` is its end, not in it; another chat's entry is not in it.
    let first = kv
        .apply(&s, guarded("a0", "0", "c/a/0", "c/a/", "c/a/1"))
        .await
        .ctx("guarded create before a1")?;
    ensure!(
        first.is_ok(),
        "a range listing nothing must let the create through, got {first:?}"
    );
    ensure!(
        keys_in(&kv, &s, Index::Two, "c/a/", "c/a0").await? == ["a0", "a1"],
        "the guarded create must be indexed"
    );
    let taken = kv
        .apply(&s, guarded("a1", "x", "c/a/9", "c/z/", "c/z0"))
        .await
        .ctx("guarded create of a taken key")?;
    ensure!(
        taken
            == CasOutcome::Conflict {
                current: Some(earlier)
            },
        "a guarded create of a taken key must answer its version, got {taken:?}"
    );
    // A taken key whose range also lists an entry (here the key's own): the key's version.
    let both = kv
        .apply(&s, guarded("a1", "x", "c/a/9", "c/a/", "c/a0"))
        .await
        .ctx("guarded create of a taken key, its range listing entries")?;
    ensure!(
        both == CasOutcome::Conflict {
            current: Some(earlier)
        },
        "a guarded create of a taken key must answer its version also when its range lists \
         entries, got {both:?}"
    );
    kv.delete(&s, "a1", earlier).await.ctx("delete a1")?;
    kv.delete(&s, "a0", version(first)?)
        .await
        .ctx("delete a0")?;
    let clear = kv
        .apply(&s, guarded("a2", "2", "c/a/2", "c/a/", "c/a/2"))
        .await
        .ctx("guarded create, range emptied")?;
    ensure!(
        clear.is_ok(),
        "once the range's entries are gone the create goes through, got {clear:?}"
    );
    Ok(())
}

/// In a batch a guarded create sees the operations before it: an entry they create in its
/// range stops it, an entry they delete (or move out of it) no longer does.
pub(super) async fn guarded_create_sees_its_batch(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let old = written(&kv, &s, "m1", None, entry("1", None, Some("c/m/1"))).await?;
    let moved = written(&kv, &s, "n1", None, entry("1", None, Some("c/n/1"))).await?;
    let outcomes = kv
        .batch(
            &s,
            vec![
                KvOp::Delete {
                    key: "m1".into(),
                    expected: old,
                },
                guarded("m2", "2", "c/m/2", "c/m/", "c/m/2"),
                KvOp::Cas {
                    key: "n1".into(),
                    expected: Some(moved),
                    entry: entry("1", None, None),
                },
                guarded("n2", "2", "c/n/2", "c/n/", "c/n/2"),
                KvOp::Cas {
                    key: "p1".into(),
                    expected: None,
                    entry: entry("1", None, Some("c/p/1")),
                },
                guarded("p2", "2", "c/p/2", "c/p/", "c/p/2"),
            ],
        )
        .await
        .ctx("batch")?;
    ensure_count(&outcomes, 6, "one outcome per op")?;
    ensure!(
        outcomes[1].is_ok() && outcomes[3].is_ok(),
        "an entry deleted or moved out by an earlier op of the batch must not stop a guarded create, got {outcomes:?}"
    );
    ensure!(
        outcomes[5] == CasOutcome::Conflict { current: None },
        "an entry created by an earlier op of the batch must stop a guarded create, got {outcomes:?}"
    );
    ensure!(
        kv.get(&s, "p2").await.ctx("get p2")?.is_none(),
        "the stopped create must write nothing"
    );
    Ok(())
}

pub(super) async fn replace_needs_current_version(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let v1 = written(&kv, &s, "k", None, entry("a", None, None)).await?;
    let v2 = written(&kv, &s, "k", Some(v1), entry("b", None, None)).await?;
    ensure!(v2 != v1, "a replace must change the version");
    let stale = kv
        .cas(&s, "k", Some(v1), entry("c", None, None))
        .await
        .ctx("stale replace")?;
    ensure!(
        stale == CasOutcome::Conflict { current: Some(v2) },
        "a stale replace must conflict, got {stale:?}"
    );
    let missing = kv
        .cas(&s, "nope", Some(v1), entry("c", None, None))
        .await
        .ctx("replace missing")?;
    ensure!(
        missing == CasOutcome::Conflict { current: None },
        "replacing a missing key must conflict with None, got {missing:?}"
    );
    let got = kv.get(&s, "k").await.ctx("get")?.ok_or("key missing")?;
    ensure!(
        got.value == b"b" && got.version == v2,
        "value must be the replaced one, got {got:?}"
    );
    Ok(())
}

pub(super) async fn delete_needs_current_version(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let v1 = written(&kv, &s, "k", None, entry("a", Some("i"), Some("j"))).await?;
    let stale = kv.delete(&s, "k", v1 + 1000).await.ctx("stale delete")?;
    ensure!(
        matches!(stale, CasOutcome::Conflict { current: Some(v) } if v == v1),
        "a delete at a wrong version must conflict, got {stale:?}"
    );
    let done = kv.delete(&s, "k", v1).await.ctx("delete")?;
    ensure!(
        done.is_ok(),
        "delete at the current version must succeed, got {done:?}"
    );
    ensure!(
        kv.get(&s, "k").await.ctx("get")?.is_none(),
        "a deleted key must be gone"
    );
    ensure!(
        keys_in(&kv, &s, Index::One, "", "~").await?.is_empty(),
        "a deleted key must leave idx1"
    );
    ensure!(
        keys_in(&kv, &s, Index::Two, "", "~").await?.is_empty(),
        "a deleted key must leave idx2"
    );
    let again = kv.delete(&s, "k", v1).await.ctx("delete again")?;
    ensure!(
        again == CasOutcome::Conflict { current: None },
        "deleting a missing key must conflict with None, got {again:?}"
    );
    Ok(())
}

pub(super) async fn versions_never_reused(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let mut seen = Vec::new();
    let mut current = written(&kv, &s, "k", None, entry("a", None, None)).await?;
    seen.push(current);
    for i in 0..3 {
        current = written(
            &kv,
            &s,
            "k",
            Some(current),
            entry(&format!("v{i}"), None, None),
        )
        .await?;
        ensure!(!seen.contains(&current), "version {current} was reused");
        seen.push(current);
    }
    kv.delete(&s, "k", current).await.ctx("delete")?;
    let recreated = written(&kv, &s, "k", None, entry("again", None, None)).await?;
    ensure!(
        !seen.contains(&recreated),
        "a re-created key got version {recreated}, which it had before: a stale holder could overwrite it"
    );
    for old in &seen {
        let stale = kv
            .cas(&s, "k", Some(*old), entry("stale", None, None))
            .await
            .ctx("stale cas")?;
        ensure!(
            !stale.is_ok(),
            "a CAS at the old version {old} overwrote the re-created key"
        );
    }
    Ok(())
}

pub(super) async fn failed_cas_changes_nothing(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let v1 = written(&kv, &s, "k", None, entry("a", Some("x1"), Some("y1"))).await?;
    let out = kv
        .cas(&s, "k", Some(v1 + 1000), entry("b", Some("x2"), None))
        .await
        .ctx("conflicting cas")?;
    ensure!(!out.is_ok(), "a CAS at a wrong version must conflict");
    let got = kv.get(&s, "k").await.ctx("get")?.ok_or("key missing")?;
    ensure!(
        got.value == b"a" && got.idx1.as_deref() == Some("x1") && got.idx2.as_deref() == Some("y1"),
        "a failed CAS changed the entry: {got:?}"
    );
    ensure!(
        keys_in(&kv, &s, Index::One, "x1", "x1~").await? == ["k"],
        "a failed CAS moved idx1"
    );
    ensure!(
        keys_in(&kv, &s, Index::One, "x2", "x2~").await?.is_empty(),
        "a failed CAS added idx1"
    );
    ensure!(
        keys_in(&kv, &s, Index::Two, "y1", "y1~").await? == ["k"],
        "a failed CAS moved idx2"
    );
    Ok(())
}

pub(super) async fn write_moves_indexes_together(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let v1 = written(&kv, &s, "k", None, entry("a", Some("a/1"), Some("c/1"))).await?;
    let v2 = written(&kv, &s, "k", Some(v1), entry("b", Some("b/1"), None)).await?;
    ensure!(
        keys_in(&kv, &s, Index::One, "a/", "a0").await?.is_empty(),
        "the old idx1 value is still listed"
    );
    let listed = kv
        .range(&s, Index::One, "b/", "b0", 10)
        .await
        .ctx("range")?;
    ensure!(
        listed.len() == 1 && listed[0].entry.value == b"b" && listed[0].entry.version == v2,
        "the new idx1 value must list the new entry, got {listed:?}"
    );
    ensure!(
        keys_in(&kv, &s, Index::Two, "", "~").await?.is_empty(),
        "an idx2 set to None is still listed"
    );
    Ok(())
}

pub(super) async fn batch_reports_each_op(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let v = written(&kv, &s, "exists", None, entry("a", Some("i/a"), None)).await?;
    let outcomes = kv
        .batch(
            &s,
            vec![
                KvOp::Cas {
                    key: "new".into(),
                    expected: None,
                    entry: entry("n", Some("i/n"), None),
                },
                KvOp::Cas {
                    key: "exists".into(),
                    expected: None,
                    entry: entry("x", None, None),
                },
                KvOp::Cas {
                    key: "exists".into(),
                    expected: Some(v),
                    entry: entry("b", Some("i/b"), None),
                },
                KvOp::Delete {
                    key: "missing".into(),
                    expected: 1,
                },
            ],
        )
        .await
        .ctx("batch")?;
    ensure_count(&outcomes, 4, "one outcome per op")?;
    ensure!(
        outcomes[0].is_ok(),
        "create in a batch failed: {:?}",
        outcomes[0]
    );
    ensure!(
        outcomes[1] == CasOutcome::Conflict { current: Some(v) },
        "a conflicting op must report its conflict, got {:?}",
        outcomes[1]
    );
    ensure!(
        outcomes[2].is_ok(),
        "an op after a conflict must still apply, got {:?}",
        outcomes[2]
    );
    ensure!(
        outcomes[3] == CasOutcome::Conflict { current: None },
        "deleting a missing key must conflict, got {:?}",
        outcomes[3]
    );
    ensure!(
        keys_in(&kv, &s, Index::One, "i/", "i0").await? == ["exists", "new"],
        "batch writes must be indexed"
    );
    Ok(())
}

pub(super) async fn concurrent_creates_have_one_winner(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let kv = Arc::clone(&kv);
        let s = s.clone();
        tasks.spawn(async move {
            kv.cas(&s, "race", None, entry(&format!("w{i}"), Some("r"), None))
                .await
        });
    }
    let mut winners = 0;
    while let Some(joined) = tasks.join_next().await {
        if joined.ctx("task")?.ctx("cas")?.is_ok() {
            winners += 1;
        }
    }
    ensure!(
        winners == 1,
        "{winners} concurrent creates of one key succeeded, expected exactly 1"
    );
    ensure!(
        keys_in(&kv, &s, Index::One, "r", "r~").await? == ["race"],
        "the key must be indexed once"
    );
    Ok(())
}

pub(super) async fn values_are_opaque_bytes(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    let samples: [&[u8]; 4] = [b"", &[0, 159, 146, 150, 255], b"{not json", &[0xC3, 0x28]];
    for (i, bytes) in samples.iter().enumerate() {
        let key = format!("bytes{i}");
        let e = Entry {
            value: bytes.to_vec(),
            idx1: Some(format!("b/{i}")),
            idx2: None,
        };
        kv.cas(&s, &key, None, e).await.ctx("create")?;
        let got = kv.get(&s, &key).await.ctx("get")?.ok_or("missing")?;
        ensure!(
            got.value == *bytes,
            "value {i} did not round-trip: {:?} != {bytes:?}",
            got.value
        );
    }
    let listed = kv
        .range(&s, Index::One, "b/", "b0", 10)
        .await
        .ctx("range")?;
    ensure!(
        listed.len() == 4 && listed[1].entry.value == samples[1],
        "listed values must be the stored bytes"
    );
    Ok(())
}

pub(super) async fn scopes_are_isolated(kv: Arc<dyn DurableKv>) -> Case {
    let a = Scope::new("t", "prod", "bot-a", "c");
    let b = Scope::new("t", "prod", "bot-b", "c");
    // Ids that only differ in how parts are split must not collide either.
    let c = Scope::new("t", "prod", "bot-a/c", "");
    ensure!(a.id() != c.id(), "scope ids {a} and {c} collide");
    let va = written(&kv, &a, "same", None, entry("A", Some("i"), Some("j"))).await?;
    written(&kv, &b, "same", None, entry("B", Some("i"), Some("j"))).await?;
    ensure!(
        kv.get(&c, "same").await.ctx("get c")?.is_none(),
        "scope {c} sees {a}'s key"
    );
    ensure!(
        kv.get(&a, "same")
            .await
            .ctx("get a")?
            .ok_or("a missing")?
            .value
            == b"A",
        "scope a must keep its own value"
    );
    ensure!(
        kv.get(&b, "same")
            .await
            .ctx("get b")?
            .ok_or("b missing")?
            .value
            == b"B",
        "scope b must keep its own value"
    );
    for index in [Index::One, Index::Two] {
        let listed = kv.range(&a, index, "", "~", 10).await.ctx("range a")?;
        ensure!(
            listed.len() == 1 && listed[0].entry.value == b"A",
            "{index:?} of scope a lists another scope's entries: {listed:?}"
        );
    }
    kv.delete(&a, "same", va).await.ctx("delete a")?;
    ensure!(
        kv.get(&b, "same").await.ctx("get b")?.is_some(),
        "a delete in scope a removed scope b's key"
    );
    Ok(())
}
