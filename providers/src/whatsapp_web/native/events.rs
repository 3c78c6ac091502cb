//! The client's events ([`Event`] of `whatsapp-rust`) as the seam's [`WaEvent`]s.
//!
//! - Messages: envelope and content in the seam's plain types ([`message`]). The client's
//!   inbound durability hook hands them over (the session's `AcceptHook`), so the
//!   `Event::Messages` the client dispatches after it (`hook_committed`) maps to nothing;
//!   the messages it dispatches without the hook (newsletters, messages recovered from the
//!   phone) map here. A message whose key (chat, author, id, own) the bot accepted already in
//!   this process (a redelivery after a reconnect, an offline-queue replay, a retry) is
//!   dropped ([`EventMapper::unseen`]); the bot's inbox drops what comes again after a
//!   restart. A key is remembered only once the bot accepted the message, so a message it
//!   did not accept is handed over again when the server delivers it again. A LID author
//!   without its phone number gets the number from the client's LID ↔ phone-number mappings
//!   when it knows one ([`fill_sender_alt`]).
//! - Receipts of the bot's messages: delivered, read (read or played), failed.
//! - Pairing (QR code, pair code, success), connection, logout, replaced stream, ban.
//! - History syncs are counted, never forwarded as messages. Everything else (presence,
//!   app-state updates, calls, …) is not the bot's business and maps to nothing.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use botmesh::message::MediaKind;
use whatsapp_rust::store::traits::ProtocolStore;
use whatsapp_rust::types::events::{Event, TempBanReason};
use whatsapp_rust::types::message::MessageInfo;
use whatsapp_rust::types::presence::ReceiptType;
use whatsapp_rust::wacore::proto_helpers::MessageExt;
use whatsapp_rust::waproto::whatsapp as wa;

use super::super::session::{WaContent, WaEvent, WaMedia, WaMessage, WaMessageInfo, WaSource};
use super::store::NativeStore;

/// How many message keys the dedupe remembers (the oldest are forgotten first).
const REMEMBERED: usize = 4096;

/// Maps the client's events, dropping messages seen already (see the module documentation).
pub(crate) struct EventMapper {
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    keys: HashSet<String>,
    order: VecDeque<String>,
}

impl Seen {
    /// Whether `key` is new (and remembers it).
    fn first(&mut self, key: String) -> bool {
        if self.keys.contains(&key) {
            return false;
        }
        if self.order.len() >= REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
        self.keys.insert(key.clone());
        self.order.push_back(key);
        true
    }
}

impl Default for EventMapper {
    fn default() -> Self {
        Self::new()
    }
}

impl EventMapper {
    /// A mapper that has seen nothing.
    pub(crate) fn new() -> Self {
        Self {
            seen: Mutex::new(Seen::default()),
        }
    }

    /// The seam's events for `event` (none for what the provider does not use, nor for
    /// messages the durability hook handed over already).
    pub(crate) fn map(&self, event: &Event) -> Vec<WaEvent> {
        match event {
            Event::Messages(batch) if batch.hook_committed => Vec::new(),
            Event::Messages(batch) => batch
                .messages
                .iter()
                .filter(|m| self.first_time(&m.info))
                .map(|m| WaEvent::Message(Box::new(message(&m.message, &m.info))))
                .collect(),
            other => one(other).into_iter().collect(),
        }
    }

    fn first_time(&self, info: &MessageInfo) -> bool {
        let first = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first(key(info));
        if !first {
            tracing::debug!(id = %info.id, "a WhatsApp Web message delivered again; dropped");
        }
        first
    }

    /// The message's key when it was not accepted in this process yet (then hand it over
    /// and [`remember`](Self::remember) the key once the bot accepted it), `None` for a
    /// message delivered again.
    pub(crate) fn unseen(&self, info: &MessageInfo) -> Option<String> {
        let key = key(info);
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.keys.contains(&key) {
            tracing::debug!(id = %info.id, "a WhatsApp Web message delivered again; dropped");
            return None;
        }
        Some(key)
    }

    /// Remembers that the bot accepted the message of `key`.
    pub(crate) fn remember(&self, key: String) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first(key);
    }
}

/// A message's key for the dedupe: chat, author, id, and whether it is the bot's own.
fn key(info: &MessageInfo) -> String {
    let source = &info.source;
    format!(
        "{}|{}|{}|{}",
        source.chat.to_non_ad_string(),
        source.sender.to_non_ad_string(),
        info.id,
        source.is_from_me
    )
}

/// The seam's event for every event but messages.
fn one(event: &Event) -> Option<WaEvent> {
    Some(match event {
        Event::Connected(_) => WaEvent::Connected,
        Event::Disconnected(d) => {
            tracing::debug!(reason = %d.reason, "WhatsApp Web socket closed");
            WaEvent::Disconnected
        }
        Event::PairingQrCode(qr) => WaEvent::PairingQrCode {
            code: qr.code.clone(),
            timeout_secs: qr.timeout.as_secs(),
        },
        Event::PairingCode(code) => WaEvent::PairingCode {
            code: code.code.clone(),
            timeout_secs: code.timeout.as_secs(),
        },
        Event::PairSuccess(success) => WaEvent::PairSuccess {
            id: success.id.to_string(),
        },
        Event::LoggedOut(out) => WaEvent::LoggedOut {
            reason: format!("{:?}", out.reason),
        },
        Event::StreamReplaced(_) => WaEvent::StreamReplaced,
        Event::TemporaryBan(ban) => WaEvent::TemporaryBan {
            code: ban_code(&ban.code),
            expires_secs: u64::try_from(ban.expire.num_seconds()).ok(),
        },
        Event::UndecryptableMessage(u) => WaEvent::Undecryptable {
            id: u.info.id.clone(),
            chat: u.info.source.chat.to_string(),
        },
        Event::Receipt(r) => {
            let status = match r.r#type {
                ReceiptType::Delivered => "delivered",
                ReceiptType::Read | ReceiptType::Played => "read",
                ReceiptType::ServerError => "failed",
                _ => return None,
            };
            WaEvent::Receipt {
                chat: r.source.chat.to_non_ad_string(),
                sender: r.source.sender.to_non_ad_string(),
                is_group: r.source.is_group,
                ids: r.message_ids.clone(),
                status: status.to_owned(),
            }
        }
        Event::HistorySync(sync) => WaEvent::HistorySync {
            messages: sync.get().map_or(0, |h| {
                h.conversations.iter().map(|c| c.messages.len()).sum()
            }),
        },
        Event::ConnectFailure(failure) => {
            tracing::warn!(reason = ?failure.reason, message = ?failure.message, "WhatsApp Web refused the connection");
            return None;
        }
        _ => return None,
    })
}

