//! Behaviour every [`Store`] shares, written once and run against each backend.
//!
//! Each function takes an open store and asserts one concern. `store_behaviour_tests!`
//! turns the list into `#[tokio::test]`s for a backend, given an async factory that returns
//! the store and a guard (a temporary folder, a server's prefix) that keeps it alive, or `None`
//! when the backend's server is not configured (`@tests` names the tests to run). Backend-specific tests
//! (files, processes, group commit) live in the backend's own test file.

use botmesh_durability::store::ACTIVITY_RESOLUTION_MS;
use botmesh_durability::store::ChatRecord;
use botmesh_durability::store::ContactRecord;
use botmesh_durability::store::Direction;
use botmesh_durability::store::FlowCheckpoint;
use botmesh_durability::store::HandoffRecord;
use botmesh_durability::store::LedgerEntry;
use botmesh_durability::store::LedgerStatus;
use botmesh_durability::{Store, StoreError};
use serde_json::json;

/// A chat record whose fields all derive from `id` and `n`.
pub(crate) fn chat(id: &str, n: i64) -> ChatRecord {
    ChatRecord {
        id: id.to_owned(),
        is_group: n % 2 == 1,
        title: Some(format!("title {n}")),
        lang: (n > 0).then(|| "en".to_owned()),
        first_seen_ms: 1_000 + n,
        last_activity_ms: 2_000 + n,
    }
}

/// The `n`th ledger entry of `chat`.
pub(crate) fn entry(chat: &str, n: i64) -> LedgerEntry {
    LedgerEntry {
        chat: chat.to_owned(),
        message_id: Some(format!("m{n}")),
        direction: if n % 2 == 0 {
            Direction::Inbound
        } else {
            Direction::Outbound
        },
        status: match n % 3 {
            0 => LedgerStatus::Received,
            1 => LedgerStatus::Sent,
            _ => LedgerStatus::Failed,
        },
        text: Some(format!("text {n}")),
        content: json!({ "n": n, "parts": ["a", { "b": null }], "é": "ü" }),
        key: (n % 2 == 1).then(|| format!("key-{n}")),
        error: (n % 3 == 2).then(|| format!("error {n}")),
        at_ms: 10_000 + n,
    }
}

/// A checkpoint of `chat` at `step`, with a layout hash above `i64::MAX`.
pub(crate) fn checkpoint(chat: &str, step: u64) -> FlowCheckpoint {
    FlowCheckpoint {
        chat: chat.to_owned(),
        flow: "shop::order".to_owned(),
        layout_hash: u64::MAX - step,
        state: json!({ "AskQty": { "item": "tea", "step": step } }),
        inbound_id: Some(format!("in-{step}")),
        step,
        updated_ms: 5_000 + i64::try_from(step).unwrap_or(0),
    }
}

/// A handoff of `chat`.
pub(crate) fn handoff(chat: &str, agent: Option<&str>) -> HandoffRecord {
    HandoffRecord {
        chat: chat.to_owned(),
        agent: agent.map(str::to_owned),
        reason: Some("asked for a human".to_owned()),
        since_ms: 42,
    }
}

pub(crate) async fn chats(store: &impl Store) {
    assert_eq!(store.chat("c1").await.unwrap(), None);
    store.upsert_chat(&chat("c1", 0)).await.unwrap();
    store.upsert_chat(&chat("c2", 1)).await.unwrap();
    assert_eq!(store.chat("c1").await.unwrap(), Some(chat("c1", 0)));
    assert_eq!(store.chat("c2").await.unwrap(), Some(chat("c2", 1)));
    // Upsert replaces every field.
    store.upsert_chat(&chat("c1", 3)).await.unwrap();
    assert_eq!(store.chat("c1").await.unwrap(), Some(chat("c1", 3)));
}

