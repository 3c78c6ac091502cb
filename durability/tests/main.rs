//! The crate's integration tests, one test binary: each file of `tests/` is a module (a test's
//! name is `file::test`), and the helpers they share are declared once here.
//!
//! The suites that need a server (`backends`' server backends, `postgres`, `redis`,
//! `redis_cluster`, `step_commit`'s server backends) read its URL from the environment; see
//! `servers`.
#![allow(clippy::unwrap_used)]

// Helpers.
#[macro_use]
#[allow(unused_macros, dead_code)]
mod common;
#[cfg(feature = "testing")]
mod crash_restart;
#[cfg(feature = "testing")]
mod crash_script;
#[allow(dead_code)]
mod journal_env;
// A skipped suite and a failed cleanup say so on stderr.
#[allow(dead_code, clippy::print_stderr)]
mod servers;
mod support;

// Test files.
mod backends;
mod config_and_media;
mod conformance_memory;
mod events_journal;
mod events_processes;
mod file_durability;
mod journals;
mod outbox_rules;
mod postgres;
mod public_api;
mod redis;
mod redis_cluster;
mod sqlite_durable;
mod sqlite_statements;
mod step_commit;
mod store_memory;
mod store_sqlite;
mod store_sqlite_threads;
mod store_sqlite_writer;
