//! How the shop reads answers, shared by both order conversations (the `#[flow]` in
//! [`order_flow`](super::order_flow) and the hand-written baseline in
//! [`hand_written`](super::hand_written)) so that they accept exactly the same inputs.
//!
//! Pure functions of the answer's text: nothing here sends, stores or knows about chats.

/// The largest quantity one order may carry.
pub const MAX_QUANTITY: u32 = 99;

/// Parses a quantity: a whole number from 1 to [`MAX_QUANTITY`], surrounding spaces allowed.
pub fn parse_quantity(answer: &str) -> Option<u32> {
    answer
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_QUANTITY).contains(n))
}

/// Whether a confirmation answer means yes (`yes`, `y`, `ok`, or the `yes` button).
pub fn is_yes(text: &str) -> bool {
    ["yes", "y", "ok"]
        .iter()
        .any(|w| w.eq_ignore_ascii_case(text.trim()))
}

/// Whether a confirmation answer means no (`no`, `n`, or the `no` button).
pub fn is_no(text: &str) -> bool {
    ["no", "n"]
        .iter()
        .any(|w| w.eq_ignore_ascii_case(text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_validated() {
        assert_eq!(parse_quantity(" 2 "), Some(2));
        assert_eq!(parse_quantity("99"), Some(99));
        for bad in ["0", "100", "-1", "two", "2.5", ""] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    #[test]
    fn yes_and_no() {
        assert!(is_yes(" YES ") && is_yes("ok") && !is_yes("maybe"));
        assert!(is_no("N") && !is_no("yes"));
    }
}
