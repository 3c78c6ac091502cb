//! Where the durable scheduler keeps its jobs, and how its runner is woken, as the kernel
//! holds them: so the flows (below the scheduler's layer) can store their asks' idle timeouts
//! as jobs, and the scheduler runs them.
//!
//! | the bot | the jobs are kept in |
//! | --- | --- |
//! | with durable journals | the journals' own scope ([`KvDurability::jobs`]): they survive restarts |
//! | without | an in-memory backend of its own: the same records and runner, gone with the process (only the flows' timeouts use it: `bot.schedule` refuses, a job meant to survive a restart would not) |
//!
//! This module does not run, plan or claim jobs (the `schedule` layer does).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use botmesh_durability::kv::{DurableKv, MemoryKv, Scope};
use botmesh_durability::{DurabilityError, KvDurability};
use tokio::sync::Notify;

use crate::clock::Clock;
use crate::config::BotConfig;
use crate::kernel::Kernel;

/// The kernel's handle on the scheduler's jobs.
pub(crate) struct JobsHandle {
    /// The in-memory journal of a bot without durable journals.
    local: Option<KvDurability>,
    /// Set once there is something to poll for (a task registered, a job scheduled or found at
    /// start): a bot that never uses the scheduler never polls its backend.
    active: AtomicBool,
    /// Wakes the runner before its next poll (a job due now).
    pub(crate) wake: Arc<Notify>,
}

impl JobsHandle {
    /// A handle over the durable journals (`durable`), or an in-memory journal of the bot's
    /// scope when there are none.
    pub(crate) fn new(
        durable: bool,
        config: &BotConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, DurabilityError> {
        let local = if durable {
            None
        } else {
            let scope = Scope::new(
                &config.tenant_id,
                &config.environment_id,
                &config.bot_id,
                &config.connection_id,
            );
            let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
            Some(
                KvDurability::builder(kv, scope)
                    .shared_clock(clock)
                    .build()?,
            )
        };
        Ok(JobsHandle {
            local,
            active: AtomicBool::new(false),
            wake: Arc::new(Notify::new()),
        })
    }

    /// There is something to poll for: the runner polls from now on (at once).
    pub(crate) fn activate(&self) {
        if !self.active.swap(true, Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }
}

impl Kernel {
    /// The journal the scheduler's jobs are stored in (see the module docs).
    pub(crate) fn jobs_store(&self) -> &KvDurability {
        match (&self.durable, &self.jobs.local) {
            (Some(dur), _) => &dur.d,
            (None, Some(local)) => local,
            (None, None) => {
                unreachable!("`JobsHandle::new` keeps a local journal without durable ones")
            }
        }
    }
}
