//! The shape of the crate, pinned: its public API (a reviewed snapshot) and the layering of
//! its folders.

mod architecture {
    pub(crate) mod public_api;
}

use std::path::{Path, PathBuf};

use architecture::public_api;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// A change to the crate's public API changes its snapshot: review it, then accept it with
/// `cargo insta review` (or `INSTA_UPDATE=always cargo test -p botmesh --test architecture`).
/// `botmesh-durability` and `botmesh-providers` pin theirs the same way (`tests/public_api.rs`).
#[test]
fn public_api() {
    let lib = workspace().join("runtime/src/lib.rs");
    insta::assert_snapshot!(public_api::render("botmesh", &lib));
}
