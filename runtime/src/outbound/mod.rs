//! The outbound path: sends and edits through the `before`/`after` send hooks, the pacer, the
//! provider, the message ledger, metrics and the `sent` event.
//!
//! Order: pacer (handler text replies) → `before` send hooks (abort → `skipped`, or rewrite) →
//! split into parts over the channel's text limit → provider (with the short in-place
//! rate-limit retry for handler replies) → metrics, `after` send hooks, ledger `sent`; or ledger
//! `failed` and the error to the caller. The idempotency key is computed here from its
//! [`KeyRule`] and is never passed to the provider. This module does not journal (the durable
//! outbox does, when configured) and does not route.
//!
//! The outbound layer sits on the kernel, below the durable inbound path, the flows and the
//! bot:
//!
//! | module | what it does |
//! | --- | --- |
//! | this module | sends and edits through hooks, pacer, parts, provider, ledger |
//! | `outbox` | the durable outbox: journal before the provider, answer a replayed send |
//! | `context` | `ctx.reply`, `ctx.edit`, `ctx.typing`, …: a handler's sends |
//! | `rate_limit_retry` | the short in-place retry of rate-limited replies |
//! | `presence` | typing and read marks, skipped while the transport is not ready |
//! | `persistence` | chat, contact, ledger, language and handoff writes |
//! | `interaction_ack` | the single automatic interaction ack |
//! | `stream` | `ctx.stream()` |

pub(crate) mod context;
pub(crate) mod fence;
pub(crate) mod interaction_ack;
pub(crate) mod outbox;
pub(crate) mod persistence;
pub(crate) mod presence;
pub(crate) mod rate_limit_retry;
pub(crate) mod stream;

use std::sync::Arc;

use tracing::Instrument;

use crate::error::BotError;
use crate::events::BotEvent;
use crate::kernel::Kernel;
use crate::kernel::routes::BeforeSendHook;
use crate::kernel::routes::{SendDecision, SendDraft, SentInfo};
use crate::message::{ChatId, MessageId, Outgoing, OutgoingContent};
use crate::metrics::Counters;
use crate::outbound::persistence::OutboundEntry;

/// How a send's idempotency key is made: the three key rules ("Idempotency keys" in
/// `docs/durability-and-backends.md`), plus flow send sites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRule {
    /// Rule 1: the caller's key.
    Explicit(String),
    /// Rule 2: `<inbound record id>:<n>`, the n-th send made for that message.
    Derived {
        /// The inbound record id.
        inbound: String,
        /// The send's position (1-based).
        n: u32,
    },
    /// A flow's compile-time send site: `<inbound record id>:<site>`.
    Site {
        /// The inbound record id that fed the step (none for a flow started from code).
        inbound: Option<String>,
        /// The site id (flow, state, place in the step, occurrence).
        site: String,
    },
    /// Rule 3: a random key (still journaled and retried, never recognised twice).
    Random,
}

impl KeyRule {
    /// The key string.
    pub fn key(&self) -> String {
        match self {
            KeyRule::Explicit(k) => k.clone(),
            KeyRule::Derived { inbound, n } => format!("{inbound}:{n}"),
            KeyRule::Site {
                inbound: Some(i),
                site,
            } => format!("{i}:{site}"),
            KeyRule::Site {
                inbound: None,
                site,
            } => format!("code:{site}"),
            KeyRule::Random => format!("rnd:{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..)),
        }
    }

    /// Whether the key was given explicitly (explicit keys are never fingerprint-compared).
    pub fn is_explicit(&self) -> bool {
        matches!(self, KeyRule::Explicit(_))
    }
}

/// The outcome of a send.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SendOutcome {
    /// The provider's id of the (last part of the) message, when it gives one.
    pub message_id: Option<MessageId>,
    /// The send's idempotency key.
    pub key: Option<String>,
    /// A `before` send hook aborted it.
    pub skipped: bool,
    /// It was answered from the outbox: it had been sent before.
    pub deduped: bool,
    /// How many messages went out (a long text is split into parts).
    pub parts: usize,
}

