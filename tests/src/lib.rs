//! botmesh-tests: tests that cross crates or processes.
//!
//! - `tests/crash_matrix.rs`: every journal crash point under both ambiguity policies, at the
//!   bot level, against the guide's guarantee table.
//! - `tests/kill9.rs`: the `crashbot` binary (this crate's `[[bin]]`) killed with SIGKILL in the
//!   middle of handlers and sends, restarted on the same file, with redelivery of what was not
//!   acknowledged.
//! - `tests/ui.rs`: compile-fail and pass cases of the flow macros (trybuild).
//!
//! The library itself is empty.
