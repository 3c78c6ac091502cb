//! Registering, starting and cancelling flows: the `Bot` methods `flow`, `register_flow`,
//! `start_flow`, `cancel_flow` and their kin. Registering a flow also registers the sub-flows
//! it calls (so their checkpoints can be restored) and installs its start trigger as a command
//! or matcher route.

use crate::error::{BotError, HandlerError};
use crate::flow::api::{
    AnyBox, Erased, Flow, FlowFn, FlowInfo, Input, IntoFlow, StartTrigger, erase,
};
use crate::flow::conversation;
use crate::kernel::Bot;
use crate::kernel::context::Ctx;
use crate::kernel::routes::{Acts, matcher};
use crate::message::ChatId;

impl Bot {
    /// Registers a flow and installs its start trigger (`#[flow(start = …)]`):
    /// `bot.flow(order)`. A flow with arguments that a trigger starts builds them from the
    /// starting message (`#[flow(start = …, args = build)]`); one started only from code is
    /// registered the same way, or with [`register_flow`](Self::register_flow), and started
    /// with [`start_flow`](Self::start_flow).
    pub fn flow<A, F: FlowFn<A>>(&self, flow: F) -> &Self {
        type T<F, A> = <F as FlowFn<A>>::Flow;
        self.register_flow(flow);
        let info = T::<F, A>::info();
        let start = move |ctx: Ctx| {
            // A flow with arguments builds them from the message; one without starts fresh.
            let start = T::<F, A>::from_trigger(&ctx)
                .map(Flow::into_start)
                .or_else(T::<F, A>::fresh);
            async move {
                let Some(start) = start else {
                    return Ok(());
                };
                // The trigger's handler does nothing else: the first step may complete the
                // message in its transaction.
                conversation::start_in_with(&ctx, erase::<T<F, A>>(), Box::new(start), true)
                    .await
                    .map_err(|e| Box::new(e) as HandlerError)
            }
        };
        match info.start {
            StartTrigger::None => {}
            StartTrigger::Command(name) => {
                self.route_command(name, start, Acts::InSteps);
            }
            StartTrigger::Keyword(word) => {
                self.route_when(matcher::keyword([word]), start, Acts::InSteps);
            }
            StartTrigger::Regex(re) => match matcher::try_regex(re) {
                Ok(m) => {
                    self.route_when(m, start, Acts::InSteps);
                }
                Err(e) => self
                    .kernel
                    .events
                    .error(format!("flow:{}", info.name), None, e),
            },
            StartTrigger::Matcher(f) => {
                self.route_when(matcher::func(f), start, Acts::InSteps);
            }
        }
        self
    }

    /// Registers a flow (and the sub-flows it calls) without installing its start trigger:
    /// `bot.register_flow(ask_name)`. Needed to restore a checkpoint of a flow that is only
    /// started from code.
    pub fn register_flow<A, F: FlowFn<A>>(&self, flow: F) -> &Self {
        let _ = flow;
        self.register_erased(erase::<F::Flow>());
        self
    }

    /// Registers `flow` and its callees.
    ///
    /// # Panics
    ///
    /// When another flow of the same name is registered (two `#[flow] async fn start` in two
    /// modules): checkpoints name their flow by its function name, so a restart could resume
    /// the wrong one. Rename one of them.
    fn register_erased(&self, flow: Erased) {
        if let Err(e) = self.kernel.flows().register(flow) {
            panic!("{e}");
        }
    }

    /// Starts `flow` in `chat` from code: queued on the chat's queue, after the work queued
    /// before it (so it is safe to call from a handler of that chat). A flow already active
    /// there ends (`replaced`). Returns once queued; `bot.idle()` waits for the first step.
    /// A chat handed off to a human is refused ([`BotError::HandedOff`]), as by `trigger`;
    /// one handed off while the start waited in the queue gets a `flow:start` error event.
    pub async fn start_flow<M, I: IntoFlow<M>>(
        &self,
        chat: impl Into<ChatId>,
        flow: I,
    ) -> Result<(), BotError> {
        let chat = chat.into();
        if self.kernel.gates.is_handed_off(&chat) {
            return Err(BotError::HandedOff { chat: chat.0 });
        }
        self.kernel
            .flows()
            .register(erase::<I::Flow>())
            .map_err(|e| BotError::config("flow", e.to_string()))?;
        let state: AnyBox = Box::new(flow.into_flow().into_start());
        conversation::queue(&self.kernel, chat, move |ctx| async move {
            if ctx.0.bot.kernel.gates.is_handed_off(ctx.chat()) {
                let e = BotError::HandedOff {
                    chat: ctx.chat().0.clone(),
                };
                ctx.0
                    .bot
                    .kernel
                    .events
                    .error("flow:start", Some(ctx.chat()), e);
                return;
            }
            if let Err(e) = conversation::start_in(&ctx, erase::<I::Flow>(), state).await {
                ctx.0
                    .bot
                    .kernel
                    .events
                    .error("flow:start", Some(ctx.chat()), e);
            }
        })
    }

    /// Cancels the flow waiting in `chat`: its ask resumes with `Err(Interrupt::Cancelled)`,
    /// through the chat's queue (so it is safe to call from a handler of that chat, e.g. a
    /// `/cancel` command). Returns whether a flow was waiting when it was called.
    pub async fn cancel_flow(&self, chat: impl Into<ChatId>) -> Result<bool, BotError> {
        let chat = chat.into();
        let waiting = self.kernel.flows().active_name(&chat).is_some()
            || self
                .kernel
                .store
                .checkpoint_head(chat.as_str())
                .await?
                .is_some();
        if waiting {
            conversation::queue(&self.kernel, chat, |ctx| async move {
                conversation::interrupt(&ctx, Input::Cancelled).await;
            })?;
        }
        Ok(waiting)
    }

    /// The name of the flow active in `chat` (the innermost of a sub-flow stack), if any.
    pub fn active_flow(&self, chat: &ChatId) -> Option<&'static str> {
        self.kernel.flows().active_name(chat)
    }

    /// What `#[flow]` built for a registered flow (its graph as Mermaid included).
    pub fn flow_info(&self, name: &str) -> Option<FlowInfo> {
        self.kernel.flows().lookup(name).map(|e| e.0.info())
    }
}
