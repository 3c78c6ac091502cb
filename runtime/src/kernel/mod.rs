//! The kernel: the bottom layer of the runtime, above the message model and the provider SPI.
//! `Kernel` holds the shared internals every module receives (config, provider, store,
//! registries, queues, counters, lifecycle state, the journals' state); behaviour lives in the
//! layers above, which take a `&Kernel`. A [`Bot`] is an `Arc<Kernel>` plus the plugin scope it
//! acts for; its methods are written in the `bot` layer.
//!
//! | module | what it holds |
//! | --- | --- |
//! | `context` | [`Ctx`](crate::Ctx): what a handler receives, and its factory |
//! | `routes` | handlers, matchers, hooks and their registry |
//! | `queue` | the per-chat FIFO queue and the in-flight work tracker |
//! | `lifecycle` | the [`LifecycleStep`](crate::LifecycleStep) trait |
//! | `journals` | the state of the durable journals, the inbound lease slots |
//! | `jobs` | where the scheduler's jobs are stored, the runner's wake-up |
//! | `waiting` | the leases of queued jobs, kept renewed |
//! | `gates`, `dedupe`, `lang` | access lists, the in-memory dedupe, `ctx.lang` |
//! | `isolated` | user code run in a task of its own (panics reported, aborted with its caller) |
//!
//! The layers, bottom to top (a folder imports only from the folders below it; the
//! `architecture` test checks it):
//!
//! | layer | folder |
//! | --- | --- |
//! | message model, provider SPI, config, errors, events | `src/*.rs` |
//! | kernel | `kernel/` |
//! | outbound path: hooks, pacing, ledger, durable outbox, presence | `outbound/` |
//! | durable inbound: journaling, replay, sweeper | `durable/` |
//! | flows | `flow/` |
//! | the durable scheduler: jobs, their runner | `schedule/` |
//! | the bot: builder, lifecycle, inbound pipeline, dispatcher | `bot/` |

pub(crate) mod context;
pub(crate) mod dedupe;
pub(crate) mod gates;
pub(crate) mod isolated;
pub(crate) mod jobs;
pub(crate) mod journals;
pub(crate) mod lang;
pub(crate) mod lifecycle;
pub(crate) mod queue;
pub(crate) mod routes;
pub(crate) mod waiting;

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use botmesh_durability::Store;
use tokio::sync::{Notify, watch};

use crate::clock::Clock;
use crate::config::BotConfig;
use crate::events::EventOutlet;
use crate::kernel::dedupe::Dedupe;
use crate::kernel::gates::Gates;
use crate::kernel::journals::Durable;
use crate::kernel::lang::LangResolver;
use crate::kernel::lifecycle::LifecycleStep;
use crate::kernel::queue::ChatQueues;
use crate::kernel::routes::Routes;
use crate::metrics::Counters;
use crate::provider::{Capabilities, Provider, TransportStatus};

/// Where the bot is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Built, not started.
    Idle,
    /// `start()` is running.
    Starting,
    /// Started.
    Running,
    /// `stop()` is running.
    Stopping,
    /// Stopped (may be started again).
    Stopped,
}

