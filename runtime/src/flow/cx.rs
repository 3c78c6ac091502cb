//! [`FlowCx`]'s sends and asks: what a flow body says to the chat (with compile-time site
//! keys) and how it reads the answer it waited for. (The context itself is defined with the
//! [`Flow`](crate::flow::Flow) trait in `api`; its effects are in `effect`.)
//!
//! Keys: a send made by a flow is keyed `KeyRule::Site { inbound, site: "<site>#<n>" }`,
//! where `inbound` is the inbound record that fed the step (a synthetic
//! `<chat>/flow:<run>:<step>` for a step no message fed: a start from code, a timeout, a
//! cancel), `site` the id `#[flow]` gave the call site, `<flow>/<identity>` (an identity
//! derived from the site's own content, or the author's `.id("…")`; `.key("…")` replaces the
//! whole site id), and `n` counts the site's uses within the step (loops). Nothing here
//! depends on timing, on formatting or on other sites, so `join!` of two sends keeps its keys
//! and inserting a send leaves the others' keys as they were. This module does not decide
//! what runs next: the executor does.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Mutex;

use crate::error::{BotError, HandlerError};
use crate::flow::api::{__Resumed, FlowCx, FlowError, FlowResult, Input, Pending, Step};
use crate::flow::ask::{Answer, Ask, Interrupt};
use crate::flow::sends;
use crate::kernel::context::Ctx;
use crate::message::Outgoing;
use crate::outbound::{KeyRule, SendOutcome};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FlowCx {
    /// Sends a message in the chat. Inside a `#[flow]` the macro gives the call its site id.
    pub fn send(&self, outgoing: impl Into<Outgoing>) -> FlowSend<'_> {
        FlowSend {
            cx: self,
            site: format!("{}/~send", self.flow),
            outgoing: outgoing.into(),
        }
    }

    #[doc(hidden)]
    pub fn __send_at(&self, site: &'static str, outgoing: impl Into<Outgoing>) -> FlowSend<'_> {
        FlowSend {
            cx: self,
            site: site.to_owned(),
            outgoing: outgoing.into(),
        }
    }

    /// Asks a question; `.await` it inside a `#[flow]` (the macro lowers it to a suspension).
    pub fn ask(&self, prompt: impl Into<Outgoing>) -> Ask<Answer> {
        Ask::new(prompt)
    }

    /// Ends the flow as cancelled: `return cx.cancel();`.
    pub fn cancel<T>(&self) -> FlowResult<T> {
        Err(Box::new(Interrupt::Cancelled) as HandlerError)
    }

    /// Sends the prompt and records the wait (generated code at a suspension).
    #[doc(hidden)]
    pub async fn __suspend<T>(&mut self, site: &'static str, ask: Ask<T>) -> Result<(), BotError> {
        let prompt_site = ask.key.clone().unwrap_or_else(|| site.to_owned());
        if let Some(mut prompt) = ask.prompt {
            // A question is safe to repeat and unsafe to lose: without it the chat is stuck.
            prompt
                .on_ambiguous
                .get_or_insert(botmesh_durability::OnAmbiguous::Resend);
            let key = self.site_key(&prompt_site);
            self.send_at(prompt, key).await?;
        }
        *lock(&self.pending) = Some(Pending::Ask {
            idle: ask.idle,
            site: site.to_owned(),
        });
        Ok(())
    }

    /// Sends the prompt, records the wait and suspends in `state` (generated code at an ask).
    #[doc(hidden)]
    pub async fn __ask_at<T, S, O>(
        &mut self,
        site: &'static str,
        ask: Ask<T>,
        state: S,
    ) -> Result<Step<S, O>, HandlerError> {
        self.__suspend(site, ask).await?;
        Ok(Step::Suspend(state))
    }

    /// The answer this step was fed, taken by the first plain ask (no `parse`/`validate`)
    /// that reads it; `None` when the step was not fed an answer (it started, or an earlier
    /// ask or sub-flow call of this step took its input), and the ask suspends. Generated
    /// code: an ask at the head of a loop is written once, and reads its answer this way
    /// whether the step resumed there or arrived there.
    #[doc(hidden)]
    pub fn __answered(&self) -> Option<Result<Answer, Interrupt>> {
        let mut input = lock(&self.input);
        match input.take() {
            Some(Input::Answer(a)) => Some(Ok(a)),
            Some(Input::Timeout) => Some(Err(Interrupt::Timeout)),
            Some(Input::Cancelled) => Some(Err(Interrupt::Cancelled)),
            None | Some(Input::Start) => None,
            Some(Input::Returned(_)) => {
                tracing::warn!(
                    flow = self.flow,
                    "an ask resumed with an input meant for another wait"
                );
                Some(Err(Interrupt::Cancelled))
            }
        }
    }

    /// The answer of the plain ask (no `parse`/`validate`) this step resumed at. Generated
    /// code.
    #[doc(hidden)]
    pub fn __answer_now(&self) -> Result<Answer, Interrupt> {
        self.__answered().unwrap_or(Err(Interrupt::Cancelled))
    }

    /// The answer of the ask this flow waited at; `None` when it failed validation (the
    /// re-ask was sent and the flow keeps waiting). Generated code.
    #[doc(hidden)]
    pub async fn __resume_ask<T>(
        &mut self,
        site: &'static str,
        ask: Ask<T>,
    ) -> Result<Option<__Resumed<Result<T, Interrupt>>>, BotError> {
        let input = lock(&self.input).take();
        let resumed = |r| Ok(Some(__Resumed(Some(r))));
        match input {
            Some(Input::Answer(a)) => match ask.check(&a) {
                Ok(v) => resumed(Ok(v)),
                Err(reask) => {
                    let key = self.site_key(&format!("{site}/reask"));
                    self.send_at(Outgoing::from(reask), key).await?;
                    *lock(&self.pending) = Some(Pending::Reask);
                    Ok(None)
                }
            },
            Some(Input::Timeout) => resumed(Err(Interrupt::Timeout)),
            Some(Input::Cancelled) | None => resumed(Err(Interrupt::Cancelled)),
            Some(Input::Start) | Some(Input::Returned(_)) => {
                tracing::warn!(
                    flow = self.flow,
                    "an ask resumed with an input meant for another wait"
                );
                resumed(Err(Interrupt::Cancelled))
            }
        }
    }

    /// The value of the sub-flow this flow waited for. Generated code.
    #[doc(hidden)]
    pub async fn __resume_call<T: 'static>(
        &mut self,
        _output: std::marker::PhantomData<T>,
    ) -> Result<Option<__Resumed<Result<T, FlowError>>>, BotError> {
        let input = lock(&self.input).take();
        Ok(Some(__Resumed(Some(match input {
            Some(Input::Returned(Ok(v))) => v
                .downcast::<T>()
                .map(|b| *b)
                .map_err(|_| FlowError::StateType { flow: self.flow }),
            Some(Input::Returned(Err(e))) => Err(e),
            Some(Input::Timeout) => Err(FlowError::SubflowInterrupted {
                flow: self.flow.to_owned(),
                interrupt: Interrupt::Timeout,
            }),
            _ => Err(FlowError::SubflowInterrupted {
                flow: self.flow.to_owned(),
                interrupt: Interrupt::Cancelled,
            }),
        }))))
    }

    /// A send of this step under `key`: collected for the step's commit when the step commits
    /// in one transaction, sent now otherwise.
    async fn send_at(&self, outgoing: Outgoing, key: KeyRule) -> Result<SendOutcome, BotError> {
        match &self.buffer {
            Some(buffer) => sends::collect(&self.ctx, buffer, outgoing, key).await,
            // Boxed: a send is several KiB of future, and a flow's step holds this one.
            None => Box::pin(send_in_flow(&self.ctx, outgoing, key)).await,
        }
    }
}

