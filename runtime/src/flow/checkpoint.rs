//! Checkpoints of persistent flows: a chat's flow stack (the flow and its sub-flows, each
//! with its layout fingerprint, encoded state, the answer fingerprint of the ask it waits at,
//! and its wait) saved as one [`FlowCheckpoint`] at every suspension and deleted when the flow
//! ends; and the way back: decoding a checkpoint, with the version policy for a checkpoint of
//! another layout. A state is named after the identity of the ask it waits at, so a
//! checkpoint of another build finds its ask by name.
//!
//! | checkpoint | running code | result |
//! | --- | --- | --- |
//! | same fingerprint | registered | the stack, resumed where it waited |
//! | another fingerprint | has the ask it waits at, read the same way, its locals decode | resumed there, resaved (event `version_mismatch:resumed`) |
//! | another fingerprint, otherwise | `Restart` | [`Loaded::Restart`]: kept until the chat's next message, which restarts the flow (a flow with parameters with those it was first started with, which the checkpoint keeps) and is not an answer (the executor emits `version_mismatch:restarted`) |
//! | another fingerprint, otherwise | `Abandon` | dropped (event `version_mismatch:abandoned`) |
//! | another fingerprint, otherwise | `Migrate(f)` | `f(old state, old fingerprint)` decoded and resaved (event `version_mismatch:migrated`); abandoned if `f` fails or its state does not decode |
//! | same fingerprint, does not decode (a kept type changed shape) | any | as "otherwise" above |
//! | a flow not registered | — | kept in the store, not resumed (an `error` event) |
//!
//! A stack holding a non-persistent flow is not checkpointed (its state is memory only).
//!
//! Pure: nothing here reads or writes the store or emits an event. [`decode`] returns what the
//! version policy asks for besides the stack ([`Note`]s: events, errors, the checkpoint's
//! removal or resave), in order; the executor carries them out, through `commit` for writes.

use botmesh_durability::store::FlowCheckpoint;
use serde::{Deserialize, Serialize};

use crate::flow::api::{AnyBox, Erased, FlowError, VersionPolicy};
use crate::flow::stack::{Cut, Frame, Handover, Stack, Wait};
use crate::telemetry::TraceContext;

