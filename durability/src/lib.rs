//! botmesh-durability: everything botmesh persists.
//!
//! - [`store`]: the [`Store`] SPI (chats, contacts, message ledger, flow checkpoints, handoffs,
//!   per-scope data) with [`MemoryStore`] and, behind the `sqlite` feature, [`SqliteStore`]
//!   (whose file also holds the journals: `SqliteStore::durability`).
//! - Behind the `file` feature (default): [`file`](mod@file), `FileDurability`, the journals in one local
//!   file for a single process.
//! - Behind the `file` feature: [`events`](mod@events), an app's events journal in one file
//!   (`FileEventJournal`, `SharedFileEventJournal` for processes on one host) that can keep
//!   the bot's journals too (`events_durability`).
//! - The durable journals: [`kv`] (the [`DurableKv`] backend SPI and [`MemoryKv`]),
//!   [`KvDurability`] (the [`inbox`] and the [`outbox`] on any `DurableKv`), [`keys`]
//!   (idempotency keys, inbound ids, fingerprints), [`retries`] (backoff, deferral, DLQ, parts),
//!   [`leases`] (fencing, instance ids), [`operating`] (metrics, events, operator API),
//!   [`retention`], [`media_refs`], [`config`] and [`error`].
//! - [`coordination`]: fenced chat turns and leader leases for several replicas, in the same
//!   backend.
//! - Behind the `postgres` and `redis` features: `backends` (`PostgresKv` / `PostgresStore`,
//!   `RedisKv` / `RedisStore`), shared by several replicas.
//! - Behind the `testing` feature: `testing::conformance` (the suite every backend passes) and
//!   `testing::crash` (the crash harness).
//!
//! This crate knows nothing of messages, chats' channels or providers: it keeps opaque JSON.
//! The runtime calls the journals from its inbound and outbound pipelines:
//!
//! ```text
//! inbound:  inbox.journal_and_claim ─► handlers ─► (each send) ─► inbox.complete
//! send:     outbox.lookup ─► hooks ─► outbox.journal_and_begin (one write; or journal,
//!           then begin_attempt when it waits its turn) ─► provider
//!           ─► outbox.mark_sent | mark_failed | mark_ambiguous
//! sweeper:  inbox.claim_due, outbox.due (recovers ambiguous sends), purge
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "postgres", feature = "redis"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "postgres", feature = "redis"))))]
pub mod backends;
mod canonical;
pub mod clock;
pub mod config;
pub mod coordination;
pub mod error;
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub mod events;
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub mod file;
pub mod inbox;
mod journal;
pub mod keys;
pub mod kv;
pub mod leases;
pub mod media_refs;
mod metrics;
pub mod operating;
pub mod outbox;
pub mod retention;
pub mod retries;
pub mod schedule;
mod step_journal;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

// The crate root re-exports what a bot author names: the stores and journal backends, the
// configuration, the errors, the journals and their events. Records, leases, keys, retries and
// the KV SPI's details are in their modules.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use backends::postgres::{PostgresKv, PostgresStore};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use backends::redis::{RedisKv, RedisStore};
pub use config::{DurabilityConfig, OnAmbiguous};
pub use error::DurabilityError;
#[cfg(feature = "file")]
pub use events::{
    EventsDurability, FileEventJournal, SharedFileEventJournal, SharedFileOptions,
    events_durability,
};
#[cfg(feature = "file")]
pub use file::{FileDurability, FileOptions};
pub use inbox::InboxState;
pub use journal::{KvDurability, KvDurabilityBuilder, MemoryDurability};
pub use kv::{DurableKv, KvError, MemoryKv, Scope};
pub use operating::DurabilityEvent;
pub use outbox::OutboxState;
pub use step_journal::{
    CommittedSend, LeasedInbound, StepCommitError, StepCommitted, StepConflict, StepJournal,
    StepSend,
};
pub use store::{MemoryStore, Store, StoreError};
#[cfg(feature = "sqlite")]
pub use store::{SqliteDurableKv, SqliteStore, SqliteStoreOptions};
