//! Runnable botmesh bots, as a library so that tests and benchmarks build exactly the bots the
//! binaries run. Each bot is a function of a [`botmesh::BotBuilder`]; the binaries in
//! `src/bin/` only pick a provider and a store, parse arguments and set up logging.

pub mod shop;