/// `record_inbound`: a new chat is inserted whole; a known chat keeps its title, language and
/// first sighting and takes the message's `is_group` and activity; the contact is replaced;
/// each call appends its ledger row.
pub(crate) async fn inbound_rows(store: &impl Store) {
    let ada = |name: &str, seen: i64| ContactRecord {
        id: "u1".into(),
        name: Some(name.into()),
        last_seen_ms: seen,
    };
    let first = ChatRecord {
        title: None,
        lang: None,
        ..chat("c1", 0)
    };
    store
        .record_inbound(&first, &ada("Ada", 1), &entry("c1", 0))
        .await
        .unwrap();
    assert_eq!(store.chat("c1").await.unwrap(), Some(first.clone()));
    assert_eq!(store.contact("u1").await.unwrap(), Some(ada("Ada", 1)));

    let named = ChatRecord {
        title: Some("Ada's chat".into()),
        lang: Some("de".into()),
        ..first.clone()
    };
    store.upsert_chat(&named).await.unwrap();
    let later = ChatRecord {
        is_group: true,
        first_seen_ms: 9_999,
        last_activity_ms: 3_000,
        ..first
    };
    store
        .record_inbound(&later, &ada("Ada L.", 2), &entry("c1", 2))
        .await
        .unwrap();
    let merged = ChatRecord {
        is_group: true,
        last_activity_ms: 3_000,
        ..named
    };
    assert_eq!(store.chat("c1").await.unwrap(), Some(merged.clone()));
    assert_eq!(store.contact("u1").await.unwrap(), Some(ada("Ada L.", 2)));
    assert_eq!(
        store.ledger("c1", 10).await.unwrap(),
        vec![entry("c1", 0), entry("c1", 2)]
    );

    // The activity and the sighting stay within ACTIVITY_RESOLUTION_MS of the latest message
    // (a store may leave the rows alone sooner than that), and take it at the resolution.
    for at in [
        3_000 + ACTIVITY_RESOLUTION_MS - 1,
        3_000 + ACTIVITY_RESOLUTION_MS,
    ] {
        let now = ChatRecord {
            last_activity_ms: at,
            ..merged.clone()
        };
        store
            .record_inbound(&now, &ada("Ada L.", at - 2_998), &entry("c1", 3))
            .await
            .unwrap();
        let chat = store.chat("c1").await.unwrap().unwrap();
        let contact = store.contact("u1").await.unwrap().unwrap();
        assert!(
            at - chat.last_activity_ms < ACTIVITY_RESOLUTION_MS,
            "{chat:?} at {at}"
        );
        assert!(
            at - 2_998 - contact.last_seen_ms < ACTIVITY_RESOLUTION_MS,
            "{contact:?}"
        );
        assert_eq!(chat.title, merged.title, "the title is kept");
    }
    assert_eq!(
        store.contact("u1").await.unwrap().map(|c| c.last_seen_ms),
        Some(2 + ACTIVITY_RESOLUTION_MS)
    );
}

pub(crate) async fn contacts(store: &impl Store) {
    assert_eq!(store.contact("u1").await.unwrap(), None);
    let ada = ContactRecord {
        id: "u1".into(),
        name: Some("Ada".into()),
        last_seen_ms: 7,
    };
    store.upsert_contact(&ada).await.unwrap();
    assert_eq!(store.contact("u1").await.unwrap(), Some(ada));
    let renamed = ContactRecord {
        id: "u1".into(),
        name: None,
        last_seen_ms: 8,
    };
    store.upsert_contact(&renamed).await.unwrap();
    assert_eq!(store.contact("u1").await.unwrap(), Some(renamed));
    assert_eq!(store.contact("u2").await.unwrap(), None);
}

pub(crate) async fn ledger_order_and_limit(store: &impl Store) {
    assert!(store.ledger("c1", 10).await.unwrap().is_empty());
    for n in 0..10 {
        store.append_ledger(&entry("c1", n)).await.unwrap();
        store.append_ledger(&entry("c2", 100 + n)).await.unwrap();
    }
    // All of them, oldest first.
    let all = store.ledger("c1", 100).await.unwrap();
    assert_eq!(all, (0..10).map(|n| entry("c1", n)).collect::<Vec<_>>());
    // The last three, still oldest first.
    let last = store.ledger("c1", 3).await.unwrap();
    assert_eq!(last, (7..10).map(|n| entry("c1", n)).collect::<Vec<_>>());
    assert!(store.ledger("c1", 0).await.unwrap().is_empty());
    assert_eq!(store.ledger("c2", usize::MAX).await.unwrap().len(), 10);
    // Two equal entries are two rows.
    store.append_ledger(&entry("c3", 1)).await.unwrap();
    store.append_ledger(&entry("c3", 1)).await.unwrap();
    assert_eq!(store.ledger("c3", 10).await.unwrap().len(), 2);
}

