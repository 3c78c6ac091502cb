//! Compile tests of `#[flow]`: every lowered construct compiles (`ui/pass`), and every
//! construct that cannot be lowered fails with its pinned message (`ui/fail`).
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
