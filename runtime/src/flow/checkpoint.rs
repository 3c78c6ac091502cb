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
//! | another fingerprint, otherwise | `Restart` | [`Loaded::Restart`]: kept until the chat's next message, which restarts the flow and is not an answer (the executor emits `version_mismatch:restarted`) |
//! | another fingerprint, otherwise | `Abandon` | dropped (event `version_mismatch:abandoned`) |
//! | another fingerprint, otherwise | `Migrate(f)` | `f(old state, old fingerprint)` decoded and resaved (event `version_mismatch:migrated`); abandoned if `f` fails or its state does not decode |
//! | same fingerprint, does not decode (a kept type changed shape) | any | as "otherwise" above |
//! | a flow not registered | — | kept in the store, not resumed (an `error` event) |
//!
//! A stack holding a non-persistent flow is not checkpointed (its state is memory only).

use botmesh_durability::store::FlowCheckpoint;
use serde::{Deserialize, Serialize};

use crate::events::BotEvent;
use crate::flow::api::{FlowError, VersionPolicy};
use crate::flow::executor::{Frame, Stack, Wait};
use crate::flow::registry::{AnyBox, Erased};
use crate::kernel::Kernel;
use crate::metrics::Counters;

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
}

/// Whether every frame of the stack is persistent.
pub(crate) fn is_persistent(stack: &Stack) -> bool {
    !stack.frames.is_empty() && stack.frames.iter().all(|f| f.flow.0.info().persistent)
}

/// The state variant's name in an encoded state (`{"S1": {…}}` → `S1`).
pub(crate) fn variant_name(state: &serde_json::Value) -> String {
    match state {
        serde_json::Value::Object(m) => m.keys().next().cloned().unwrap_or_default(),
        serde_json::Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

/// Encodes the stack into a checkpoint; also returns the top frame's `flow@State`.
pub(crate) fn encode(
    k: &Kernel,
    chat: &str,
    stack: &Stack,
    inbound: Option<String>,
) -> Result<(FlowCheckpoint, String), FlowError> {
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
    };
    let state = serde_json::to_value(&saved).map_err(|e| FlowError::Encode {
        flow: root.map_or("", |i| i.name),
        reason: e.to_string(),
    })?;
    let cp = FlowCheckpoint {
        chat: chat.to_owned(),
        flow: root.map(|i| i.name.to_owned()).unwrap_or_default(),
        layout_hash: root.map_or(0, |i| i.layout_hash),
        state,
        inbound_id: inbound,
        step: stack.step,
        updated_ms: k.clock.now_ms(),
    };
    Ok((cp, top))
}

/// Writes a checkpoint.
pub(crate) async fn write(k: &Kernel, cp: FlowCheckpoint) -> Result<(), FlowError> {
    k.store
        .save_checkpoint(&cp)
        .await
        .map_err(|source| FlowError::CheckpointWrite {
            flow: cp.flow.clone(),
            chat: cp.chat.clone(),
            source,
        })?;
    k.flows().clear_ended(&cp.chat.as_str().into());
    Counters::inc(&k.counters.checkpoints_written);
    Ok(())
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
    },
}

