//! Content a text-only channel cannot carry natively, as readable text: a location as its name,
//! address and a maps link; contact cards as `name: phones` lines. Twilio (SMS) and email
//! send them so.

use botmesh::message::{ContactCard, Location};

/// A location as text: its name and address lines, then a Google Maps link.
pub(crate) fn location(l: &Location) -> String {
    let mut body = String::new();
    for part in [&l.name, &l.address].into_iter().flatten() {
        body.push_str(part);
        body.push('\n');
    }
    body.push_str(&format!(
        "https://maps.google.com/?q={},{}",
        l.latitude, l.longitude
    ));
    body
}

/// Contact cards as `name: phone, phone` lines; `None` for no card.
pub(crate) fn contacts(cards: &[ContactCard]) -> Option<String> {
    (!cards.is_empty()).then(|| {
        cards
            .iter()
            .map(|c| format!("{}: {}", c.name, c.phones.join(", ")))
            .collect::<Vec<_>>()
            .join("\n")
    })
}
