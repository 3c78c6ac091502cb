//! The shop's catalogue: a fixed list of items with prices in cents, and price formatting.
//! It does not change at run time and knows nothing of chats or the store.

/// An item for sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    /// The stable id (also the id of its button).
    pub id: &'static str,
    /// The display name.
    pub name: &'static str,
    /// The unit price in cents.
    pub price_cents: u32,
}

/// Everything the shop sells.
pub const CATALOGUE: &[Item] = &[
    Item {
        id: "tea",
        name: "Tea",
        price_cents: 300,
    },
    Item {
        id: "coffee",
        name: "Coffee",
        price_cents: 350,
    },
    Item {
        id: "cake",
        name: "Cake",
        price_cents: 400,
    },
];

/// The item an answer names: its id or its name, ignoring case and surrounding spaces.
pub fn find(answer: &str) -> Option<&'static Item> {
    let answer = answer.trim();
    CATALOGUE
        .iter()
        .find(|i| i.id.eq_ignore_ascii_case(answer) || i.name.eq_ignore_ascii_case(answer))
}

/// Formats cents as `3.50`.
pub fn price(cents: u32) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_items_and_formats_prices() {
        assert_eq!(find(" COFFEE ").map(|i| i.id), Some("coffee"));
        assert_eq!(find("cake").map(|i| i.name), Some("Cake"));
        assert!(find("pizza").is_none());
        assert_eq!(price(350), "3.50");
        assert_eq!(price(1205), "12.05");
    }
}
