//! The rich messages the channel tests send, built once: each test sends the same kinds to
//! its channel and checks what reached the fake server.

use botmesh::message::{
    Button, ContactCard, Location, MediaKind, MediaSource, Outgoing, OutgoingContent, Reaction,
};
use serde_json::Value;

/// Media of `kind` from `source`, with an optional caption and MIME type.
pub fn media(
    kind: MediaKind,
    source: MediaSource,
    caption: Option<&str>,
    mime: Option<&str>,
) -> Outgoing {
    Outgoing::from(OutgoingContent::Media {
        media_kind: kind,
        source,
        caption: caption.map(str::to_owned),
        mime: mime.map(str::to_owned),
    })
}

/// The text `text` in reply to the message `id`.
pub fn reply(text: &str, id: &str) -> Outgoing {
    let mut reply = Outgoing::from(text);
    reply.reply_to = Some(id.into());
    reply
}

/// The approved template `name` in `language`, with its body's `params`.
pub fn template(name: &str, language: &str, params: &[&str]) -> Outgoing {
    Outgoing::from(OutgoingContent::Template {
        name: name.to_owned(),
        language: language.to_owned(),
        params: params.iter().map(|p| (*p).to_owned()).collect(),
    })
}

/// Media the channel fetches from `url`.
pub fn url(url: &str) -> MediaSource {
    MediaSource::Url {
        url: url.to_owned(),
    }
}

/// In-memory media: `data`, with an optional file name.
pub fn bytes(data: Vec<u8>, file_name: Option<&str>) -> MediaSource {
    MediaSource::Bytes {
        data,
        file_name: file_name.map(str::to_owned),
    }
}

/// A location at `latitude`, `longitude`, with an optional place name.
pub fn location(latitude: f64, longitude: f64, name: Option<&str>) -> Outgoing {
    Outgoing::from(OutgoingContent::Location(Location {
        latitude,
        longitude,
        name: name.map(str::to_owned),
        address: None,
    }))
}

/// One contact card: `name` with one phone number.
pub fn contact(name: &str, phone: &str) -> Outgoing {
    Outgoing::from(OutgoingContent::Contacts(vec![ContactCard {
        name: name.to_owned(),
        phones: vec![phone.to_owned()],
    }]))
}

/// The reaction `emoji` to the channel message `message_id`.
pub fn reaction(message_id: &str, emoji: &str) -> Outgoing {
    Outgoing::from(OutgoingContent::Reaction(Reaction {
        message_id: message_id.into(),
        emoji: emoji.to_owned(),
    }))
}

/// "Pick" with a short button and one whose title is over twenty characters.
pub fn two_buttons() -> Outgoing {
    Outgoing::buttons(
        "Pick",
        [("yes", "Yes"), ("no", "A title longer than twenty")],
    )
}

/// "Many" with `n` buttons `b1`… titled `B1`….
pub fn many_buttons(n: usize) -> Outgoing {
    let buttons: Vec<Button> = (1..=n)
        .map(|i| Button::with_id(format!("b{i}"), format!("B{i}")))
        .collect();
    Outgoing::buttons("Many", buttons)
}

/// The length in characters of a JSON string.
pub fn chars(v: &Value) -> Option<usize> {
    v.as_str().map(|t| t.chars().count())
}
