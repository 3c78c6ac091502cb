//! Checkpoints of persistent flows: a chat's flow stack (the flow and its sub-flows, each
//! with its layout hash, encoded state and wait) saved as one [`FlowCheckpoint`] at every
//! suspension and deleted when the flow ends; and the way back: decoding a checkpoint, with
//! the version policy for a checkpoint another layout wrote.
//!
//! | checkpoint | running code | result |
//! | --- | --- | --- |
//! | same layout hash | registered | the stack, resumed where it waited |
//! | another hash | `Restart` | dropped; the flow starts again (event `version_mismatch:restarted`) |
//! | another hash | `Abandon` | dropped (event `version_mismatch:abandoned`) |
//! | another hash | `Migrate(f)` | `f(old state, old hash)` decoded and resaved (event `version_mismatch:migrated`); abandoned if `f` fails |
//! | a flow not registered | — | kept in the store, not resumed (an `error` event) |
//!
//! A stack holding a non-persistent flow is not checkpointed (its state is memory only).

use botmesh_durability::FlowCheckpoint;
use serde::{Deserialize, Serialize};

use crate::bot::kernel::Kernel;
use crate::events::BotEvent;
use crate::flow::api::{FlowError, VersionPolicy};
use crate::flow::executor::{Frame, Stack, Wait};
use crate::flow::registry::Erased;
use crate::metrics::Counters;

#[derive(Serialize, Deserialize)]
struct SavedFrame {
    flow: String,
    hash: u64,
    state: serde_json::Value,
    #[serde(default)]
    wait: Option<Wait>,
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
        frames.push(SavedFrame {
            flow: info.name.to_owned(),
            hash: info.layout_hash,
            state: f.flow.0.encode(&f.state)?,
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
    k.flows.clear_ended(&cp.chat.as_str().into());
    Counters::inc(&k.counters.checkpoints_written);
    Ok(())
}

/// What a stored checkpoint turned into.
pub(crate) enum Loaded {
    /// Resumable.
    Ready(Stack),
    /// Dropped by the version policy (or undecodable).
    Gone,
    /// Start this flow again from the top.
    Restart(Erased),
}

fn event(k: &Kernel, chat: &str, flow: &str, what: &str) {
    k.events.emit(BotEvent::Flow {
        chat: chat.into(),
        flow: flow.to_owned(),
        what: what.to_owned(),
    });
}

/// `restart` of the version policy: the stack starts again from its root flow (`flow` when
/// the frame that failed is the root).
fn restart_root(k: &Kernel, chat: &str, name: &str, frames: &[Frame], flow: Erased) -> Loaded {
    event(k, chat, name, "version_mismatch:restarted");
    Loaded::Restart(frames.first().map_or(flow, |fr| fr.flow.clone()))
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
    let mut frames = Vec::with_capacity(saved.frames.len());
    let mut migrated = false;
    for f in saved.frames {
        let Some(flow) = k.flows.lookup(&f.flow) else {
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
        let mut state = f.state;
        if f.hash != info.layout_hash {
            match info.on_version_mismatch {
                VersionPolicy::Abandon => {
                    drop_checkpoint(k, &chat).await;
                    event(k, &chat, info.name, "version_mismatch:abandoned");
                    return Loaded::Gone;
                }
                VersionPolicy::Restart => {
                    drop_checkpoint(k, &chat).await;
                    return restart_root(k, &chat, info.name, &frames, flow);
                }
                VersionPolicy::Migrate(m) => match m(state, f.hash) {
                    Ok(v) => {
                        state = v;
                        migrated = true;
                        event(k, &chat, info.name, "version_mismatch:migrated");
                    }
                    Err(reason) => {
                        drop_checkpoint(k, &chat).await;
                        k.events.error(
                            format!("flow:{}", info.name),
                            Some(&chat.as_str().into()),
                            format!("migration failed: {reason}"),
                        );
                        event(k, &chat, info.name, "version_mismatch:abandoned");
                        return Loaded::Gone;
                    }
                },
            }
        }
        match flow.0.decode(state) {
            Ok(state) => frames.push(Frame {
                flow,
                state,
                wait: f.wait,
            }),
            Err(e) => {
                // Same hash, and still not decodable: a kept local's own type changed shape
                // (the hash sees types by name). `restart` starts the flow again; the other
                // policies have nothing to migrate from, and abandon it.
                drop_checkpoint(k, &chat).await;
                k.events.error(
                    format!("flow:{}", info.name),
                    Some(&chat.as_str().into()),
                    e,
                );
                if matches!(info.on_version_mismatch, VersionPolicy::Restart) {
                    return restart_root(k, &chat, info.name, &frames, flow);
                }
                event(k, &chat, info.name, "version_mismatch:abandoned");
                return Loaded::Gone;
            }
        }
    }
    let stack = Stack {
        run: saved.run,
        step: cp.step,
        fed_by: cp.inbound_id.clone(),
        frames,
        checkpointed: true,
    };
    if migrated {
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

/// Deletes a chat's checkpoint, reporting a failure as an event; whether it is gone.
pub(crate) async fn drop_checkpoint(k: &Kernel, chat: &str) -> bool {
    match k.store.delete_checkpoint(chat).await {
        Ok(()) => {
            k.flows.clear_ended(&chat.into());
            true
        }
        Err(e) => {
            k.events.error("flow:checkpoint", Some(&chat.into()), e);
            false
        }
    }
}
