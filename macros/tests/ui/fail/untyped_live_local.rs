use botmesh::prelude::*;

#[flow]
async fn f(cx: &mut FlowCx) -> FlowResult {
    let name = cx.ask("Name?").await?.text().to_owned();
    let age: u32 = cx.ask("Age?").parse::<u32>("A number, please.").await?;
    cx.send(format!("{name} is {age}")).await?;
    Ok(())
}

fn main() {}
