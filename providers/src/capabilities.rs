//! What the kinds of channel can do ([`Capabilities`]), written once: a REST channel
//! (webhooks in, API calls out: no typing, read marks or acknowledgements) and an interactive
//! chat app (buttons that must be acknowledged, edits, typing). A channel states its limits
//! and, where it differs from its kind, the difference.

use botmesh::provider::Capabilities;

/// The capabilities of a REST channel: its text limits and whether it edits; no typing, read
/// marks or acknowledgements, and a resend is not deduplicated.
#[cfg(any(rest_channel, meta_channel, feature = "email"))]
pub(crate) fn rest(
    text_limit: usize,
    buttons_text_limit: Option<usize>,
    edits: bool,
) -> Capabilities {
    Capabilities {
        text_limit,
        buttons_text_limit,
        interactions_require_ack: false,
        edits,
        typing: false,
        mark_read: false,
        resends_deduplicated: false,
    }
}

/// The capabilities of an interactive chat app: a button press is acknowledged, a message
/// is edited, typing is shown; no read marks. `resends_deduplicated` says whether the
/// channel itself drops a resend of the same message.
#[cfg(any(feature = "discord", feature = "telegram"))]
pub(crate) fn interactive(text_limit: usize, resends_deduplicated: bool) -> Capabilities {
    Capabilities {
        text_limit,
        buttons_text_limit: None,
        interactions_require_ack: true,
        edits: true,
        typing: true,
        mark_read: false,
        resends_deduplicated,
    }
}
