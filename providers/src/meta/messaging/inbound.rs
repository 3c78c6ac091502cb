//! Messenger and Instagram webhook bodies (`entry[].messaging[]`) → [`ProviderEvent`]s.
//!
//! One POST may batch several entries and events; all are parsed before any is delivered, so
//! a malformed body (400) delivers nothing.
//!
//! | `messaging[i]` carries | event |
//! | --- | --- |
//! | `message` with `is_echo: true` (the Page's own sends, the bot's included: Instagram sends them back) | none: dropped, or the bot would answer itself |
//! | `message` with `quick_reply.payload` | `Interaction` with the payload as data, deduped as the message (`mid`) |
//! | `message` with `text` | `Message` with `Content::Text` |
//! | `message` with `attachments` (`image`, `video`, `audio`, `file`; a sticker) | one `Message` per attachment with `Content::Media`: the hosted URL as the token, the text as the first one's caption; ids `mid`, `mid#2`, … |
//! | an attachment of another type (`location`, `share`, `story_mention`, `reel`, `fallback`, …) | `Message` with `Content::Location` (legacy location) or `Content::Other` (the attachment) |
//! | `postback` (a template button, the persistent menu, Get Started) | `Interaction` with the payload; its id is `postback.mid`, or `sender:timestamp:payload` for one without |
//! | `reaction` | `Reaction` (`unreact`: an empty emoji) |
//! | `delivery` with `mids` | a `Status` `delivered` per message |
//! | `read`, `delivery` without `mids`, `optin`, `referral`, `standby`, … | none |
//!
//! Chats and senders are the PSID (Messenger) or IGSID (Instagram); timestamps are
//! milliseconds. With an account id configured, events addressed to another Page or account
//! are skipped. `reply_to.mid` becomes the message's `reply_to`.

use botmesh::message::{
    ChatId, Content, InboundMedia, Interaction, Location, MediaKind, MediaRef, Message, MessageId,
    Reaction, UserId,
};
use botmesh::provider::{DeliveryStatus, ProviderEvent};
use serde_json::Value;

use crate::meta::MetaInbound;

/// The body parser of one Messenger or Instagram webhook route.
pub(crate) struct Inbound {
    /// The provider's name (media refs carry it).
    pub(crate) name: &'static str,
    /// The envelope's `object`: `page` or `instagram`.
    pub(crate) object: &'static str,
    /// The Page or account whose events are delivered (`None`: all).
    pub(crate) account_id: Option<String>,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |cur, p| cur.get(p))?.as_str()
}

/// The fields every event of a `messaging[]` item shares.
struct Item {
    chat: ChatId,
    timestamp_ms: i64,
}

impl MetaInbound for Inbound {
    fn parse(&self, body: &[u8]) -> Result<Vec<ProviderEvent>, String> {
        let envelope: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let object = envelope["object"].as_str().unwrap_or_default();
        if object != self.object {
            return Err(format!(
                "not a {} webhook: object {object:?}, expected {:?}",
                self.name, self.object
            ));
        }
        let entries = envelope["entry"]
            .as_array()
            .ok_or("a webhook without entry")?;
        let mut events = Vec::new();
        for entry in entries {
            let Some(items) = entry.get("messaging") else {
                continue;
            };
            let items = items.as_array().ok_or("messaging is not a list")?;
            for raw in items {
                self.item(raw, &mut events)?;
            }
        }
        Ok(events)
    }
}