#[derive(Serialize, Deserialize)]
struct SavedFrame {
    flow: String,
    hash: u64,
    state: serde_json::Value,
    #[serde(default)]
    wait: Option<Wait>,
    /// The answer fingerprint of the state it waits in (`StateInfo::answer`).
    #[serde(default)]
    answer: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct SavedStack {
    run: String,
    frames: Vec<SavedFrame>,
    /// The root flow's start state (its parameters), for a flow with parameters: what the
    /// `Restart` version policy starts again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<serde_json::Value>,
    /// The W3C trace context of the turn that wrote the checkpoint (feature `otel`): the
    /// first turn that resumes it links to it. Absent from older checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace: Option<TraceContext>,
    /// The answer of a step under way (hand-over): the checkpoint's `inbound_id` is its
    /// inbound record, and the step is still to be finished with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cut: Option<Cut>,
    /// Inbound records whose cut step another message finished (see `Stack::handed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    handed: Vec<String>,
}

/// The state variant's name in an encoded state (`{"S1": {…}}` → `S1`).
pub(crate) fn variant_name(state: &serde_json::Value) -> String {
    match state {
        serde_json::Value::Object(m) => m.keys().next().cloned().unwrap_or_default(),
        serde_json::Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

/// A stack's checkpoint.
pub(crate) struct Encoded {
    pub(crate) checkpoint: FlowCheckpoint,
    /// The top frame's `flow@State` (the `checkpoint:` event names it).
    pub(crate) top: String,
}

/// Encodes the stack of `chat` into a checkpoint written at `now_ms` by the step `inbound`
/// fed, in the turn whose trace context is `trace`.
pub(crate) fn encode(
    stack: &Stack,
    chat: &str,
    (inbound, trace): (Option<String>, Option<TraceContext>),
    now_ms: i64,
) -> Result<Encoded, FlowError> {
    let mut frames = Vec::with_capacity(stack.frames.len());
    for f in &stack.frames {
        let info = f.flow.0.info();
        let state = f.flow.0.encode(&f.state)?;
        frames.push(SavedFrame {
            flow: info.name.to_owned(),
            hash: info.layout_hash,
            answer: info.state(&variant_name(&state)).map(|s| s.answer),
            state,
            wait: f.wait.clone(),
        });
    }
    let top = frames
        .last()
        .map(|f| format!("{}@{}", f.flow, variant_name(&f.state)))
        .unwrap_or_default();
    let root = stack.frames.first().map(|f| f.flow.0.info());
    let saved = SavedStack {
        run: stack.run.clone(),
        frames,
        start: stack.start.clone(),
        trace,
        cut: stack.cut().cloned(),
        handed: stack.handed().to_vec(),
    };
    let state = serde_json::to_value(&saved).map_err(|e| FlowError::Encode {
        flow: root.map_or("", |i| i.name),
        reason: e.to_string(),
    })?;
    let checkpoint = FlowCheckpoint {
        chat: chat.to_owned(),
        flow: root.map(|i| i.name.to_owned()).unwrap_or_default(),
        layout_hash: root.map_or(0, |i| i.layout_hash),
        state,
        inbound_id: inbound,
        step: stack.step,
        updated_ms: now_ms,
    };
    Ok(Encoded { checkpoint, top })
}

/// [`Stack::fed`] of a stored checkpoint, read without decoding its frames.
pub(crate) fn fed(cp: &FlowCheckpoint, inbound: Option<&str>) -> bool {
    let Some(id) = inbound else {
        return false;
    };
    let cut = cp
        .state
        .get("cut")
        .and_then(|c| c.get("inbound"))
        .and_then(|i| i.as_str());
    if cut == Some(id) {
        return false;
    }
    let handed = cp
        .state
        .get("handed")
        .and_then(|h| h.as_array())
        .is_some_and(|h| h.iter().any(|v| v.as_str() == Some(id)));
    cp.inbound_id.as_deref() == Some(id) || handed
}

/// What a stored checkpoint turned into.
pub(crate) enum Loaded {
    /// Resumable.
    Ready(Stack),
    /// Dropped by the version policy (or undecodable).
    Gone,
    /// The version policy restarts this flow: the checkpoint is still stored, and the chat's
    /// next message starts the flow again (after the notice) instead of answering.
    Restart {
        /// The root flow.
        flow: Erased,
        /// What the user is told first.
        notice: Option<&'static str>,
        /// The root flow's start state as it was first started (its parameters), when it has
        /// parameters.
        start: Option<serde_json::Value>,
    },
}

/// What decoding a checkpoint asks for besides its stack, to be carried out in order.
#[derive(Debug)]
pub(crate) enum Note {
    /// A flow event of the chat (`version_mismatch:…`).
    Event {
        flow: &'static str,
        what: &'static str,
    },
    /// An error event of the chat.
    Error { context: String, error: String },
    /// Delete the chat's checkpoint (the version policy dropped it).
    Drop,
    /// Save the checkpoint again, re-encoded in the running layout (resumed or migrated).
    Resave(FlowCheckpoint),
}

/// A decoded checkpoint: the stack (or why there is none) and what else to do.
pub(crate) struct Decoded {
    pub(crate) loaded: Loaded,
    pub(crate) notes: Vec<Note>,
}

/// A frame of another layout, or one that no longer decodes, meets the flow's policy.
enum Outcome {
    Decoded(AnyBox),
    Stop(Loaded),
}

/// Whether a frame can resume at the ask it waits at in the running code: same identity,
/// same answer fingerprint, and its state decodes.
fn resume_same_ask(flow: &Erased, f: &SavedFrame) -> Option<AnyBox> {
    let info = flow.0.info();
    let state = info.state(&variant_name(&f.state))?;
    if state.name == "Start" || f.answer != Some(state.answer) {
        return None;
    }
    flow.0.decode(f.state.clone()).ok()
}

fn error(context: impl Into<String>, error: impl ToString) -> Note {
    Note::Error {
        context: context.into(),
        error: error.to_string(),
    }
}

/// The version policy, for a frame that cannot resume as it is.
fn policy(
    notes: &mut Vec<Note>,
    (root, start): (Option<Erased>, Option<&serde_json::Value>),
    flow: &Erased,
    f: &SavedFrame,
    why: Option<FlowError>,
) -> Outcome {
    let info = flow.0.info();
    if let Some(e) = why {
        notes.push(error(format!("flow:{}", info.name), e));
    }
    match info.on_version_mismatch {
        VersionPolicy::Restart { notice } => Outcome::Stop(Loaded::Restart {
            flow: root.unwrap_or_else(|| flow.clone()),
            notice,
            start: start.cloned(),
        }),
        VersionPolicy::Abandon => {
            notes.push(Note::Drop);
            notes.push(Note::Event {
                flow: info.name,
                what: "version_mismatch:abandoned",
            });
            Outcome::Stop(Loaded::Gone)
        }
        VersionPolicy::Migrate(m) => {
            let migrated = m(f.state.clone(), f.hash)
                .map_err(|reason| format!("migration failed: {reason}"))
                .and_then(|v| {
                    flow.0
                        .decode(v)
                        .map_err(|e| format!("the migrated state does not decode: {e}"))
                });
            match migrated {
                Ok(state) => {
                    notes.push(Note::Event {
                        flow: info.name,
                        what: "version_mismatch:migrated",
                    });
                    Outcome::Decoded(state)
                }
                Err(reason) => {
                    notes.push(Note::Drop);
                    notes.push(error(format!("flow:{}", info.name), reason));
                    notes.push(Note::Event {
                        flow: info.name,
                        what: "version_mismatch:abandoned",
                    });
                    Outcome::Stop(Loaded::Gone)
                }
            }
        }
    }
}

/// Decodes a checkpoint, applying the version policy; `lookup` finds a registered flow by
/// name, `now_ms` dates a resave.
pub(crate) fn decode(
    cp: FlowCheckpoint,
    lookup: impl Fn(&str) -> Option<Erased>,
    now_ms: i64,
) -> Decoded {
    let mut notes = Vec::new();
    let loaded = decode_into(cp, lookup, now_ms, &mut notes);
    Decoded { loaded, notes }
}

fn decode_into(
    cp: FlowCheckpoint,
    lookup: impl Fn(&str) -> Option<Erased>,
    now_ms: i64,
    notes: &mut Vec<Note>,
) -> Loaded {
    let chat = cp.chat.clone();
    let saved: SavedStack = match serde_json::from_value(cp.state) {
        Ok(s) => s,
        Err(e) => {
            notes.push(error(
                format!("flow:{}", cp.flow),
                FlowError::Decode {
                    flow: cp.flow.clone(),
                    reason: e.to_string(),
                },
            ));
            return Loaded::Gone;
        }
    };
    let mut frames: Vec<Frame> = Vec::with_capacity(saved.frames.len());
    let mut resave = false;
    for f in saved.frames {
        let Some(flow) = lookup(&f.flow) else {
            notes.push(error(
                format!("flow:{}", f.flow),
                FlowError::Unknown {
                    chat: chat.clone(),
                    flow: f.flow.clone(),
                },
            ));
            return Loaded::Gone;
        };
        let info = flow.0.info();
        let root = (frames.first().map(|r| r.flow.clone()), saved.start.as_ref());
        let decoded = if f.hash == info.layout_hash {
            match flow.0.decode(f.state.clone()) {
                Ok(state) => Outcome::Decoded(state),
                // Same fingerprint, and still not decodable: a kept local's own type
                // changed shape (the fingerprint sees types as written).
                Err(e) => policy(notes, root, &flow, &f, Some(e)),
            }
        } else if let Some(state) = resume_same_ask(&flow, &f) {
            resave = true;
            notes.push(Note::Event {
                flow: info.name,
                what: "version_mismatch:resumed",
            });
            Outcome::Decoded(state)
        } else {
            resave = true;
            policy(notes, root, &flow, &f, None)
        };
        match decoded {
            Outcome::Decoded(state) => frames.push(Frame {
                flow,
                state,
                wait: f.wait,
            }),
            Outcome::Stop(loaded) => return loaded,
        }
    }
    let stack = Stack {
        run: saved.run,
        step: cp.step,
        fed_by: cp.inbound_id.clone(),
        frames,
        checkpointed: true,
        start: saved.start,
        noted: false,
        trace: saved.trace,
        handover: Handover::of(saved.cut, saved.handed),
    };
    if resave {
        match encode(&stack, &chat, (cp.inbound_id, stack.trace.clone()), now_ms) {
            Ok(encoded) => notes.push(Note::Resave(encoded.checkpoint)),
            Err(e) => notes.push(error("flow:migrate", e)),
        }
    }
    Loaded::Ready(stack)
}
