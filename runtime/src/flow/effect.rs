//! Side effects other than sends: `cx.effect(async { … })`, `cx.now()` and `cx.random()` run
//! once per step and record their result, so a step re-run after a crash gets the recorded
//! result instead of doing the effect again (charging a card twice).
//!
//! Records live in the store's key/value data under scope `flow-effects:<chat>`, keyed
//! `<run>:<step>:<site>#<n>`: the flow run, the step counter of the checkpoint the step
//! started from, the compile-time site id and the site's use count within the step.
//!
//! | history | the step runs the effect | it returns |
//! | --- | --- | --- |
//! | no record | yes, then records the result | the result |
//! | a record (the step ran before and was cut) | no | the recorded result |
//! | the record cannot be read or decoded | no | `Err(FlowError::Effect)` |
//!
//! A step's records are deleted once the step's outcome is saved (the next checkpoint, or
//! the flow's end): past that point the step never runs again. Effects are at-least-once if
//! the process dies between running the effect and writing its record; nothing here can close
//! that gap (make the effect itself idempotent when that matters).

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::flow::api::{FlowCx, FlowError};

fn scope(chat: &str) -> String {
    format!("flow-effects:{chat}")
}

/// What a recorded call runs the first time.
#[derive(Clone, Copy)]
enum Runs {
    /// The author's effect (a payment, a write elsewhere): never for a redelivered message.
    Effect,
    /// A reading of the clock or of randomness.
    Reading,
}

impl FlowCx {
    /// Runs `effect` once for this step and records its result (see the module docs). Inside a
    /// `#[flow]` the macro gives the call its compile-time site id.
    pub async fn effect<T, Fut>(&self, effect: Fut) -> Result<T, FlowError>
    where
        T: Serialize + DeserializeOwned + Send,
        Fut: Future<Output = T> + Send,
    {
        let site = format!("{}/~effect", self.flow);
        self.record(&site, effect, Runs::Effect).await
    }

    #[doc(hidden)]
    pub async fn __effect_at<T, Fut>(&self, site: &'static str, effect: Fut) -> Result<T, FlowError>
    where
        T: Serialize + DeserializeOwned + Send,
        Fut: Future<Output = T> + Send,
    {
        self.record(site, effect, Runs::Effect).await
    }

    /// The bot clock's time (Unix ms), recorded: a re-run step reads the same instant.
    pub async fn now(&self) -> i64 {
        let clock = self.ctx.0.bot.kernel.clock.clone();
        let site = format!("{}/~now", self.flow);
        match self
            .record(&site, async move { clock.now_ms() }, Runs::Reading)
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cx.now() not recorded; using the clock");
                self.ctx.0.bot.kernel.clock.now_ms()
            }
        }
    }

    /// A random number, recorded: a re-run step reads the same number.
    pub async fn random(&self) -> u64 {
        let site = format!("{}/~random", self.flow);
        match self
            .record(&site, async { fastrand::u64(..) }, Runs::Reading)
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cx.random() not recorded");
                fastrand::u64(..)
            }
        }
    }

    async fn record<T, Fut>(&self, site: &str, effect: Fut, runs: Runs) -> Result<T, FlowError>
    where
        T: Serialize + DeserializeOwned + Send,
        Fut: Future<Output = T> + Send,
    {
        let n = self.next_occurrence(site);
        let key = format!("{}:{}:{site}#{n}", self.run, self.step);
        let scope = scope(self.ctx.chat().as_str());
        let store = self.ctx.0.bot.kernel.store.clone();
        let err = |reason: String| FlowError::Effect {
            flow: self.flow,
            chat: self.ctx.chat().to_string(),
            key: key.clone(),
            reason,
        };
        // An effect runs only for a message that is the channel's first delivery of it: the
        // message's record is written before the effect (a step that only reads the clock
        // writes it with its commit), at the same time as the effect's own record is read.
        let (recorded, acting) = match runs {
            Runs::Effect => tokio::join!(
                store.get_value(&scope, &key),
                crate::durable::inbound::recorded(&self.ctx)
            ),
            Runs::Reading => (store.get_value(&scope, &key).await, true),
        };
        if let Some(v) = recorded.map_err(|e| err(e.to_string()))? {
            tracing::debug!(flow = self.flow, %key, "effect replayed from its record");
            self.effects
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((scope, key.clone()));
            return serde_json::from_value(v).map_err(|e| err(e.to_string()));
        }
        if !acting {
            return Err(err(
                "the step's message was not accepted (a redelivery of one handled before, or its record could not be written)".to_owned(),
            ));
        }
        let value = effect.await;
        let json = serde_json::to_value(&value).map_err(|e| err(e.to_string()))?;
        store
            .set_value(&scope, &key, &json)
            .await
            .map_err(|e| err(e.to_string()))?;
        self.effects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((scope, key));
        Ok(value)
    }
}
