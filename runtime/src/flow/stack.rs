//! A chat's flow stack: the flow it runs and the sub-flows it called (innermost last), each
//! with its state and what it waits for; the run it belongs to and the step it is at. The
//! executor steps it, `checkpoint` encodes and decodes it, the flows' state keeps one per chat.

use serde::{Deserialize, Serialize};

use crate::flow::api::{AnyBox, Erased};
use crate::flow::ask::Answer;
use crate::telemetry::TraceContext;

/// What a frame waits for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Wait {
    pub(crate) site: String,
    pub(crate) idle_ms: Option<u64>,
    pub(crate) deadline_ms: Option<i64>,
}

/// The answer a step is taking, recorded in the checkpoint before the step runs (hand-over,
/// `Coordination::handover`): when the step is cut short, whichever replica gets the chat
/// next finishes it with this answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Cut {
    /// The inbound record that fed the step (its sends keep their keys).
    pub(crate) inbound: String,
    /// The answer it brought.
    pub(crate) answer: Answer,
}

/// How many inbound records, besides the last one, a stack remembers as having fed it (see
/// [`Stack::handed`]).
const HANDED: usize = 8;

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
    /// Hand-over's state (boxed: most stacks have none).
    pub(crate) handover: Option<Box<Handover>>,
}

/// A stack's hand-over state (`Coordination::handover`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Handover {
    /// The answer of the step under way, when the checkpoint carries it.
    pub(crate) cut: Option<Cut>,
    /// Inbound records whose cut step was finished by another message: their replay is not
    /// the next answer either (the last [`HANDED`]).
    pub(crate) handed: Vec<String>,
}

impl Handover {
    /// The state of a checkpoint's `cut` and `handed`, `None` when it has neither.
    pub(crate) fn of(cut: Option<Cut>, handed: Vec<String>) -> Option<Box<Self>> {
        (cut.is_some() || !handed.is_empty()).then(|| Box::new(Handover { cut, handed }))
    }
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

    /// Whether the inbound record `inbound` already fed the step that wrote the current state
    /// (a replay or a redelivery of it must not be taken as the next answer). The answer of a
    /// cut step has not: its step is still to be finished.
    pub(crate) fn fed(&self, inbound: Option<&str>) -> bool {
        let Some(id) = inbound else {
            return false;
        };
        if self.cut().is_some_and(|c| c.inbound == id) {
            return false;
        }
        self.fed_by.as_deref() == Some(id) || self.handed().iter().any(|h| h == id)
    }

    /// The answer of the step under way, when the checkpoint carries it (hand-over).
    pub(crate) fn cut(&self) -> Option<&Cut> {
        self.handover.as_ref().and_then(|h| h.cut.as_ref())
    }

    /// Sets (or clears) the answer of the step under way.
    pub(crate) fn set_cut(&mut self, cut: Option<Cut>) {
        match (&mut self.handover, cut) {
            (Some(h), cut) => h.cut = cut,
            (None, Some(cut)) => self.handover = Handover::of(Some(cut), Vec::new()),
            (None, None) => {}
        }
    }

    /// Takes the answer of the step under way.
    pub(crate) fn take_cut(&mut self) -> Option<Cut> {
        self.handover.as_mut().and_then(|h| h.cut.take())
    }

    /// Inbound records whose cut step another message finished.
    pub(crate) fn handed(&self) -> &[String] {
        self.handover.as_ref().map_or(&[], |h| &h.handed)
    }

    /// Remembers that `inbound` fed a step finished on another message's behalf.
    pub(crate) fn hand(&mut self, inbound: String) {
        let h = self.handover.get_or_insert_with(Box::default);
        if h.handed.len() >= HANDED {
            h.handed.remove(0);
        }
        h.handed.push(inbound);
    }

    /// Whether every frame is persistent (only such a stack is checkpointed).
    pub(crate) fn is_persistent(&self) -> bool {
        !self.frames.is_empty() && self.frames.iter().all(|f| f.flow.0.info().persistent)
    }
}
