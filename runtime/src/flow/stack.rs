//! A chat's flow stack: the flow it runs and the sub-flows it called (innermost last), each
//! with its state and what it waits for; the run it belongs to and the step it is at. The
//! executor steps it, `checkpoint` encodes and decodes it, the flows' state keeps one per chat.

use serde::{Deserialize, Serialize};

use crate::flow::api::{AnyBox, Erased};
use crate::telemetry::TraceContext;

/// What a frame waits for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Wait {
    pub(crate) site: String,
    pub(crate) idle_ms: Option<u64>,
    pub(crate) deadline_ms: Option<i64>,
}

/// One flow of a chat's stack.
pub(crate) struct Frame {
    pub(crate) flow: Erased,
    pub(crate) state: AnyBox,
    /// `None` while the frame waits for a sub-flow.
    pub(crate) wait: Option<Wait>,
}

/// A chat's active flows.
pub(crate) struct Stack {
    pub(crate) run: String,
    pub(crate) step: u64,
    /// The inbound record that fed the step which wrote the current state (a redelivery or
    /// replay of that record must not be taken as the next answer).
    pub(crate) fed_by: Option<String>,
    pub(crate) frames: Vec<Frame>,
    /// Whether the store holds this stack's checkpoint (as of its last step).
    pub(crate) checkpointed: bool,
    /// The root flow's start state, encoded, when the flow has parameters: kept in the
    /// checkpoint, so the `Restart` version policy starts it again with them.
    pub(crate) start: Option<serde_json::Value>,
    /// The root flow is not persistent and the store holds the note that it waits in memory
    /// (see `lost`).
    pub(crate) noted: bool,
    /// The trace context of the turn that wrote the checkpoint this stack was loaded from,
    /// until the stack's first turn here links to it (`telemetry`).
    pub(crate) trace: Option<TraceContext>,
}

impl Stack {
    /// The innermost flow's name.
    pub(crate) fn top_name(&self) -> Option<&'static str> {
        self.frames.last().map(|f| f.flow.0.info().name)
    }

    /// When the innermost flow's idle timeout fires (bot clock, Unix ms).
    pub(crate) fn deadline(&self) -> Option<i64> {
        self.frames
            .last()
            .and_then(|f| f.wait.as_ref())
            .and_then(|w| w.deadline_ms)
    }

    /// Whether every frame is persistent (only such a stack is checkpointed).
    pub(crate) fn is_persistent(&self) -> bool {
        !self.frames.is_empty() && self.frames.iter().all(|f| f.flow.0.info().persistent)
    }
}
