//! Asks: the question a flow sends and what comes back.
//!
//! An [`Ask`] is built by `cx.ask(prompt)` and its options (buttons, an idle timeout, a key,
//! a validation or parse function with a re-ask message). `#[flow]` lowers `cx.ask(…).await`
//! into a suspension: the prompt goes out, the flow's state is saved, and the step returns.
//! When the chat's next message (or button press) arrives, the executor resumes the flow and
//! the ask evaluates to a `Result<T, Interrupt>`:
//!
//! | what arrives | validation | the ask is |
//! | --- | --- | --- |
//! | a message or a press | passes (or none) | `Ok(value)` |
//! | a message or a press | fails | not resumed: the re-ask message goes out, the flow keeps waiting |
//! | the idle deadline passes | — | `Err(Interrupt::Timeout)` |
//! | `bot.cancel_flow(chat)` | — | `Err(Interrupt::Cancelled)` |
//!
//! This module does not send or store anything itself: `FlowCx` does.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::{Button, Outgoing, OutgoingContent};

/// What a user answered: a message's text or a pressed button.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Answer {
    text: String,
    button: Option<String>,
    message_id: Option<String>,
}

impl Answer {
    /// An answer (the executor builds them; handy in tests).
    pub fn new(
        text: impl Into<String>,
        button: Option<String>,
        message_id: Option<String>,
    ) -> Self {
        Self {
            text: text.into(),
            button,
            message_id,
        }
    }

    /// The text of the message, or the data of the pressed button.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The pressed button's data, when the answer is a press.
    pub fn button(&self) -> Option<&str> {
        self.button.as_deref()
    }

    /// Whether the answer reads as "yes" (yes, y, ok, sure, 👍, or a `yes` button).
    pub fn is_yes(&self) -> bool {
        matches!(
            self.text.trim().to_lowercase().as_str(),
            "yes" | "y" | "ok" | "okay" | "sure" | "yep" | "👍"
        )
    }

    /// The channel's message id of the answer, when it was a message.
    pub fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }
}

/// Why an ask has no answer: the code must handle it (`?` ends the flow with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Interrupt {
    /// The ask's idle timeout passed without an answer.
    Timeout,
    /// The flow was cancelled from outside (`bot.cancel_flow`) or by `cx.cancel()`.
    Cancelled,
}

impl fmt::Display for Interrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interrupt::Timeout => f.write_str("timed out"),
            Interrupt::Cancelled => f.write_str("cancelled"),
        }
    }
}

impl std::error::Error for Interrupt {}

type Parser<T> = Box<dyn Fn(&Answer) -> Result<T, String> + Send + Sync>;

/// A question: the prompt and its options. `cx.ask(prompt).await` inside a `#[flow]`.
pub struct Ask<T = Answer> {
    pub(crate) prompt: Option<Outgoing>,
    pub(crate) idle: Option<Duration>,
    pub(crate) key: Option<String>,
    pub(crate) parse: Parser<T>,
}

impl<T> fmt::Debug for Ask<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ask")
            .field("prompt", &self.prompt)
            .field("idle", &self.idle)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Ask<Answer> {
    /// An ask with this prompt.
    pub fn new(prompt: impl Into<Outgoing>) -> Self {
        Self {
            prompt: Some(prompt.into()),
            idle: None,
            key: None,
            parse: Box::new(|a| Ok(a.clone())),
        }
    }

    /// The answer-side of an ask, rebuilt when the flow resumes (generated code).
    #[doc(hidden)]
    pub fn __resumed() -> Self {
        Self {
            prompt: None,
            idle: None,
            key: None,
            parse: Box::new(|a| Ok(a.clone())),
        }
    }

    /// Accepts the answer when `f` maps it to `Some(value)`; otherwise sends `reask` and keeps
    /// waiting. `f` and `reask` are evaluated again when the flow resumes.
    pub fn validate<U>(
        self,
        f: impl Fn(&Answer) -> Option<U> + Send + Sync + 'static,
        reask: impl Into<String>,
    ) -> Ask<U> {
        let reask = reask.into();
        Ask {
            prompt: self.prompt,
            idle: self.idle,
            key: self.key,
            parse: Box::new(move |a| f(a).ok_or_else(|| reask.clone())),
        }
    }

    /// Like [`validate`](Self::validate), with the re-ask message chosen by `f`.
    pub fn validate_with<U>(
        self,
        f: impl Fn(&Answer) -> Result<U, String> + Send + Sync + 'static,
    ) -> Ask<U> {
        Ask {
            prompt: self.prompt,
            idle: self.idle,
            key: self.key,
            parse: Box::new(f),
        }
    }

    /// Parses the trimmed answer text with `FromStr`; on failure sends `reask`.
    pub fn parse<U: FromStr>(self, reask: impl Into<String>) -> Ask<U> {
        self.validate(|a: &Answer| a.text().trim().parse::<U>().ok(), reask)
    }
}

impl<T> Ask<T> {
    /// Shows buttons under the prompt (a press is an answer whose text is the button's id).
    pub fn buttons<I, B>(mut self, buttons: I) -> Self
    where
        I: IntoIterator<Item = B>,
        B: Into<Button>,
    {
        if let Some(p) = &mut self.prompt {
            let text = p.content.text().to_owned();
            p.content = OutgoingContent::Text {
                text,
                buttons: buttons.into_iter().map(Into::into).collect(),
            };
        }
        self
    }

    /// Gives up after `after` without an answer: the ask is `Err(Interrupt::Timeout)`.
    pub fn idle(mut self, after: Duration) -> Self {
        self.idle = Some(after);
        self
    }

    /// Replaces the prompt's compile-time send site with `key`.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Names this ask: `#[flow]` reads the name (a string literal) at compile time and makes
    /// it the ask's identity, the name of its state in checkpoints and of its prompt's key, in
    /// place of one derived from the prompt. Name an ask whose prompt may change while
    /// conversations wait at it (`cx.ask(format!(…)).id("age")`): a checkpoint resumes at the
    /// ask of the same identity.
    pub fn id(self, _name: &'static str) -> Self {
        self
    }

    pub(crate) fn check(&self, answer: &Answer) -> Result<T, String> {
        (self.parse)(answer)
    }
}
