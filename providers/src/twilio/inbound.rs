//! Twilio's form-encoded webhooks → [`ProviderEvent`]s.
//!
//! | parameters | event |
//! | --- | --- |
//! | `Body` only | `Message` with `Content::Text`, id `MessageSid` |
//! | `Body` that picks one of the options last sent to the chat (its number or title) | `Interaction` with the option's id, `from_text` (journaled and deduped as the message `MessageSid`, however a redelivery is read) |
//! | `ButtonPayload` (WhatsApp quick reply) | `Interaction` with the payload |
//! | `Latitude` + `Longitude` (WhatsApp location) | `Content::Location` |
//! | `NumMedia` = N ≥ 1 | N messages with `Content::Media` (the `MediaUrl{i}` as the token, `Body` as the first caption); ids `MessageSid`, `MessageSid/1`, … |
//! | a status callback (`MessageStatus`) | `Status` of the `To` chat |
//!
//! Chats and senders are the `From` address as Twilio gives it (`+1555…`, `whatsapp:+1555…`).

use botmesh::message::{
    Button, ChatId, Content, InboundMedia, Interaction, Location, MediaRef, Message, MessageId,
    UserId,
};
use botmesh::provider::{DeliveryStatus, ProviderEvent};

use super::NAME;

/// A form that is not a Twilio webhook.
#[derive(Debug, thiserror::Error)]
#[error("not a Twilio webhook: {0}")]
pub(crate) struct Malformed(String);

pub(crate) struct Form(pub(crate) Vec<(String, String)>);

impl Form {
    fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    fn need(&self, k: &str) -> Result<&str, Malformed> {
        self.get(k)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Malformed(format!("{k} is missing")))
    }
}

/// The events of an inbound message; `options` are the buttons last offered to the chat.
pub(crate) fn message_events(
    form: &Form,
    options: impl Fn(&ChatId) -> Vec<Button>,
) -> Result<Vec<ProviderEvent>, Malformed> {
    let sid = form.need("MessageSid")?;
    let from = form.need("From")?;
    form.need("To")?;
    let chat = ChatId(from.to_owned());
    let sender = UserId(from.to_owned());
    let sender_name = form.get("ProfileName").map(str::to_owned);
    let body = form.get("Body").unwrap_or_default();
    let now = botmesh::clock::now_ms();
    let num_media: usize = match form.get("NumMedia") {
        None | Some("") => 0,
        Some(n) => n
            .parse()
            .map_err(|_| Malformed(format!("NumMedia {n:?} is not a number")))?,
    };
    let message = |id: String, content| {
        ProviderEvent::Message(Message {
            id: MessageId(id),
            chat: chat.clone(),
            sender: sender.clone(),
            sender_name: sender_name.clone(),
            is_group: false,
            mentions_bot: false,
            timestamp_ms: now,
            content,
            reply_to: form
                .get("OriginalRepliedMessageSid")
                .map(|s| MessageId(s.to_owned())),
            lang_hint: None,
        })
    };
    // `from_text`: an option picked by its number or title in `Body` (see `Interaction`).
    let interaction = |data: String, title: Option<String>, from_text: bool| {
        ProviderEvent::Interaction(Interaction {
            id: sid.to_owned(),
            chat: chat.clone(),
            sender: sender.clone(),
            sender_name: sender_name.clone(),
            data,
            title,
            message_id: form
                .get("OriginalRepliedMessageSid")
                .map(|s| MessageId(s.to_owned())),
            is_group: false,
            timestamp_ms: now,
            respond_by_ms: None,
            from_text,
        })
    };
    if let Some(payload) = form.get("ButtonPayload").filter(|p| !p.is_empty()) {
        return Ok(vec![interaction(
            payload.to_owned(),
            form.get("ButtonText").map(str::to_owned),
            false,
        )]);
    }
    if num_media > 0 {
        let mut events = Vec::with_capacity(num_media);
        for i in 0..num_media {
            let url = form.need(&format!("MediaUrl{i}"))?;
            let ct = form
                .get(&format!("MediaContentType{i}"))
                .unwrap_or("application/octet-stream");
            let id = if i == 0 {
                sid.to_owned()
            } else {
                format!("{sid}/{i}")
            };
            events.push(message(
                id,
                Content::Media(InboundMedia {
                    kind: crate::media::kind_of_mime(ct),
                    media_ref: MediaRef {
                        provider: NAME.to_owned(),
                        token: url.to_owned(),
                    },
                    mime: Some(ct.to_owned()),
                    caption: (i == 0 && !body.is_empty()).then(|| body.to_owned()),
                    file_name: None,
                    size: None,
                }),
            ));
        }
        return Ok(events);
    }
    if let (Some(lat), Some(lon)) = (form.get("Latitude"), form.get("Longitude")) {
        let (Ok(latitude), Ok(longitude)) = (lat.parse(), lon.parse()) else {
            return Err(Malformed("Latitude/Longitude are not numbers".to_owned()));
        };
        return Ok(vec![message(
            sid.to_owned(),
            Content::Location(Location {
                latitude,
                longitude,
                name: form.get("Label").map(str::to_owned),
                address: form.get("Address").map(str::to_owned),
            }),
        )]);
    }
    let answer = body.trim();
    let offered = options(&chat);
    let picked = answer
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| offered.get(i))
        .or_else(|| {
            offered
                .iter()
                .find(|b| b.title.eq_ignore_ascii_case(answer))
        });
    if let Some(b) = picked {
        return Ok(vec![interaction(b.id.clone(), Some(b.title.clone()), true)]);
    }
    Ok(vec![message(
        sid.to_owned(),
        Content::Text(body.to_owned()),
    )])
}

/// The event of a status callback.
pub(crate) fn status_event(form: &Form) -> Result<ProviderEvent, Malformed> {
    Ok(ProviderEvent::Status(DeliveryStatus {
        chat: ChatId(form.need("To")?.to_owned()),
        message_id: MessageId(form.need("MessageSid")?.to_owned()),
        status: form.need("MessageStatus")?.to_owned(),
        error: form
            .get("ErrorCode")
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
    }))
}
