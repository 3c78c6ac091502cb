//! Test support for durability backends (feature `testing`).
//!
//! - [`conformance`]: the suite every [`DurableKv`](crate::DurableKv) backend passes, run with
//!   one call on a backend factory.
//! - [`crash`]: the crash harness, which kills "the process" at any journal write point.
//!
//! Nothing here is compiled without the feature, and nothing here is used by the journals.

pub mod conformance;
pub mod crash;
