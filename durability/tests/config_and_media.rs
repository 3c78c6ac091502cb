//! Configuration (defaults, `"15s"` strings, validation) and journaled media references.

use std::sync::Arc;
use std::time::Duration;

use crate::journal_env::Env;
use botmesh_durability::config::OnDiverged;
use botmesh_durability::inbox::InboxJournal;
use botmesh_durability::inbox::NewInbound;
use botmesh_durability::media_refs::StoredMediaRef;
use botmesh_durability::retries::Backoff;
use botmesh_durability::{
    DurabilityConfig, DurabilityError, KvDurability, MemoryKv, OnAmbiguous, Scope,
};
use serde_json::json;

// ---- media refs, config ------------------------------------------------------------------------

#[tokio::test]
async fn media_refs_are_journaled_with_their_provider() {
    let (_env, d) = Env::opened();
    let media = StoredMediaRef::new("telegram", 1, json!({"file_id": "abc"}));
    let m = NewInbound::new("alice", "m1", json!({})).with_media_ref(media.clone());
    let InboxJournal::Journaled(r) = d.inbox().journal(m).await.expect("journal") else {
        panic!("new")
    };
    let stored = d
        .inbox()
        .get(&r.id)
        .await
        .expect("get")
        .expect("record")
        .media_ref
        .expect("media ref");
    assert_eq!(stored, media);
    assert_eq!(
        stored.check_provider("telegram").expect("same provider"),
        json!({"v": 1, "data": {"file_id": "abc"}})
    );
    assert!(
        stored.check_provider("discord").is_err(),
        "provider-mismatch"
    );
}

#[test]
fn config_defaults_are_the_documented_ones() {
    let c = DurabilityConfig::default();
    assert!(!c.fail_open);
    assert_eq!(c.inbox.lease, Duration::from_secs(60));
    assert_eq!(c.inbox.max_attempts, 5);
    assert_eq!(
        c.inbox.backoff,
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            jitter: 0.2
        }
    );
    assert!(c.inbox.media_refs);
    assert_eq!(c.outbox.retries, 5);
    assert_eq!(c.outbox.backoff, c.inbox.backoff);
    assert_eq!(c.outbox.inline_max, Duration::from_secs(15));
    assert_eq!(c.outbox.on_ambiguous, OnAmbiguous::Skip);
    assert_eq!(c.outbox.on_diverged, OnDiverged::Send);
    assert_eq!(c.outbox.max_payload_bytes, 1024 * 1024);
    assert_eq!(c.outbox.lease, Duration::from_secs(60));
    assert_eq!(c.poll, Duration::from_secs(1));
    assert_eq!(c.retention, Some(Duration::from_secs(7 * 24 * 3600)));
    c.validate().expect("defaults are valid");
}

#[test]
fn config_reads_duration_strings_and_milliseconds() {
    use botmesh_durability::config::{ConfigError, parse_duration};
    assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 24 * 3600)));
    assert_eq!(parse_duration("1500"), Ok(Duration::from_millis(1500)));
    assert!(matches!(
        parse_duration("soon"),
        Err(ConfigError::InvalidDuration { .. })
    ));
    let c = DurabilityConfig::from_json(json!({
        "instanceId": "bot-1",
        "inbox": { "leaseMs": "30s", "backoff": { "baseMs": 500, "capMs": "10s", "jitter": 0.1 } },
        "outbox": { "retries": 3, "inlineMaxMs": 2000, "onAmbiguous": "resend", "onDiverged": "skip", "leaseMs": "20ms" },
        "pollMs": "250ms",
        "retention": "0"
    }))
    .expect("valid");
    assert_eq!(c.instance_id.as_deref(), Some("bot-1"));
    assert_eq!(c.inbox.lease, Duration::from_secs(30));
    assert_eq!(c.inbox.backoff.base, Duration::from_millis(500));
    assert_eq!(c.outbox.inline_max, Duration::from_secs(2));
    assert_eq!(
        (c.outbox.on_ambiguous, c.outbox.on_diverged),
        (OnAmbiguous::Resend, OnDiverged::Skip)
    );
    assert_eq!(c.outbox.lease, Duration::from_millis(20));
    assert_eq!(c.poll, Duration::from_millis(250));
    assert_eq!(c.retention, None, "0 keeps records");
    assert!(
        matches!(
            DurabilityConfig::from_json(json!({ "outbx": {} })),
            Err(ConfigError::Parse { .. })
        ),
        "typos are refused"
    );
}

#[test]
fn config_refuses_invalid_values() {
    use botmesh_durability::config::ConfigError;
    let check = |tweak: fn(&mut DurabilityConfig)| {
        let mut c = DurabilityConfig::default();
        tweak(&mut c);
        c.validate().expect_err("invalid")
    };
    assert_eq!(
        check(|c| c.outbox.lease = Duration::from_millis(19)),
        ConfigError::OutboxLeaseTooShort {
            lease: Duration::from_millis(19)
        }
    );
    assert_eq!(
        check(|c| c.inbox.max_attempts = 0),
        ConfigError::ZeroMaxAttempts
    );
    assert_eq!(
        check(|c| c.inbox.lease = Duration::ZERO),
        ConfigError::ZeroDuration {
            option: "inbox.lease"
        }
    );
    assert_eq!(
        check(|c| c.poll = Duration::ZERO),
        ConfigError::ZeroDuration { option: "poll" }
    );
    assert!(matches!(
        check(|c| c.outbox.backoff.jitter = 1.5),
        ConfigError::InvalidJitter {
            option: "outbox.backoff",
            ..
        }
    ));
    assert!(matches!(
        check(|c| c.inbox.backoff.cap = Duration::from_millis(1)),
        ConfigError::BackoffCapBelowBase {
            option: "inbox.backoff",
            ..
        }
    ));
    assert_eq!(
        check(|c| c.outbox.max_payload_bytes = 0),
        ConfigError::ZeroPayloadLimit
    );
    assert_eq!(
        check(|c| c.instance_id = Some(" ".into())),
        ConfigError::EmptyInstanceId
    );
    let mut bad = DurabilityConfig::default();
    bad.outbox.lease = Duration::from_millis(5);
    let built = KvDurability::new(Arc::new(MemoryKv::new()), Scope::custom("s"), bad);
    assert!(
        matches!(
            built,
            Err(DurabilityError::Config(
                ConfigError::OutboxLeaseTooShort { .. }
            ))
        ),
        "a durability refuses the config"
    );
    assert!(
        ConfigError::OutboxLeaseTooShort {
            lease: Duration::from_millis(5)
        }
        .to_string()
        .contains("at least 20ms")
    );
}

#[test]
fn default_instance_id_names_host_bot_and_connection() {
    let d = KvDurability::new(
        Arc::new(MemoryKv::new()),
        Scope::new("t", "e", "shop", "wa"),
        DurabilityConfig::default(),
    )
    .expect("build");
    assert!(
        d.instance_id().ends_with("/shop/wa"),
        "got {}",
        d.instance_id()
    );
    let again = d.reopen().expect("reopen");
    assert_eq!(
        again.instance_id(),
        d.instance_id(),
        "stable across restarts"
    );
    assert_ne!(again.incarnation().boot_id, d.incarnation().boot_id);
}
