//! The crate's integration tests, one test binary: each file of `tests/` is a module (a test's
//! name is `file::test`), and the helpers they share are declared once here. `architecture.rs`
//! (the public API snapshot and the layering) and `tracing_spans.rs` (the spans exported through
//! OpenTelemetry, which must see every callsite of the process) are test binaries of their own.

// Helpers.
#[macro_use]
#[allow(dead_code)]
mod common;
mod servers;

// Test files.
#[cfg(feature = "http")]
mod admin_page;
mod ask_timeouts;
#[cfg(feature = "cli")]
mod cli;
mod durable;
mod events_durability;
mod flow_args;
mod flow_basic;
mod flow_control;
mod flow_crash_in_step;
mod flow_effects;
mod flow_equivalence;
mod flow_for_loops;
mod flow_identity;
mod flow_keys;
mod flow_upgrade;
mod flow_version;
mod handover;
#[cfg(feature = "http")]
mod metrics_endpoint;
mod outbound_lifecycle;
mod replicas;
mod routing;
mod schedule;
mod stopping;
