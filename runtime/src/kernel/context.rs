//! The context factory and [`Ctx`]: what a handler receives for a message, an interaction or a
//! `bot.trigger()`.
//!
//! A `Ctx` knows its chat, sender, the message or interaction, the inbound record id (the base
//! of derived send keys: `<record id>:<n>`, the n-th send made for that message), its language
//! (resolved on the handler's first `ctx.lang()`, not before: a message whose handlers never ask
//! costs no read of the chat), and the interaction-ack state. Cheap to clone. Its sends (`ctx.reply`, `ctx.edit`, …) are
//! written in the outbound layer (`outbound::context`); `Ctx` only supplies the key rule,
//! pacing and the inline rate-limit retry.

use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex};

use crate::error::BotError;
use crate::kernel::{Bot, Kernel, lang};
use crate::message::{ChatId, Interaction, Message, UserId};

pub(crate) struct CtxInner {
    pub(crate) bot: Bot,
    pub(crate) chat: ChatId,
    pub(crate) sender: UserId,
    pub(crate) sender_name: Option<String>,
    pub(crate) is_group: bool,
    /// Shared with the message's journal record (its deferred payload), not copied.
    pub(crate) message: Option<Arc<Message>>,
    pub(crate) interaction: Option<Interaction>,
    pub(crate) inbound_id: Option<String>,
    pub(crate) sends: AtomicU32,
    /// The chat's language once resolved (the first `lang()`) or set (`set_lang`).
    pub(crate) lang: Mutex<Option<String>>,
    pub(crate) acked: AtomicBool,
    /// This dispatch read the chat's checkpoint and found none (the dormant stage, in the
    /// chat's turn): a flow started next in it has no leftover checkpoint to remove and does
    /// not ask the store again. Taken (reset) by the first start.
    pub(crate) checkpoint_absent: AtomicBool,
    pub(crate) command: Option<(String, String)>,
    pub(crate) stale: bool,
    pub(crate) replay: bool,
    pub(crate) media_issue: Option<crate::provider::MediaUnavailableReason>,
    /// A send or edit of this context failed because the durable journal was unavailable: the
    /// inbound record is then retried instead of completed.
    pub(crate) journal_failed: AtomicBool,
    /// The lease of the durable inbound record this context runs for.
    pub(crate) lease: Option<Arc<crate::kernel::journals::LeaseSlot>>,
}

/// What the inbound path knows about a context beyond its source.
#[derive(Debug, Clone, Default)]
pub(crate) struct CtxExtras {
    pub(crate) stale: bool,
    pub(crate) replay: bool,
    pub(crate) media_issue: Option<crate::provider::MediaUnavailableReason>,
    /// The lease of the durable inbound record, when the message was journaled.
    pub(crate) lease: Option<Arc<crate::kernel::journals::LeaseSlot>>,
    /// When a replayed message was first admitted (its record's creation): `inbox.max_age`
    /// measures its age there, not at the replay.
    pub(crate) admitted_ms: Option<i64>,
}

/// A handler's context. Cheap to clone; clones share the send counter.
#[derive(Clone)]
pub struct Ctx(pub(crate) Arc<CtxInner>);

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("chat", &self.0.chat)
            .field("sender", &self.0.sender)
            .field("inbound_id", &self.0.inbound_id)
            .finish_non_exhaustive()
    }
}

/// What a context is made for.
pub(crate) enum CtxSource {
    Message(Arc<Message>),
    Interaction(Interaction),
    Trigger { chat: ChatId, sender: UserId },
}

impl Ctx {
    /// Builds the context of a message, an interaction or a trigger.
    pub(crate) fn new(
        bot: Bot,
        source: CtxSource,
        inbound_id: Option<String>,
        extras: CtxExtras,
    ) -> Self {
        let prefixes = bot.kernel.config.command_prefixes.clone();
        let (chat, sender, sender_name, is_group, message, interaction) = match source {
            CtxSource::Message(m) => (
                m.chat.clone(),
                m.sender.clone(),
                m.sender_name.clone(),
                m.is_group,
                Some(m),
                None,
            ),
            CtxSource::Interaction(i) => (
                i.chat.clone(),
                i.sender.clone(),
                i.sender_name.clone(),
                i.is_group,
                None,
                Some(i),
            ),
            CtxSource::Trigger { chat, sender } => (chat, sender, None, false, None, None),
        };
        // A message's text, or an interaction's data (a Discord slash command arrives as
        // `/name options…`), may be a command.
        let command = match (&message, &interaction) {
            (Some(m), _) => parse_command(m.text_content(), &prefixes),
            (None, Some(i)) => parse_command(&i.data, &prefixes),
            (None, None) => None,
        };
        Ctx(Arc::new(CtxInner {
            bot,
            chat,
            sender,
            sender_name,
            is_group,
            message,
            interaction,
            inbound_id,
            sends: AtomicU32::new(0),
            lang: Mutex::new(None),
            acked: AtomicBool::new(false),
            checkpoint_absent: AtomicBool::new(false),
            command,
            stale: extras.stale,
            replay: extras.replay,
            media_issue: extras.media_issue,
            journal_failed: AtomicBool::new(false),
            lease: extras.lease,
        }))
    }

    /// The bot (a plugin's handler sees its plugin-scoped bot).
    pub fn bot(&self) -> &Bot {
        &self.0.bot
    }