/// The server's number of a ban reason.
fn ban_code(reason: &TempBanReason) -> i32 {
    match reason {
        TempBanReason::SentToTooManyPeople => 101,
        TempBanReason::BlockedByUsers => 102,
        TempBanReason::CreatedTooManyGroups => 103,
        TempBanReason::SentTooManySameMessage => 104,
        TempBanReason::BroadcastList => 106,
        TempBanReason::Unknown(code) => *code,
    }
}

/// A message in the seam's types.
pub(crate) fn message(msg: &wa::Message, info: &MessageInfo) -> WaMessage {
    let source = &info.source;
    WaMessage {
        info: WaMessageInfo {
            id: info.id.clone(),
            source: WaSource {
                chat: source.chat.to_string(),
                sender: source.sender.to_string(),
                sender_alt: source.sender_alt.as_ref().map(ToString::to_string),
                is_from_me: source.is_from_me,
                is_group: source.is_group,
            },
            push_name: Some(info.push_name.clone()).filter(|n| !n.is_empty()),
            timestamp: info.timestamp.timestamp(),
            is_offline: info.is_offline,
        },
        content: content(msg),
    }
}

/// What a message carries.
pub(crate) fn content(msg: &wa::Message) -> WaContent {
    let base = msg.get_base_message();
    // `$m` names the media message in `$caption` and `$file_name`.
    macro_rules! media {
        ($field:ident, $m:ident, $kind:expr, $caption:expr, $file_name:expr) => {
            if let Some($m) = base.$field.as_option() {
                return media(
                    $kind,
                    $m.direct_path.as_deref(),
                    $m.media_key.as_deref(),
                    $m.file_sha256.as_deref(),
                    $m.file_enc_sha256.as_deref(),
                    $m.file_length,
                    $m.mimetype.clone(),
                    $caption,
                    $file_name,
                );
            }
        };
    }
    media!(image_message, m, MediaKind::Image, m.caption.clone(), None);
    media!(video_message, m, MediaKind::Video, m.caption.clone(), None);
    let voice = |m: &wa::message::AudioMessage| m.ptt == Some(true);
    media!(
        audio_message,
        m,
        if voice(m) {
            MediaKind::Voice
        } else {
            MediaKind::Audio
        },
        None,
        None
    );
    media!(
        document_message,
        m,
        MediaKind::Document,
        m.caption.clone(),
        m.file_name.clone()
    );
    media!(sticker_message, m, MediaKind::Sticker, None, None);
    if let Some(r) = base.reaction_message.as_option() {
        return WaContent::Reaction {
            target_id: r
                .key
                .as_option()
                .and_then(|k| k.id.clone())
                .unwrap_or_default(),
            emoji: r.text.clone().unwrap_or_default(),
        };
    }
    if base.protocol_message.is_set() {
        return WaContent::Other {
            kind: "protocol".to_owned(),
        };
    }
    if let Some(text) = base.text_content() {
        return WaContent::Text {
            text: text.to_owned(),
        };
    }
    WaContent::Other {
        kind: "unsupported".to_owned(),
    }
}

#[allow(clippy::too_many_arguments)]
fn media(
    kind: MediaKind,
    direct_path: Option<&str>,
    media_key: Option<&[u8]>,
    file_sha256: Option<&[u8]>,
    file_enc_sha256: Option<&[u8]>,
    file_length: Option<u64>,
    mimetype: Option<String>,
    caption: Option<String>,
    file_name: Option<String>,
) -> WaContent {
    match (direct_path, media_key, file_sha256, file_enc_sha256) {
        (Some(direct_path), Some(key), Some(sha), Some(enc)) => WaContent::Media(WaMedia {
            kind,
            direct_path: direct_path.to_owned(),
            media_key: key.to_vec(),
            file_sha256: sha.to_vec(),
            file_enc_sha256: enc.to_vec(),
            file_length: file_length.unwrap_or(0),
            mimetype,
            caption,
            file_name,
        }),
        _ => WaContent::Other {
            kind: format!("{} without its download fields", kind.as_str()),
        },
    }
}

/// Gives a LID author its phone number when the client has learned the mapping (so the
/// provider can key the person by phone number from the first message on).
pub(crate) async fn fill_sender_alt(store: &NativeStore, message: &mut WaMessage) {
    let source = &mut message.info.source;
    if source.sender_alt.is_some() {
        return;
    }
    let Some((user, "lid")) = source
        .sender
        .split_once('@')
        .map(|(u, s)| (u.split_once(':').map_or(u, |(u, _)| u), s))
    else {
        return;
    };
    match store.get_lid_mapping(user).await {
        Ok(Some(entry)) => {
            source.sender_alt = Some(format!("{}@s.whatsapp.net", entry.phone_number));
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, lid = %user, "reading a LID mapping failed"),
    }
}
