//! `ctx.lang`: which language a chat speaks.
//!
//! Resolution order: a language stored for the chat (`ctx.set_lang`), a custom resolver given
//! to the builder, the channel's hint on the message, then `BotConfig::default_lang`.
//! Tags are normalised to lowercase primary-subtag form with region (`pt-BR` → `pt-br`).
//! This module does not translate anything.

use std::sync::Arc;

use crate::message::Message;

/// A custom language resolver: given the message, a language tag or `None` to fall through.
pub type LangResolver = Arc<dyn Fn(&Message) -> Option<String> + Send + Sync>;

/// Normalises a language tag (`"PT_br"` → `"pt-br"`).
pub fn normalize(tag: &str) -> String {
    tag.trim().replace('_', "-").to_ascii_lowercase()
}

pub(crate) fn resolve(
    stored: Option<&str>,
    resolver: Option<&LangResolver>,
    message: Option<&Message>,
    default: &str,
) -> String {
    if let Some(s) = stored.filter(|s| !s.is_empty()) {
        return normalize(s);
    }
    if let (Some(r), Some(m)) = (resolver, message) {
        if let Some(l) = r(m).filter(|l| !l.is_empty()) {
            return normalize(&l);
        }
    }
    if let Some(h) = message
        .and_then(|m| m.lang_hint.as_deref())
        .filter(|h| !h.is_empty())
    {
        return normalize(h);
    }
    normalize(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order() {
        let mut m = Message::text("1", "c", "hi");
        m.lang_hint = Some("PT_BR".into());
        assert_eq!(resolve(Some("de"), None, Some(&m), "en"), "de");
        let r: LangResolver = Arc::new(|_| Some("fr".into()));
        assert_eq!(resolve(None, Some(&r), Some(&m), "en"), "fr");
        assert_eq!(resolve(None, None, Some(&m), "en"), "pt-br");
        assert_eq!(resolve(None, None, None, "EN"), "en");
    }
}
