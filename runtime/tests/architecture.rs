//! The shape of the crate, pinned: its public API (a reviewed snapshot) and the layering of
//! its folders.

mod architecture {
    pub(crate) mod layers;
    pub(crate) mod public_api;
}

use std::path::{Path, PathBuf};

use architecture::{layers, public_api};

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

/// No folder of the runtime names a folder above it or beside it (see `architecture/layers.rs`
/// for the layers), so there is no import circle between `bot/`, `flow/`, `durable/` and the
/// layers below them.
#[test]
fn each_folder_imports_only_from_the_layers_below_it() {
    let src = workspace().join("runtime/src");
    let violations = layers::violations(&src);
    assert!(
        violations.is_empty(),
        "paths that go up or sideways between layers {:?}:\n{}",
        layers::LAYERS,
        violations
            .iter()
            .map(|v| format!("  {} ({} -> {}): {}", v.file, v.from, v.to, v.path))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // And so the folder graph has no circle.
    for (from, to) in layers::graph(&src) {
        let rank = |f: &str| layers::LAYERS.iter().position(|l| *l == f);
        assert!(rank(&to) < rank(&from), "{from} imports {to}");
    }
}
