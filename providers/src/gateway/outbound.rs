//! What the REST channels' send builders share: their capabilities, the checks of a text,
//! options as numbered lines, a location and contacts as a readable text.

use botmesh::provider::ProviderError;

use crate::errors::unsupported_content;

/// `text` (`what` names it), refused when blank or over `limit` characters.
pub(crate) fn checked_text<'a>(
    provider: &str,
    what: &str,
    text: &'a str,
    limit: usize,
) -> Result<&'a str, ProviderError> {
    let n = text.chars().count();
    if text.trim().is_empty() {
        return Err(unsupported_content(
            provider,
            format!("{what} that is empty"),
        ));
    }
    if n > limit {
        return Err(unsupported_content(
            provider,
            format!("{what} of {n} characters (the limit is {limit})"),
        ));
    }
    Ok(text)
}

/// Contact cards as lines `name: phone, phone`; refused when there are none.
#[cfg(any(
    feature = "gupshup",
    feature = "wppconnect",
    feature = "gohighlevel",
    feature = "tiktok"
))]
pub(crate) fn contacts_text(
    provider: &str,
    cards: &[botmesh::message::ContactCard],
) -> Result<String, ProviderError> {
    if cards.is_empty() {
        return Err(unsupported_content(provider, "an empty list of contacts"));
    }
    Ok(cards
        .iter()
        .map(|c| format!("{}: {}", c.name, c.phones.join(", ")))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// `text` with `options` numbered under it (`1. Yes`), for a channel without buttons: the
/// options may take `room` characters, the whole `limit`.
#[cfg(any(feature = "gohighlevel", feature = "tiktok"))]
pub(crate) fn numbered(
    provider: &str,
    text: &str,
    options: &[botmesh::message::Button],
    limit: usize,
    room: usize,
) -> Result<String, ProviderError> {
    let lines: Vec<String> = (1..)
        .zip(options)
        .map(|(n, b)| format!("{n}. {}", b.title))
        .collect();
    let taken: usize = lines.iter().map(|l| l.chars().count() + 1).sum();
    if taken > room {
        return Err(unsupported_content(
            provider,
            format!(
                "{} options taking {taken} characters, over {room}",
                options.len()
            ),
        ));
    }
    let message = if lines.is_empty() {
        text.to_owned()
    } else {
        format!("{text}\n\n{}", lines.join("\n"))
    };
    checked_text(provider, "a message", &message, limit).map(str::to_owned)
}

/// A location as lines: its name, its address, a map link.
#[cfg(any(feature = "gohighlevel", feature = "tiktok"))]
pub(crate) fn location_text(l: &botmesh::message::Location) -> String {
    let place = [l.name.as_deref(), l.address.as_deref()];
    let mut lines: Vec<String> = place.into_iter().flatten().map(str::to_owned).collect();
    lines.push(format!(
        "https://maps.google.com/?q={},{}",
        l.latitude, l.longitude
    ));
    lines.join("\n")
}
