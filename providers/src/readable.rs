//! Content a text-only channel cannot carry natively, as readable text: a location as its name,
//! address and a maps link (Twilio's SMS, email); contact cards as `name: phones` lines
//! (Twilio's SMS, email); buttons and list rows as numbered options under the text (email,
//! WhatsApp Web).

/// `text` with `options` numbered under it after a blank line (`1. Yes`); the text alone
/// when there are none.
#[cfg(any(feature = "email", feature = "whatsapp-web"))]
pub(crate) fn numbered<'a>(
    text: &str,
    options: impl IntoIterator<Item = &'a botmesh::message::Button>,
) -> String {
    let mut out = text.to_owned();
    for (i, option) in (1..).zip(options) {
        if i == 1 {
            out.push('\n');
        }
        out.push_str(&format!("\n{i}. {}", option.title));
    }
    out
}

/// A location as text: its name and address lines, then a Google Maps link.
#[cfg(any(feature = "twilio", feature = "email"))]
pub(crate) fn location(l: &botmesh::message::Location) -> String {
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
#[cfg(any(feature = "twilio", feature = "email"))]
pub(crate) fn contacts(cards: &[botmesh::message::ContactCard]) -> Option<String> {
    (!cards.is_empty()).then(|| {
        cards
            .iter()
            .map(|c| format!("{}: {}", c.name, c.phones.join(", ")))
            .collect::<Vec<_>>()
            .join("\n")
    })
}
