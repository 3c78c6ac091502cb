//! The flows' state inside a bot: the registered flows (by name), each chat's active stack,
//! the chats' generations (a step that started before its chat's flows ended drops its
//! outcome) and the chats whose ended flow left a checkpoint behind. Memory only: what is
//! stored is the checkpoints (see `commit`) and the asks' timeouts (see `timeout`).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, RwLock};

use crate::flow::api::Erased;
use crate::flow::stack::Stack;
use crate::kernel::Kernel;
use crate::message::ChatId;

/// The flows' state inside a bot.
#[derive(Default)]
pub(crate) struct FlowRuntime {
    registry: RwLock<HashMap<&'static str, Erased>>,
    active: Mutex<HashMap<ChatId, Stack>>,
    generations: Mutex<HashMap<ChatId, u64>>,
    /// Chats whose flow ended while its checkpoint could not be deleted (and no message will
    /// be replayed to end it again): the leftover checkpoint must not bring the flow back. The
    /// delete is tried again before the chat's next flow stage; a new checkpoint clears it.
    /// In memory: a restart in another process finds the checkpoint and resumes it.
    ended: Mutex<HashSet<ChatId>>,
    /// The last millisecond a run started from code took, and how many took it.
    code_runs: Mutex<(i64, u32)>,
}

impl std::fmt::Debug for FlowRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowRuntime")
            .field("flows", &self.read_registry().len())
            .finish_non_exhaustive()
    }
}

impl Kernel {
    /// The flows' state in this kernel (which keeps it as `dyn Any`: the flows are a layer
    /// above the kernel).
    pub(crate) fn flows(&self) -> &FlowRuntime {
        match self.flow_state.downcast_ref::<FlowRuntime>() {
            Some(runtime) => runtime,
            None => unreachable!("`BotBuilder::build` gives every kernel a `FlowRuntime`"),
        }
    }
}

impl FlowRuntime {
    fn read_registry(&self) -> std::sync::RwLockReadGuard<'_, HashMap<&'static str, Erased>> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `flow` and the sub-flows it calls; registering one again does nothing. Refuses
    /// another flow of a name already taken (checkpoints find their flow by name).
    pub(crate) fn register(&self, flow: Erased) -> Result<(), DuplicateFlow> {
        let name = flow.0.info().name;
        if let Some(known) = self.read_registry().get(name) {
            if known.0.state_type() == flow.0.state_type() {
                return Ok(());
            }
            return Err(DuplicateFlow { name });
        }
        let callees = flow.0.callees();
        self.registry
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, flow);
        for c in callees {
            self.register(c)?;
        }
        Ok(())
    }

    pub(crate) fn lookup(&self, name: &str) -> Option<Erased> {
        self.read_registry().get(name).cloned()
    }

    pub(crate) fn take(&self, chat: &ChatId) -> Option<Stack> {
        lock(&self.active).remove(chat)
    }

    pub(crate) fn put(&self, chat: &ChatId, stack: Stack) {
        lock(&self.active).insert(chat.clone(), stack);
    }

    pub(crate) fn generation(&self, chat: &ChatId) -> u64 {
        lock(&self.generations).get(chat).copied().unwrap_or(0)
    }

    /// Ends the chat's current steps: an outcome of a step that started before is dropped.
    pub(crate) fn bump(&self, chat: &ChatId) {
        *lock(&self.generations).entry(chat.clone()).or_insert(0) += 1;
    }

    pub(crate) fn active_name(&self, chat: &ChatId) -> Option<&'static str> {
        lock(&self.active).get(chat).and_then(Stack::top_name)
    }

    /// `f` of the chat's stack in memory, if it has one.
    pub(crate) fn with_stack<R>(&self, chat: &ChatId, f: impl FnOnce(&Stack) -> R) -> Option<R> {
        lock(&self.active).get(chat).map(f)
    }

    /// The id of a run started from code at `now_ms`: the millisecond, then `-2`, `-3`, … for
    /// the further runs started within it.
    pub(crate) fn run_from_code(&self, now_ms: i64) -> String {
        let mut last = lock(&self.code_runs);
        if last.0 == now_ms {
            last.1 += 1;
            format!("{now_ms}-{}", last.1)
        } else {
            *last = (now_ms, 1);
            now_ms.to_string()
        }
    }

    /// The chat's flow ended but its checkpoint is still stored (see `ended`).
    pub(crate) fn mark_ended(&self, chat: &ChatId) {
        lock(&self.ended).insert(chat.clone());
    }

    /// The chat's checkpoint was deleted or replaced.
    pub(crate) fn clear_ended(&self, chat: &ChatId) {
        lock(&self.ended).remove(chat);
    }

    pub(crate) fn is_ended(&self, chat: &ChatId) -> bool {
        lock(&self.ended).contains(chat)
    }

    /// Forgets every in-memory stack (their checkpoints stay stored): each chat's running step
    /// drops its outcome.
    pub(crate) fn abort_all(&self) {
        let chats: Vec<ChatId> = lock(&self.active).drain().map(|(c, _)| c).collect();
        for c in &chats {
            self.bump(c);
        }
    }
}

/// Two different flows under one name.
#[derive(Debug, thiserror::Error)]
#[error(
    "two different flows are named `{name}` (in two modules): checkpoints find their flow by its function name, so rename one of them"
)]
pub(crate) struct DuplicateFlow {
    name: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