pub(crate) struct SendRequest {
    pub(crate) chat: ChatId,
    pub(crate) outgoing: Outgoing,
    pub(crate) key: KeyRule,
    pub(crate) paced: bool,
    pub(crate) inline_rate_limit_retry: bool,
}

/// Runs the `before` send hooks in registration order; `None` when one aborted.
pub(crate) async fn run_before_send(k: &Kernel, draft: SendDraft) -> Option<SendDraft> {
    run_hooks(before_send_hooks(k), draft).await
}

/// The `before` send hooks registered now, in registration order.
fn before_send_hooks(k: &Kernel) -> Vec<BeforeSendHook> {
    let routes = k.routes.read().unwrap_or_else(|e| e.into_inner());
    routes.before_send.iter().map(|r| r.item.clone()).collect()
}

/// Runs `hooks` on `draft` in order; `None` when one aborted.
async fn run_hooks(hooks: Vec<BeforeSendHook>, mut draft: SendDraft) -> Option<SendDraft> {
    for hook in hooks {
        match hook(draft).await {
            SendDecision::Proceed(d) => draft = d,
            SendDecision::Abort => return None,
        }
    }
    Some(draft)
}

async fn run_after_send(k: &Kernel, info: SentInfo) {
    let hooks: Vec<_> = {
        let routes = k.routes.read().unwrap_or_else(|e| e.into_inner());
        routes.after_send.iter().map(|r| r.item.clone()).collect()
    };
    for hook in hooks {
        hook(info.clone()).await;
    }
}

/// Sends one message through the whole outbound path.
/// On a channel that drops resends ([`Capabilities::resends_deduplicated`](crate::provider::Capabilities::resends_deduplicated)),
/// a send without its own ambiguity policy is journaled with `resend`: sending it again
/// cannot post it twice there, and skipping it could lose it.
pub(crate) fn resend_where_deduplicated(k: &Kernel, outgoing: &mut Outgoing) {
    if k.capabilities.resends_deduplicated {
        outgoing
            .on_ambiguous
            .get_or_insert(botmesh_durability::OnAmbiguous::Resend);
    }
}

