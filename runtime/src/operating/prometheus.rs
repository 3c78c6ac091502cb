//! The bot's counters in the OpenMetrics text format (which Prometheus scrapes), encoded by
//! `prometheus-client` from a snapshot taken at scrape time.
//!
//! The counters stay where they are kept (relaxed atomics in the bot and in the journals); a
//! scrape reads one snapshot of each and encodes it, so `/metrics` costs nothing between
//! scrapes and cannot disagree with [`Bot::metrics`] or
//! [`KvDurability::metrics`](botmesh_durability::KvDurability::metrics).
//!
//! | metric | from |
//! | --- | --- |
//! | `botmesh_<counter>_total` | each pipeline counter of [`BotMetrics`] (`botmesh_received_total`, `botmesh_sent_total`, …) |
//! | `botmesh_durability_<counter>_total` | each of the 13 durability counters of [`DurabilityMetrics`] (`botmesh_durability_outbox_dead_total`, …), only when the bot runs the journals |
//! | `botmesh_coordination_<counter>_total` | each counter of [`CoordinationMetrics`] (`botmesh_coordination_turn_steals_total`, `…_handovers_total`, …), only when the bot runs as one of several replicas (`coordination`) |
//!
//! Counters are per process, like the snapshots they come from: a restart starts them from
//! zero, which Prometheus' `rate()` and `increase()` account for.
//!
//! ```
//! use botmesh::prelude::*;
//!
//! let bot = Bot::builder(botmesh::testing::MockProvider::new()).build().unwrap();
//! let text = botmesh::operating::prometheus::render(&bot);
//! assert!(text.contains("\nbotmesh_received_total 0\n"));
//! assert!(text.ends_with("# EOF\n"));
//! ```

use botmesh_durability::coordination::CoordinationMetrics;
use botmesh_durability::operating::DurabilityMetrics;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;

use crate::kernel::Bot;
use crate::metrics::BotMetrics;

/// The `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The prefix of every metric name.
pub const PREFIX: &str = "botmesh";

/// The bot's pipeline counters and, when it runs the journals, its durability counters, as
/// OpenMetrics text ending in `# EOF`.
pub fn render(bot: &Bot) -> String {
    let durability = bot.durability().map(|d| d.metrics());
    let coordination = bot.coordination_metrics();
    render_with(&bot.metrics(), durability.as_ref(), coordination.as_ref())
}

/// [`render`] of snapshots taken elsewhere (another process's, a test's).
pub fn render_snapshots(pipeline: &BotMetrics, durability: Option<&DurabilityMetrics>) -> String {
    render_with(pipeline, durability, None)
}

/// [`render`] of snapshots, with a replica's coordination counters.
fn render_with(
    pipeline: &BotMetrics,
    durability: Option<&DurabilityMetrics>,
    coordination: Option<&CoordinationMetrics>,
) -> String {
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(Snapshot {
        counters: pipeline.counters(),
    }));
    if let Some(d) = durability {
        registry
            .sub_registry_with_prefix("durability")
            .register_collector(Box::new(Snapshot {
                counters: durability_counters(d).to_vec(),
            }));
    }
    if let Some(c) = coordination {
        registry
            .sub_registry_with_prefix("coordination")
            .register_collector(Box::new(Snapshot {
                counters: coordination_counters(c).to_vec(),
            }));
    }
    let mut text = String::new();
    // Writing to a `String` cannot fail, and every name and help text here is static.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::error!(error = %e, "cannot encode the metrics");
    }
    text
}

/// A replica's coordination counters as `(name, description, value)`.
pub fn coordination_counters(m: &CoordinationMetrics) -> [(&'static str, &'static str, u64); 9] {
    [
        ("turns_taken", "Chat turns taken.", m.turns_taken),
        (
            "turn_waits",
            "Waits for a chat's turn held elsewhere.",
            m.turn_waits,
        ),
        (
            "turn_steals",
            "Chat turns taken over from a holder whose lease expired.",
            m.turn_steals,
        ),
        (
            "fenced_refusals",
            "Writes of a stale turn or lease holder refused.",
            m.fenced_refusals,
        ),
        (
            "leader_changes",
            "Times this replica became or stopped being the leader.",
            m.leader_changes,
        ),
        (
            "not_leader_refusals",
            "Calls to an exclusive transport refused on a standby.",
            m.not_leader_refusals,
        ),
        (
            "handovers",
            "Conversation steps cut short elsewhere and finished here.",
            m.handovers,
        ),
        (
            "records_purged",
            "Idle turn and leader records deleted.",
            m.records_purged,
        ),
        (
            "forwards",
            "Messages handed to the replica holding their chat's non-persistent flow.",
            m.forwards,
        ),
    ]
}

/// The 13 durability counters ([`DurabilityMetrics`]) as `(name, description, value)`.
pub fn durability_counters(m: &DurabilityMetrics) -> [(&'static str, &'static str, u64); 13] {
    [
        (
            "inbound_journaled",
            "Inbound events written to the inbox.",
            m.inbound_journaled,
        ),
        (
            "inbound_duplicates",
            "Redelivered inbound events found already journaled.",
            m.inbound_duplicates,
        ),
        (
            "inbound_replayed",
            "Inbound records run again.",
            m.inbound_replayed,
        ),
        (
            "inbound_dead",
            "Inbound records dead-lettered or quarantined.",
            m.inbound_dead,
        ),
        (
            "outbox_journaled",
            "Sends written to the outbox.",
            m.outbox_journaled,
        ),
        (
            "outbox_deduped",
            "Sends answered from the outbox.",
            m.outbox_deduped,
        ),
        (
            "outbox_retried",
            "Failed sends scheduled for another attempt.",
            m.outbox_retried,
        ),
        (
            "outbox_deferred",
            "Inline sends left to the sweeper.",
            m.outbox_deferred,
        ),
        (
            "outbox_dead",
            "Sends dead-lettered or quarantined.",
            m.outbox_dead,
        ),
        (
            "outbox_ambiguous",
            "Sends whose outcome was found unknown.",
            m.outbox_ambiguous,
        ),
        (
            "outbox_bypassed",
            "Payloads that bypassed the outbox.",
            m.outbox_bypassed,
        ),
        (
            "stale_leases",
            "Completions refused because the lease was taken over.",
            m.stale_leases,
        ),
        (
            "outbox_diverged",
            "Replays that produced different content under a derived key.",
            m.outbox_diverged,
        ),
    ]
}

/// One scrape's counters, encoded as they were read.
#[derive(Debug)]
struct Snapshot {
    counters: Vec<(&'static str, &'static str, u64)>,
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (name, help, value) in &self.counters {
            let counter = ConstCounter::new(*value);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        Ok(())
    }
}
