//! `ctx.stream()`: a reply written progressively (an AI answer token by token).
//!
//! While text is pushed, a live preview is shown: the first push sends a preview message and
//! later pushes edit it in place, at most once per `BotConfig::stream_interval`. Previews run
//! only the `before` send hooks and are not journaled nor written to the ledger. `finish()`
//! takes the full path: an edit of the preview (hooks, ledger) when there is one, or a full
//! send when the channel cannot edit or nothing was previewed yet.

use tokio::time::Instant;

use crate::error::BotError;
use crate::kernel::context::Ctx;
use crate::kernel::routes::SendDraft;
use crate::message::{MessageId, Outgoing, OutgoingContent};
use crate::outbound::persistence::{self, OutboundEntry};
use crate::outbound::{self, SendOutcome};

/// A streamed reply; see the module docs.
#[derive(Debug)]
pub struct ReplyStream {
    ctx: Ctx,
    text: String,
    preview: Option<MessageId>,
    last_edit: Option<Instant>,
    previews: usize,
}

impl ReplyStream {
    pub(crate) fn new(ctx: Ctx) -> Self {
        Self {
            ctx,
            text: String::new(),
            preview: None,
            last_edit: None,
            previews: 0,
        }
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How many previews (first send and edits) were shown.
    pub fn previews(&self) -> usize {
        self.previews
    }

    /// Appends text and refreshes the preview when the interval allows.
    pub async fn push(&mut self, delta: &str) -> Result<(), BotError> {
        self.text.push_str(delta);
        let k = self.ctx.0.bot.kernel.clone();
        if !k.capabilities.edits || self.text.trim().is_empty() {
            return Ok(());
        }
        let due = self
            .last_edit
            .is_none_or(|t| t.elapsed() >= k.config.stream_interval);
        if !due {
            return Ok(());
        }
        crate::outbound::interaction_ack::before_send(&self.ctx).await;
        match &self.preview {
            None => {
                let draft = SendDraft {
                    chat: self.ctx.chat().clone(),
                    outgoing: Outgoing::from(self.text.clone()),
                    edit_of: None,
                    preview: true,
                };
                let Some(draft) = outbound::run_before_send(&k, draft).await else {
                    return Ok(());
                };
                let sent = k.provider.send(&draft.chat, &draft.outgoing).await?;
                self.preview = sent.message_id;
            }
            Some(id) => {
                let id = id.clone();
                outbound::edit(&k, self.ctx.chat(), &id, self.text.clone().into(), true).await?;
            }
        }
        self.previews += 1;
        self.last_edit = Some(Instant::now());
        Ok(())
    }

    /// Sends the final text through the full path.
    pub async fn finish(self) -> Result<SendOutcome, BotError> {
        let k = self.ctx.0.bot.kernel.clone();
        match self.preview {
            Some(id) => {
                let content = OutgoingContent::from(self.text.clone());
                let outcome = outbound::edit(&k, self.ctx.chat(), &id, content, false).await?;
                persistence::record_outbound(
                    &k,
                    OutboundEntry {
                        chat: self.ctx.chat(),
                        outgoing: &Outgoing::from(self.text),
                        message_id: Some(&id),
                        key: None,
                        error: None,
                    },
                )
                .await;
                Ok(outcome)
            }
            None => self.ctx.reply(self.text).await,
        }
    }
}