pub(crate) async fn send(k: &Arc<Kernel>, req: SendRequest) -> Result<SendOutcome, BotError> {
    let SendRequest {
        chat,
        mut outgoing,
        key: rule,
        paced,
        inline_rate_limit_retry,
    } = req;
    // The send fence: work that lost its chat's turn journals and sends nothing more.
    crate::outbound::fence::chat_write(k, chat.as_str()).await?;
    let key = rule.key();
    outgoing.idempotency_key = None;
    resend_where_deduplicated(k, &mut outgoing);

    if paced && outgoing.content.is_text() {
        if let Some(p) = &k.config.pacing {
            let delay = p.delay_for(outgoing.content.text().chars().count());
            let paced = async {
                if p.typing {
                    presence::typing(k, &chat).await;
                }
                tokio::time::sleep(delay).await;
            };
            paced
                .instrument(crate::telemetry::pace_span(chat.as_str()))
                .await;
        }
    }

    // The durable idempotency lookup comes before the hooks: a send already recorded as sent
    // is answered from the outbox, with no hooks and no provider call. Without hooks, the
    // journal write that follows finds such a record itself (and answers it the same way): no
    // lookup of its own then.
    let hooks = before_send_hooks(k);
    let fingerprint = match &k.durable {
        Some(dur) => {
            // The fingerprint is of the content before the hooks: computed now when a hook
            // may change it, or when its JSON does not give it back exactly (floats); else it
            // is computed from the journaled payload if a replay ever compares it.
            let now = (!hooks.is_empty()
                || !crate::outbound::outbox::payload_fingerprints(&outgoing))
            .then(|| crate::outbound::outbox::fingerprint(&chat, &outgoing));
            // With hooks, `now` holds the fingerprint.
            if let Some(fp) = now.as_ref().filter(|_| !hooks.is_empty()) {
                if let Some(done) =
                    crate::outbound::outbox::answered(k, dur, &key, &rule, fp).await?
                {
                    Counters::inc(&k.counters.send_deduped);
                    return Ok(done);
                }
            }
            Some(now)
        }
        None => None,
    };

    let draft = SendDraft {
        chat: chat.clone(),
        outgoing,
        edit_of: None,
        preview: false,
    };
    let Some(draft) = run_hooks(hooks, draft).await else {
        Counters::inc(&k.counters.send_skipped);
        return Ok(SendOutcome {
            key: Some(key),
            skipped: true,
            ..SendOutcome::default()
        });
    };
    let SendDraft { chat, outgoing, .. } = draft;

    if let (Some(dur), Some(fp)) = (&k.durable, fingerprint) {
        return crate::outbound::outbox::deliver(k, dur, &rule, key, chat, outgoing, fp).await;
    }

    let parts = split_outgoing(&outgoing, &k.capabilities);
    if parts.len() > 1 {
        Counters::inc(&k.counters.split_messages);
    }
    let mut outcome = SendOutcome {
        key: Some(key.clone()),
        ..SendOutcome::default()
    };
    for (i, part) in parts.iter().enumerate() {
        let part_key = part_key(&key, i);
        let result = if inline_rate_limit_retry {
            rate_limit_retry::send_with_retry(k, &chat, part, &part_key).await
        } else {
            provider_send(k, &chat, part, &part_key)
                .await
                .map_err(BotError::from)
        };
        match result {
            Ok(sent) => {
                on_sent(k, &chat, part, sent.message_id.clone(), &part_key).await;
                outcome.message_id = sent.message_id;
                outcome.parts += 1;
            }
            Err(err) => {
                on_failed(k, &chat, part, &part_key, &err).await;
                return Err(err);
            }
        }
    }
    Ok(outcome)
}

/// One attempt of `part` at the channel under the send key `key` (which the provider reads
/// with [`current_send_key`](crate::provider::current_send_key)), in its `bot.send` span.
pub(crate) async fn provider_send(
    k: &Kernel,
    chat: &ChatId,
    part: &Outgoing,
    key: &str,
) -> Result<crate::message::SentMessage, crate::provider::ProviderError> {
    let span = crate::telemetry::send_span(chat.as_str(), Some(key), false);
    crate::provider::with_send_key(Some(key.to_owned()), k.provider.send(chat, part))
        .instrument(span)
        .await
}

/// What follows a send the provider accepted: metrics, ledger, `after` send hooks, event.
pub(crate) async fn on_sent(
    k: &Kernel,
    chat: &ChatId,
    part: &Outgoing,
    message_id: Option<MessageId>,
    part_key: &str,
) {
    persistence::record_outbound(
        k,
        OutboundEntry {
            chat,
            outgoing: part,
            message_id: message_id.as_ref(),
            key: Some(part_key),
            error: None,
        },
    )
    .await;
    on_sent_recorded(k, chat, part, message_id, part_key).await;
}

/// [`on_sent`] for a send whose ledger row was written with its journal record: metrics,
/// `after` send hooks, event.
pub(crate) async fn on_sent_recorded(
    k: &Kernel,
    chat: &ChatId,
    part: &Outgoing,
    message_id: Option<MessageId>,
    part_key: &str,
) {
    Counters::inc(&k.counters.sent);
    run_after_send(
        k,
        SentInfo {
            chat: chat.clone(),
            outgoing: part.clone(),
            message_id: message_id.clone(),
            key: Some(part_key.to_owned()),
            edit: false,
        },
    )
    .await;
    k.events.emit(BotEvent::Sent {
        chat: chat.clone(),
        key: Some(part_key.to_owned()),
        message_id,
    });
}

