//! What the gateways' send builders share: the checks of a text, contacts as a readable text.

use botmesh::provider::ProviderError;

use super::unsupported;

/// `text` (`what` names it), refused when blank or over `limit` characters.
pub(crate) fn checked_text<'a>(
    provider: &str,
    what: &str,
    text: &'a str,
    limit: usize,
) -> Result<&'a str, ProviderError> {
    let n = text.chars().count();
    if text.trim().is_empty() {
        return Err(unsupported(provider, format!("{what} that is empty")));
    }
    if n > limit {
        return Err(unsupported(
            provider,
            format!("{what} of {n} characters (the limit is {limit})"),
        ));
    }
    Ok(text)
}

/// Contact cards as lines `name: phone, phone`; refused when there are none.
#[cfg(any(feature = "gupshup", feature = "wppconnect"))]
pub(crate) fn contacts_text(
    provider: &str,
    cards: &[botmesh::message::ContactCard],
) -> Result<String, ProviderError> {
    if cards.is_empty() {
        return Err(unsupported(provider, "an empty list of contacts"));
    }
    Ok(cards
        .iter()
        .map(|c| format!("{}: {}", c.name, c.phones.join(", ")))
        .collect::<Vec<_>>()
        .join("\n"))
}