pub(crate) struct Kernel {
    pub(crate) config: BotConfig,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) capabilities: Capabilities,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) routes: RwLock<Routes>,
    pub(crate) events: EventOutlet,
    pub(crate) counters: Counters,
    pub(crate) queues: ChatQueues,
    pub(crate) dedupe: Dedupe,
    pub(crate) gates: Gates,
    pub(crate) lang_resolver: Option<LangResolver>,
    pub(crate) run_state: Mutex<RunState>,
    pub(crate) accepting: AtomicBool,
    pub(crate) transport: Mutex<TransportStatus>,
    pub(crate) input_ended: watch::Sender<bool>,
    pub(crate) cancel_background: watch::Sender<bool>,
    pub(crate) next_owner: AtomicU64,
    pub(crate) plugins: Mutex<HashMap<String, u64>>,
    pub(crate) steps: Vec<Arc<dyn LifecycleStep>>,
    pub(crate) custom_steps: Mutex<Vec<Arc<dyn LifecycleStep>>>,
    pub(crate) started_steps: Mutex<Vec<Arc<dyn LifecycleStep>>>,
    /// The flows' state (`flow::FlowRuntime`): the flow layer is above the kernel, so the
    /// kernel keeps it without naming its type.
    pub(crate) flow_state: Box<dyn Any + Send + Sync>,
    /// The scheduler's state (`schedule::Scheduler`), kept without naming its type as
    /// `flow_state` is.
    pub(crate) scheduler_state: Box<dyn Any + Send + Sync>,
    /// Where the scheduler's jobs are stored (the flows' timeouts among them).
    pub(crate) jobs: crate::kernel::jobs::JobsHandle,
    pub(crate) durable: Option<Durable>,
    /// The `coordination` opt-in (several replicas), when on.
    pub(crate) coordination: Option<Arc<crate::coordination::Coord>>,
    /// The author turned the journals off on a store that keeps them: warned at each start.
    pub(crate) journals_off: bool,
    pub(crate) stopped: Notify,
}

/// A bot. See the crate docs for a tour.
#[derive(Clone)]
pub struct Bot {
    pub(crate) kernel: Arc<Kernel>,
    pub(crate) owner: Option<u64>,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot")
            .field("bot_id", &self.kernel.config.bot_id)
            .field("provider", &self.kernel.provider.name())
            .field("owner", &self.owner)
            .finish()
    }
}

impl Bot {
    pub(crate) fn from_kernel(kernel: Arc<Kernel>) -> Self {
        Self {
            kernel,
            owner: None,
        }
    }
}

impl Kernel {
    /// The ticket of work admitted at `admitted_ms` (now when unknown): its admission time in
    /// microseconds, plus one per call within this process so two events never share one.
    /// Chat turns are taken in ticket order (`bot/turns.rs`), forwarded messages queued in it
    /// (`flow/forward.rs`).
    pub(crate) fn ticket(&self, admitted_ms: Option<i64>) -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static LAST: AtomicU64 = AtomicU64::new(0);
        let ms = admitted_ms.unwrap_or_else(|| self.clock.now_ms());
        let floor = u64::try_from(ms.max(0)).unwrap_or(0).saturating_mul(1000);
        let prev = LAST
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(floor.max(last.saturating_add(1)))
            })
            .unwrap_or(floor);
        floor.max(prev.saturating_add(1))
    }

    pub(crate) fn run_state(&self) -> RunState {
        *self.run_state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_run_state(&self, s: RunState) {
        *self.run_state.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    pub(crate) fn transport_status(&self) -> TransportStatus {
        *self.transport.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_transport_status(&self, s: TransportStatus) {
        *self.transport.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    pub(crate) fn is_accepting(&self) -> bool {
        self.accepting.load(Ordering::SeqCst)
    }

    pub(crate) fn new_owner(&self) -> u64 {
        self.next_owner.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The id of an inbound record: stable for a (chat, channel message id) pair, readable
    /// (`alice/m1`), and unambiguous (`%` and `/` in the chat id are escaped).
    pub(crate) fn inbound_record_id(chat: &str, message_id: &str) -> String {
        let mut id = String::with_capacity(chat.len() + 1 + message_id.len());
        botmesh_durability::keys::push_escaped(&mut id, chat);
        id.push('/');
        id.push_str(message_id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::Kernel;

    #[test]
    fn inbound_record_id_escapes_the_chat_and_keeps_the_message_id() {
        assert_eq!(Kernel::inbound_record_id("alice", "m1"), "alice/m1");
        assert_eq!(
            Kernel::inbound_record_id("a/b%c/", "m/1"),
            "a%2Fb%25c%2F/m/1"
        );
        assert_eq!(Kernel::inbound_record_id("%", "x"), "%25/x");
        // Two chats that differ only by an escaped character keep apart.
        assert_ne!(
            Kernel::inbound_record_id("a/b", "c"),
            Kernel::inbound_record_id("a", "b/c")
        );
    }
}