pub(crate) async fn checkpoints(store: &impl Store) {
    assert_eq!(store.checkpoint("c1").await.unwrap(), None);
    assert_eq!(store.checkpoint_head("c1").await.unwrap(), None);
    assert!(store.checkpoints().await.unwrap().is_empty());
    store.save_checkpoint(&checkpoint("c2", 1)).await.unwrap();
    store.save_checkpoint(&checkpoint("c1", 1)).await.unwrap();
    // Saving again replaces.
    store.save_checkpoint(&checkpoint("c1", 2)).await.unwrap();
    assert_eq!(
        store.checkpoint("c1").await.unwrap(),
        Some(checkpoint("c1", 2))
    );
    // The step and the inbound alone, as the whole checkpoint has them.
    let head = |step: u64| botmesh_durability::store::CheckpointHead {
        step,
        inbound_id: Some(format!("in-{step}")),
    };
    assert_eq!(store.checkpoint_head("c1").await.unwrap(), Some(head(2)));
    assert_eq!(store.checkpoint_head("c2").await.unwrap(), Some(head(1)));
    let mut all = store.checkpoints().await.unwrap();
    all.sort_by(|a, b| a.chat.cmp(&b.chat));
    assert_eq!(all, vec![checkpoint("c1", 2), checkpoint("c2", 1)]);
    store.delete_checkpoint("c1").await.unwrap();
    assert_eq!(store.checkpoint("c1").await.unwrap(), None);
    assert_eq!(store.checkpoint_head("c1").await.unwrap(), None);
    // Deleting none is not an error.
    store.delete_checkpoint("c1").await.unwrap();
    store.delete_checkpoint("nobody").await.unwrap();
    assert_eq!(
        store.checkpoints().await.unwrap(),
        vec![checkpoint("c2", 1)]
    );
}

pub(crate) async fn handoffs(store: &impl Store) {
    assert!(store.handoffs().await.unwrap().is_empty());
    store.set_handoff(&handoff("c1", None)).await.unwrap();
    store
        .set_handoff(&handoff("c2", Some("bob")))
        .await
        .unwrap();
    store
        .set_handoff(&handoff("c1", Some("alice")))
        .await
        .unwrap();
    let mut all = store.handoffs().await.unwrap();
    all.sort_by(|a, b| a.chat.cmp(&b.chat));
    assert_eq!(
        all,
        vec![handoff("c1", Some("alice")), handoff("c2", Some("bob"))]
    );
    store.clear_handoff("c1").await.unwrap();
    store.clear_handoff("c1").await.unwrap();
    assert_eq!(
        store.handoffs().await.unwrap(),
        vec![handoff("c2", Some("bob"))]
    );
}

pub(crate) async fn values(store: &impl Store) {
    assert_eq!(store.get_value("user:1", "name").await.unwrap(), None);
    assert!(store.values("user:1").await.unwrap().is_empty());
    for key in ["zeta", "alpha", "Mid", "beta"] {
        store
            .set_value("user:1", key, &json!({ "k": key }))
            .await
            .unwrap();
    }
    store.set_value("user:2", "alpha", &json!(2)).await.unwrap();
    store
        .set_value("user:1", "beta", &json!([1, 2]))
        .await
        .unwrap();
    assert_eq!(
        store.get_value("user:1", "beta").await.unwrap(),
        Some(json!([1, 2]))
    );
    let keys: Vec<String> = store
        .values("user:1")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["Mid", "alpha", "beta", "zeta"]);
    store.delete_value("user:1", "alpha").await.unwrap();
    store.delete_value("user:1", "alpha").await.unwrap();
    store.delete_value("nobody", "alpha").await.unwrap();
    assert_eq!(store.get_value("user:1", "alpha").await.unwrap(), None);
    assert_eq!(
        store.values("user:2").await.unwrap(),
        vec![("alpha".to_owned(), json!(2))]
    );
    // Any JSON value round-trips, null included.
    for value in [
        json!(null),
        json!("s"),
        json!(1.5),
        json!({ "deep": { "x": [true] } }),
    ] {
        store.set_value("app", "v", &value).await.unwrap();
        assert_eq!(store.get_value("app", "v").await.unwrap(), Some(value));
    }
}

