//! Expand: turns a parsed, validated and lowered flow into Rust: the flow's unit (or tuple)
//! struct named like the function and its constructor, then, in a block of their own
//! (`const _: () = { use ::botmesh::__gen::*; … };`, which imports the runtime's
//! `__`-prefixed names and the state's variants): the state enum (generic over the kept
//! locals' types, serde-derived when `#[persistent]`: see `codec`), and the
//! `::botmesh::flow::Flow` impl (what the flow declares: name, layout fingerprint, start,
//! version policy, Mermaid graph, states; its codec; the step function, one `match` arm per
//! state). What every flow would write alike (encoding, decoding, `fresh`, the start of a
//! flow without parameters) is the `Flow` trait's default methods.
//!
//! When a check fails, every collected error is emitted as `compile_error!` next to a
//! best-effort item (the struct and a stub impl), so the rest of the crate still type-checks.

use std::collections::BTreeMap;

use proc_macro2::{Literal, TokenStream};
use quote::{ToTokens, format_ident, quote};
use syn::Stmt;

use crate::analyze::{self, Analyzed};
use crate::codec;
use crate::errors::Errors;
use crate::graph::{self, StateNode};
use crate::items::{flow_type, start_tokens, struct_tokens, stub};
use crate::lower;
use crate::parse::{self, FlowDef, Policy};
use crate::sites::{count_sends, reach};
use crate::step::Step;
use crate::validate::{Kind, Suspension};

/// `#[flow(…)]`.
pub(crate) fn flow(args: TokenStream, item: TokenStream, persistent: bool) -> TokenStream {
    let errors = Errors::default();
    let args = parse::parse_args(args, &errors);
    let Some(def) = parse::parse_fn(item, args, persistent, &errors) else {
        return errors.to_compile_errors();
    };
    expand(def, &errors)
}

/// `#[persistent]`: finds the `#[flow(…)]` next to it and expands it as persistent.
pub(crate) fn persistent(args: TokenStream, item: TokenStream) -> TokenStream {
    let errors = Errors::default();
    if !args.is_empty() {
        errors.spanned(&args, "#[persistent] takes no arguments");
    }
    let mut func: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            errors.push(syn::Error::new(
                e.span(),
                "#[persistent] goes on a `#[flow]` function",
            ));
            return errors.to_compile_errors();
        }
    };
    let pos = func
        .attrs
        .iter()
        .position(|a| a.path().segments.last().is_some_and(|s| s.ident == "flow"));
    let Some(pos) = pos else {
        errors.at(
            func.sig.ident.span(),
            "#[persistent] goes with #[flow]: add `#[flow(start = …)]` to this function",
        );
        return errors.to_compile_errors();
    };
    let attr = func.attrs.remove(pos);
    let flow_args = match attr.meta {
        syn::Meta::List(l) => l.tokens,
        _ => TokenStream::new(),
    };
    let out = flow(flow_args, func.into_token_stream(), true);
    let errs = errors.to_compile_errors();
    quote!(#errs #out)
}

