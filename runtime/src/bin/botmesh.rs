//! `botmesh`: the operator command line (`botmesh --help`; see `botmesh::operating::cli`).
//!
//! Output goes to stdout, errors to stderr with exit code 2 for a usage or lookup error
//! (unknown URL scheme, missing file, unknown id) and 1 for the others.

use std::io::Write;
use std::process::ExitCode;

use botmesh::operating::cli::{Cli, execute};
use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = std::io::stdout();
    match execute(&cli, &mut stdout).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "botmesh: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
