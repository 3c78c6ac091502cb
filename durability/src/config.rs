//! `DurabilityConfig`: every option of the journals, with its default (the table
//! "Configuration" of `docs/durability-and-backends.md`; below, as a config file names them).
//!
//! Durations are [`Duration`] in code and `"15s"`-style strings (or plain milliseconds) in config
//! files; [`parse_duration`] is the one parser for both. [`DurabilityConfig::validate`] refuses
//! values out of range (an outbox lease under 20 ms, …) with a typed [`ConfigError`];
//! [`KvDurability`](crate::KvDurability) validates before it starts.
//!
//! | option | default | field |
//! | --- | --- | --- |
//! | `backend` | a new `MemoryDurability` | not here: the `DurableKv` given to `KvDurability` |
//! | `instanceId` | `<hostname>/<botId>/<connectionId>` (+ per-boot suffix on a shared backend) | [`DurabilityConfig::instance_id`] |
//! | `failOpen` | `false` | [`DurabilityConfig::fail_open`] |
//! | `inbox.leaseMs` | 60 s | [`InboxConfig::lease`] |
//! | `inbox.maxAttempts` | 5 | [`InboxConfig::max_attempts`] |
//! | `inbox.backoff` | 1 s base, 60 s cap, jitter 0.2 | [`InboxConfig::backoff`] |
//! | `inbox.mediaRefs` | `true` | [`InboxConfig::media_refs`] |
//! | `outbox.retries` | 5 (6 provider calls at most) | [`OutboxConfig::retries`] |
//! | `outbox.backoff` | as `inbox.backoff` | [`OutboxConfig::backoff`] |
//! | `outbox.inlineMaxMs` | 15 s | [`OutboxConfig::inline_max`] |
//! | `outbox.onAmbiguous` | `skip` | [`OutboxConfig::on_ambiguous`] |
//! | `outbox.onDiverged` | `send` | [`OutboxConfig::on_diverged`] |
//! | `outbox.maxPayloadBytes` | 1 MiB | [`OutboxConfig::max_payload_bytes`] |
//! | `outbox.leaseMs` | 60 s, at least 20 ms | [`OutboxConfig::lease`] |
//! | `pollMs` | 1 s | [`DurabilityConfig::poll`] |
//! | `retention` | 7 days; `0` keeps records | [`DurabilityConfig::retention`] (`None` keeps) |
//!
//! It does not run anything: `fail_open`, `inline_max` and `poll` are read by the runtime.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The shortest outbox lease accepted.
pub const MIN_OUTBOX_LEASE: Duration = Duration::from_millis(20);

/// Exponential backoff with a cap and a random jitter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Backoff {
    /// The first delay (`baseMs`).
    #[serde(alias = "baseMs", with = "duration_serde")]
    pub base: Duration,
    /// The longest delay (`capMs`).
    #[serde(alias = "capMs", with = "duration_serde")]
    pub cap: Duration,
    /// The random spread, as a fraction of the delay (`0.2` = ±20 %), in `0.0..=1.0`.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// A backoff without jitter (deterministic; for tests and tools).
    pub fn fixed(base: Duration, cap: Duration) -> Self {
        Backoff {
            base,
            cap,
            jitter: 0.0,
        }
    }

    /// The delay before retry number `failures` (1 = after the first failure):
    /// `min(cap, base × 2^(failures-1))`, spread by ±`jitter` with `unit` (a random number in
    /// `0.0..1.0`; `0.5` means no spread), and never above `cap`.
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        let exponent = failures.saturating_sub(1).min(62);
        let factor = 1u64 << exponent;
        let base_ms = u64::try_from(self.base.as_millis()).unwrap_or(u64::MAX);
        let cap_ms = u64::try_from(self.cap.as_millis()).unwrap_or(u64::MAX);
        let raw = base_ms.saturating_mul(factor).min(cap_ms);
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let spread = 1.0 + self.jitter.clamp(0.0, 1.0) * (2.0 * unit - 1.0);
        let jittered = (raw as f64 * spread).round();
        let ms = if jittered.is_finite() && jittered > 0.0 {
            (jittered as u64).min(cap_ms)
        } else {
            0
        };
        Duration::from_millis(ms)
    }

    pub(crate) fn validate(&self, option: &'static str) -> Result<(), ConfigError> {
        if !self.jitter.is_finite() || !(0.0..=1.0).contains(&self.jitter) {
            return Err(ConfigError::InvalidJitter {
                option,
                jitter: self.jitter,
            });
        }
        if self.cap < self.base {
            return Err(ConfigError::BackoffCapBelowBase {
                option,
                base: self.base,
                cap: self.cap,
            });
        }
        Ok(())
    }
}

