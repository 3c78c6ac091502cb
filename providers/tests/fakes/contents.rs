//! The rich messages the channel tests send, built once: each test sends the same kinds to
//! its channel and checks what reached the fake server.

use botmesh::message::{ContactCard, Location, Outgoing, OutgoingContent, Reaction};

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
