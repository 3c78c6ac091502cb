//! Upgrade tests: will a deploy carry the conversations in flight on? What Temporal's
//! replayer does for workflows, for flows.
//!
//! [`record`] runs scripted conversations against the current build and writes, after every
//! message, the checkpoint a conversation would be stored with (and the keys of the sends so
//! far) as JSON: commit it next to the test. [`check`] loads each recorded checkpoint into the
//! new build exactly as a restarted bot would (the same version policy), re-runs the scripts
//! for their keys, and fails with a readable report when a conversation would restart, be
//! abandoned, or have a send keyed differently (a message redelivered across the deploy would
//! then be answered twice). [`assert_upgrade`] does both around a file, as `insta` does.
//!
//! | recorded checkpoint, in the new build | outcome |
//! | --- | --- |
//! | same layout fingerprint | carries on |
//! | the ask it waits at still there (identity, answer side), its locals decode | resumes there |
//! | migrated by the flow's `migrate` | carries on where the migration says |
//! | otherwise | restarted or abandoned: the check fails |
//!
//! Nothing here is a mock: the checkpoints are loaded by the runtime's own code.

use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;

use botmesh_durability::store::FlowCheckpoint;
use botmesh_durability::{MemoryStore, Store};
use serde::{Deserialize, Serialize};

use crate::bot::{Bot, BotBuilder};
use crate::error::BotError;
use crate::flow::checkpoint::{self, Loaded};
use crate::flow::resume;
use crate::testing::{MockProvider, Transcript};

/// One recorded conversation state (after a conversation's last message, with no flow in
/// flight: `flow` empty, for its keys).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Recorded {
    /// The messages that led here.
    said: Vec<String>,
    flow: String,
    layout_hash: u64,
    step: u64,
    state: serde_json::Value,
    /// `(text, site key)` of every send so far.
    sends: Vec<(String, String)>,
}

/// Why an upgrade check failed: the report, one conversation per paragraph.
#[derive(Debug, thiserror::Error)]
#[error("{report}")]
pub struct UpgradeFailure {
    /// What would go wrong, readable.
    pub report: String,
}

const CHAT: &str = "user";

/// `(text, site)` of the sends in transcript lines (the key without its inbound record id).
fn sends_of(lines: &[String]) -> Vec<(String, String)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("bot → {CHAT} [key=")))
        .filter_map(|rest| rest.split_once("]: "))
        .map(|(key, text)| {
            let site = key.split_once(':').map_or(key, |(_, s)| s);
            (text.to_owned(), site.to_owned())
        })
        .collect()
}

/// Runs `scripts` (each a conversation: the user's messages) against the build `setup`
/// makes, and returns the checkpoints and keys after every message, as JSON.
pub async fn record<S>(setup: S, scripts: &[&[&str]]) -> Result<String, BotError>
where
    S: Fn(BotBuilder) -> Result<Bot, BotError> + Clone + Send + Sync + 'static,
{
    let mut out = Vec::new();
    for script in scripts {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let mut t = Transcript::with_store(store.clone(), setup.clone()).await?;
        let mut said = Vec::new();
        for (i, msg) in script.iter().enumerate() {
            t.says(CHAT, msg).await;
            said.push((*msg).to_owned());
            match store.checkpoint(CHAT).await? {
                Some(cp) => out.push(Recorded {
                    said: said.clone(),
                    flow: cp.flow,
                    layout_hash: cp.layout_hash,
                    step: cp.step,
                    state: cp.state,
                    sends: sends_of(&t.lines()),
                }),
                None if i + 1 == script.len() => out.push(Recorded {
                    said: said.clone(),
                    flow: String::new(),
                    layout_hash: 0,
                    step: 0,
                    state: serde_json::Value::Null,
                    sends: sends_of(&t.lines()),
                }),
                None => {}
            }
        }
        t.bot().stop().await?;
    }
    serde_json::to_string_pretty(&out).map_err(|e| BotError::Config {
        option: "upgrade recording".to_owned(),
        reason: e.to_string(),
    })
}

/// The state a recorded checkpoint's top frame waits in.
fn waits_at(r: &Recorded) -> String {
    r.state
        .get("frames")
        .and_then(|f| f.as_array())
        .and_then(|f| f.last())
        .and_then(|f| f.get("state"))
        .map(checkpoint::variant_name)
        .unwrap_or_default()
}

