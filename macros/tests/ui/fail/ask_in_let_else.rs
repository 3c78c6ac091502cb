use botmesh::prelude::*;

/// An ask in the `else` of a `let … else`.
#[flow(start = command("age"))]
#[persistent]
async fn age(cx: &mut FlowCx) -> FlowResult {
    let text: String = cx.ask("Your age?").await?.text().to_owned();
    let Ok(years) = text.trim().parse::<u32>() else {
        let _bye = cx.ask("That is not a number. Press any key to leave.").await?;
        return Ok(());
    };
    cx.send(format!("{years} years")).await?;
    Ok(())
}

fn main() {
    let _ = age;
}
