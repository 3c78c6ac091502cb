use botmesh::prelude::*;

/// Two sites named alike: keys and checkpoints could not tell them apart.
#[flow(start = command("signup"))]
async fn signup(cx: &mut FlowCx) -> FlowResult {
    let age: u32 = cx.ask("Age?").id("age").parse::<u32>("A number.").await?;
    cx.send(format!("{age}")).id("age").await?;
    cx.send("bye").id("not a name").await?;
    Ok(())
}

fn main() {}
