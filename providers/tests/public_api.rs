//! The crate's public API, pinned by a reviewed snapshot: a change to it fails this test until
//! the snapshot is accepted (`cargo insta review`, or `INSTA_UPDATE=always cargo test -p
//! botmesh-providers --test integration public_api`). The renderer is shared with the runtime's
//! `tests/architecture.rs`.

#[path = "../../runtime/tests/architecture/public_api.rs"]
mod renderer;

#[test]
fn public_api() {
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    insta::assert_snapshot!(renderer::render("botmesh_providers", &lib));
}