/// What follows a send that failed for good: metrics and the ledger.
pub(crate) async fn on_failed(
    k: &Kernel,
    chat: &ChatId,
    part: &Outgoing,
    part_key: &str,
    err: &(dyn std::fmt::Display + Sync),
) {
    Counters::inc(&k.counters.send_failed);
    persistence::record_outbound(
        k,
        OutboundEntry {
            chat,
            outgoing: part,
            message_id: None,
            key: Some(part_key),
            error: Some(err.to_string()),
        },
    )
    .await;
}

/// Edits a message: `before` send hooks (with `edit_of`), provider, `after` send hooks.
/// Previews (`ctx.stream()`) run only the `before` hooks.
pub(crate) async fn edit(
    k: &Arc<Kernel>,
    chat: &ChatId,
    message_id: &MessageId,
    content: OutgoingContent,
    preview: bool,
) -> Result<SendOutcome, BotError> {
    let draft = SendDraft {
        chat: chat.clone(),
        outgoing: content.into(),
        edit_of: Some(message_id.clone()),
        preview,
    };
    let Some(draft) = run_before_send(k, draft).await else {
        Counters::inc(&k.counters.send_skipped);
        return Ok(SendOutcome {
            skipped: true,
            ..SendOutcome::default()
        });
    };
    let target = draft.edit_of.clone().unwrap_or_else(|| message_id.clone());
    k.provider
        .edit(&draft.chat, &target, &draft.outgoing.content)
        .instrument(crate::telemetry::send_span(draft.chat.as_str(), None, true))
        .await?;
    Counters::inc(&k.counters.edits);
    if !preview {
        run_after_send(
            k,
            SentInfo {
                chat: draft.chat.clone(),
                outgoing: draft.outgoing.clone(),
                message_id: Some(target.clone()),
                key: None,
                edit: true,
            },
        )
        .await;
    }
    Ok(SendOutcome {
        message_id: Some(target),
        parts: 1,
        ..SendOutcome::default()
    })
}

/// The key of part `index` (0-based) of a send keyed `key`: `key`, `key#2`, `key#3`, …
pub fn part_key(key: &str, index: usize) -> String {
    if index == 0 {
        key.to_owned()
    } else {
        format!("{key}#{}", index + 1)
    }
}

/// The text of a text or list send and the channel's limits for it: `(text, limit, limit of
/// the last part)`; `None` for other content or a channel without a limit. The last part
/// carries the buttons or the list: it must also fit the channel's limit for a text with
/// buttons.
fn text_limits<'a>(
    outgoing: &'a Outgoing,
    caps: &crate::provider::Capabilities,
) -> Option<(&'a str, usize, usize)> {
    let limit = caps.text_limit;
    let (text, decorated) = match &outgoing.content {
        OutgoingContent::Text { text, buttons } => (text, !buttons.is_empty()),
        OutgoingContent::List { text, .. } => (text, true),
        _ => return None,
    };
    if limit == 0 {
        return None;
    }
    let last_limit = match caps.buttons_text_limit {
        Some(b) if decorated && b > 0 => b.min(limit),
        _ => limit,
    };
    Some((text, limit, last_limit))
}

/// Whether [`split_outgoing`] splits `outgoing` in several parts (its text is over the
/// channel's limit, or over its limit for a text with buttons), without splitting it.
pub(crate) fn is_split(outgoing: &Outgoing, caps: &crate::provider::Capabilities) -> bool {
    text_limits(outgoing, caps).is_some_and(|(text, _, last_limit)| longer_than(text, last_limit))
}

/// Whether `text` has more than `limit` characters (counting stops past the limit).
fn longer_than(text: &str, limit: usize) -> bool {
    text.chars().nth(limit).is_some()
}

