//! The SQLite store's connections keep their statements prepared: the journal's range reads
//! (a bound lower and upper bound on an index) are not planned again at every run.

#![allow(clippy::unwrap_used)]

use crate::support;

use botmesh_durability::kv::{DurableKv, Entry, Scope};
use botmesh_durability::store::rusqlite::{StatementStatus, params};

#[tokio::test]
async fn a_bound_range_read_is_not_prepared_again_at_each_run() {
    let (store, _dir) = support::sqlite_store("bot.db").await;
    let kv = store.durability_kv();
    let scope = Scope::custom("s");
    let mut last = None;
    for i in 0..20 {
        let entry = Entry {
            value: vec![1; 100],
            idx1: Some(format!("a{i:03}")),
            idx2: None,
        };
        kv.cas(&scope, &format!("k{i}"), None, entry).await.unwrap();
        let (reprepared, rows) = store
            .read("probe", move |conn| {
                let scope: i64 =
                    conn.query_row("SELECT id FROM durable_scopes WHERE scope = 's'", [], |r| {
                        r.get(0)
                    })?;
                let mut st = conn.prepare_cached(
                    "SELECT key FROM durable WHERE scope_id = ?1 AND idx1 >= ?2 AND idx1 < ?3 \
                     ORDER BY idx1, key LIMIT ?4",
                )?;
                let rows = st
                    .query_map(params![scope, format!("a{:03}", i / 2), "b", 100i64], |r| {
                        r.get::<_, String>(0)
                    })?
                    .count();
                Ok((st.get_status(StatementStatus::RePrepare), rows))
            })
            .await
            .unwrap();
        assert_eq!(rows, i + 1 - i / 2, "the range read finds its rows");
        last = Some(reprepared);
    }
    assert_eq!(last, Some(0), "the range statement was prepared again");
}

/// The journal's range reads (as `SqliteDurableKv::range` runs them) walk an index in
/// `(idx, key)` order: no temporary B-tree sorts their rows at each read.
#[tokio::test]
async fn range_reads_are_ordered_by_their_index_without_a_sort() {
    let (store, _dir) = support::sqlite_store("bot.db").await;
    for column in ["idx1", "idx2"] {
        let sql = format!(
            "EXPLAIN QUERY PLAN SELECT key, version, value, idx1, idx2 FROM durable \
             WHERE scope_id = ?1 AND {column} >= ?2 AND {column} < ?3 ORDER BY {column}, key LIMIT ?4"
        );
        let plan = store
            .read("plan", move |conn| {
                let mut st = conn.prepare(&sql)?;
                let rows =
                    st.query_map(params![1i64, "a", "b", 10i64], |r| r.get::<_, String>(3))?;
                rows.collect::<Result<Vec<_>, _>>()
            })
            .await
            .unwrap();
        let plan = plan.join("; ");
        assert!(
            plan.contains(&format!("USING INDEX durable_scope_{column}")),
            "{column}: {plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{column}: {plan}");
    }
}
