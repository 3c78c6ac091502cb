//! The bot's configuration: plain structs with defaults, built by [`crate::BotBuilder`].
//!
//! Durations are `Duration`s in code; config files may give `"15s"`-style strings, parsed by
//! [`parse_duration`]. Invalid values are refused when the bot is built, not when first used.

use std::collections::HashSet;
use std::time::Duration;

use crate::error::BotError;
use crate::message::{ChatId, UserId};

/// Parses `"15s"`, `"250ms"`, `"7d"`, `"1h 30m"` or a bare number of milliseconds.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(botmesh::config::parse_duration("15s").unwrap(), Duration::from_secs(15));
/// assert_eq!(botmesh::config::parse_duration("250").unwrap(), Duration::from_millis(250));
/// assert!(botmesh::config::parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, BotError> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<u64>() {
        return Ok(Duration::from_millis(ms));
    }
    humantime::parse_duration(t)
        .map_err(|e| BotError::config("duration", format!("`{text}` is not a duration: {e}")))
}

/// How the bot treats messages in groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupMode {
    /// Every group message is dispatched.
    #[default]
    All,
    /// Only messages that mention the bot or are commands are dispatched.
    MentionsOrCommands,
    /// Group messages are persisted but never dispatched.
    Ignore,
}

/// Access lists: who may reach the handlers. Empty allow lists allow everyone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessList {
    /// If not empty, only these chats are admitted.
    pub allow_chats: HashSet<ChatId>,
    /// If not empty, only these senders are admitted.
    pub allow_users: HashSet<UserId>,
    /// These chats are refused.
    pub block_chats: HashSet<ChatId>,
    /// These senders are refused.
    pub block_users: HashSet<UserId>,
}

impl AccessList {
    /// Whether an event of `chat` from `user` is admitted.
    pub fn admits(&self, chat: &ChatId, user: &UserId) -> bool {
        if self.block_chats.contains(chat) || self.block_users.contains(user) {
            return false;
        }
        let chat_ok = self.allow_chats.is_empty() || self.allow_chats.contains(chat);
        let user_ok = self.allow_users.is_empty() || self.allow_users.contains(user);
        chat_ok && user_ok
    }
}

/// The pacer: a human-like delay, with a typing indicator, before text replies of a handler.
#[derive(Debug, Clone, PartialEq)]
pub struct Pacing {
    /// Delay per character of the reply.
    pub per_char: Duration,
    /// The shortest delay.
    pub min: Duration,
    /// The longest delay.
    pub max: Duration,
    /// Show a typing indicator during the delay.
    pub typing: bool,
}

impl Default for Pacing {
    fn default() -> Self {
        Self {
            per_char: Duration::from_millis(20),
            min: Duration::from_millis(300),
            max: Duration::from_secs(3),
            typing: true,
        }
    }
}

impl Pacing {
    /// The delay for a text of `chars` characters.
    pub fn delay_for(&self, chars: usize) -> Duration {
        let d = self
            .per_char
            .saturating_mul(u32::try_from(chars).unwrap_or(u32::MAX));
        d.clamp(self.min, self.max)
    }

    pub(crate) fn validate(&self) -> Result<(), BotError> {
        if self.min > self.max {
            return Err(BotError::config(
                "pacing.min",
                format!("{:?} is above pacing.max {:?}", self.min, self.max),
            ));
        }
        Ok(())
    }
}

/// The short in-place retry of rate-limited replies made from a handler.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitRetry {
    /// Retries after the first attempt (0 disables).
    pub retries: u32,
    /// A `retry_after` longer than this is not waited for inline: the error goes to the caller.
    pub max_wait: Duration,
    /// The wait when the channel gives no `retry_after`.
    pub default_wait: Duration,
}

impl Default for RateLimitRetry {
    fn default() -> Self {
        Self {
            retries: 2,
            max_wait: Duration::from_secs(10),
            default_wait: Duration::from_secs(1),
        }
    }
}

/// The bot's configuration. See [`crate::BotBuilder`] for how to set each field.
#[derive(Debug, Clone)]
pub struct BotConfig {
    /// The bot's id (namespaces, instance ids, logs).
    pub bot_id: String,
    /// The connection id (several connections of one bot).
    pub connection_id: String,
    /// Tenant id of the namespace.
    pub tenant_id: String,
    /// Environment id of the namespace.
    pub environment_id: String,
    /// The language when nothing else resolves one.
    pub default_lang: String,
    /// The command prefixes (`/` by default).
    pub command_prefixes: Vec<String>,
    /// How group messages are treated.
    pub group_mode: GroupMode,
    /// Access lists.
    pub access: AccessList,
    /// The pacer, off by default.
    pub pacing: Option<Pacing>,
    /// The inline retry of rate-limited replies.
    pub rate_limit_retry: RateLimitRetry,
    /// How many (chat, message id) pairs the in-memory dedupe remembers.
    pub dedupe_capacity: usize,
    /// How long `stop()` without a drain lets running handlers end (a send in flight lands and
    /// is recorded) before aborting them, and waits for the durability sweeper (default 5 s).
    pub stop_timeout: Duration,
    /// How long [`Bot::run`](crate::Bot::run) waits for the accepted work to settle once its
    /// input ended or it was told to stop (Ctrl-C, SIGTERM, SIGHUP) before it aborts what
    /// still runs (default 30 s; `docker stop` waits 10 s and Kubernetes 30 s before SIGKILL).
    pub drain_timeout: Duration,
    /// How often live previews of `ctx.stream()` are edited at most.
    pub stream_interval: Duration,
    /// Default concurrency of `broadcast`.
    pub broadcast_concurrency: usize,
    /// Persist chats, contacts and the message ledger to the store.
    pub ledger: bool,
}

impl Default for BotConfig {
    fn default() -> Self {
        Self {
            bot_id: "bot".to_owned(),
            connection_id: "default".to_owned(),
            tenant_id: "default".to_owned(),
            environment_id: "default".to_owned(),
            default_lang: "en".to_owned(),
            command_prefixes: vec!["/".to_owned()],
            group_mode: GroupMode::All,
            access: AccessList::default(),
            pacing: None,
            rate_limit_retry: RateLimitRetry::default(),
            dedupe_capacity: 10_000,
            stop_timeout: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(30),
            stream_interval: Duration::from_millis(700),
            broadcast_concurrency: 4,
            ledger: true,
        }
    }
}

impl BotConfig {
    pub(crate) fn validate(&self) -> Result<(), BotError> {
        if self.bot_id.is_empty() {
            return Err(BotError::config("bot_id", "must not be empty"));
        }
        if self.command_prefixes.iter().any(String::is_empty) {
            return Err(BotError::config(
                "command_prefixes",
                "a prefix must not be empty",
            ));
        }
        if self.broadcast_concurrency == 0 {
            return Err(BotError::config(
                "broadcast_concurrency",
                "must be at least 1",
            ));
        }
        if let Some(p) = &self.pacing {
            p.validate()?;
        }
        if self.drain_timeout.is_zero() {
            return Err(BotError::config("drain_timeout", "must be above zero"));
        }
        Ok(())
    }
}