/// Splits a text message, or a list, over the channel's `text_limit` into parts. The last
/// part keeps the buttons (or is the list, with the end of its text) and also fits
/// `buttons_text_limit`; the parts before it are plain texts. Other content is returned as it
/// is.
pub(crate) fn split_outgoing(
    outgoing: &Outgoing,
    caps: &crate::provider::Capabilities,
) -> Vec<Outgoing> {
    let Some((text, limit, last_limit)) =
        text_limits(outgoing, caps).filter(|&(text, _, last_limit)| longer_than(text, last_limit))
    else {
        return vec![outgoing.clone()];
    };
    let mut chunks = split_text(text, limit);
    if chunks
        .last()
        .is_some_and(|c| c.chars().count() > last_limit)
    {
        // Cut the last chunk to the buttons' limit, keep its final piece for the buttons, and
        // give the rest back to the parts before (at `limit` each).
        let last = chunks.pop().unwrap_or_default();
        let mut pieces = split_text(&last, last_limit);
        let tail = pieces.pop().unwrap_or_default();
        let head: String = chunks.into_iter().chain(pieces).collect();
        chunks = if head.is_empty() {
            Vec::new()
        } else {
            split_text(&head, limit)
        };
        chunks.push(tail);
    }
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| Outgoing {
            content: if i + 1 < n {
                OutgoingContent::Text {
                    text: chunk,
                    buttons: Vec::new(),
                }
            } else {
                match &outgoing.content {
                    OutgoingContent::List {
                        button, sections, ..
                    } => OutgoingContent::List {
                        text: chunk,
                        button: button.clone(),
                        sections: sections.clone(),
                    },
                    OutgoingContent::Text { buttons, .. } => OutgoingContent::Text {
                        text: chunk,
                        buttons: buttons.clone(),
                    },
                    other => other.clone(),
                }
            },
            reply_to: if i == 0 {
                outgoing.reply_to.clone()
            } else {
                None
            },
            idempotency_key: None,
            on_ambiguous: outgoing.on_ambiguous,
        })
        .collect()
}