/// Asserts that `result` is [`StoreError::Closed`].
fn assert_closed<T: std::fmt::Debug>(what: &str, result: Result<T, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::Closed)),
        "{what} after close: {result:?}"
    );
}

pub(crate) async fn closed_store(store: &impl Store) {
    store.set_value("s", "k", &json!(1)).await.unwrap();
    store.close().await.unwrap();
    // Closing twice is harmless.
    store.close().await.unwrap();
    assert_closed("upsert_chat", store.upsert_chat(&chat("c", 0)).await);
    assert_closed("chat", store.chat("c").await);
    assert_closed("contact", store.contact("u").await);
    assert_closed("append_ledger", store.append_ledger(&entry("c", 0)).await);
    assert_closed("ledger", store.ledger("c", 1).await);
    assert_closed(
        "save_checkpoint",
        store.save_checkpoint(&checkpoint("c", 0)).await,
    );
    assert_closed("checkpoints", store.checkpoints().await);
    assert_closed("set_handoff", store.set_handoff(&handoff("c", None)).await);
    assert_closed("handoffs", store.handoffs().await);
    assert_closed("get_value", store.get_value("s", "k").await);
    assert_closed("set_value", store.set_value("s", "k", &json!(2)).await);
    assert_closed("values", store.values("s").await);
    // Opening again finds the data; opening twice is harmless.
    store.open().await.unwrap();
    store.open().await.unwrap();
    assert_eq!(store.get_value("s", "k").await.unwrap(), Some(json!(1)));
    store.set_value("s", "k", &json!(3)).await.unwrap();
    assert_eq!(store.get_value("s", "k").await.unwrap(), Some(json!(3)));
}

/// Writes through `first`, then checks that `second` (the same store after a restart) sees
/// everything.
pub(crate) async fn restart(first: &impl Store, second: &impl Store) {
    first.upsert_chat(&chat("c1", 1)).await.unwrap();
    first.append_ledger(&entry("c1", 1)).await.unwrap();
    first.save_checkpoint(&checkpoint("c1", 4)).await.unwrap();
    first.set_handoff(&handoff("c1", None)).await.unwrap();
    first.set_value("user:1", "k", &json!("v")).await.unwrap();
    first.close().await.unwrap();

    second.open().await.unwrap();
    assert_eq!(second.chat("c1").await.unwrap(), Some(chat("c1", 1)));
    assert_eq!(second.ledger("c1", 5).await.unwrap(), vec![entry("c1", 1)]);
    assert_eq!(
        second.checkpoints().await.unwrap(),
        vec![checkpoint("c1", 4)]
    );
    assert_eq!(second.handoffs().await.unwrap(), vec![handoff("c1", None)]);
    assert_eq!(
        second.get_value("user:1", "k").await.unwrap(),
        Some(json!("v"))
    );
}

/// Expands to one `#[tokio::test]` per shared behaviour; `$make` is an async expression
/// returning `(store, guard)` with the store open.
macro_rules! store_behaviour_tests {
    ($make:expr) => {
        store_behaviour_tests!(@tests $make;
            chats, inbound_rows, contacts, ledger_order_and_limit, checkpoints, handoffs, values, closed_store);
    };
    (@tests $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test]
            async fn $name() {
                let Some((store, _guard)) = $make.await else {
                    return;
                };
                $crate::common::$name(&store).await;
            }
        )*
    };
}
