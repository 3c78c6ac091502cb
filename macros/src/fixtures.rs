//! Flow sources that the unit tests of several passes share.

/// The file of the design document's example, a flow of the runtime's tests.
const DESIGN_FILE: &str = include_str!("fixtures/design_order.rs");

/// The design document's example: an ask, then an ask in a loop until the answer is a number,
/// then a send of both answers: the function as written, from `async fn order(` on.
pub(crate) fn design() -> &'static str {
    DESIGN_FILE
        .find("async fn order(")
        .map_or(DESIGN_FILE, |at| &DESIGN_FILE[at..])
}
