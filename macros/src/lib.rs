//! botmesh-macros: `#[flow]` and `#[persistent]` compile a conversation written as one async
//! function into a checkpointable state machine (see the `botmesh` crate's `flow` module).
//!
//! The pipeline, one module each: `parse` (attribute and signature) → `analyze` (the front:
//! `sites` gives sends and effects their ids, `for_loops` rewrites a `for` loop that asks
//! into a loop over its remaining items, `validate` finds where asks stand and puts
//! suspension markers, `identity` names every site after its own content, `liveness` finds
//! what lives across each suspension) → `model` (the flow as plain data, and the
//! fingerprints computed from it) → `lower` (the rest of the program after a suspension,
//! forward code up to the next one; `diverge` says where code cannot complete) → `step` (the
//! body cut into segments, each written once) → `expand` (state enum, `step` function, `Flow`
//! impl) with `codec` (the state enum's parameters, a persistent flow's codec) and `items`
//! (flow struct, constructor, stub), plus `errors` (collected, spanned errors) and `graph`
//! (the Mermaid state graph). Entry points stay thin: everything below works on `proc_macro2` types and is unit-tested with
//! `parse_quote!`. To read an expansion, use `cargo expand` (the macro prints nothing
//! itself). The generated code carries no blanket `allow`: the author's lints apply to the
//! flow's body (a lint attribute on the flow function applies to it too).

mod analyze;
mod codec;
mod diverge;
mod errors;
mod expand;
#[cfg(test)]
mod fixtures;
mod for_loops;
mod graph;
mod identity;
mod items;
mod liveness;
mod lower;
mod model;
mod parse;
mod sites;
mod step;
mod validate;

use proc_macro::TokenStream;

/// Compiles `async fn name(cx: &mut FlowCx, …) -> FlowResult` into a flow: a struct named
/// `name` implementing `botmesh::flow::Flow`.
///
/// Options: `start = command("x") | keyword("x") | regex("x") | matcher(path) | none`,
/// `args = path` (a flow with parameters that a trigger starts: `fn path(ctx: &Ctx) -> T`
/// builds them from the starting message or the bot's state, a tuple for several; they are
/// kept in the checkpoint like any state),
/// `on_version_mismatch = restart | restart(notice = "…" | none) | abandon | migrate(path)`,
/// `version = N`. A checkpoint of another build resumes at the ask it waits at when the new
/// code still has it (same identity and answer side, its kept locals decode); otherwise the
/// policy decides (see `botmesh::flow::VersionPolicy`).
///
/// A `for` loop may ask when it goes over an owned local whose type is written
/// (`let items: Vec<Item> = …; for item in items { … cx.ask(…).await? … }`): the items it has
/// not reached yet are kept in the state (`botmesh::flow::Remaining`), and so is `item` when
/// it is used after the ask.
///
/// Every ask, send, effect and sub-flow call has an identity derived from its own code (not
/// from its position or formatting), or the author's name for it: `cx.ask(…).id("age")`,
/// `cx.send(…).id("welcome")`. Keys and checkpoint states are named after identities, so
/// adding or moving a site changes no other site's key or state; two sites of one identity
/// are a compile error. The layout fingerprint is computed from the macro's model of the flow
/// (identities, kept locals and their types as written, answer sides, control structure);
/// when a kept local's own type changes shape (a field added to `Cart`), bump `version` so
/// that old checkpoints meet `on_version_mismatch`.
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