/// What to do with a send whose outcome is unknown after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnAmbiguous {
    /// Mark it `unknown`: never a duplicate, possibly lost (the default).
    #[default]
    Skip,
    /// Send it again: never lost, possibly a duplicate.
    Resend,
}

/// What to do when a replay produces different content under the same derived key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDiverged {
    /// Send the new content under a new key, so no reply is silently swallowed (the default).
    #[default]
    Send,
    /// Answer it from the recorded send.
    Skip,
}

/// The inbox options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct InboxConfig {
    /// Processing lease, extended by a heartbeat while the handler runs (`leaseMs`).
    #[serde(alias = "leaseMs", with = "duration_serde")]
    pub lease: Duration,
    /// Runs charged before an inbound event that keeps failing is dead-lettered.
    pub max_attempts: u32,
    /// Backoff between failed inbound attempts.
    pub backoff: Backoff,
    /// Journal a serializable media reference so a replay can download the media.
    pub media_refs: bool,
}

impl Default for InboxConfig {
    fn default() -> Self {
        InboxConfig {
            lease: Duration::from_secs(60),
            max_attempts: 5,
            backoff: Backoff::default(),
            media_refs: true,
        }
    }
}

/// The outbox options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct OutboxConfig {
    /// Retries after the first attempt before a send is dead-lettered.
    pub retries: u32,
    /// Backoff between send attempts; a rate limit waits at least its `retry_after`.
    pub backoff: Backoff,
    /// How long inline sends retry before rejecting with a deferral (`inlineMaxMs`).
    #[serde(alias = "inlineMaxMs", with = "duration_serde")]
    pub inline_max: Duration,
    /// A send whose outcome is unknown after a crash.
    pub on_ambiguous: OnAmbiguous,
    /// A replay producing different content under the same derived key.
    pub on_diverged: OnDiverged,
    /// Larger payloads bypass the outbox, with a warning.
    pub max_payload_bytes: usize,
    /// Lease of a send in flight (`leaseMs`, at least 20 ms).
    #[serde(alias = "leaseMs", with = "duration_serde")]
    pub lease: Duration,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            retries: 5,
            backoff: Backoff::default(),
            inline_max: Duration::from_secs(15),
            on_ambiguous: OnAmbiguous::Skip,
            on_diverged: OnDiverged::Send,
            max_payload_bytes: 1024 * 1024,
            lease: Duration::from_secs(60),
        }
    }
}

/// The durability options of a bot (given with `DurabilityOptions::config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DurabilityConfig {
    /// Lease owner, stable across restarts and unique per running replica. `None` derives the
    /// default (see [`crate::leases::InstanceId::default_for`]).
    pub instance_id: Option<String>,
    /// `true` dispatches an inbound event even when the journal cannot record it.
    pub fail_open: bool,
    /// Inbox options.
    pub inbox: InboxConfig,
    /// Outbox options.
    pub outbox: OutboxConfig,
    /// Period of the background sweeper (`pollMs`).
    #[serde(alias = "pollMs", with = "duration_serde")]
    pub poll: Duration,
    /// How long `done`/`sent` records are kept; `None` (`0` in a file) keeps them.
    #[serde(with = "retention_serde")]
    pub retention: Option<Duration>,
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        DurabilityConfig {
            instance_id: None,
            fail_open: false,
            inbox: InboxConfig::default(),
            outbox: OutboxConfig::default(),
            poll: Duration::from_secs(1),
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
        }
    }
}

