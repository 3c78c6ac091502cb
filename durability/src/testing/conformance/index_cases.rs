//! Conformance cases on the two sorted secondary indexes of a `DurableKv`.

use std::sync::Arc;

use super::kv_cases::{entry, keys_in, scope};
use super::{Ctx, ensure};
use crate::kv::{DurableKv, Index};

type Case = Result<(), String>;

pub(super) async fn range_sorted_by_value_then_key(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    for (key, idx) in [("k3", "b"), ("k1", "b"), ("k2", "a"), ("k0", "c")] {
        kv.cas(&s, key, None, entry(key, Some(idx), Some(idx)))
            .await
            .ctx("create")?;
    }
    for index in [Index::One, Index::Two] {
        let got = keys_in(&kv, &s, index, "a", "z").await?;
        ensure!(
            got == ["k2", "k1", "k3", "k0"],
            "{index:?} must sort by (value, key), got {got:?}"
        );
    }
    Ok(())
}

pub(super) async fn range_is_half_open_and_limited(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    for (key, idx) in [("a", "p/1"), ("b", "p/2"), ("c", "p/3"), ("d", "q/1")] {
        kv.cas(&s, key, None, entry(key, Some(idx), None))
            .await
            .ctx("create")?;
    }
    ensure!(
        keys_in(&kv, &s, Index::One, "p/1", "p/3").await? == ["a", "b"],
        "range must include `from` and exclude `to`"
    );
    let limited = kv.range(&s, Index::One, "p/", "p0", 2).await.ctx("range")?;
    ensure!(
        limited.iter().map(|r| r.key.as_str()).collect::<Vec<_>>() == ["a", "b"],
        "limit must keep the first entries"
    );
    ensure!(
        kv.range(&s, Index::One, "p/", "p0", 0)
            .await
            .ctx("range")?
            .is_empty(),
        "limit 0 must return nothing"
    );
    ensure!(
        kv.range(&s, Index::One, "q", "p", 10)
            .await
            .ctx("range")?
            .is_empty(),
        "an empty range must return nothing"
    );
    Ok(())
}

pub(super) async fn range_is_bytewise(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    for (key, idx) in [
        ("lower", "a"),
        ("upper", "Z"),
        ("accent", "é"),
        ("digit", "9"),
        ("colon", ":"),
        ("nul", "a\u{0}"),
    ] {
        kv.cas(&s, key, None, entry(key, Some(idx), None))
            .await
            .ctx("create")?;
    }
    let got = keys_in(&kv, &s, Index::One, "", "\u{10FFFF}").await?;
    ensure!(
        got == ["digit", "colon", "upper", "lower", "nul", "accent"],
        "index values must compare as bytes (C collation), got {got:?}"
    );
    Ok(())
}

pub(super) async fn entries_without_index_not_listed(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    kv.cas(&s, "none", None, entry("n", None, None))
        .await
        .ctx("create")?;
    kv.cas(&s, "one", None, entry("o", Some("x"), None))
        .await
        .ctx("create")?;
    kv.cas(&s, "two", None, entry("t", None, Some("x")))
        .await
        .ctx("create")?;
    ensure!(
        keys_in(&kv, &s, Index::One, "", "~").await? == ["one"],
        "idx1 must list only entries with an idx1 value"
    );
    ensure!(
        keys_in(&kv, &s, Index::Two, "", "~").await? == ["two"],
        "idx2 must list only entries with an idx2 value"
    );
    Ok(())
}

/// A backend that answers `first_key_now` answers what `range_records` lists first.
pub(super) async fn first_key_now_is_the_first_listed(kv: Arc<dyn DurableKv>) -> Case {
    let s = scope();
    for (key, idx) in [("k3", "c/2"), ("k1", "c/2"), ("k2", "c/1"), ("k0", "d/1")] {
        kv.cas(&s, key, None, entry(key, None, Some(idx)))
            .await
            .ctx("create")?;
    }
    for (from, to) in [
        ("c/", "c0"),
        ("c/2", "c0"),
        ("c/1", "c/2"),
        ("c/3", "c0"),
        ("d/", "d0"),
        ("e", "f"),
        ("c0", "c/"),
    ] {
        let Some(now) = kv.first_key_now(&s, Index::Two, from, to) else {
            return Ok(()); // this backend lists only through `range_records`
        };
        let now = now.ctx("first_key_now")?;
        let listed = kv
            .range_records(&s, Index::Two, from, to, 1)
            .await
            .ctx("range_records")?
            .into_iter()
            .next()
            .map(|e| e.key);
        ensure!(
            now == listed,
            "first_key_now({from:?}, {to:?}) gave {now:?}, range_records lists {listed:?} first"
        );
    }
    Ok(())
}
