//! botmesh-macros: `#[flow]` and `#[persistent]` compile a conversation written as one async
//! function into a checkpointable state machine (see the `botmesh` crate's `flow` module).
//!
//! The pipeline, one module each: `parse` (attribute and signature) → `validate` (where asks
//! stand; suspension markers) → `lower` (split at suspensions) and `liveness` → `expand`
//! (state enum, step function, keys, `Flow` impl) with `codec` (persistent states) and
//! `items` (flow struct, constructor, stub), plus
//! `errors` (collected, spanned errors), `sites` (send and effect site ids) and `graph` (the
//! Mermaid state graph). Entry points stay thin: everything below works on `proc_macro2`
//! types and is unit-tested with `parse_quote!`. To read an expansion, use `cargo expand`
//! (the macro prints nothing itself).

mod codec;
mod errors;
mod expand;
mod graph;
mod items;
mod liveness;
mod lower;
mod parse;
mod sites;
mod validate;

use proc_macro::TokenStream;

/// Compiles `async fn name(cx: &mut FlowCx, …) -> FlowResult` into a flow: a struct named
/// `name` implementing `botmesh::flow::Flow`.
///
/// Options: `start = command("x") | keyword("x") | regex("x") | matcher(path) | none`,
/// `on_version_mismatch = restart | abandon | migrate(path)`, `version = N`.
///
/// The layout hash that tells a checkpoint of another build covers the state's variants, the
/// kept locals' names and their types as written (`Cart`), not what those types contain:
/// when a kept local's own type changes shape (a field added to `Cart`), bump `version` so
/// that old checkpoints meet `on_version_mismatch`. A checkpoint that fails to decode meets
/// the policy too (`restart` starts the flow again; otherwise it is abandoned).
#[proc_macro_attribute]
pub fn flow(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::flow(args.into(), item.into(), false).into()
}

/// Makes a `#[flow]` persistent: checkpointed at every ask, resumed after a restart or on
/// another replica.
#[proc_macro_attribute]
pub fn persistent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::persistent(args.into(), item.into()).into()
}