impl Inbound {
    fn item(&self, raw: &Value, events: &mut Vec<ProviderEvent>) -> Result<(), String> {
        let sender = str_at(raw, &["sender", "id"]).ok_or("an event without sender.id")?;
        let recipient = str_at(raw, &["recipient", "id"]).ok_or("an event without recipient.id")?;
        let timestamp_ms = raw["timestamp"]
            .as_i64()
            .ok_or("an event without a timestamp in milliseconds")?;
        if raw["message"]["is_echo"].as_bool() == Some(true) {
            tracing::debug!(
                provider = self.name,
                "echo of a message the account sent: dropped"
            );
            return Ok(());
        }
        if let Some(account) = &self.account_id
            && account != recipient
        {
            tracing::debug!(
                provider = self.name,
                recipient,
                "an event for another account: skipped"
            );
            return Ok(());
        }
        let item = Item {
            chat: ChatId(sender.to_owned()),
            timestamp_ms,
        };
        if let Some(message) = raw.get("message") {
            self.message(&item, message, events)?;
        } else if let Some(postback) = raw.get("postback") {
            let payload = str_at(postback, &["payload"]).ok_or("a postback without payload")?;
            let id = str_at(postback, &["mid"]).map_or_else(
                || format!("{sender}:{timestamp_ms}:{payload}"),
                str::to_owned,
            );
            events.push(interaction(
                &item,
                id,
                payload,
                str_at(postback, &["title"]),
                false,
            ));
        } else if let Some(reaction) = raw.get("reaction") {
            let mid = str_at(reaction, &["mid"]).ok_or("a reaction without mid")?;
            let emoji = match str_at(reaction, &["action"]) {
                Some("unreact") => "",
                _ => str_at(reaction, &["emoji"]).unwrap_or_default(),
            };
            events.push(ProviderEvent::Reaction {
                chat: item.chat.clone(),
                sender: UserId(sender.to_owned()),
                reaction: Reaction {
                    message_id: MessageId(mid.to_owned()),
                    emoji: emoji.to_owned(),
                },
            });
        } else if let Some(mids) = raw["delivery"]["mids"].as_array() {
            for mid in mids.iter().filter_map(Value::as_str) {
                events.push(ProviderEvent::Status(DeliveryStatus {
                    chat: item.chat.clone(),
                    message_id: MessageId(mid.to_owned()),
                    status: "delivered".to_owned(),
                    error: None,
                }));
            }
        }
        Ok(())
    }

    fn message(
        &self,
        item: &Item,
        message: &Value,
        events: &mut Vec<ProviderEvent>,
    ) -> Result<(), String> {
        let mid = str_at(message, &["mid"]).ok_or("a message without mid")?;
        let text = str_at(message, &["text"]);
        if let Some(payload) = str_at(message, &["quick_reply", "payload"]) {
            events.push(interaction(item, mid.to_owned(), payload, text, true));
            return Ok(());
        }
        let reply_to = str_at(message, &["reply_to", "mid"]).map(|m| MessageId(m.to_owned()));
        let attachments = message["attachments"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let mut contents: Vec<Content> = attachments
            .iter()
            .enumerate()
            .map(|(i, a)| self.attachment(a, if i == 0 { text } else { None }))
            .collect();
        if contents.is_empty() {
            contents.push(match text {
                Some(t) => Content::Text(t.to_owned()),
                None => Content::Other(message.clone()),
            });
        }
        for (i, content) in contents.into_iter().enumerate() {
            let id = if i == 0 {
                mid.to_owned()
            } else {
                format!("{mid}#{}", i + 1)
            };
            events.push(ProviderEvent::Message(Message {
                id: MessageId(id),
                chat: item.chat.clone(),
                sender: UserId(item.chat.0.clone()),
                sender_name: None,
                is_group: false,
                mentions_bot: false,
                timestamp_ms: item.timestamp_ms,
                content,
                reply_to: reply_to.clone(),
                lang_hint: None,
            }));
        }
        Ok(())
    }

    fn attachment(&self, a: &Value, caption: Option<&str>) -> Content {
        let url = str_at(a, &["payload", "url"]);
        let kind = match (str_at(a, &["type"]), url) {
            (Some("image"), Some(_)) if a["payload"].get("sticker_id").is_some() => {
                MediaKind::Sticker
            }
            (Some("image"), Some(_)) => MediaKind::Image,
            (Some("video"), Some(_)) => MediaKind::Video,
            (Some("audio"), Some(_)) => MediaKind::Audio,
            (Some("file"), Some(_)) => MediaKind::Document,
            (Some("location"), _) => {
                let at = &a["payload"]["coordinates"];
                if let (Some(latitude), Some(longitude)) = (at["lat"].as_f64(), at["long"].as_f64())
                {
                    return Content::Location(Location {
                        latitude,
                        longitude,
                        name: str_at(a, &["title"]).map(str::to_owned),
                        address: None,
                    });
                }
                return Content::Other(a.clone());
            }
            _ => return Content::Other(a.clone()),
        };
        Content::Media(InboundMedia {
            kind,
            media_ref: MediaRef {
                provider: self.name.to_owned(),
                token: url.unwrap_or_default().to_owned(),
            },
            mime: None,
            caption: caption.map(str::to_owned),
            file_name: None,
            size: None,
        })
    }
}

fn interaction(
    item: &Item,
    id: String,
    data: &str,
    title: Option<&str>,
    from_text: bool,
) -> ProviderEvent {
    ProviderEvent::Interaction(Interaction {
        id,
        chat: item.chat.clone(),
        sender: UserId(item.chat.0.clone()),
        sender_name: None,
        data: data.to_owned(),
        title: title.map(str::to_owned),
        message_id: None,
        is_group: false,
        timestamp_ms: item.timestamp_ms,
        respond_by_ms: None,
        from_text,
    })
}
