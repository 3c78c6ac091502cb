//! A handler's sends: `ctx.reply`, `ctx.edit`, `ctx.stream`, `ctx.typing`, `ctx.mark_read`,
//! `ctx.ack`, `ctx.set_lang`, through the outbound path under the context's key rule.

use std::sync::atomic::Ordering;

use crate::error::BotError;
use crate::kernel::context::Ctx;
use crate::message::{MessageId, Outgoing, OutgoingContent};
use crate::outbound::stream::ReplyStream;
use crate::outbound::{self, KeyRule, SendOutcome, SendRequest};
use crate::outbound::{interaction_ack, persistence, presence};

impl Ctx {
    /// Sets and stores the chat's language.
    pub async fn set_lang(&self, lang: &str) -> Result<(), BotError> {
        let lang = crate::kernel::lang::normalize(lang);
        *self.0.lang.lock().unwrap_or_else(|e| e.into_inner()) = Some(lang.clone());
        persistence::save_lang(&self.0.bot.kernel, &self.0.chat, &lang).await?;
        Ok(())
    }

    /// Replies in the chat: paced (when the pacer is on), retried in place when rate limited,
    /// keyed `<inbound record id>:<n>` unless `outgoing` carries an explicit key.
    ///
    /// Returns `skipped: true` when a `before` send hook aborted it.
    pub async fn reply(&self, outgoing: impl Into<Outgoing>) -> Result<SendOutcome, BotError> {
        let outgoing = outgoing.into();
        let key = match &outgoing.idempotency_key {
            Some(k) => KeyRule::Explicit(k.clone()),
            None => self.next_derived_key(),
        };
        self.send_keyed(outgoing, key).await
    }

    /// Sends with buttons under the text.
    pub async fn reply_buttons<I, B>(
        &self,
        text: impl Into<String>,
        buttons: I,
    ) -> Result<SendOutcome, BotError>
    where
        I: IntoIterator<Item = B>,
        B: Into<crate::message::Button>,
    {
        self.reply(Outgoing::buttons(text, buttons)).await
    }

    /// The next derived key rule of this context (`<inbound>:<n>`), counting the send.
    pub(crate) fn next_derived_key(&self) -> KeyRule {
        let n = self.0.sends.fetch_add(1, Ordering::SeqCst) + 1;
        match &self.0.inbound_id {
            Some(id) => KeyRule::Derived {
                inbound: id.clone(),
                n,
            },
            None => KeyRule::Random,
        }
    }

    /// Sends under a given key rule (used by flows, whose keys are decided at compile time).
    pub(crate) async fn send_keyed(
        &self,
        outgoing: Outgoing,
        key: KeyRule,
    ) -> Result<SendOutcome, BotError> {
        interaction_ack::before_send(self).await;
        let k = &self.0.bot.kernel;
        let result = outbound::send(
            k,
            SendRequest {
                chat: self.0.chat.clone(),
                outgoing,
                key,
                paced: k.config.pacing.is_some(),
                inline_rate_limit_retry: true,
            },
        )
        .await;
        self.note_journal_failure(&result);
        result
    }

    /// Whether a send of this context failed because the journal was unavailable.
    pub(crate) fn journal_failed(&self) -> bool {
        self.0.journal_failed.load(Ordering::SeqCst)
    }

    /// Marks this context's inbound record for a retry instead of its completion.
    pub(crate) fn fail_journal(&self) {
        self.0.journal_failed.store(true, Ordering::SeqCst);
    }

    fn note_journal_failure<T>(&self, result: &Result<T, BotError>) {
        if matches!(result, Err(BotError::Durability(_))) {
            self.0.journal_failed.store(true, Ordering::SeqCst);
        }
    }

    /// Edits a message the bot sent (same hooks as a send, with `edit_of` set).
    pub async fn edit(
        &self,
        message_id: &MessageId,
        content: impl Into<OutgoingContent>,
    ) -> Result<SendOutcome, BotError> {
        interaction_ack::before_send(self).await;
        outbound::edit(
            &self.0.bot.kernel,
            &self.0.chat,
            message_id,
            content.into(),
            false,
        )
        .await
    }

    /// Starts a streamed reply: live previews by edits, the final text through the full path.
    pub fn stream(&self) -> ReplyStream {
        ReplyStream::new(self.clone())
    }

    /// Shows a typing indicator (skipped and counted while the transport is not ready).
    pub async fn typing(&self) {
        presence::typing(&self.0.bot.kernel, &self.0.chat).await;
    }

    /// Marks the message read (skipped and counted while the transport is not ready).
    pub async fn mark_read(&self) {
        if let Some(m) = &self.0.message {
            presence::mark_read(&self.0.bot.kernel, &self.0.chat, &m.id).await;
        }
    }

    /// Acknowledges the interaction now, with an optional notice; later acks do nothing.
    pub async fn ack(&self, notice: Option<&str>) {
        interaction_ack::ack(self, notice).await;
    }
}