/// Expands a parsed flow (errors collected in `errors`).
pub(crate) fn expand(def: FlowDef, errors: &Errors) -> TokenStream {
    let FlowDef {
        attrs,
        vis,
        name,
        cx,
        params,
        output,
        body,
        persistent,
        args,
    } = def;
    let flow_name = name.to_string();
    let state_ty = format_ident!("__{}_State", name);
    let start = start_tokens(&args.start);
    let policy = match &args.policy {
        Policy::Restart(None) => quote!(__RESTART),
        Policy::Restart(Some(None)) => quote!(__VersionPolicy::Restart {
            notice: __Option::None
        }),
        Policy::Restart(Some(Some(n))) => {
            quote!(__VersionPolicy::Restart { notice: __Some(#n) })
        }
        Policy::Abandon => quote!(__VersionPolicy::Abandon),
        Policy::Migrate(p) => quote!(__VersionPolicy::Migrate(#p)),
    };
    // What the flow's code names as a type or module (for the states' variant names).
    let mut named = std::collections::BTreeSet::new();
    let build = &args.args;
    let tys = params.iter().map(|p| &p.ty);
    codec::idents_in(
        quote!(#(#attrs)* #(#tys)* #output #start #policy #build),
        &mut named,
    );
    codec::type_names(&body, &mut named);

    let Analyzed {
        body,
        suspensions,
        lowered,
        param_bindings,
        model,
        ..
    } = analyze::analyze(&name, &cx, &params, args.version, body, errors);
    let out_ty = &output;
    if !errors.is_empty() {
        let stub = stub(&attrs, &vis, &name, &params, out_ty, persistent);
        let errs = errors.to_compile_errors();
        return quote!(#errs #stub);
    }

    // State enum: variants `__Start` and one per suspension (see `codec::variant`: the
    // expansion's block imports them, so they are named so as not to shadow the author's
    // names), each named after its state's name (`Start`, or the identity of the ask it waits
    // at) in checkpoints; generic over the kept locals' types (see `codec`).
    let (start_v, start_renamed) = codec::start_variant(persistent, &named);
    let mut states: Vec<(syn::Ident, String, bool)> =
        vec![(start_v.clone(), "Start".into(), start_renamed)];
    let mut variants: BTreeMap<usize, syn::Ident> = BTreeMap::new();
    // (variant, field, type) of every state field.
    let mut fields: Vec<codec::CodecField> = params
        .iter()
        .map(|p| (start_v.clone(), p.name.clone(), p.ty.clone()))
        .collect();
    for (s, l) in suspensions.iter().zip(&lowered) {
        let (v, rename) = codec::variant(persistent, s.id, &s.ident, &named);
        for b in &l.live {
            if let Some(t) = &b.ty {
                fields.push((v.clone(), b.name.clone(), t.clone()));
            }
        }
        variants.insert(s.id, v.clone());
        states.push((v, s.ident.clone(), rename));
    }
    let kept = codec::Kept::new(&fields);
    let variant_defs = states.iter().map(|(v, name, rename)| {
        let fields = fields.iter().filter(|(fv, _, _)| fv == v).map(|(_, n, t)| {
            let p = kept.param(n, t);
            quote!(#n: #p)
        });
        let rename = rename.then(|| quote!(#[serde(rename = #name)]));
        quote!(#rename #v { #(#fields),* })
    });
    let layout_hash = Literal::u64_suffixed(model.fingerprint());

    let susp_by_id: BTreeMap<usize, &Suspension> = suspensions.iter().map(|s| (s.id, s)).collect();
    let step = Step {
        cx: &cx,
        flow_name: &flow_name,
        body: &body.stmts,
        suspensions: &suspensions,
        lowered: &lowered,
        params: &param_bindings,
        variants: &variants,
        start: &start_v,
    };
    let suspend = |k: usize| step.suspend(k);
    let node = |name: String, stmts: &[Stmt]| -> StateNode {
        let fwd = lower::forward_stmts(stmts.to_vec(), &suspend);
        let (reached, ends) = reach(stmts);
        let edges = reached
            .into_iter()
            .filter_map(|k| susp_by_id.get(&k))
            .map(|s| {
                let label = match &s.kind {
                    // A prompt built at run time: the ask's identity.
                    Kind::Ask { .. } if s.label == format!("ask {}", s.id) => {
                        format!("ask {}", s.ident)
                    }
                    Kind::Ask { .. } => format!("ask \"{}\"", s.label),
                    Kind::Call { .. } => s.label.clone(),
                };
                (s.ident.clone(), label)
            })
            .collect();
        StateNode {
            name,
            edges,
            ends,
            sends: count_sends(&fwd),
        }
    };
    let mut nodes = vec![node("Start".into(), &body.stmts)];
    for (s, l) in suspensions.iter().zip(&lowered) {
        nodes.push(node(s.ident.clone(), &l.rest));
    }
    let step_body = step.body();
    let mermaid = graph::mermaid(&flow_name, &nodes);
    let state_infos = std::iter::once(quote!(__START)).chain(model.states.iter().map(|s| {
        let n = &s.ident;
        let a = Literal::u64_suffixed(s.answer_fingerprint());
        quote!(__state(#n, #a))
    }));

    let (codec_fn, codec_method) = if persistent {
        kept.codec(&state_ty)
    } else {
        (quote!(), quote!())
    };
    let derive = persistent.then(|| kept.derive());
    let mut callees: Vec<syn::Path> = Vec::new();
    for s in &suspensions {
        if let Kind::Call { callee, .. } = &s.kind {
            if !callees.iter().any(|c| c == callee) {
                callees.push(callee.clone());
            }
        }
    }
    // What a start trigger starts: the flow, its arguments built by `args = …`.
    let docs: Vec<_> = attrs.iter().filter(|a| a.path().is_ident("doc")).collect();
    let (strukt, into_start) = struct_tokens(&vis, &name, &docs, &params, &start_v);
    // How the flow starts: a flow without parameters from its start state (`fresh`, which
    // `Flow::into_start` defaults to), one with some from its arguments (`into_start`), built
    // by `args = …` when a start trigger starts it.
    let start_fns = if params.is_empty() {
        quote!(
            fn fresh() -> __Fresh<Self> {
                __Some(#into_start)
            }
        )
    } else if let Some(build) = &args.args {
        let names: Vec<&syn::Ident> = params.iter().map(|p| &p.name).collect();
        let pat = if names.len() == 1 {
            quote!(#(#names)*)
        } else {
            quote!((#(#names),*))
        };
        quote! {
            fn into_start(self) -> Self::State { #into_start }

            fn from_trigger(ctx: &__Ctx) -> __Option<Self> {
                let #pat = #build(ctx);
                __Some(Self(#(#names),*))
            }
        }
    } else {
        quote!(fn into_start(self) -> Self::State { #into_start })
    };
    let register_callees = (!callees.is_empty()).then(|| {
        quote! {
            fn register_callees(reg: &mut dyn ::core::ops::FnMut(__Erased)) {
                #( reg(__erase_fn(#callees)); )*
            }
        }
    });
    // The author's lint levels apply to the body, which `step` holds.
    let lints = attrs.iter().filter(|a| {
        ["allow", "warn", "deny", "forbid", "expect"]
            .iter()
            .any(|l| a.path().is_ident(l))
    });
    let flow_ty = flow_type(&name);
    let generics = kept.params();
    let state_args = kept.args();
    // The state enum and the `Flow` impl live in a block of their own, which imports what
    // they name from the runtime (`__`-prefixed names only) and the state's variants.
    quote! {
        #strukt

        const _: () = {
            use ::botmesh::__gen::*;

            #derive
            #[allow(non_camel_case_types)]
            pub enum #state_ty #generics { #(#variant_defs),* }

            use #state_ty::*;

            #codec_fn

            impl __Flow for #flow_ty {
                type State = #state_ty #state_args;
                type Output = #out_ty;

                fn info() -> __FlowInfo {
                    __info(#flow_name, #layout_hash, #persistent, #start, #policy, #mermaid, const { &[#(#state_infos),*] })
                }

                #start_fns

                #codec_method

                #register_callees

                #(#lints)*
                async fn step(#cx: &mut __FlowCx, __botmesh_state: Self::State) -> __StepResult<Self> {
                    #step_body
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_untyped_live_locals() {
        let out = flow(
            quote!(),
            quote! {
                async fn f(cx: &mut FlowCx) -> FlowResult {
                    let name = cx.ask("Name?").await?.text().to_owned();
                    let _age = cx.ask("Age?").await?;
                    cx.send(name).await?;
                    Ok(())
                }
            },
            false,
        );
        let text = out.to_string();
        assert!(text.contains("`name` lives across the ask #2"), "{text}");
    }
}

#[cfg(test)]
mod size {
    //! The size of what `#[flow]` writes for the demo shop's order flow.

    use proc_macro2::{TokenStream, TokenTree};

    const SHOP: &str = include_str!("../../examples/src/shop/order_flow.rs");

    /// Leaf tokens (identifiers, punctuation, literals).
    fn count(ts: TokenStream) -> usize {
        ts.into_iter()
            .map(|t| match t {
                TokenTree::Group(g) => count(g.stream()),
                _ => 1,
            })
            .sum()
    }

    fn count_ident(ts: TokenStream, name: &str) -> usize {
        ts.into_iter()
            .map(|t| match t {
                TokenTree::Group(g) => count_ident(g.stream(), name),
                TokenTree::Ident(i) if i == name => 1,
                _ => 0,
            })
            .sum()
    }

    /// The shop's flow as written, from its `#[flow(…)]` attribute to the function's closing
    /// brace (its doc comment, passed through as it is, left out of both counts).
    fn shop_flow() -> TokenStream {
        let start = SHOP.find("#[flow(").expect("the shop's flow");
        let len = SHOP[start..].find("\n}\n").expect("its end") + 2;
        SHOP[start..start + len].parse().expect("tokens")
    }

    /// What the compiler hands `#[flow]` for the shop's flow and what it gets back: the
    /// attribute's arguments and the item with its other attributes (`#[persistent]`), as
    /// written, through the macro's entry point.
    fn expand_shop(src: TokenStream) -> TokenStream {
        let mut item: syn::ItemFn = syn::parse2(src).expect("a function");
        let pos = item
            .attrs
            .iter()
            .position(|a| a.path().is_ident("flow"))
            .expect("#[flow]");
        let args = match item.attrs.remove(pos).meta {
            syn::Meta::List(l) => l.tokens,
            _ => TokenStream::new(),
        };
        super::flow(args, quote::quote!(#item), false)
    }

    #[test]
    fn the_shop_flow_is_written_once() {
        let src = shop_flow();
        let out = expand_shop(src.clone());
        let file: syn::File = syn::parse2(out.clone()).expect("an expansion");
        // The `Flow` impl is in the expansion's `const _: () = { … };` block.
        let step = file
            .items
            .iter()
            .filter_map(|i| match i {
                syn::Item::Const(c) => match &*c.expr {
                    syn::Expr::Block(b) => Some(&b.block.stmts),
                    _ => None,
                },
                _ => None,
            })
            .flatten()
            .filter_map(|s| match s {
                syn::Stmt::Item(syn::Item::Impl(i)) => Some(i),
                _ => None,
            })
            .flat_map(|i| &i.items)
            .find_map(|i| match i {
                syn::ImplItem::Fn(f) if f.sig.ident == "step" => Some(quote::quote!(#f)),
                _ => None,
            })
            .expect("a step function");
        let (src_n, step_n, all_n) = (count(src.clone()), count(step.clone()), count(out.clone()));
        // The flow's code is written once: the step function is at most 1.4 times its
        // source (399 tokens for 292).
        assert!(
            step_n * 10 <= 14 * src_n,
            "the step function has {step_n} tokens, the flow {src_n}"
        );
        // Every ask is written once, those at a loop's head too (not again for the loop's
        // next iteration), and so is every send and effect site.
        assert_eq!(
            count_ident(step.clone(), "__ask_at"),
            count_ident(src.clone(), "ask")
        );
        let sends = count_ident(src.clone(), "send");
        assert!(sends >= 2);
        assert_eq!(count_ident(step.clone(), "__send_at"), sends);
        assert_eq!(
            count_ident(step, "__effect_at"),
            count_ident(src.clone(), "effect")
        );
        // Everything else (the flow struct and its constructor, the state enum and its serde
        // derive, the codec, the `Flow` impl) stays small: what every flow expands alike is
        // generic code in the runtime. The whole expansion, counted leaf by leaf, is at most
        // twice the source it replaces (584 tokens for 292). (What serde's derive then
        // writes for the state enum is serde's expansion, as for any type that derives it.)
        assert!(
            all_n <= 2 * src_n,
            "the expansion has {all_n} tokens, the flow {src_n}"
        );
    }
}