/// Splits text into chunks of at most `limit` characters, preferring to cut after a newline,
/// then after a space. Deterministic: the same text and limit give the same parts.
pub fn split_text(text: &str, limit: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if limit == 0 || chars.len() <= limit {
        return vec![text.to_owned()];
    }
    let mut parts = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let end = (start + limit).min(chars.len());
        let mut cut = end;
        if end < chars.len() {
            let window = &chars[start..end];
            if let Some(i) = window.iter().rposition(|&c| c == '\n').filter(|&i| i > 0) {
                cut = start + i + 1;
            } else if let Some(i) = window.iter().rposition(|&c| c == ' ').filter(|&i| i > 0) {
                cut = start + i + 1;
            }
        }
        parts.push(chars[start..cut].iter().collect());
        start = cut;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel of 4096-character texts, 1024 under buttons.
    fn caps() -> crate::provider::Capabilities {
        crate::provider::Capabilities {
            text_limit: 4096,
            buttons_text_limit: Some(1024),
            ..crate::provider::Capabilities::default()
        }
    }

    /// Every part fits the text limit, the last (with the buttons) the buttons' limit, and the
    /// parts put back together are the text, for texts around both limits.
    #[test]
    fn a_text_with_buttons_keeps_its_last_part_under_the_buttons_limit() {
        let caps = caps();
        for len in [10, 1024, 1025, 1500, 4096, 4097, 5000, 9000] {
            let text: String = (0..len)
                .map(|i| if i % 7 == 6 { ' ' } else { 'x' })
                .collect();
            let parts = split_outgoing(&Outgoing::buttons(text.clone(), [("y", "Yes")]), &caps);
            let texts: Vec<String> = parts.iter().map(|p| p.content.text().to_owned()).collect();
            assert_eq!(texts.concat(), text, "{len}");
            assert!(texts.iter().all(|t| t.chars().count() <= 4096), "{len}");
            let last = texts.last().map_or(0, |t| t.chars().count());
            assert!(last <= 1024, "{len}: last part {last}");
            assert_eq!(
                parts.len() == 1,
                len <= 1024,
                "{len}: split only when needed"
            );
            let buttons = Outgoing::buttons(text.clone(), [("y", "Yes")]);
            assert_eq!(is_split(&buttons, &caps), parts.len() > 1, "{len}");
            let with_buttons = parts
                .iter()
                .filter(|p| matches!(&p.content, OutgoingContent::Text { buttons, .. } if !buttons.is_empty()))
                .count();
            assert_eq!(with_buttons, 1, "{len}");
            // Without buttons, only the text limit counts.
            let plain = split_outgoing(&Outgoing::from(text.clone()), &caps);
            assert_eq!(plain.len() == 1, len <= 4096, "{len}");
            assert_eq!(
                is_split(&Outgoing::from(text.clone()), &caps),
                plain.len() > 1,
                "{len}"
            );
        }
    }

    /// A list over the buttons' limit is split like a text with buttons: plain texts first,
    /// the list (its button and sections unchanged) with the end of the text last.
    #[test]
    fn a_long_list_keeps_its_rows_on_its_last_part() {
        let caps = caps();
        let sections = vec![crate::message::ListSection {
            title: "Drinks".into(),
            rows: vec![crate::message::Button::with_id("tea", "Tea")],
        }];
        let list = |text: String| {
            Outgoing::from(OutgoingContent::List {
                text,
                button: "Pick".into(),
                sections: sections.clone(),
            })
        };
        assert_eq!(split_outgoing(&list("x ".repeat(512)), &caps).len(), 1);
        let text = "word ".repeat(1040); // 5200: 4096 + 1104, over the 1024 of the last part
        let parts = split_outgoing(&list(text.clone()).reply_to("m1"), &caps);
        assert_eq!(parts.len(), 3, "4096 + the rest, cut to fit 1024 last");
        let texts: Vec<&str> = parts.iter().map(|p| p.content.text()).collect();
        assert_eq!(texts.concat(), text);
        let (last, before) = parts.split_last().expect("parts");
        assert!(
            before.iter().all(|p| matches!(&p.content, OutgoingContent::Text { buttons, .. } if buttons.is_empty())),
            "{before:?}"
        );
        match &last.content {
            OutgoingContent::List {
                text,
                button,
                sections: s,
            } => {
                assert!(text.chars().count() <= 1024, "{}", text.len());
                assert_eq!(button, "Pick");
                assert_eq!(s, &sections);
            }
            other => panic!("the last part is the list: {other:?}"),
        }
        assert_eq!(parts[0].reply_to.as_ref().map(|m| m.as_str()), Some("m1"));
        assert!(parts[1..].iter().all(|p| p.reply_to.is_none()));
    }

    #[test]
    fn splits_at_spaces_and_keeps_every_char() {
        let text = "aaaa bbbb cccc dddd";
        let parts = split_text(text, 10);
        assert!(parts.iter().all(|p| p.chars().count() <= 10));
        assert_eq!(parts.concat(), text);
        assert_eq!(parts, vec!["aaaa bbbb ", "cccc dddd"]);
        let hard = split_text("abcdefghij", 3);
        assert_eq!(hard, vec!["abc", "def", "ghi", "j"]);
        assert_eq!(split_text("short", 10), vec!["short"]);
    }

    #[test]
    fn keys() {
        assert_eq!(part_key("k", 0), "k");
        assert_eq!(part_key("k", 1), "k#2");
        assert_eq!(
            KeyRule::Derived {
                inbound: "c/1".into(),
                n: 2
            }
            .key(),
            "c/1:2"
        );
        assert_ne!(KeyRule::Random.key(), KeyRule::Random.key());
    }
}
