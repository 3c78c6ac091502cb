//! The crate's integration tests, one test binary: each file of `tests/` is a module (a test's
//! name is `file::test`), and what they share is declared once here (`common`). The compile
//! tests of `#[flow]` (trybuild) are the macros crate's (`macros/tests/ui.rs`).

// Helpers.
mod common;
// The builds of one flow side by side, as the runtime's flow tests write them.
#[macro_use]
#[path = "../../runtime/tests/common/flow_builds.rs"]
mod flow_builds;

// Test files.
mod ask_timeout_kill9;
mod crash_matrix;
mod durable_default;
mod failover;
mod flow_crash;
mod flow_lowering;
mod flow_runs;
mod flow_store_faults;
mod inbound_journal;
mod kill9;
mod leases;
mod redelivery;
mod schedule_kill9;
mod server_faults;
mod sigterm;
mod start_errors;
mod user_http_client;
