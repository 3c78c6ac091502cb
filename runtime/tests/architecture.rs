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

/// Inside `flow/`, no module names one that names it back, through any number of steps: a step
/// returns one commit that `commit` writes, `checkpoint` only encodes and decodes, the
/// executor drives (see `flow/mod.rs` for the modules and what each names).
#[test]
fn flow_modules_import_each_other_in_no_circle() {
    let src = workspace().join("runtime/src");
    let graph = layers::module_graph(&src, "flow");
    assert!(
        graph
            .iter()
            .any(|(from, to)| from == "executor" && to == "commit"),
        "the module graph of flow/ is not read: {graph:?}"
    );
    if let Some(circle) = layers::circle(&graph) {
        panic!(
            "flow/ modules import each other in a circle: {}\nthe graph:\n{}",
            circle.join(" -> "),
            graph
                .iter()
                .map(|(from, to)| format!("  {from} -> {to}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
