use std::io::Write;

use botmesh::prelude::*;

/// A file handle held across an ask cannot be saved in a persistent flow's checkpoint.
#[flow]
#[persistent]
async fn log_answers(cx: &mut FlowCx) -> FlowResult {
    let mut file: std::fs::File = std::fs::File::create("answers.txt")?;
    let name: String = cx.ask("Name?").await?.text().to_owned();
    writeln!(file, "{name}")?;
    Ok(())
}

fn main() {}