impl DurabilityConfig {
    /// Parses a JSON config (durations as `"15s"` or milliseconds) and validates it.
    pub fn from_json(value: serde_json::Value) -> Result<Self, ConfigError> {
        let config: DurabilityConfig =
            serde_json::from_value(value).map_err(|e| ConfigError::Parse {
                reason: e.to_string(),
            })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every option; the first invalid one is reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(id) = &self.instance_id
            && id.trim().is_empty()
        {
            return Err(ConfigError::EmptyInstanceId);
        }
        if self.inbox.lease.is_zero() {
            return Err(ConfigError::ZeroDuration {
                option: "inbox.lease",
            });
        }
        if self.inbox.max_attempts == 0 {
            return Err(ConfigError::ZeroMaxAttempts);
        }
        self.inbox.backoff.validate("inbox.backoff")?;
        self.outbox.backoff.validate("outbox.backoff")?;
        if self.outbox.lease < MIN_OUTBOX_LEASE {
            return Err(ConfigError::OutboxLeaseTooShort {
                lease: self.outbox.lease,
            });
        }
        if self.outbox.max_payload_bytes == 0 {
            return Err(ConfigError::ZeroPayloadLimit);
        }
        if self.poll.is_zero() {
            return Err(ConfigError::ZeroDuration { option: "poll" });
        }
        Ok(())
    }
}

/// An invalid configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A duration string that is neither `"15s"`-like nor plain milliseconds.
    #[error(
        "invalid duration `{input}`: {reason} (write e.g. \"15s\", \"250ms\", \"7d\" or milliseconds)"
    )]
    InvalidDuration {
        /// The text given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// `outbox.lease` under 20 ms.
    #[error("durability.outbox.lease is {lease:?}; it must be at least 20ms")]
    OutboxLeaseTooShort {
        /// The lease given.
        lease: Duration,
    },
    /// A duration that must be positive is zero.
    #[error("durability.{option} must be greater than zero")]
    ZeroDuration {
        /// The option (`inbox.lease`, `poll`).
        option: &'static str,
    },
    /// `inbox.max_attempts` is zero.
    #[error("durability.inbox.maxAttempts must be at least 1")]
    ZeroMaxAttempts,
    /// A backoff jitter outside `0.0..=1.0`.
    #[error("durability.{option}.jitter is {jitter}; it must be between 0 and 1")]
    InvalidJitter {
        /// The backoff (`inbox.backoff`, `outbox.backoff`).
        option: &'static str,
        /// The jitter given.
        jitter: f64,
    },
    /// A backoff cap below its base.
    #[error("durability.{option}: cap {cap:?} is below base {base:?}")]
    BackoffCapBelowBase {
        /// The backoff.
        option: &'static str,
        /// Its base.
        base: Duration,
        /// Its cap.
        cap: Duration,
    },
    /// `outbox.max_payload_bytes` is zero.
    #[error("durability.outbox.maxPayloadBytes must be greater than zero")]
    ZeroPayloadLimit,
    /// An instance id that is empty or blank.
    #[error("durability.instanceId must not be empty")]
    EmptyInstanceId,
    /// A config document that does not parse.
    #[error("invalid durability config: {reason}")]
    Parse {
        /// The parser's message.
        reason: String,
    },
}

/// Parses a duration: `"15s"`, `"250ms"`, `"1m 30s"`, `"7d"` (humantime syntax) or plain
/// milliseconds (`"1500"`).
pub fn parse_duration(input: &str) -> Result<Duration, ConfigError> {
    let text = input.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<u64>().map(Duration::from_millis).map_err(|e| {
            ConfigError::InvalidDuration {
                input: input.to_owned(),
                reason: e.to_string(),
            }
        });
    }
    humantime::parse_duration(text).map_err(|e| ConfigError::InvalidDuration {
        input: input.to_owned(),
        reason: e.to_string(),
    })
}

/// Formats a duration the way [`parse_duration`] reads it back (`"15s"`).
pub fn format_duration(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// Serde adapter for `Duration` fields: a `"15s"` string or a number of milliseconds.
pub(crate) mod duration_serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Millis(u64),
        Text(String),
    }

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
            Raw::Text(text) => super::parse_duration(&text).map_err(D::Error::custom),
        }
    }
}

/// Serde adapter for the retention: like a duration, where `0` means "keep".
mod retention_serde {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        super::duration_serde::serialize(&d.unwrap_or(Duration::ZERO), s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let duration = super::duration_serde::deserialize(d)?;
        Ok((!duration.is_zero()).then_some(duration))
    }
}