    /// The chat.
    pub fn chat(&self) -> &ChatId {
        &self.0.chat
    }

    /// Who wrote (or pressed, or for whom the trigger runs).
    pub fn sender(&self) -> &UserId {
        &self.0.sender
    }

    /// The sender's display name, when known.
    pub fn sender_name(&self) -> Option<&str> {
        self.0.sender_name.as_deref()
    }

    /// Whether the chat is a group.
    pub fn is_group(&self) -> bool {
        self.0.is_group
    }

    /// The message, when the context was made for one.
    pub fn message(&self) -> Option<&Message> {
        self.0.message.as_deref()
    }

    /// The interaction, when the context was made for one.
    pub fn interaction(&self) -> Option<&Interaction> {
        self.0.interaction.as_ref()
    }

    /// The text: a message's text (or caption), an interaction's data, or `""`.
    pub fn text(&self) -> &str {
        if let Some(m) = &self.0.message {
            return m.text_content();
        }
        self.0.interaction.as_ref().map_or("", |i| i.data.as_str())
    }

    /// The command name when the message (or the interaction's data: a slash command) is a
    /// command (`/order 2` → `"order"`).
    pub fn command(&self) -> Option<&str> {
        self.0.command.as_ref().map(|(c, _)| c.as_str())
    }

    /// The text after the command (`/order 2 apples` → `"2 apples"`), or `""`.
    pub fn args(&self) -> &str {
        self.0.command.as_ref().map_or("", |(_, a)| a.as_str())
    }

    /// The inbound record id that feeds this context's derived send keys.
    pub fn inbound_id(&self) -> Option<&str> {
        self.0.inbound_id.as_deref()
    }

    /// The chat's language (`ctx.lang`): the one stored for the chat (see
    /// [`set_lang`](Self::set_lang)), else the bot's `lang_resolver`'s answer for the message,
    /// else the message's language hint, else the bot's `default_lang`; normalized.
    ///
    /// Resolved on the first call of this context (the chat's stored language is read then,
    /// once), so a message whose handlers never ask costs no read. A store that cannot be read
    /// is reported as a `persistence:chat` error and the language is resolved without it.
    pub async fn lang(&self) -> String {
        if let Some(lang) = self.known_lang() {
            return lang;
        }
        let k = &self.0.bot.kernel;
        let stored = match k.store.chat(self.0.chat.as_str()).await {
            Ok(c) => c.and_then(|c| c.lang),
            Err(e) => {
                k.events.error("persistence:chat", Some(&self.0.chat), e);
                None
            }
        };
        let resolved = lang::resolve(
            stored.as_deref(),
            k.lang_resolver.as_ref(),
            self.0.message.as_deref(),
            &k.config.default_lang,
        );
        // A `set_lang` made while the chat was read wins.
        self.0
            .lang
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(resolved)
            .clone()
    }

    /// The language resolved or set so far in this context.
    fn known_lang(&self) -> Option<String> {
        self.0
            .lang
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads a value stored for the sender (`user:<id>` scope of the store).
    pub async fn user_get(&self, key: &str) -> Result<Option<serde_json::Value>, BotError> {
        let scope = format!("user:{}", self.0.sender);
        Ok(self.0.bot.kernel.store.get_value(&scope, key).await?)
    }

    /// Stores a value for the sender (`user:<id>` scope of the store).
    pub async fn user_set(&self, key: &str, value: serde_json::Value) -> Result<(), BotError> {
        let scope = format!("user:{}", self.0.sender);
        Ok(self
            .0
            .bot
            .kernel
            .store
            .set_value(&scope, key, &value)
            .await?)
    }
}

/// The context factory: builds the `Ctx` (its language is resolved on first use).
pub(crate) fn make_ctx(k: &Arc<Kernel>, source: CtxSource, inbound_id: Option<String>) -> Ctx {
    make_ctx_with(k, source, inbound_id, CtxExtras::default())
}

/// The context factory, with what the inbound path knows (replay, stale, media issue).
pub(crate) fn make_ctx_with(
    k: &Arc<Kernel>,
    source: CtxSource,
    inbound_id: Option<String>,
    extras: CtxExtras,
) -> Ctx {
    Ctx::new(Bot::from_kernel(k.clone()), source, inbound_id, extras)
}

/// Splits `/name args` (or `/name@botname args`) into `(name, args)`.
pub(crate) fn parse_command(text: &str, prefixes: &[String]) -> Option<(String, String)> {
    let text = text.trim_start();
    let prefix = prefixes.iter().find(|p| text.starts_with(p.as_str()))?;
    let rest = &text[prefix.len()..];
    let (head, args) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    let name = head.split('@').next().unwrap_or(head);
    if name.is_empty() {
        return None;
    }
    Some((name.to_ascii_lowercase(), args.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::parse_command;

    #[test]
    fn commands_parse() {
        let p = vec!["/".to_owned()];
        assert_eq!(
            parse_command("/start", &p),
            Some(("start".into(), "".into()))
        );
        assert_eq!(
            parse_command("/Order@shop_bot 2 apples", &p),
            Some(("order".into(), "2 apples".into()))
        );
        assert_eq!(parse_command("hello /start", &p), None);
        assert_eq!(parse_command("/", &p), None);
    }
}
