//! `Kernel`: the shared internals every bot module receives (config, provider, store,
//! registries, queues, counters, lifecycle state), plus tiny shared helpers.
//!
//! The kernel holds state; behaviour lives in the modules that take a `&Kernel`. A `Bot` is
//! an `Arc<Kernel>` plus the plugin scope it acts for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use botmesh_durability::Store;
use tokio::sync::{Notify, watch};

use crate::bot::dedupe::Dedupe;
use crate::bot::gates::Gates;
use crate::bot::lang::LangResolver;
use crate::bot::lifecycle::LifecycleStep;
use crate::bot::queue::ChatQueues;
use crate::bot::routes::Routes;
use crate::clock::Clock;
use crate::config::BotConfig;
use crate::events::EventOutlet;
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
    pub(crate) flows: crate::flow::FlowRuntime,
    pub(crate) durable: Option<crate::durable::Durable>,
    /// The author turned the journals off on a store that keeps them: warned at each start.
    pub(crate) journals_off: bool,
    pub(crate) stopped: Notify,
}

impl Kernel {
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