/// Loads every checkpoint of `recorded` (from [`record`]) into the build `setup` makes, and
/// re-runs the recorded messages for their keys; `Err` with the report when a conversation
/// in flight would restart, be abandoned, or see a send keyed differently.
pub async fn check<S>(setup: S, recorded: &str) -> Result<(), UpgradeFailure>
where
    S: Fn(BotBuilder) -> Result<Bot, BotError> + Clone + Send + Sync + 'static,
{
    let fail = |report: String| UpgradeFailure { report };
    let recorded: Vec<Recorded> = serde_json::from_str(recorded)
        .map_err(|e| fail(format!("the recording does not parse: {e}")))?;
    let mut report = String::new();
    let mut bad = 0;
    for r in &recorded {
        let mut problems = Vec::new();
        let store = MemoryStore::new();
        let bot = setup(Bot::builder(MockProvider::new()).store(store.clone()))
            .map_err(|e| fail(format!("the new build does not start: {e}")))?;
        let cp = FlowCheckpoint {
            chat: CHAT.to_owned(),
            flow: r.flow.clone(),
            layout_hash: r.layout_hash,
            state: r.state.clone(),
            inbound_id: None,
            step: r.step,
            updated_ms: 0,
        };
        let at = waits_at(r);
        let states = bot
            .kernel
            .flows()
            .lookup(&r.flow)
            .map(|f| {
                let names: Vec<&str> = f.0.info().states.iter().map(|s| s.name).collect();
                names.join(", ")
            })
            .unwrap_or_else(|| "the flow is not registered".to_owned());
        let loaded = if r.flow.is_empty() {
            Loaded::Gone
        } else {
            resume::load(&bot.kernel, cp).await
        };
        match loaded {
            Loaded::Gone if r.flow.is_empty() => {}
            Loaded::Ready(_) => {}
            Loaded::Restart { .. } => problems.push(format!(
                "restarted: the new build has no ask `{at}` read the same way whose kept locals decode (its states: {states})"
            )),
            Loaded::Gone => problems.push(format!(
                "abandoned: the new build cannot resume `{at}` and its policy drops it (its states: {states})"
            )),
        }
        // Keys: the same messages against the new build.
        let said: Vec<&str> = r.said.iter().map(String::as_str).collect();
        let mut t = Transcript::new(setup.clone())
            .await
            .map_err(|e| fail(format!("the new build does not start: {e}")))?;
        for msg in &said {
            t.says(CHAT, msg).await;
        }
        let now = sends_of(&t.lines());
        for (text, site) in &r.sends {
            let new: Vec<&String> = now
                .iter()
                .filter(|(t, _)| t == text)
                .map(|(_, s)| s)
                .collect();
            if !new.is_empty() && !new.contains(&site) {
                problems.push(format!(
                    "- key of `{text}`: {site}\n      + key of `{text}`: {}\n      (a message redelivered across the deploy would send it again)",
                    new[0]
                ));
            }
        }
        let _ = t.bot().stop().await;
        if !problems.is_empty() {
            bad += 1;
            if r.flow.is_empty() {
                let _ = writeln!(report, "after {:?}, no flow in flight:", r.said);
            } else {
                let _ = writeln!(
                    report,
                    "after {:?}, `{}` waiting at `{at}` (step {}):",
                    r.said, r.flow, r.step
                );
            }
            for p in problems {
                let _ = writeln!(report, "    {p}");
            }
        }
    }
    if bad == 0 {
        return Ok(());
    }
    Err(fail(format!(
        "this deploy would not carry {bad} of {} recorded conversation states on:\n{report}",
        recorded.len()
    )))
}

/// The upgrade test in one call: with the recording at `path` missing, or the environment
/// variable `BOTMESH_UPGRADE_RECORD` set, records `scripts` against this build into `path`
/// (commit it: it stands for the build deployed now); otherwise checks this build against
/// the recording and panics with the report when a deploy would restart or misroute a
/// conversation.
pub async fn assert_upgrade<S>(path: impl AsRef<Path>, setup: S, scripts: &[&[&str]])
where
    S: Fn(BotBuilder) -> Result<Bot, BotError> + Clone + Send + Sync + 'static,
{
    let path = path.as_ref();
    let recording = std::fs::read_to_string(path).ok();
    match recording {
        Some(text) if std::env::var_os("BOTMESH_UPGRADE_RECORD").is_none() => {
            if let Err(e) = check(setup, &text).await {
                panic!("upgrade check against {}:\n{e}", path.display());
            }
        }
        _ => {
            let text = match record(setup, scripts).await {
                Ok(t) => t,
                Err(e) => panic!("cannot record {}: {e}", path.display()),
            };
            if let Err(e) = std::fs::write(path, text) {
                panic!("cannot write {}: {e}", path.display());
            }
        }
    }
}