/// A send from a flow: `.key("…")` replaces its site id; `.await` sends it.
#[derive(Debug)]
#[must_use = "a send does nothing until awaited"]
pub struct FlowSend<'a> {
    cx: &'a FlowCx,
    site: String,
    outgoing: Outgoing,
}

impl<'a> FlowSend<'a> {
    /// Replaces the compile-time site id (the key stays `<inbound>:<key>#<n>`).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.site = key.into();
        self
    }

    /// Names this send: `#[flow]` reads the name (a string literal) at compile time and makes
    /// it the site's identity (key `<inbound>:<flow>/<name>#<n>`), in place of one derived
    /// from the message. Name a send whose text may change while its step can be re-run.
    pub fn id(self, _name: &'static str) -> Self {
        self
    }

    /// Sends and returns the outcome (message id, key, whether it was deduplicated);
    /// `.await` alone returns `()`, as a statement in a flow usually wants. In a persistent
    /// flow whose steps commit in one transaction (the store and the journals in one
    /// database: see `docs/durability-and-backends.md`), the message goes out when the step commits: the
    /// outcome then carries the key and no message id yet.
    pub fn outcome(
        self,
    ) -> Pin<Box<dyn Future<Output = Result<SendOutcome, BotError>> + Send + 'a>> {
        let key = self.cx.site_key(&self.site);
        let ctx = self.cx.ctx.clone();
        match self.cx.buffer.clone() {
            Some(buffer) => {
                Box::pin(async move { sends::collect(&ctx, &buffer, self.outgoing, key).await })
            }
            None => Box::pin(async move { send_in_flow(&ctx, self.outgoing, key).await }),
        }
    }
}

/// A flow's send: a send the durable outbox deferred (`SendDeferred`) counts as made, since the
/// outbox now owns it and the sweeper delivers it in order; the step goes on.
async fn send_in_flow(
    ctx: &Ctx,
    outgoing: Outgoing,
    key: KeyRule,
) -> Result<SendOutcome, BotError> {
    match ctx.send_keyed(outgoing, key).await {
        Err(BotError::SendDeferred { key }) => {
            tracing::debug!(%key, chat = %ctx.chat(), "flow send deferred to the outbox sweeper");
            Ok(SendOutcome {
                key: Some(key),
                ..SendOutcome::default()
            })
        }
        other => other,
    }
}

impl<'a> IntoFuture for FlowSend<'a> {
    type Output = Result<(), BotError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let fut = self.outcome();
        Box::pin(async move { fut.await.map(|_| ()) })
    }
}
