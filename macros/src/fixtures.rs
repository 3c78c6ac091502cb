//! Flow sources that the unit tests of several passes share.

/// The design document's example: an ask, then an ask in a loop until the answer is a number,
/// then a send of both answers.
pub(crate) const DESIGN: &str = r#"
    async fn order(cx: &mut FlowCx) -> FlowResult {
        let item: String = cx.ask("What would you like?").await?.text().to_owned();
        let qty: u32 = loop {
            let answer = cx.ask("How many?").await?;
            match answer.text().trim().parse() {
                Ok(n) if n > 0 => break n,
                _ => cx.send("Please answer with a number.").await?,
            }
        };
        cx.send(format!("Ordered {qty} x {item}")).await?;
        Ok(())
    }"#;