fn event(k: &Kernel, chat: &str, flow: &str, what: &str) {
    k.events.emit(BotEvent::Flow {
        chat: chat.into(),
        flow: flow.to_owned(),
        what: what.to_owned(),
    });
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

/// The version policy, for a frame that cannot resume as it is.
async fn policy(
    k: &Kernel,
    chat: &str,
    root: Option<Erased>,
    flow: &Erased,
    f: SavedFrame,
    why: Option<FlowError>,
) -> Outcome {
    let info = flow.0.info();
    if let Some(e) = why {
        k.events
            .error(format!("flow:{}", info.name), Some(&chat.into()), e);
    }
    match info.on_version_mismatch {
        VersionPolicy::Restart { notice } => Outcome::Stop(Loaded::Restart {
            flow: root.unwrap_or_else(|| flow.clone()),
            notice,
        }),
        VersionPolicy::Abandon => {
            drop_checkpoint(k, chat).await;
            event(k, chat, info.name, "version_mismatch:abandoned");
            Outcome::Stop(Loaded::Gone)
        }
        VersionPolicy::Migrate(m) => {
            let migrated = m(f.state, f.hash)
                .map_err(|reason| format!("migration failed: {reason}"))
                .and_then(|v| {
                    flow.0
                        .decode(v)
                        .map_err(|e| format!("the migrated state does not decode: {e}"))
                });
            match migrated {
                Ok(state) => {
                    event(k, chat, info.name, "version_mismatch:migrated");
                    Outcome::Decoded(state)
                }
                Err(reason) => {
                    drop_checkpoint(k, chat).await;
                    k.events
                        .error(format!("flow:{}", info.name), Some(&chat.into()), reason);
                    event(k, chat, info.name, "version_mismatch:abandoned");
                    Outcome::Stop(Loaded::Gone)
                }
            }
        }
    }
}

/// Decodes a checkpoint, applying the version policy (and deleting what it drops).
pub(crate) async fn load(k: &Kernel, cp: FlowCheckpoint) -> Loaded {
    let chat = cp.chat.clone();
    let saved: SavedStack = match serde_json::from_value(cp.state) {
        Ok(s) => s,
        Err(e) => {
            k.events.error(
                format!("flow:{}", cp.flow),
                Some(&chat.as_str().into()),
                FlowError::Decode {
                    flow: cp.flow.clone(),
                    reason: e.to_string(),
                },
            );
            return Loaded::Gone;
        }
    };
    let mut frames: Vec<Frame> = Vec::with_capacity(saved.frames.len());
    let mut resave = false;
    for f in saved.frames {
        let Some(flow) = k.flows().lookup(&f.flow) else {
            k.events.error(
                format!("flow:{}", f.flow),
                Some(&chat.as_str().into()),
                FlowError::Unknown {
                    chat: chat.clone(),
                    flow: f.flow.clone(),
                },
            );
            return Loaded::Gone;
        };
        let info = flow.0.info();
        let root = frames.first().map(|r| r.flow.clone());
        let decoded = if f.hash == info.layout_hash {
            match flow.0.decode(f.state.clone()) {
                Ok(state) => Outcome::Decoded(state),
                // Same fingerprint, and still not decodable: a kept local's own type
                // changed shape (the fingerprint sees types as written).
                Err(e) => policy(k, &chat, root.clone(), &flow, f.clone_meta(), Some(e)).await,
            }
        } else if let Some(state) = resume_same_ask(&flow, &f) {
            resave = true;
            event(k, &chat, info.name, "version_mismatch:resumed");
            Outcome::Decoded(state)
        } else {
            resave = true;
            policy(k, &chat, root.clone(), &flow, f.clone_meta(), None).await
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
    };
    if resave {
        let encoded = encode(k, &chat, &stack, cp.inbound_id);
        let written = match encoded {
            Ok((cp, _)) => write(k, cp).await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            k.events
                .error("flow:migrate", Some(&chat.as_str().into()), e);
        }
    }
    Loaded::Ready(stack)
}

impl SavedFrame {
    /// A copy of the frame without its wait (the policy does not need it).
    fn clone_meta(&self) -> SavedFrame {
        SavedFrame {
            flow: self.flow.clone(),
            hash: self.hash,
            state: self.state.clone(),
            wait: None,
            answer: self.answer,
        }
    }
}

/// Deletes a chat's checkpoint, reporting a failure as an event; whether it is gone.
pub(crate) async fn drop_checkpoint(k: &Kernel, chat: &str) -> bool {
    match k.store.delete_checkpoint(chat).await {
        Ok(()) => {
            k.flows().clear_ended(&chat.into());
            true
        }
        Err(e) => {
            k.events.error("flow:checkpoint", Some(&chat.into()), e);
            false
        }
    }
}
