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
    for (from, to, limit, rule) in [
        ("p/", "p0", 0, "limit 0 must return nothing"),
        ("q", "p", 10, "an empty range must return nothing"),
    ] {
        let found = kv
            .range(&s, Index::One, from, to, limit)
            .await
            .ctx("range")?;
        ensure!(found.is_empty(), "{rule}");
    }
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
