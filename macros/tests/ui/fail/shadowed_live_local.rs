use botmesh::prelude::*;

/// An inner `label` shadows the outer one across an ask: after the block the outer one would
/// come back with the inner one's value (the state keeps one value per name).
#[flow(start = command("shadow"))]
async fn shadow(cx: &mut FlowCx) -> FlowResult {
    let label: String = "outer".to_owned();
    {
        let label: String = "inner".to_owned();
        let _a = cx.ask("go?").await?;
        cx.send(label.clone()).await?;
    }
    cx.send(label).await?;
    Ok(())
}

fn main() {
    let _ = shadow;
}
